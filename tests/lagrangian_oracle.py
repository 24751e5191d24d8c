"""An independent autodiff-Lagrangian oracle for the moving-base equation of motion.

In the spirit of SPACEMAPLE's verification (symbolic Lagrange equations checked against
SpaceDyn's recursive algorithms), the equation of motion is derived here from nothing but
the *position-level* forward kinematics and the energies, with JAX doing the calculus:

    L(x, xd) = T(x, xd) - V(x),
    M(x)     = d^2 L / dxd^2                          (jax.hessian),
    c(x, xd) = (d^2 L / dxd dx) xd - dL/dx            (jax.jacfwd of jax.grad, jax.grad),

so that ``M xdd + c = Q`` (Lagrange's equations).

Generalized coordinates ``x = (r0, phi, q)`` (3 + 3 + n): base centroid position, a rotation
vector of the base attitude ``A0(phi) = exp(skew(phi)) A0_current``, and the joint positions.
At ``phi = 0``:

* ``v0 = r0_dot`` and ``w0 = phi_dot`` exactly (``dA0/dt = skew(phi_dot) A0``);
* ``dw0/dt = phi_ddot`` exactly: ``w0 = J(phi) phi_dot`` with the left Jacobian
  ``J = E + 1/2 skew(phi) + O(phi^2)``, so ``dw0/dt = phi_ddot + 1/2 phi_dot x phi_dot = phi_ddot``;
* the virtual work of a base torque is ``N0 . delta(theta) = N0 . delta(phi)``.

Hence at ``phi = 0`` the classical Lagrange equations in ``x`` are *exactly* sdjax's equation
``H [dv0/dt; dw0/dt; qdd] + c = [F0; N0; tau]`` for the generalized velocity ``nu = [v0, w0, qd]``:
``M = H`` and the Lagrangian ``c`` is sdjax's bias force (gravity included).

Independence: nothing of sdjax's kinematics, dynamics or rotation code is used. The axis
rotations, SpaceDyn RPY, quaternion-to-matrix and Rodrigues formula are re-implemented
below; only the numbers stored in :class:`sdjax.Model` and :class:`sdjax.State` are read.

Frames follow SpaceDyn: body 0 is the base; link ``i`` hangs on ``parent[i-1] < i``;
``A_i = A_parent Rx Ry Rz(joint_rpy) [Rz(q_i) if revolute]``, joint point
``p_i = r_parent + A_parent c_parent,i`` and centroid
``r_i = p_i + A_i ([q_i e_z if prismatic] - c_ii)``.

Compile-time design: the tree is walked by a loop over the links (``lax.fori_loop``) that
reads the parent index and joint type from *arrays*, so the topology is data, not code.
Models are padded to a common number of links with massless, inertia-free dummy links hung
on the base (their ``q = qd = 0``): a dummy contributes exactly ``0`` to ``T`` and ``V``, so
every derivative with respect to the real coordinates is unchanged and the dummy rows and
columns of ``M`` and ``c`` are exactly zero. One compiled function then serves every model
and state (``jax.vmap`` over both); XLA compile time on CPU, not arithmetic, is what this
oracle costs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

# --------------------------------------------------------------------------------------
# Rotation helpers (deliberately not imported from sdjax).


def skew(v: Array) -> Array:
    """``skew(v) @ a == cross(v, a)`` for one ``(3,)`` vector."""
    zero = jnp.zeros_like(v[0])
    return jnp.array([[zero, -v[2], v[1]], [v[2], zero, -v[0]], [-v[1], v[0], zero]])


def unskew(m: Array) -> Array:
    """Vector of the skew-symmetric part of ``(..., 3, 3)`` matrices (inverse of :func:`skew`)."""
    return 0.5 * jnp.stack(
        [m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], axis=-1
    )


def rot_x(a: Array) -> Array:
    c, s = jnp.cos(a), jnp.sin(a)
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.array([[one, zero, zero], [zero, c, -s], [zero, s, c]])


def rot_y(a: Array) -> Array:
    c, s = jnp.cos(a), jnp.sin(a)
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.array([[c, zero, s], [zero, one, zero], [-s, zero, c]])


def rot_z(a: Array) -> Array:
    c, s = jnp.cos(a), jnp.sin(a)
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.array([[c, -s, zero], [s, c, zero], [zero, zero, one]])


def rpy(angles: Array) -> Array:
    """SpaceDyn RPY (moving axes): ``Rx(a) Ry(b) Rz(c)``, child frame to parent frame."""
    return rot_x(angles[0]) @ rot_y(angles[1]) @ rot_z(angles[2])


def quaternion_to_matrix(quat: Array) -> Array:
    """Scalar-last ``(x, y, z, w)`` quaternion to its active rotation (normalised here):
    ``R = (w^2 - |v|^2) E + 2 v v^T + 2 w skew(v)``."""
    v, w = quat[:3], quat[3]
    eye = jnp.eye(3, dtype=quat.dtype)
    return ((w * w - jnp.dot(v, v)) * eye + 2.0 * jnp.outer(v, v) + 2.0 * w * skew(v)) / jnp.dot(quat, quat)


def exp_so3(phi: Array) -> Array:
    """``expm(skew(phi))`` by Rodrigues' formula, exact in float64 and smooth at ``phi = 0``.

    Below ``|phi|^2 = 1e-3`` the coefficients ``sin t / t`` and ``(1 - cos t) / t^2`` are their
    Taylor series to ``t^6`` (truncation error below ``t^8 / 8! < 3e-17``); the ``jnp.where``
    guards keep every derivative finite. At ``phi = 0`` the series branch is the one
    differentiated, i.e. ``E + K + K^2/2 + K^3/6 + ...``: derivatives are exact to all orders
    used here (the Lagrange equations need the second).
    """
    t2 = jnp.dot(phi, phi)
    small = t2 < 1e-3
    safe = jnp.where(small, 1.0, t2)
    t = jnp.sqrt(safe)
    sinc = jnp.where(small, 1.0 - t2 / 6.0 + t2**2 / 120.0 - t2**3 / 5040.0, jnp.sin(t) / t)
    cosc = jnp.where(small, 0.5 - t2 / 24.0 + t2**2 / 720.0 - t2**3 / 40320.0, (1.0 - jnp.cos(t)) / safe)
    k = skew(phi)
    return jnp.eye(3, dtype=phi.dtype) + sinc * k + cosc * (k @ k)


# --------------------------------------------------------------------------------------
# Model data as plain arrays (padded), and the position-level forward kinematics.


class Params(NamedTuple):
    """A model as arrays, padded to ``n_pad`` links (a pytree; stack for ``jax.vmap``)."""

    parent: Array  # (n_pad,) int32, parent body of link i + 1 (dummies: 0)
    revolute: Array  # (n_pad,) bool
    joint_rpy: Array  # (n_pad, 3)
    parent_centroid_to_joint: Array  # (n_pad, 3)
    centroid_to_joint: Array  # (n_pad, 3)
    masses: Array  # (n_pad + 1,) base first; dummies 0
    inertias: Array  # (n_pad + 1, 3, 3) body frames; dummies 0
    gravity: Array  # (3,)


def model_params(model, n_pad: int | None = None) -> Params:
    """Read a :class:`sdjax.Model`'s numbers into :class:`Params` (NumPy arrays), padded to
    ``n_pad`` links."""
    n = len(model.parent)
    n_pad = n if n_pad is None else int(n_pad)
    if n_pad < n:
        raise ValueError(f"n_pad={n_pad} < n={n}")
    extra = n_pad - n

    def pad(a, shape_tail):
        a = np.asarray(a, dtype=np.float64).reshape((-1,) + shape_tail)
        return np.concatenate([a, np.zeros((extra,) + shape_tail)], axis=0)

    return Params(
        parent=np.array(list(model.parent) + [0] * extra, dtype=np.int32),
        revolute=np.array([t == "R" for t in model.joint_type] + [True] * extra, dtype=bool),
        joint_rpy=pad(model.joint_rpy, (3,)),
        parent_centroid_to_joint=pad(model.parent_centroid_to_joint, (3,)),
        centroid_to_joint=pad(model.centroid_to_joint, (3,)),
        masses=pad(np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass).reshape(-1)]), ()),
        inertias=pad(
            np.concatenate([np.asarray(model.base_inertia)[None], np.asarray(model.link_inertia).reshape(-1, 3, 3)]),
            (3, 3),
        ),
        gravity=np.asarray(model.gravity, dtype=np.float64),
    )


def body_poses(params: Params, base_rotation: Array, x: Array) -> tuple[Array, Array]:
    """Rotations ``(n + 1, 3, 3)`` and centroids ``(n + 1, 3)`` of all bodies at ``x = (r0, phi, q)``.

    A loop over links ``i = 1..n`` in index order (parents come first), reading the parent's
    pose from the arrays filled so far.
    """
    n = params.parent.shape[0]
    r0, phi, q = x[:3], x[3:6], x[6:]
    e_z = jnp.array([0.0, 0.0, 1.0], dtype=x.dtype)
    rotations = jnp.zeros((n + 1, 3, 3), x.dtype).at[0].set(exp_so3(phi) @ base_rotation)
    centroids = jnp.zeros((n + 1, 3), x.dtype).at[0].set(r0)

    def link(i, carry):
        rotations, centroids = carry
        p = params.parent[i]
        revolute = params.revolute[i]
        parent_rotation = rotations[p]
        joint = centroids[p] + parent_rotation @ params.parent_centroid_to_joint[i]
        rotation = parent_rotation @ rpy(params.joint_rpy[i]) @ rot_z(jnp.where(revolute, q[i], 0.0))
        slide = jnp.where(revolute, 0.0, q[i]) * e_z
        centroid = joint + rotation @ (slide - params.centroid_to_joint[i])
        return rotations.at[i + 1].set(rotation), centroids.at[i + 1].set(centroid)

    return jax.lax.fori_loop(0, n, link, (rotations, centroids))


def energies(params: Params, base_rotation: Array, x: Array, xd: Array) -> tuple[Array, Array]:
    """Kinetic and potential energy ``(T, V)`` at coordinates ``x`` and rates ``xd``.

    Velocities are the forward-mode derivative of the poses along ``xd``: centroid velocity
    ``dr_i/dt`` and angular velocity ``w_i = unskew(dA_i/dt A_i^T)`` (inertial frame);
    ``T = sum 1/2 m |v|^2 + 1/2 w^T (A I A^T) w``, ``V = -sum m g . r``.
    """
    (rot, pos), (rot_dot, pos_dot) = jax.jvp(lambda y: body_poses(params, base_rotation, y), (x,), (xd,))
    w = unskew(rot_dot @ jnp.swapaxes(rot, -1, -2))  # dA/dt A^T = skew(w), up to round-off
    inertia_world = rot @ params.inertias @ jnp.swapaxes(rot, -1, -2)  # A I A^T
    kinetic = 0.5 * (
        params.masses @ jnp.sum(pos_dot * pos_dot, axis=-1) + jnp.einsum("bi,bij,bj->", w, inertia_world, w)
    )
    potential = -jnp.dot(params.gravity, params.masses @ pos)
    return kinetic, potential


class Terms(NamedTuple):
    M: Array  # (6 + n, 6 + n) d2L/dxd2
    c: Array  # (6 + n,) (d2L/dxd dx) xd - dL/dx
    T: Array  # () kinetic energy
    V: Array  # () potential energy


def lagrange_terms(params: Params, quaternion: Array, x: Array, xd: Array) -> Terms:
    """Lagrange-equation terms at ``x = (r0, 0, q)``, ``xd = nu = (v0, w0, qd)``.

    ``quaternion`` is the state's base attitude (scalar last); ``phi = 0`` in ``x`` makes
    ``M`` and ``c`` directly comparable with sdjax's ``H`` and ``c``.
    """
    base_rotation = quaternion_to_matrix(quaternion)

    def lagrangian(y, yd):
        kinetic, potential = energies(params, base_rotation, y, yd)
        return kinetic - potential

    mass_matrix = jax.hessian(lagrangian, argnums=1)(x, xd)
    mixed = jax.jacfwd(jax.grad(lagrangian, argnums=1), argnums=0)(x, xd)  # [i, j] = d2L / dxd_i dx_j
    bias = mixed @ xd - jax.grad(lagrangian, argnums=0)(x, xd)
    kinetic, potential = energies(params, base_rotation, x, xd)
    return Terms(mass_matrix, bias, kinetic, potential)


#: ``lagrange_terms`` batched over models and states; XLA's backend optimisation is turned
#: off because on a CPU it triples compile time for no gain here (the batch runs in ~0.1 s);
#: it changes no arithmetic (no fast-math either way).
batched_lagrange_terms = jax.jit(jax.vmap(lagrange_terms), compiler_options={"xla_backend_optimization_level": 0})


def state_coordinates(state, n_pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(quaternion, x, xd)`` of one :class:`sdjax.State` as NumPy arrays, joints padded with
    zeros to ``n_pad``: ``x = (r0, phi = 0, q)``, ``xd = (v0, w0, qd)``."""
    q = np.asarray(state.q, dtype=np.float64).reshape(-1)
    qd = np.asarray(state.qd, dtype=np.float64).reshape(-1)
    extra = np.zeros(n_pad - q.shape[0])
    x = np.concatenate([np.asarray(state.base_position), np.zeros(3), q, extra])
    xd = np.concatenate([np.asarray(state.base_linear_velocity), np.asarray(state.base_angular_velocity), qd, extra])
    return np.asarray(state.base_quaternion, dtype=np.float64), x, xd


def oracle(cases, n_pad: int) -> tuple[list[Terms], float]:
    """Evaluate many ``(model, [states])`` cases in one batched call.

    Returns one :class:`Terms` per case (batched over that case's states, cropped to
    ``6 + n``) and the largest magnitude found in the dummy rows/columns of ``M`` and ``c``
    (exactly ``0`` if the padding is inert, as it must be).
    """
    params, quats, xs, xds, owner = [], [], [], [], []
    for k, (model, states) in enumerate(cases):
        p = model_params(model, n_pad)
        for state in states:
            quat, x, xd = state_coordinates(state, n_pad)
            params.append(p)
            quats.append(quat)
            xs.append(x)
            xds.append(xd)
            owner.append(k)
    # Stack with NumPy (eager jnp.stack would compile once per shape), then one device call.
    stacked = jax.tree.map(lambda *leaves: jnp.asarray(np.stack(leaves)), *params)
    out = batched_lagrange_terms(
        stacked, jnp.asarray(np.stack(quats)), jnp.asarray(np.stack(xs)), jnp.asarray(np.stack(xds))
    )
    out = jax.tree.map(np.asarray, out)
    owner = np.asarray(owner)
    results, padding = [], 0.0
    for k, (model, _) in enumerate(cases):
        size = 6 + len(model.parent)
        rows = owner == k
        m, c = out.M[rows], out.c[rows]
        results.append(Terms(M=m[:, :size, :size], c=c[:, :size], T=out.T[rows], V=out.V[rows]))
        padding = max(padding, float(np.max(np.abs(m[:, size:, :]), initial=0.0)))
        padding = max(padding, float(np.max(np.abs(m[:, :, size:]), initial=0.0)))
        padding = max(padding, float(np.max(np.abs(c[:, size:]), initial=0.0)))
    return results, padding
