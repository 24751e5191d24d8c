"""Compiled CPU kernel for batched forward dynamics (optional: ``pip install sdjax[fast]``).

Under ``jax.vmap`` the per-sample code of :mod:`sdjax.dynamics` runs as XLA kernels with the
batch as the outermost axis: every product of 3-vectors works on axes of length 3, each of the
~60 fusions of a forward dynamics is a separate pass over memory, and the Cholesky solve of the
inertia matrix is one LAPACK call per sample. Rewriting the equations with the batch innermost
inside XLA was measured and does not help on the CPU: XLA's CPU fusion recomputes shared
producers in every consumer (a 7-link chain unrolled link by link compiled to 45k multiplies
for ~5k in the equations, 3x slower than ``vmap``), and the same code as a ``lax.scan`` over
links ran 2.5x slower (benchmarks/README.md, "The compiled batch kernel").

This module evaluates the same equations, sample by sample, as one function compiled by
Numba (LLVM) and run on all cores: kinematics and the Newton-Euler bias forces (seed 000 eqs
3.1-3.39), the composite-body inertia matrix from subtree mass moments (eqs 3.18-3.28, as
:func:`sdjax.dynamics.inertia_matrix_from_frames`), its Cholesky factorisation and eq 3.29's
solve, with every intermediate in registers or a scratch block per call. It is entered by
the batching rule of the forward dynamics (:func:`sdjax.dynamics.forward_dynamics` and
everything built on it: rollouts, Monte-Carlo) on the CPU backend when Numba is installed; the
JAX path stays the reference, runs everywhere else (GPU, no Numba, ``SDJAX_KERNEL=jax``) and
gives every derivative: only primal values pass through here (the forward dynamics is
differentiated by the implicit-function rule of its Newton-Euler residual). Values agree with
the JAX path to round-off (tests/test_batch_kernel.py).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.rotation import rpy_to_matrix

#: Environment variable choosing the batched forward-dynamics path: ``auto`` (default: the
#: compiled kernel when Numba is installed and the backend is the CPU) or ``jax``.
KERNEL_ENV = "SDJAX_KERNEL"

#: Smallest batch given to the kernel: each call crosses from XLA to Python and back (0.3-0.9
#: ms measured at batch 1024), which smaller batches do not repay (7-joint arm, float64: the
#: kernel is 0.8x the XLA path at batch 64 and 2.1x at 256).
MIN_BATCH = 128


@functools.cache
def _numba() -> Any:
    try:
        import numba
    except ImportError:
        return None
    return numba


def available() -> bool:
    """Whether batched forward dynamics will use the compiled kernel (Numba installed, CPU
    backend, not disabled by ``SDJAX_KERNEL=jax``)."""
    choice = os.environ.get(KERNEL_ENV, "auto").lower()
    if choice not in ("auto", "jax"):
        raise ValueError(f"{KERNEL_ENV}={choice!r}: choose 'auto' or 'jax'")
    return choice == "auto" and _numba() is not None and jax.default_backend() == "cpu"


# ------------------------------------------------------------------------------------------
# The kernel (plain Python; compiled by Numba on first use).


def _forward_dynamics_kernel(
    parent, revolute, free, end_point_link,
    quaternion, linear_velocity, angular_velocity, q, qd,
    base_mass, base_inertia, link_mass, link_inertia, joint_frame, parent_to_joint, centroid_to_joint,
    centroid_to_end_point, stiffness, damping, gravity,
    tau, base_force, base_torque, end_point_force, end_point_torque,
    acceleration_out, factor_out, start, stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """Forward dynamics of ``B`` samples (see the module docstring).

    Static topology: ``parent (n,)`` int, ``revolute (n,)`` bool, ``free (nv,)`` int (the base
    mode's free coordinates in ``[v0, w0, qd]``), ``end_point_link (ne,)`` int. Every other
    input has a leading batch axis of ``B`` or 1 (shared by the batch); ``joint_frame (.., n,
    3, 3)`` is the fixed rotation ``Rx Ry Rz`` of each joint frame. Outputs: ``acceleration_out
    (B, 6 + n)``, ``factor_out (B, nv, nv)`` (lower Cholesky factor of the free coordinates'
    inertia matrix, zero above the diagonal; a ``(0, nv, nv)`` array: not stored). Samples ``start <= b < stop`` are computed (threads
    share the arrays and take disjoint ranges).
    """
    n = parent.shape[0]
    nv = free.shape[0]
    ne = end_point_link.shape[0]
    size = 6 + n
    dtype = q.dtype
    # Scratch, once per call.
    rot = np.zeros((n + 1, 3, 3), dtype)
    pos = np.zeros((n + 1, 3), dtype)  # centroid - r0
    twist = np.zeros((n + 1, 6), dtype)  # (w, v_o)
    accel = np.zeros((n + 1, 6), dtype)  # spatial acceleration at zero base/joint accelerations
    axis = np.zeros((n, 6), dtype)  # joint motion axes (k, p x k) or (0, k)
    wrench = np.zeros((n + 1, 6), dtype)  # (force, moment about r0), subtree sums after the up pass
    mass = np.zeros(n + 1, dtype)
    first = np.zeros((n + 1, 3), dtype)
    second = np.zeros((n + 1, 3, 3), dtype)
    world = np.zeros((3, 3), dtype)
    jp = np.zeros(3, dtype)  # joint position - r0
    tmp = np.zeros((3, 3), dtype)
    h = np.zeros((size, size), dtype)
    rhs = np.zeros(size, dtype)
    factor = np.zeros((nv, nv), dtype)
    y = np.zeros(nv, dtype)
    for b in range(start, stop):
        bq = b if quaternion.shape[0] > 1 else 0
        bv = b if linear_velocity.shape[0] > 1 else 0
        bw = b if angular_velocity.shape[0] > 1 else 0
        bj = b if q.shape[0] > 1 else 0
        bd = b if qd.shape[0] > 1 else 0
        bm = b if link_mass.shape[0] > 1 else 0
        bbm = b if base_mass.shape[0] > 1 else 0
        bbi = b if base_inertia.shape[0] > 1 else 0
        bli = b if link_inertia.shape[0] > 1 else 0
        bf = b if joint_frame.shape[0] > 1 else 0
        bpj = b if parent_to_joint.shape[0] > 1 else 0
        bcj = b if centroid_to_joint.shape[0] > 1 else 0
        bce = b if centroid_to_end_point.shape[0] > 1 else 0
        bk = b if stiffness.shape[0] > 1 else 0
        bdd = b if damping.shape[0] > 1 else 0
        bg = b if gravity.shape[0] > 1 else 0
        bt = b if tau.shape[0] > 1 else 0
        bbf = b if base_force.shape[0] > 1 else 0
        bbt = b if base_torque.shape[0] > 1 else 0
        bef = b if end_point_force.shape[0] > 1 else 0
        bet = b if end_point_torque.shape[0] > 1 else 0
        # Base rotation from the (not necessarily unit) quaternion x, y, z, w.
        x, yq, z, w = quaternion[bq, 0], quaternion[bq, 1], quaternion[bq, 2], quaternion[bq, 3]
        s = 2.0 / (x * x + yq * yq + z * z + w * w)
        rot[0, 0, 0] = 1 - s * (yq * yq + z * z)
        rot[0, 0, 1] = s * (x * yq - z * w)
        rot[0, 0, 2] = s * (x * z + yq * w)
        rot[0, 1, 0] = s * (x * yq + z * w)
        rot[0, 1, 1] = 1 - s * (x * x + z * z)
        rot[0, 1, 2] = s * (yq * z - x * w)
        rot[0, 2, 0] = s * (x * z - yq * w)
        rot[0, 2, 1] = s * (yq * z + x * w)
        rot[0, 2, 2] = 1 - s * (x * x + yq * yq)
        w0 = angular_velocity[bw]
        v0 = linear_velocity[bv]
        for a in range(3):
            pos[0, a] = 0.0
            twist[0, a] = w0[a]
            twist[0, 3 + a] = v0[a]
            accel[0, a] = 0.0
        # Base spatial acceleration (0, -w0 x v0) at zero base acceleration.
        accel[0, 3] = -(w0[1] * v0[2] - w0[2] * v0[1])
        accel[0, 4] = -(w0[2] * v0[0] - w0[0] * v0[2])
        accel[0, 5] = -(w0[0] * v0[1] - w0[1] * v0[0])
        # Kinematics, root to leaves (eq 3.1; twists and accelerations eqs 3.8-3.15).
        for i in range(n):
            p = parent[i]
            qi = q[bj, i]
            qdi = qd[bd, i]
            fixed = joint_frame[bf, i]
            if revolute[i]:
                c, sn = np.cos(qi), np.sin(qi)
                for r in range(3):
                    tmp[r, 0] = c * fixed[r, 0] + sn * fixed[r, 1]
                    tmp[r, 1] = c * fixed[r, 1] - sn * fixed[r, 0]
                    tmp[r, 2] = fixed[r, 2]
            else:
                for r in range(3):
                    for k in range(3):
                        tmp[r, k] = fixed[r, k]
            for r in range(3):
                for k in range(3):
                    rot[i + 1, r, k] = rot[p, r, 0] * tmp[0, k] + rot[p, r, 1] * tmp[1, k] + rot[p, r, 2] * tmp[2, k]
            pj = parent_to_joint[bpj, i]
            cj = centroid_to_joint[bcj, i]
            o0, o1, o2 = -cj[0], -cj[1], -cj[2]
            if not revolute[i]:
                o2 += qi
            for r in range(3):
                jp[r] = pos[p, r] + rot[p, r, 0] * pj[0] + rot[p, r, 1] * pj[1] + rot[p, r, 2] * pj[2]
            for r in range(3):
                pos[i + 1, r] = jp[r] + rot[i + 1, r, 0] * o0 + rot[i + 1, r, 1] * o1 + rot[i + 1, r, 2] * o2
            k0, k1, k2 = rot[i + 1, 0, 2], rot[i + 1, 1, 2], rot[i + 1, 2, 2]
            if revolute[i]:
                axis[i, 0], axis[i, 1], axis[i, 2] = k0, k1, k2
                axis[i, 3] = jp[1] * k2 - jp[2] * k1
                axis[i, 4] = jp[2] * k0 - jp[0] * k2
                axis[i, 5] = jp[0] * k1 - jp[1] * k0
            else:
                axis[i, 0], axis[i, 1], axis[i, 2] = 0.0, 0.0, 0.0
                axis[i, 3], axis[i, 4], axis[i, 5] = k0, k1, k2
            for a in range(6):
                twist[i + 1, a] = twist[p, a] + axis[i, a] * qdi
            # (twist_i x s_i) qd_i: (w x sw, w x sv + v x sw).
            tw0, tw1, tw2 = twist[i + 1, 0], twist[i + 1, 1], twist[i + 1, 2]
            tv0, tv1, tv2 = twist[i + 1, 3], twist[i + 1, 4], twist[i + 1, 5]
            sw0, sw1, sw2 = axis[i, 0], axis[i, 1], axis[i, 2]
            sv0, sv1, sv2 = axis[i, 3], axis[i, 4], axis[i, 5]
            accel[i + 1, 0] = accel[p, 0] + qdi * (tw1 * sw2 - tw2 * sw1)
            accel[i + 1, 1] = accel[p, 1] + qdi * (tw2 * sw0 - tw0 * sw2)
            accel[i + 1, 2] = accel[p, 2] + qdi * (tw0 * sw1 - tw1 * sw0)
            accel[i + 1, 3] = accel[p, 3] + qdi * (tw1 * sv2 - tw2 * sv1 + tv1 * sw2 - tv2 * sw1)
            accel[i + 1, 4] = accel[p, 4] + qdi * (tw2 * sv0 - tw0 * sv2 + tv2 * sw0 - tv0 * sw2)
            accel[i + 1, 5] = accel[p, 5] + qdi * (tw0 * sv1 - tw1 * sv0 + tv0 * sw1 - tv1 * sw0)
        # Per body: Newton-Euler wrench about r0 (eqs 3.30-3.31) and mass moments about r0.
        g = gravity[bg]
        for body in range(n + 1):
            if body == 0:
                m = base_mass[bbm]
                inertia = base_inertia[bbi]
            else:
                m = link_mass[bm, body - 1]
                inertia = link_inertia[bli, body - 1]
            # world = A I A^T (symmetrised).
            for r in range(3):
                for k in range(3):
                    tmp[r, k] = rot[body, r, 0] * inertia[0, k] + rot[body, r, 1] * inertia[1, k] + rot[body, r, 2] * inertia[2, k]
            for r in range(3):
                for k in range(r, 3):
                    value = tmp[r, 0] * rot[body, k, 0] + tmp[r, 1] * rot[body, k, 1] + tmp[r, 2] * rot[body, k, 2]
                    world[r, k] = value
                    world[k, r] = value
            wx, wy, wz = twist[body, 0], twist[body, 1], twist[body, 2]
            ax, ay, az = accel[body, 0], accel[body, 1], accel[body, 2]
            hx = world[0, 0] * wx + world[0, 1] * wy + world[0, 2] * wz
            hy = world[1, 0] * wx + world[1, 1] * wy + world[1, 2] * wz
            hz = world[2, 0] * wx + world[2, 1] * wy + world[2, 2] * wz
            nx = world[0, 0] * ax + world[0, 1] * ay + world[0, 2] * az + wy * hz - wz * hy
            ny = world[1, 0] * ax + world[1, 1] * ay + world[1, 2] * az + wz * hx - wx * hz
            nz = world[2, 0] * ax + world[2, 1] * ay + world[2, 2] * az + wx * hy - wy * hx
            rx, ry, rz = pos[body, 0], pos[body, 1], pos[body, 2]
            # Centroid velocity and classical acceleration from the spatial quantities.
            vx = twist[body, 3] + wy * rz - wz * ry
            vy = twist[body, 4] + wz * rx - wx * rz
            vz = twist[body, 5] + wx * ry - wy * rx
            lx = accel[body, 3] + ay * rz - az * ry + wy * vz - wz * vy
            ly = accel[body, 4] + az * rx - ax * rz + wz * vx - wx * vz
            lz = accel[body, 5] + ax * ry - ay * rx + wx * vy - wy * vx
            fx, fy, fz = m * (lx - g[0]), m * (ly - g[1]), m * (lz - g[2])
            wrench[body, 0], wrench[body, 1], wrench[body, 2] = fx, fy, fz
            wrench[body, 3] = nx + ry * fz - rz * fy
            wrench[body, 4] = ny + rz * fx - rx * fz
            wrench[body, 5] = nz + rx * fy - ry * fx
            mass[body] = m
            first[body, 0], first[body, 1], first[body, 2] = m * rx, m * ry, m * rz
            rr = m * (rx * rx + ry * ry + rz * rz)
            for r in range(3):
                for k in range(3):
                    second[body, r, k] = world[r, k] - first[body, r] * pos[body, k]
                second[body, r, r] += rr
        # End-point loads are applied, not required: subtract them.
        for e in range(ne):
            body = end_point_link[e]
            ce = centroid_to_end_point[bce, e]
            fe = end_point_force[bef, e]
            te = end_point_torque[bet, e]
            px = pos[body, 0] + rot[body, 0, 0] * ce[0] + rot[body, 0, 1] * ce[1] + rot[body, 0, 2] * ce[2]
            py = pos[body, 1] + rot[body, 1, 0] * ce[0] + rot[body, 1, 1] * ce[1] + rot[body, 1, 2] * ce[2]
            pz = pos[body, 2] + rot[body, 2, 0] * ce[0] + rot[body, 2, 1] * ce[1] + rot[body, 2, 2] * ce[2]
            wrench[body, 0] -= fe[0]
            wrench[body, 1] -= fe[1]
            wrench[body, 2] -= fe[2]
            wrench[body, 3] -= te[0] + py * fe[2] - pz * fe[1]
            wrench[body, 4] -= te[1] + pz * fe[0] - px * fe[2]
            wrench[body, 5] -= te[2] + px * fe[1] - py * fe[0]
        # Subtree sums, leaves to root (eqs 3.32-3.35; parents have smaller numbers).
        for i in range(n - 1, -1, -1):
            body, p = i + 1, parent[i]
            mass[p] += mass[body]
            for a in range(6):
                wrench[p, a] += wrench[body, a]
            for a in range(3):
                first[p, a] += first[body, a]
                for k in range(3):
                    second[p, a, k] += second[body, a, k]
        # Right-hand side [F0; N0; tau + tau_passive] - c (eqs 3.36-3.39 give c).
        for a in range(3):
            rhs[a] = base_force[bbf, a] - wrench[0, a]
            rhs[3 + a] = base_torque[bbt, a] - wrench[0, 3 + a]
        for i in range(n):
            bias = 0.0
            for a in range(3):
                bias += axis[i, a] * wrench[i + 1, 3 + a] + axis[i, 3 + a] * wrench[i + 1, a]
            passive = -stiffness[bk, i] * q[bj, i] - damping[bdd, i] * qd[bd, i]
            rhs[6 + i] = tau[bt, i] + passive - bias
        # Inertia matrix (eqs 3.18-3.28): H_b, and per joint its subtree momentum at unit rate.
        m0 = mass[0]
        s0x, s0y, s0z = first[0, 0], first[0, 1], first[0, 2]
        for r in range(6):
            for k in range(6):
                h[r, k] = 0.0
        for a in range(3):
            h[a, a] = m0
            for k in range(3):
                h[3 + a, 3 + k] = second[0, a, k]
        # Lower-left block skew(s0), upper-right -skew(s0).
        h[3, 1], h[3, 2], h[4, 0], h[4, 2], h[5, 0], h[5, 1] = -s0z, s0y, s0z, -s0x, -s0y, s0x
        h[1, 3], h[2, 3], h[0, 4], h[2, 4], h[0, 5], h[1, 5] = -s0z, s0y, s0z, -s0x, -s0y, s0x
        for i in range(n):
            body = i + 1
            sw0, sw1, sw2 = axis[i, 0], axis[i, 1], axis[i, 2]
            sv0, sv1, sv2 = axis[i, 3], axis[i, 4], axis[i, 5]
            f0, f1, f2 = first[body, 0], first[body, 1], first[body, 2]
            mi = mass[body]
            lin0 = mi * sv0 + sw1 * f2 - sw2 * f1
            lin1 = mi * sv1 + sw2 * f0 - sw0 * f2
            lin2 = mi * sv2 + sw0 * f1 - sw1 * f0
            ang0 = second[body, 0, 0] * sw0 + second[body, 0, 1] * sw1 + second[body, 0, 2] * sw2 + f1 * sv2 - f2 * sv1
            ang1 = second[body, 1, 0] * sw0 + second[body, 1, 1] * sw1 + second[body, 1, 2] * sw2 + f2 * sv0 - f0 * sv2
            ang2 = second[body, 2, 0] * sw0 + second[body, 2, 1] * sw1 + second[body, 2, 2] * sw2 + f0 * sv1 - f1 * sv0
            h[0, 6 + i], h[1, 6 + i], h[2, 6 + i] = lin0, lin1, lin2
            h[3, 6 + i], h[4, 6 + i], h[5, 6 + i] = ang0, ang1, ang2
            for a in range(6):
                h[6 + i, a] = h[a, 6 + i]
            # H_m[j, i] = s_j . (L_i, h_i) for every joint j on the path to link i.
            for k in range(n):
                h[6 + i, 6 + k] = 0.0
            j = i
            while True:
                value = (axis[j, 0] * ang0 + axis[j, 1] * ang1 + axis[j, 2] * ang2
                         + axis[j, 3] * lin0 + axis[j, 4] * lin1 + axis[j, 5] * lin2)
                h[6 + i, 6 + j] = value
                h[6 + j, 6 + i] = value
                if parent[j] == 0:
                    break
                j = parent[j] - 1
        # Cholesky factor of the free coordinates' H and eq 3.29's solve.
        for c in range(nv):
            for r in range(c, nv):
                value = h[free[r], free[c]]
                for k in range(c):
                    value -= factor[r, k] * factor[c, k]
                if r == c:
                    value = np.sqrt(value)
                    factor[c, c] = value
                else:
                    factor[r, c] = value / factor[c, c]
        for r in range(nv):
            value = rhs[free[r]]
            for k in range(r):
                value -= factor[r, k] * y[k]
            y[r] = value / factor[r, r]
        for r in range(nv - 1, -1, -1):
            value = y[r]
            for k in range(r + 1, nv):
                value -= factor[k, r] * y[k]
            y[r] = value / factor[r, r]
        for a in range(size):
            acceleration_out[b, a] = 0.0
        for r in range(nv):
            acceleration_out[b, free[r]] = y[r]
        if factor_out.shape[0]:  # (empty when the caller does not use the factor)
            for r in range(nv):
                for c in range(nv):
                    factor_out[b, r, c] = factor[r, c] if c <= r else 0.0


@functools.cache
def _compiled() -> Any:
    # Serial and without the GIL: threads of this process take disjoint sample ranges (a
    # parallel Numba loop compiles 3x longer, 13 s, and its OpenMP threads spin between calls,
    # slowing XLA's own threads).
    return _numba().njit(cache=True, nogil=True)(_forward_dynamics_kernel)


@functools.cache
def _threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=max(1, _thread_count() - 1), thread_name_prefix="sdjax-kernel")


def _thread_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not on every platform)
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------------------------------
# Entry from JAX.


def solve_forward_dynamics(
    axis_size: int, model: Any, state: Any, controls: Any, batched: Any, *, with_factor: bool
) -> tuple[Array, Array | None]:
    """Batched :func:`sdjax.dynamics._solve_forward_dynamics` by the compiled kernel.

    Arguments:
        axis_size: batch size ``B``.
        model, state, controls: :class:`~sdjax.model.Model`, :class:`~sdjax.state.State`,
            :class:`~sdjax.dynamics.Controls`; each leaf either batched (batch on axis 0) or
            shared by the batch, as ``batched`` (the same pytree structure, booleans) says.
        with_factor: also return the Cholesky factor (a ``(B, nv, nv)`` array to copy back:
            asked for only where it is used).

    Returns:
        ``(acceleration (B, 6 + n), factor (B, nv, nv) or None)`` as the per-sample function
        returns them: floating-order accelerations ``[dv0/dt, dw0/dt, qdd]`` and the lower
        Cholesky factor of the free coordinates' inertia matrix.
    """
    dtype = jnp.result_type(model.joint_rpy, state.q, state.base_quaternion)
    flags = dict(zip(map(id, jax.tree.leaves((model, state, controls))), jax.tree.leaves(batched)))
    leaves = (
        state.base_quaternion, state.base_linear_velocity, state.base_angular_velocity, state.q, state.qd,
        model.base_mass, model.base_inertia, model.link_mass, model.link_inertia,
        model.joint_rpy, model.parent_centroid_to_joint, model.centroid_to_joint,
        model.centroid_to_end_point, model.joint_stiffness, model.joint_damping, model.gravity,
        controls.tau, controls.base_force, controls.base_torque, controls.end_point_force, controls.end_point_torque,
    )
    is_batched = [bool(flags[id(x)]) for x in leaves]
    values = [jnp.asarray(x, dtype) for x in leaves]
    if not any(is_batched):  # (only leaves the dynamics does not read vary, e.g. base_position)
        values[3], is_batched[3] = jnp.broadcast_to(values[3], (axis_size,) + values[3].shape), True
    # The fixed rotation Rx Ry Rz of each joint frame replaces its RPY angles (computed once
    # per model, not per sample, when the model is shared).
    values[9] = rpy_to_matrix(values[9])
    core_shapes = [v.shape[1:] if b else v.shape for v, b in zip(values, is_batched)]
    # One array of batched and one of shared numbers: each array a callback passes costs
    # ~30 us (measured), whatever its size.
    packed_batched = jnp.concatenate([v.reshape(axis_size, -1) for v, b in zip(values, is_batched) if b], axis=1)
    shared = [v.reshape(-1) for v, b in zip(values, is_batched) if not b]
    packed_shared = jnp.concatenate(shared) if shared else jnp.zeros((0,), dtype)
    n, nv = model.num_joints, model.num_velocities
    static = (
        np.asarray(model.parent, np.int64).reshape(n),
        np.asarray([t == "R" for t in model.joint_type], np.bool_).reshape(n),
        np.asarray(model.velocity_indices, np.int64),
        np.asarray(model.end_point_link, np.int64).reshape(model.num_end_points),
    )
    result = [jax.ShapeDtypeStruct((axis_size, 6 + n), dtype)]
    if with_factor:
        result.append(jax.ShapeDtypeStruct((axis_size, nv, nv), dtype))

    def host(batched_numbers: np.ndarray, shared_numbers: np.ndarray) -> list[np.ndarray]:
        # Under further vmaps (vmap_method="broadcast_all") both carry the same extra leading
        # axes: each outer index is a separate batch of B.
        batched_numbers, shared_numbers = np.asarray(batched_numbers), np.asarray(shared_numbers)  # (zero-copy on the CPU)
        outer = batched_numbers.shape[:-2]
        batched_numbers = batched_numbers.reshape((-1,) + batched_numbers.shape[-2:])
        shared_numbers = np.broadcast_to(shared_numbers, outer + shared_numbers.shape[-1:]).reshape(-1, shared_numbers.shape[-1])
        outputs = [np.empty((len(batched_numbers),) + r.shape, dtype) for r in result]
        for k in range(len(batched_numbers)):
            arrays, column, offset = [], 0, 0
            for shape, b in zip(core_shapes, is_batched):
                size = int(np.prod(shape, dtype=np.int64))
                # Contiguous and writable, always: Numba compiles one kernel per array type, and
                # views of XLA's buffers are read-only.
                if b:
                    arrays.append(np.require(batched_numbers[k, :, column : column + size], requirements="CW").reshape((axis_size,) + shape))
                    column += size
                else:
                    arrays.append(np.require(shared_numbers[k, offset : offset + size], requirements="CW").reshape((1,) + shape))
                    offset += size
            factor = outputs[1][k] if with_factor else np.empty((0, nv, nv), dtype)
            _run(static, arrays, outputs[0][k], factor)
        return [o.reshape(outer + o.shape[1:]) for o in outputs]

    out = jax.pure_callback(host, result, packed_batched, packed_shared, vmap_method="broadcast_all")
    return out[0], (out[1] if with_factor else None)


_lock = threading.Lock()


def _run(static: tuple, arrays: list, acceleration: np.ndarray, factor: np.ndarray) -> None:
    """The compiled kernel over the batch, one contiguous range of samples per core (ranges of
    at least :data:`MIN_BATCH` / 2 samples). Calls are serialised (XLA may run two callbacks at
    once; the cores are busy either way)."""
    kernel = _compiled()
    count = len(acceleration)
    parts = max(1, min(_thread_count(), count // max(1, MIN_BATCH // 2)))
    bounds = [count * k // parts for k in range(parts + 1)]
    with _lock:
        if parts == 1:
            kernel(*static, *arrays, acceleration, factor, 0, count)
            return
        # The other ranges on the pool, the first on this thread.
        futures = [_threads().submit(kernel, *static, *arrays, acceleration, factor, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
        kernel(*static, *arrays, acceleration, factor, bounds[0], bounds[1])
        for future in futures:
            future.result()


__all__: list[str] = []
