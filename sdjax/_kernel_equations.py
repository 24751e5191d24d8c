"""The equations of :mod:`sdjax.batch_kernel`, compiled by Numba (imported only by it, and
only when a batch is solved on the CPU: ``import sdjax`` never imports Numba).

One compiled forward dynamics serves every entry:

- :func:`forward_dynamics_range`: kinematics and Newton-Euler bias forces (seed 000 eqs
  3.1-3.39), the composite-body inertia matrix from subtree mass moments (eqs 3.18-3.28, as
  :func:`sdjax.dynamics.inertia_matrix_from_frames`), its Cholesky factorisation and eq 3.29's
  solve, sample by sample over a range of a batch, every intermediate in working arrays
  allocated once per call (:func:`scratch`); the pieces (positions, motion, mass moments,
  wrenches, subtree sums, the inertia matrix, the Cholesky solve) are inlined functions shared
  with :func:`computed_torque_range`;
- :func:`forward_dynamics`: that for a batch of states (the batched solve of
  :mod:`sdjax.dynamics`);
- :func:`inverse_dynamics_range` and :func:`inertia_matrix_range`: the Newton-Euler inverse
  dynamics and the inertia matrix alone, from the same pieces (batched
  :func:`sdjax.inverse_dynamics` and :func:`sdjax.inertia_matrix`);
- :func:`computed_torque_range`: the computed-torque law of a floating-base controller model
  (the joint torques that give commanded joint accelerations at zero momentum);
- :func:`rk4_rollout`: rollouts of a range of samples with classical RK4 (the scheme of
  :func:`sdjax.integrate.rk4_step`: four stages on the un-normalised quaternion, normalised
  after each step), open loop or under a joint law evaluated at each step (PD or computed
  torque, saturated, with bias and noise torques), blocks of samples stepping together, four
  forward dynamics per step, no crossing back to XLA; with one step, the RK4 step of
  :func:`sdjax.integrate.rk4_step`, its stages stored for reverse mode;
- :func:`inverse_dynamics_vjp_range` and :func:`forward_dynamics_vjp_range`: reverse mode of the
  inverse dynamics (every piece transposed, :func:`_newton_euler_reverse`) and of the forward
  dynamics (its implicit-function rule: ``H`` refactorised from the same Newton-Euler pass);
- :func:`rk4_step_vjp_range`: reverse mode of one RK4 step, its four stages transposed, each
  stage's forward dynamics as :func:`forward_dynamics_vjp_range`'s.

Each is serial and releases the GIL (threads of :mod:`sdjax.batch_kernel` take disjoint sample
ranges) and is cached on disk by Numba (compiled once per precision).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "LAW_COMPUTED_TORQUE",
    "LAW_NONE",
    "LAW_PD",
    "computed_torque_range",
    "forward_dynamics",
    "forward_dynamics_range",
    "inertia_matrix_range",
    "inverse_dynamics_range",
    "inverse_dynamics_vjp_range",
    "forward_dynamics_vjp_range",
    "rk4_rollout",
    "rk4_step_vjp_range",
    "scratch",
]

# IEEE arithmetic as XLA's (error_model="numpy"): a state that blows up gives inf and NaN, as on
# the JAX path, instead of Numba's default ZeroDivisionError, which aborted a whole batch for
# one diverging sample. LLVM may reassociate sums, fuse multiply-adds and divide by
# reciprocals (round-off only; inf and NaN keep their meaning: no "nnan"/"ninf" flags), which
# lets it vectorise the Cholesky factorisation's row products: with the reciprocal pivots of
# _cholesky, forward dynamics of a 36-DOF tree about 20 % faster, of the 13-DOF arm about 5 %
# (batch 1024, one thread).
_FAST_MATH = {"reassoc", "contract", "arcp"}
_jit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST_MATH)
# Compiled once per precision and inlined into its callers by LLVM (the "alwaysinline" attribute):
# called as a separate function it ran 1.5x slower. Numba's own IR-level inlining
# (inline="always") runs as fast but copies each callee's IR at every call site: it took half of
# the kernels' first compilation, 115 s -> 56 s for all twenty kernel signatures (float64 and
# float32; 2-core AMD EPYC), the kernels' run times unchanged within 3 % (one thread, batch 1024,
# the 7-joint arm and a 30-link tree).
_inline = numba.njit(cache=True, nogil=True, forceinline=True, error_model="numpy", fastmath=_FAST_MATH)
# Inlined at Numba's IR level instead, for the per-sample bodies that take tuples of ~50 arrays:
# a call, even one LLVM inlines, keeps each array's reference counting (atomic operations); see
# _newton_euler_reverse.
_inline_ir = numba.njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath=_FAST_MATH)


@_inline
def scratch(n, nv, dtype_of):  # pragma: no cover - compiled by Numba; results tested against the JAX path
    """Working arrays of :func:`forward_dynamics_range` and :func:`computed_torque_range` for
    ``n`` joints and ``nv`` free coordinates, in the precision of the array ``dtype_of``."""
    dtype = dtype_of.dtype
    size = 6 + n
    return (
        np.zeros((n + 1, 3, 3), dtype),  # rot: body-to-inertial rotations
        np.zeros((n + 1, 3), dtype),  # pos: centroid - r0
        np.zeros((n + 1, 6), dtype),  # twist (w, v_o)
        np.zeros((n + 1, 6), dtype),  # accel: spatial acceleration at zero base/joint accelerations
        np.zeros((n, 6), dtype),  # axis: joint motion axes (k, p x k) or (0, k)
        np.zeros((n + 1, 6), dtype),  # wrench (force, moment about r0), subtree sums after the up pass
        np.zeros(n + 1, dtype),  # mass (subtree)
        np.zeros((n + 1, 3), dtype),  # first mass moments about r0
        np.zeros((n + 1, 3, 3), dtype),  # second mass moments about r0
        np.zeros((3, 3), dtype),  # world: one body's inertia in the inertial frame
        np.zeros(3, dtype),  # jp: joint position - r0
        np.zeros((3, 3), dtype),  # tmp
        np.zeros((size, size), dtype),  # h: inertia matrix
        np.zeros(size, dtype),  # rhs
        np.zeros((nv, nv), dtype),  # factor: lower Cholesky factor of the free coordinates' H
        np.zeros(nv, dtype),  # y: solution in the free coordinates
    )


# ------------------------------------------------------------------------------------------
# The pieces of one sample's dynamics (inlined into the kernels below; each fills working
# arrays of scratch()). Model arrays are read at the sample's row (``b*`` indices: b or 0).


@_inline
def _base_frame(quaternion, bq, rot, pos):  # pragma: no cover - compiled by Numba
    """``rot[0]``: the base rotation from the (not necessarily unit) quaternion x, y, z, w;
    ``pos[0] = 0`` (positions are relative to r0)."""
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
    for a in range(3):
        pos[0, a] = 0.0


@_inline
def _link_frame(
    i, parent, revolute, q, bj, joint_frame, bf, parent_to_joint, bpj, centroid_to_joint, bcj, rot, pos, axis, tmp, jp
):  # pragma: no cover - compiled by Numba
    """Link ``i``'s rotation ``rot[i + 1]``, centroid ``pos[i + 1]`` (relative to r0) and joint
    motion axis ``axis[i]`` from its parent's (eq 3.1); returns ``(cos q_i, sin q_i)`` of a
    revolute joint (``(1, 0)`` for a prismatic one)."""
    p = parent[i]
    qi = q[bj, i]
    fixed = joint_frame[bf, i]
    c, sn = 1.0, 0.0
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
    return c, sn


@_inline
def _base_motion(w0, v0, twist, accel):  # pragma: no cover - compiled by Numba
    """The base twist ``(w0, v0)`` and its spatial acceleration ``(0, -w0 x v0)`` at zero base
    acceleration."""
    for a in range(3):
        twist[0, a] = w0[a]
        twist[0, 3 + a] = v0[a]
        accel[0, a] = 0.0
    accel[0, 3] = -(w0[1] * v0[2] - w0[2] * v0[1])
    accel[0, 4] = -(w0[2] * v0[0] - w0[0] * v0[2])
    accel[0, 5] = -(w0[0] * v0[1] - w0[1] * v0[0])


@_inline
def _link_motion(i, parent, qd, bd, axis, twist, accel):  # pragma: no cover - compiled by Numba
    """Link ``i``'s twist and its spatial acceleration at zero base and joint accelerations
    from its parent's (eqs 3.8-3.15)."""
    p = parent[i]
    qdi = qd[bd, i]
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


@_inline
def _body_inertia(
    body, base_mass, bbm, base_inertia, bbi, link_mass, bm, link_inertia, bli, rot, tmp, world
):  # pragma: no cover - compiled by Numba
    """Body ``body``'s mass (returned) and its inertia in the inertial frame, ``world = A I
    A^T`` (symmetrised)."""
    if body == 0:
        m = base_mass[bbm]
        inertia = base_inertia[bbi]
    else:
        m = link_mass[bm, body - 1]
        inertia = link_inertia[bli, body - 1]
    for r in range(3):
        for k in range(3):
            tmp[r, k] = (
                rot[body, r, 0] * inertia[0, k] + rot[body, r, 1] * inertia[1, k] + rot[body, r, 2] * inertia[2, k]
            )
    for r in range(3):
        for k in range(r, 3):
            value = tmp[r, 0] * rot[body, k, 0] + tmp[r, 1] * rot[body, k, 1] + tmp[r, 2] * rot[body, k, 2]
            world[r, k] = value
            world[k, r] = value
    return m


@_inline
def _body_wrench(body, m, world, g, pos, twist, accel, wrench):  # pragma: no cover - compiled by Numba
    """Body ``body``'s Newton-Euler wrench (force, moment about r0) that its motion requires
    under gravity ``g`` (eqs 3.30-3.31)."""
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


@_inline
def _body_moments(body, m, world, pos, mass, first, second):  # pragma: no cover - compiled by Numba
    """Body ``body``'s mass moments about r0 (``mass``, ``first``, ``second``)."""
    rx, ry, rz = pos[body, 0], pos[body, 1], pos[body, 2]
    mass[body] = m
    first[body, 0], first[body, 1], first[body, 2] = m * rx, m * ry, m * rz
    rr = m * (rx * rx + ry * ry + rz * rz)
    for r in range(3):
        for k in range(3):
            second[body, r, k] = world[r, k] - first[body, r] * pos[body, k]
        second[body, r, r] += rr


@_inline
def _subtract_end_point_loads(end_point_link, centroid_to_end_point, force, torque, rot, pos, wrench):
    """Subtracts the loads applied at the end points (``force``, ``torque``: ``(ne, 3)``, on
    the robot, inertial frame; ``centroid_to_end_point (ne, 3)``) from the body wrenches (force,
    moment about r0): applied loads are not required of the motion."""
    for e in range(end_point_link.shape[0]):
        body = end_point_link[e]
        ce = centroid_to_end_point[e]
        fe = force[e]
        te = torque[e]
        px = pos[body, 0] + rot[body, 0, 0] * ce[0] + rot[body, 0, 1] * ce[1] + rot[body, 0, 2] * ce[2]
        py = pos[body, 1] + rot[body, 1, 0] * ce[0] + rot[body, 1, 1] * ce[1] + rot[body, 1, 2] * ce[2]
        pz = pos[body, 2] + rot[body, 2, 0] * ce[0] + rot[body, 2, 1] * ce[1] + rot[body, 2, 2] * ce[2]
        wrench[body, 0] -= fe[0]
        wrench[body, 1] -= fe[1]
        wrench[body, 2] -= fe[2]
        wrench[body, 3] -= te[0] + py * fe[2] - pz * fe[1]
        wrench[body, 4] -= te[1] + pz * fe[0] - px * fe[2]
        wrench[body, 5] -= te[2] + px * fe[1] - py * fe[0]


@_inline
def _moments_to_parent(i, parent, mass, first, second):  # pragma: no cover - compiled by Numba
    """Adds link ``i``'s subtree mass moments to its parent's (leaves to root: eqs 3.32-3.35)."""
    body, p = i + 1, parent[i]
    mass[p] += mass[body]
    for a in range(3):
        first[p, a] += first[body, a]
        for k in range(3):
            second[p, a, k] += second[body, a, k]


@_inline
def _wrench_to_parent(i, parent, wrench):  # pragma: no cover - compiled by Numba
    """Adds link ``i``'s subtree wrench to its parent's (leaves to root): after the pass,
    ``wrench[i + 1]`` is the wrench joint ``i`` transmits."""
    body, p = i + 1, parent[i]
    for a in range(6):
        wrench[p, a] += wrench[body, a]


@_inline
def _joint_bias(axis, wrench, i):  # pragma: no cover - compiled by Numba
    """Joint ``i``'s component of the bias forces ``c``: its axis . the subtree wrench."""
    bias = 0.0
    for a in range(3):
        bias += axis[i, a] * wrench[i + 1, 3 + a] + axis[i, 3 + a] * wrench[i + 1, a]
    return bias


@_inline
def _inertia_matrix(parent, axis, mass, first, second, h):  # pragma: no cover - compiled by Numba
    """The ``(6 + n, 6 + n)`` inertia matrix ``h`` (eqs 3.18-3.28) from subtree mass moments:
    ``H_b``, and per joint its subtree momentum at unit rate."""
    n = parent.shape[0]
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
            value = (
                axis[j, 0] * ang0
                + axis[j, 1] * ang1
                + axis[j, 2] * ang2
                + axis[j, 3] * lin0
                + axis[j, 4] * lin1
                + axis[j, 5] * lin2
            )
            h[6 + i, 6 + j] = value
            h[6 + j, 6 + i] = value
            if parent[j] == 0:
                break
            j = parent[j] - 1


@_inline
def _cholesky(h, free, nv, factor):  # pragma: no cover - compiled by Numba
    """Lower Cholesky factor (rows and columns below ``nv`` of ``factor``) of ``h`` restricted
    to the coordinates ``free[:nv]``: column by column, each divided by its pivot through one
    reciprocal (a division per entry cost a 36-DOF tree 4 % of its forward dynamics)."""
    for c in range(nv):
        value = h[free[c], free[c]]
        for k in range(c):
            value -= factor[c, k] * factor[c, k]
        pivot = np.sqrt(value)
        factor[c, c] = pivot
        inverse = 1.0 / pivot
        for r in range(c + 1, nv):
            value = h[free[r], free[c]]
            for k in range(c):
                value -= factor[r, k] * factor[c, k]
            factor[r, c] = value * inverse


@_inline
def _cholesky_solve(factor, nv, y):  # pragma: no cover - compiled by Numba
    """Solves ``L L^T x = y`` in place (``L = factor[:nv, :nv]``)."""
    for r in range(nv):
        value = y[r]
        for k in range(r):
            value -= factor[r, k] * y[k]
        y[r] = value / factor[r, r]
    for r in range(nv - 1, -1, -1):
        value = y[r]
        for k in range(r + 1, nv):
            value -= factor[k, r] * y[k]
        y[r] = value / factor[r, r]


@_inline
def _tree_factor(h, free, dof_parent, factor):  # pragma: no cover - compiled by Numba
    """Featherstone's sparse factorisation ``H = L^T L`` of the free coordinates' inertia matrix
    (Rigid Body Dynamics Algorithms, section 6.5, the "LTL" factorisation): ``L`` (lower
    triangle of ``factor``) has ``L[k, i] != 0`` only for ``i = k`` or ``i`` an ancestor of
    ``k``, the sparsity of ``H`` itself on a tree (``dof_parent``: each free coordinate's parent
    coordinate, -1 at the root), so there is no fill-in: O(n d^2) work for a tree of depth
    ``d`` instead of the dense O(n^3); entries off the ancestor paths are neither read nor
    written."""
    for k in range(free.shape[0]):
        factor[k, k] = h[free[k], free[k]]
        i = dof_parent[k]
        while i >= 0:
            factor[k, i] = h[free[k], free[i]]
            i = dof_parent[i]
    for k in range(free.shape[0] - 1, -1, -1):
        pivot = np.sqrt(factor[k, k])
        factor[k, k] = pivot
        i = dof_parent[k]
        while i >= 0:
            factor[k, i] /= pivot
            i = dof_parent[i]
        i = dof_parent[k]
        while i >= 0:
            j = i
            while j >= 0:
                factor[i, j] -= factor[k, i] * factor[k, j]
                j = dof_parent[j]
            i = dof_parent[i]


@_inline
def _tree_solve(factor, dof_parent, nv, y):  # pragma: no cover - compiled by Numba
    """Solves ``L^T L x = y`` in place for the factor of :func:`_tree_factor`: ``L^T`` from the
    leaves to the root, then ``L`` from the root to the leaves."""
    for k in range(nv - 1, -1, -1):
        y[k] /= factor[k, k]
        i = dof_parent[k]
        while i >= 0:
            y[i] -= factor[k, i] * y[k]
            i = dof_parent[i]
    for k in range(nv):
        value = y[k]
        i = dof_parent[k]
        while i >= 0:
            value -= factor[k, i] * y[i]
            i = dof_parent[i]
        y[k] = value / factor[k, k]


@_jit
def forward_dynamics_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    step,
    tau,
    base_force,
    base_torque,
    end_point_force,
    end_point_torque,
    acceleration_out,
    factor_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """Forward dynamics of the samples ``start <= b < stop`` of a batch of ``B``.

    Static topology: ``parent (n,)`` int, ``revolute (n,)`` bool, ``free (nv,)`` int (the base
    mode's free coordinates in ``[v0, w0, qd]``), ``end_point_link (ne,)`` int, ``dof_parent
    (nv,)`` int (each free coordinate's parent coordinate in the tree, -1 at the root; empty
    where the dense factorisation is the faster; see :func:`sdjax.batch_kernel._topology`).
    Every other
    input has a leading axis of ``B`` or 1 (shared by the batch). State: ``quaternion (.., 4)``
    (x, y, z, w; any non-zero norm), ``linear_velocity, angular_velocity (.., 3)``, ``q, qd
    (.., n)``. Model: ``base_mass (..)``, ``base_inertia (.., 3, 3)``, ``link_mass (.., n)``,
    ``link_inertia (.., n, 3, 3)``, ``joint_frame (.., n, 3, 3)`` (the fixed rotation ``Rx Ry
    Rz`` of each joint frame), joint offsets ``(.., n, 3)``, ``centroid_to_end_point (.., ne,
    3)``, ``stiffness, damping (.., n)``, ``gravity (.., 3)``. Loads have a step axis of ``S``
    or 1 after the batch axis, read at ``step`` (or 0): ``tau (.., .., n)``, ``base_force,
    base_torque (.., .., 3)``, end-point ``(.., .., ne, 3)``.

    Outputs: ``acceleration_out (B, 6 + n)`` in floating order ``[dv0/dt, dw0/dt, qdd]`` (zero
    along the components the base mode fixes); ``factor_out (B, nv, nv)``, the lower Cholesky
    factor of the free coordinates' inertia matrix, zero above the diagonal (a ``(0, nv, nv)``
    array: not stored, and with ``dof_parent`` the solve uses the sparse factorisation that
    follows the tree, :func:`_tree_factor`, instead). Inputs are indexed in place, never sliced into per-sample views (each
    view costs an atomic reference count), and the working arrays (:func:`scratch`) are
    allocated per call, not passed in: measured 7 % faster on a 13-DOF arm (the compiler then
    knows they alias nothing), and 25 % faster than calling a per-sample function. It is built
    from the inlined helpers it shares with :func:`computed_torque_range`, except two pieces
    written out here: the link frames and each body's inertia in the inertial frame. As the
    helpers :func:`_link_frame` and :func:`_body_inertia` they ran this function 8 % and 12 %
    slower (13-DOF arm, batch 1024, one thread; the other helpers cost nothing measurable).
    """
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y = scratch(
        parent.shape[0], free.shape[0], q
    )
    n = parent.shape[0]
    nv = free.shape[0]
    size = 6 + n
    # The dense Cholesky factorisation where the factor is returned or the tree is a chain.
    dense = factor_out.shape[0] > 0 or dof_parent.shape[0] == 0
    for b in range(start, stop):
        bq = _pick(b, quaternion)
        bv = _pick(b, linear_velocity)
        bw = _pick(b, angular_velocity)
        bj = _pick(b, q)
        bd = _pick(b, qd)
        bm = _pick(b, link_mass)
        bbm = _pick(b, base_mass)
        bbi = _pick(b, base_inertia)
        bli = _pick(b, link_inertia)
        bf = _pick(b, joint_frame)
        bpj = _pick(b, parent_to_joint)
        bcj = _pick(b, centroid_to_joint)
        bce = _pick(b, centroid_to_end_point)
        bk = _pick(b, stiffness)
        bdd = _pick(b, damping)
        bg = _pick(b, gravity)
        bt = _pick(b, tau)
        bbf = _pick(b, base_force)
        bbt = _pick(b, base_torque)
        bef = _pick(b, end_point_force)
        bet = _pick(b, end_point_torque)
        # Loads: a step axis of S or 1 after the batch axis.
        st, sf, sm = _pick_step(step, tau), _pick_step(step, base_force), _pick_step(step, base_torque)
        sef, set_ = _pick_step(step, end_point_force), _pick_step(step, end_point_torque)
        _base_frame(quaternion, bq, rot, pos)
        _base_motion(angular_velocity[bw], linear_velocity[bv], twist, accel)
        # Kinematics, root to leaves (eq 3.1; twists and accelerations eqs 3.8-3.15).
        for i in range(n):
            p = parent[i]
            qi = q[bj, i]
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
            _link_motion(i, parent, qd, bd, axis, twist, accel)
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
                    tmp[r, k] = (
                        rot[body, r, 0] * inertia[0, k]
                        + rot[body, r, 1] * inertia[1, k]
                        + rot[body, r, 2] * inertia[2, k]
                    )
            for r in range(3):
                for k in range(r, 3):
                    value = tmp[r, 0] * rot[body, k, 0] + tmp[r, 1] * rot[body, k, 1] + tmp[r, 2] * rot[body, k, 2]
                    world[r, k] = value
                    world[k, r] = value
            _body_wrench(body, m, world, g, pos, twist, accel, wrench)
            _body_moments(body, m, world, pos, mass, first, second)
        _subtract_end_point_loads(
            end_point_link,
            centroid_to_end_point[bce],
            end_point_force[bef, sef],
            end_point_torque[bet, set_],
            rot,
            pos,
            wrench,
        )
        # Subtree sums, leaves to root (eqs 3.32-3.35; parents have smaller numbers).
        for i in range(n - 1, -1, -1):
            _moments_to_parent(i, parent, mass, first, second)
            _wrench_to_parent(i, parent, wrench)
        # Right-hand side [F0; N0; tau + tau_passive] - c (eqs 3.36-3.39 give c).
        for a in range(3):
            rhs[a] = base_force[bbf, sf, a] - wrench[0, a]
            rhs[3 + a] = base_torque[bbt, sm, a] - wrench[0, 3 + a]
        for i in range(n):
            passive = -stiffness[bk, i] * q[bj, i] - damping[bdd, i] * qd[bd, i]
            rhs[6 + i] = tau[bt, st, i] + passive - _joint_bias(axis, wrench, i)
        _inertia_matrix(parent, axis, mass, first, second, h)
        # Eq 3.29's solve: by the Cholesky factor of the free coordinates' H, or by the sparse
        # factorisation that follows the tree.
        for r in range(nv):
            y[r] = rhs[free[r]]
        if dense:
            _cholesky(h, free, nv, factor)
            _cholesky_solve(factor, nv, y)
        else:
            _tree_factor(h, free, dof_parent, factor)
            _tree_solve(factor, dof_parent, nv, y)
        for a in range(size):
            acceleration_out[b, a] = 0.0
        for r in range(nv):
            acceleration_out[b, free[r]] = y[r]
        if factor_out.shape[0]:  # (empty when the caller does not use the factor)
            for r in range(nv):
                for c in range(nv):
                    factor_out[b, r, c] = factor[r, c] if c <= r else 0.0


@_jit
def forward_dynamics(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    tau,
    base_force,
    base_torque,
    end_point_force,
    end_point_torque,
    acceleration_out,
    factor_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """:func:`forward_dynamics_range` of held loads (a step axis of 1)."""
    forward_dynamics_range(
        parent,
        revolute,
        free,
        end_point_link,
        dof_parent,
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        0,
        tau,
        base_force,
        base_torque,
        end_point_force,
        end_point_torque,
        acceleration_out,
        factor_out,
        start,
        stop,
    )


@_inline
def _body_frames(
    b, parent, revolute, quaternion, q, joint_frame, parent_to_joint, centroid_to_joint, rot, pos, axis, tmp, jp
):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s body rotations ``rot``, centroids ``pos`` (relative to r0) and joint motion
    axes ``axis``, root to leaves (eq 3.1)."""
    bj, bf, bpj, bcj = _pick(b, q), _pick(b, joint_frame), _pick(b, parent_to_joint), _pick(b, centroid_to_joint)
    _base_frame(quaternion, _pick(b, quaternion), rot, pos)
    for i in range(parent.shape[0]):
        _link_frame(
            i,
            parent,
            revolute,
            q,
            bj,
            joint_frame,
            bf,
            parent_to_joint,
            bpj,
            centroid_to_joint,
            bcj,
            rot,
            pos,
            axis,
            tmp,
            jp,
        )


@_inline
def _frames_and_inertia_matrix(
    b,
    parent,
    revolute,
    quaternion,
    q,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    rot,
    pos,
    axis,
    mass,
    first,
    second,
    world,
    jp,
    tmp,
    h,
):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s body frames (:func:`_body_frames`), subtree mass moments and ``(6 + n, 6 +
    n)`` inertia matrix ``h`` (eqs 3.18-3.28)."""
    _body_frames(
        b, parent, revolute, quaternion, q, joint_frame, parent_to_joint, centroid_to_joint, rot, pos, axis, tmp, jp
    )
    n = parent.shape[0]
    bm, bbm, bbi, bli = _pick(b, link_mass), _pick(b, base_mass), _pick(b, base_inertia), _pick(b, link_inertia)
    for body in range(n + 1):
        m = _body_inertia(body, base_mass, bbm, base_inertia, bbi, link_mass, bm, link_inertia, bli, rot, tmp, world)
        _body_moments(body, m, world, pos, mass, first, second)
    _subtree_inertia_matrix(parent, axis, mass, first, second, h)


@_inline
def _subtree_inertia_matrix(parent, axis, mass, first, second, h):  # pragma: no cover - compiled by Numba
    """The ``(6 + n, 6 + n)`` inertia matrix ``h`` (eqs 3.18-3.28) from each body's own mass
    moments about r0 (``mass``, ``first``, ``second``: summed over subtrees here, leaves to
    root) and the motion axes."""
    for i in range(parent.shape[0] - 1, -1, -1):
        _moments_to_parent(i, parent, mass, first, second)
    _inertia_matrix(parent, axis, mass, first, second, h)


@_inline
def _pick(b, array):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s index into an array with a leading axis of ``B`` or 1 (shared)."""
    return b if array.shape[0] > 1 else 0


@_inline
def _pick_step(step, array):  # pragma: no cover - compiled by Numba
    """Step ``step``'s index into loads with a step axis (second) of ``S`` or 1 (held)."""
    return step if array.shape[1] > 1 else 0


#: Classical RK4 tableau (as sdjax.integrate._RK4_OFFSETS and _RK4_WEIGHTS).
_RK4_OFFSETS = (0.0, 0.5, 0.5, 1.0)
_RK4_WEIGHTS = (1.0 / 6.0, 2.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0)

#: Samples of a rollout stepped together (their state, stage and rate arrays, ~10 rows of 13 +
#: 2 n numbers each, stay in the L1/L2 cache).
_ROLLOUT_BLOCK = 32


@_jit
def computed_torque_range(
    parent,
    revolute,
    quaternion,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    stiffness,
    damping,
    gravity,
    command,
    tau_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """Computed torque of a floating-base model at zero momentum (:func:`sdjax.computed_torque`
    with ``base="floating"``, seed 003 eqs 44-50, 109, 115) for the samples ``start <= b <
    stop``: ``tau_out[b] = H* u + C* - tau_passive`` for the commanded joint accelerations
    ``u = command[b] (n,)``.

    Inputs as :func:`forward_dynamics_range`'s (leading axis ``B`` or 1; the state's base
    twist is not read: the controller's twist is eq 109's for zero momentum); ``command`` and
    ``tau_out`` have the whole batch's rows ``(B, n)``. Written as the
    hybrid dynamics it is: positions give ``H``; the base twist solves ``H_b [v0; w0] = -H_bm
    qd``; at that twist one Newton-Euler pass gives ``c``; the base acceleration that the
    joint accelerations ``u`` cause, ``a_b = -H_b^-1 (H_bm u + c_b)``, gives ``tau = H_m u +
    c_m + H_bm^T a_b`` (``= H* u + C*``, ``H* = H_m - H_bm^T H_b^-1 H_bm``, ``C* = c_m -
    H_bm^T H_b^-1 c_b``).
    """
    n = parent.shape[0]
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y = scratch(n, 6, q)
    base = np.arange(6)
    for b in range(start, stop):
        bj, bd = _pick(b, q), _pick(b, qd)
        bm, bbm = _pick(b, link_mass), _pick(b, base_mass)
        bbi, bli = _pick(b, base_inertia), _pick(b, link_inertia)
        _frames_and_inertia_matrix(
            b,
            parent,
            revolute,
            quaternion,
            q,
            base_mass,
            base_inertia,
            link_mass,
            link_inertia,
            joint_frame,
            parent_to_joint,
            centroid_to_joint,
            rot,
            pos,
            axis,
            mass,
            first,
            second,
            world,
            jp,
            tmp,
            h,
        )
        _cholesky(h, base, 6, factor)
        # Base twist at zero momentum (eq 109): H_b [v0; w0] = -H_bm qd.
        for a in range(6):
            value = 0.0
            for i in range(n):
                value -= h[a, 6 + i] * qd[bd, i]
            y[a] = value
        _cholesky_solve(factor, 6, y)
        _base_motion(y[3:6], y[0:3], twist, accel)
        for i in range(n):
            _link_motion(i, parent, qd, bd, axis, twist, accel)
        g = gravity[_pick(b, gravity)]
        for body in range(n + 1):
            m = _body_inertia(
                body, base_mass, bbm, base_inertia, bbi, link_mass, bm, link_inertia, bli, rot, tmp, world
            )
            _body_wrench(body, m, world, g, pos, twist, accel, wrench)
        for i in range(n - 1, -1, -1):
            _wrench_to_parent(i, parent, wrench)
        # a_b = -H_b^-1 (H_bm u + c_b); c_b is the base's subtree wrench.
        for a in range(6):
            value = wrench[0, a]
            for i in range(n):
                value += h[a, 6 + i] * command[b, i]
            y[a] = -value
        _cholesky_solve(factor, 6, y)
        bk, bdd = _pick(b, stiffness), _pick(b, damping)
        for i in range(n):
            value = _joint_bias(axis, wrench, i)
            for k in range(n):
                value += h[6 + i, 6 + k] * command[b, k]
            for a in range(6):
                value += h[a, 6 + i] * y[a]
            # minus tau_passive = -K q - D qd
            tau_out[b, i] = value + stiffness[bk, i] * q[bj, i] + damping[bdd, i] * qd[bd, i]


@_inline
def _newton_euler_pass(
    b,
    parent,
    revolute,
    end_point_link,
    inputs,
    rot,
    pos,
    twist,
    accel,
    axis,
    wrench,
    world,
    jp,
    tmp,
    joint_position,
    joint_trig,
    body_world,
):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s Newton-Euler pass (eqs 3.1-3.35): ``inputs`` the tuple of
    :func:`inverse_dynamics_range`'s inputs; fills the frames, motion axes, joint positions
    ``joint_position (n, 3)``, each joint's ``(cos q, sin q)`` ``joint_trig (n, 2)``, each body's
    inertia in the inertial frame ``body_world (n + 1, 3, 3)``, twists, accelerations and, after
    the pass, each subtree's wrench (``wrench[i + 1]``: the load joint ``i`` transmits;
    ``wrench[0]``: the whole system's)."""
    (
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        base_acceleration,
        qdd,
        end_point_force,
        end_point_torque,
    ) = inputs
    n = parent.shape[0]
    bj, bd, bdd = _pick(b, q), _pick(b, qd), _pick(b, qdd)
    bf, bpj, bcj = _pick(b, joint_frame), _pick(b, parent_to_joint), _pick(b, centroid_to_joint)
    bm, bbm, bbi, bli = _pick(b, link_mass), _pick(b, base_mass), _pick(b, base_inertia), _pick(b, link_inertia)
    _base_frame(quaternion, _pick(b, quaternion), rot, pos)
    _base_motion(angular_velocity[_pick(b, angular_velocity)], linear_velocity[_pick(b, linear_velocity)], twist, accel)
    # The base's spatial acceleration (dw0/dt, dv0/dt - w0 x v0).
    ba = base_acceleration[_pick(b, base_acceleration)]
    for a in range(3):
        accel[0, a] += ba[3 + a]
        accel[0, 3 + a] += ba[a]
    # Kinematics, root to leaves (eq 3.1; twists and accelerations eqs 3.8-3.15): frames and
    # motion in one loop over the links, as forward_dynamics_range (the frames alone are
    # _body_frames; as two loops, the timings were within this machine's 10-15 % noise).
    for i in range(n):
        joint_trig[i, 0], joint_trig[i, 1] = _link_frame(
            i,
            parent,
            revolute,
            q,
            bj,
            joint_frame,
            bf,
            parent_to_joint,
            bpj,
            centroid_to_joint,
            bcj,
            rot,
            pos,
            axis,
            tmp,
            jp,
        )
        for a in range(3):
            joint_position[i, a] = jp[a]
        _link_motion(i, parent, qd, bd, axis, twist, accel)
        qddi = qdd[bdd, i]
        for a in range(6):
            accel[i + 1, a] += axis[i, a] * qddi
    g = gravity[_pick(b, gravity)]
    for body in range(n + 1):
        m = _body_inertia(body, base_mass, bbm, base_inertia, bbi, link_mass, bm, link_inertia, bli, rot, tmp, world)
        for r in range(3):
            for k in range(3):
                body_world[body, r, k] = world[r, k]
        _body_wrench(body, m, world, g, pos, twist, accel, wrench)
    _subtract_end_point_loads(
        end_point_link,
        centroid_to_end_point[_pick(b, centroid_to_end_point)],
        end_point_force[_pick(b, end_point_force), 0],
        end_point_torque[_pick(b, end_point_torque), 0],
        rot,
        pos,
        wrench,
    )
    # Subtree sums, leaves to root (eqs 3.32-3.35); the base's is the whole system's (eqs
    # 3.38-3.39), each joint's load its axis . its subtree wrench (eqs 3.36-3.37).
    for i in range(n - 1, -1, -1):
        _wrench_to_parent(i, parent, wrench)


@_jit
def inverse_dynamics_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    base_acceleration,
    qdd,
    end_point_force,
    end_point_torque,
    base_wrench_out,
    tau_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """Recursive Newton-Euler inverse dynamics (:func:`sdjax.inverse_dynamics` of a model
    without mimic joints, eqs 3.30-3.39) of the samples ``start <= b < stop``.

    Inputs as :func:`forward_dynamics_range`'s (``free`` and ``dof_parent`` are not read), with
    ``base_acceleration (.., 6)`` ``[dv0/dt, dw0/dt]`` and ``qdd (.., n)``; the end-point loads
    have a step axis of 1. Outputs: ``base_wrench_out (B, 6)`` ``[F0, N0]`` (force at and
    torque about the base centroid, inertial frame) and ``tau_out (B, n)``, the actuator loads
    (the Newton-Euler joint loads less the passive torques ``-K q - D qd``).
    """
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y = scratch(
        parent.shape[0], free.shape[0], q
    )
    n = parent.shape[0]
    joint_position = np.zeros((n, 3), q.dtype)
    joint_trig = np.zeros((n, 2), q.dtype)
    body_world = np.zeros((n + 1, 3, 3), q.dtype)
    inputs = (
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        base_acceleration,
        qdd,
        end_point_force,
        end_point_torque,
    )
    for b in range(start, stop):
        _newton_euler_pass(
            b,
            parent,
            revolute,
            end_point_link,
            inputs,
            rot,
            pos,
            twist,
            accel,
            axis,
            wrench,
            world,
            jp,
            tmp,
            joint_position,
            joint_trig,
            body_world,
        )
        bj, bd = _pick(b, q), _pick(b, qd)
        for a in range(6):
            base_wrench_out[b, a] = wrench[0, a]
        bk, bdamp = _pick(b, stiffness), _pick(b, damping)
        for i in range(n):
            # minus tau_passive = -K q - D qd
            tau_out[b, i] = _joint_bias(axis, wrench, i) + stiffness[bk, i] * q[bj, i] + damping[bdamp, i] * qd[bd, i]


# ------------------------------------------------------------------------------------------
# The adjoint (reverse mode) of the Newton-Euler inverse dynamics: each piece below transposes
# the forward piece it is named after, given the cotangents of that piece's outputs (``*_bar``,
# accumulated) and the forward values it read. For a product ``a x b`` with cotangent ``c``:
# ``a_bar += b x c`` and ``b_bar += c x a``.


@_inline
def _cross_add(a0, a1, a2, b0, b1, b2, out, row, offset):  # pragma: no cover - compiled by Numba
    """``out[row, offset:offset + 3] += a x b``."""
    out[row, offset] += a1 * b2 - a2 * b1
    out[row, offset + 1] += a2 * b0 - a0 * b2
    out[row, offset + 2] += a0 * b1 - a1 * b0


@_inline
def _body_wrench_adjoint(
    body, m, inertia, world, g, pos, twist, accel, wrench_bar, twist_bar, accel_bar, pos_bar, rot, rot_bar, tmp, out_bar
):  # pragma: no cover - compiled by Numba
    """Transposes :func:`_body_wrench` (eqs 3.30-3.31) and :func:`_body_inertia`'s
    ``world = sym(A I A^T)`` for body ``body``: adds to the twist, acceleration, centroid and
    rotation cotangents and writes ``out_bar = (m_bar, g_bar (3), I_bar (3 x 3))`` (``world``
    and ``tmp`` are overwritten)."""
    wx, wy, wz = twist[body, 0], twist[body, 1], twist[body, 2]
    ax, ay, az = accel[body, 0], accel[body, 1], accel[body, 2]
    rx, ry, rz = pos[body, 0], pos[body, 1], pos[body, 2]
    hx = world[0, 0] * wx + world[0, 1] * wy + world[0, 2] * wz
    hy = world[1, 0] * wx + world[1, 1] * wy + world[1, 2] * wz
    hz = world[2, 0] * wx + world[2, 1] * wy + world[2, 2] * wz
    vx = twist[body, 3] + wy * rz - wz * ry
    vy = twist[body, 4] + wz * rx - wx * rz
    vz = twist[body, 5] + wx * ry - wy * rx
    lx = accel[body, 3] + ay * rz - az * ry + wy * vz - wz * vy - g[0]
    ly = accel[body, 4] + az * rx - ax * rz + wz * vx - wx * vz - g[1]
    lz = accel[body, 5] + ax * ry - ay * rx + wx * vy - wy * vx - g[2]
    fx, fy, fz = m * lx, m * ly, m * lz
    # wrench = (f, n + r x f)
    nbx, nby, nbz = wrench_bar[body, 3], wrench_bar[body, 4], wrench_bar[body, 5]
    _cross_add(fx, fy, fz, nbx, nby, nbz, pos_bar, body, 0)
    fbx = wrench_bar[body, 0] + nby * rz - nbz * ry
    fby = wrench_bar[body, 1] + nbz * rx - nbx * rz
    fbz = wrench_bar[body, 2] + nbx * ry - nby * rx
    # f = m (l - g): l_bar = m f_bar
    out_bar[0] = fbx * lx + fby * ly + fbz * lz
    out_bar[1], out_bar[2], out_bar[3] = -m * fbx, -m * fby, -m * fbz
    lbx, lby, lbz = m * fbx, m * fby, m * fbz
    # l = a_v + a_w x r + w x vel
    accel_bar[body, 3] += lbx
    accel_bar[body, 4] += lby
    accel_bar[body, 5] += lbz
    _cross_add(rx, ry, rz, lbx, lby, lbz, accel_bar, body, 0)
    _cross_add(lbx, lby, lbz, ax, ay, az, pos_bar, body, 0)
    _cross_add(vx, vy, vz, lbx, lby, lbz, twist_bar, body, 0)
    vbx, vby, vbz = lby * wz - lbz * wy, lbz * wx - lbx * wz, lbx * wy - lby * wx
    # vel = v_o + w x r
    twist_bar[body, 3] += vbx
    twist_bar[body, 4] += vby
    twist_bar[body, 5] += vbz
    _cross_add(rx, ry, rz, vbx, vby, vbz, twist_bar, body, 0)
    _cross_add(vbx, vby, vbz, wx, wy, wz, pos_bar, body, 0)
    # n = world a_w + w x h, h = world w (world symmetric)
    for r in range(3):
        accel_bar[body, r] += world[r, 0] * nbx + world[r, 1] * nby + world[r, 2] * nbz
    _cross_add(hx, hy, hz, nbx, nby, nbz, twist_bar, body, 0)
    hbx, hby, hbz = nby * wz - nbz * wy, nbz * wx - nbx * wz, nbx * wy - nby * wx
    for r in range(3):
        twist_bar[body, r] += world[r, 0] * hbx + world[r, 1] * hby + world[r, 2] * hbz
    # world_bar = n_bar a_w^T + h_bar w^T, symmetrised (world = sym(A I A^T)):
    # A_bar += world_bar A (I + I^T), I_bar = A^T world_bar A.
    nb = (nbx, nby, nbz)
    hb = (hbx, hby, hbz)
    aw = (ax, ay, az)
    w = (wx, wy, wz)
    for r in range(3):
        for k in range(3):
            world[r, k] = 0.5 * (nb[r] * aw[k] + hb[r] * w[k] + nb[k] * aw[r] + hb[k] * w[r])
    for r in range(3):  # tmp = world_bar A
        for k in range(3):
            tmp[r, k] = world[r, 0] * rot[body, 0, k] + world[r, 1] * rot[body, 1, k] + world[r, 2] * rot[body, 2, k]
    for r in range(3):
        for j in range(3):
            rot_bar[body, r, j] += (
                tmp[r, 0] * (inertia[0, j] + inertia[j, 0])
                + tmp[r, 1] * (inertia[1, j] + inertia[j, 1])
                + tmp[r, 2] * (inertia[2, j] + inertia[j, 2])
            )
    for r in range(3):
        for k in range(3):
            out_bar[4 + 3 * r + k] = (
                rot[body, 0, r] * tmp[0, k] + rot[body, 1, r] * tmp[1, k] + rot[body, 2, r] * tmp[2, k]
            )


@_inline
def _end_point_loads_adjoint(
    end_point_link,
    centroid_to_end_point,
    force,
    torque,
    rot,
    pos,
    wrench_bar,
    pos_bar,
    rot_bar,
    ce_bar,
    force_bar,
    torque_bar,
):  # pragma: no cover - compiled by Numba
    """Transposes :func:`_subtract_end_point_loads`: ``wrench[body] -= (fe, te + p_e x fe)``
    with ``p_e = pos[body] + A ce``; writes the cotangents of ``ce``, ``fe`` and ``te``
    (``(ne, 3)`` each)."""
    for e in range(end_point_link.shape[0]):
        body = end_point_link[e]
        ce = centroid_to_end_point[e]
        fe = force[e]
        px = pos[body, 0] + rot[body, 0, 0] * ce[0] + rot[body, 0, 1] * ce[1] + rot[body, 0, 2] * ce[2]
        py = pos[body, 1] + rot[body, 1, 0] * ce[0] + rot[body, 1, 1] * ce[1] + rot[body, 1, 2] * ce[2]
        pz = pos[body, 2] + rot[body, 2, 0] * ce[0] + rot[body, 2, 1] * ce[1] + rot[body, 2, 2] * ce[2]
        mx, my, mz = -wrench_bar[body, 3], -wrench_bar[body, 4], -wrench_bar[body, 5]
        torque_bar[e, 0], torque_bar[e, 1], torque_bar[e, 2] = mx, my, mz
        force_bar[e, 0] = -wrench_bar[body, 0] + my * pz - mz * py
        force_bar[e, 1] = -wrench_bar[body, 1] + mz * px - mx * pz
        force_bar[e, 2] = -wrench_bar[body, 2] + mx * py - my * px
        # p_bar = fe x m_bar
        pbx, pby, pbz = fe[1] * mz - fe[2] * my, fe[2] * mx - fe[0] * mz, fe[0] * my - fe[1] * mx
        pos_bar[body, 0] += pbx
        pos_bar[body, 1] += pby
        pos_bar[body, 2] += pbz
        pb = (pbx, pby, pbz)
        for r in range(3):
            for k in range(3):
                rot_bar[body, r, k] += pb[r] * ce[k]
        for k in range(3):
            ce_bar[e, k] = rot[body, 0, k] * pbx + rot[body, 1, k] * pby + rot[body, 2, k] * pbz


@_inline
def _link_motion_adjoint(i, parent, qd, bd, qdd, bdd, axis, twist, accel_bar, twist_bar, axis_bar, qd_bar, qdd_bar):
    """Transposes link ``i``'s ``accel = accel_p + qd (twist x s) + s qdd`` and ``twist =
    twist_p + s qd`` (eqs 3.8-3.15; :func:`_link_motion`), once the cotangents of its twist and
    acceleration are complete (its children's done): adds to the parent's and to ``axis_bar[i]``,
    writes ``qd_bar`` and ``qdd_bar`` (``[i]``)."""  # pragma: no cover - compiled by Numba
    p, body = parent[i], i + 1
    qdi, qddi = qd[bd, i], qdd[bdd, i]
    tw0, tw1, tw2 = twist[body, 0], twist[body, 1], twist[body, 2]
    tv0, tv1, tv2 = twist[body, 3], twist[body, 4], twist[body, 5]
    sw0, sw1, sw2 = axis[i, 0], axis[i, 1], axis[i, 2]
    sv0, sv1, sv2 = axis[i, 3], axis[i, 4], axis[i, 5]
    a0, a1, a2 = accel_bar[body, 0], accel_bar[body, 1], accel_bar[body, 2]
    l0, l1, l2 = accel_bar[body, 3], accel_bar[body, 4], accel_bar[body, 5]
    speed_bar = (
        a0 * (tw1 * sw2 - tw2 * sw1)
        + a1 * (tw2 * sw0 - tw0 * sw2)
        + a2 * (tw0 * sw1 - tw1 * sw0)
        + l0 * (tw1 * sv2 - tw2 * sv1 + tv1 * sw2 - tv2 * sw1)
        + l1 * (tw2 * sv0 - tw0 * sv2 + tv2 * sw0 - tv0 * sw2)
        + l2 * (tw0 * sv1 - tw1 * sv0 + tv0 * sw1 - tv1 * sw0)
    )
    acceleration_bar = 0.0
    for a in range(6):
        acceleration_bar += accel_bar[body, a] * axis[i, a]
        axis_bar[i, a] += qddi * accel_bar[body, a]
        accel_bar[p, a] += accel_bar[body, a]
    qdd_bar[i] = acceleration_bar
    # (w x sw, w x sv + v x sw) with cotangent qd * accel_bar
    x0, x1, x2 = qdi * a0, qdi * a1, qdi * a2
    y0, y1, y2 = qdi * l0, qdi * l1, qdi * l2
    _cross_add(sw0, sw1, sw2, x0, x1, x2, twist_bar, body, 0)
    _cross_add(sv0, sv1, sv2, y0, y1, y2, twist_bar, body, 0)
    _cross_add(sw0, sw1, sw2, y0, y1, y2, twist_bar, body, 3)
    _cross_add(x0, x1, x2, tw0, tw1, tw2, axis_bar, i, 0)
    _cross_add(y0, y1, y2, tv0, tv1, tv2, axis_bar, i, 0)
    _cross_add(y0, y1, y2, tw0, tw1, tw2, axis_bar, i, 3)
    for a in range(6):
        speed_bar += twist_bar[body, a] * axis[i, a]
        axis_bar[i, a] += qdi * twist_bar[body, a]
        twist_bar[p, a] += twist_bar[body, a]
    qd_bar[i] += speed_bar


@_inline
def _link_frame_adjoint(
    i,
    parent,
    revolute,
    q,
    bj,
    joint_frame,
    bf,
    parent_to_joint,
    bpj,
    centroid_to_joint,
    bcj,
    rot,
    joint_position,
    joint_trig,
    axis_bar,
    rot_bar,
    pos_bar,
    q_bar,
    frame_bar,
    parent_to_joint_bar,
    centroid_to_joint_bar,
    tmp,
):  # pragma: no cover - compiled by Numba
    """Transposes :func:`_link_frame` (eq 3.1) for link ``i``, once the cotangents of its
    rotation, centroid and motion axis are complete (its children's done): adds to the
    parent's and to ``q_bar[i]``, writes the cotangents of its fixed frame rotation and two
    position vectors."""
    p, body = parent[i], i + 1
    qi = q[bj, i]
    fixed = joint_frame[bf, i]
    pj = parent_to_joint[bpj, i]
    cj = centroid_to_joint[bcj, i]
    jx, jy, jz = joint_position[i, 0], joint_position[i, 1], joint_position[i, 2]
    k0, k1, k2 = rot[body, 0, 2], rot[body, 1, 2], rot[body, 2, 2]
    c, sn = 1.0, 0.0
    # axis = (k, jp x k) revolute, (0, k) prismatic
    if revolute[i]:
        rot_bar[body, 0, 2] += axis_bar[i, 0] + axis_bar[i, 4] * jz - axis_bar[i, 5] * jy
        rot_bar[body, 1, 2] += axis_bar[i, 1] + axis_bar[i, 5] * jx - axis_bar[i, 3] * jz
        rot_bar[body, 2, 2] += axis_bar[i, 2] + axis_bar[i, 3] * jy - axis_bar[i, 4] * jx
        jbx = k1 * axis_bar[i, 5] - k2 * axis_bar[i, 4]
        jby = k2 * axis_bar[i, 3] - k0 * axis_bar[i, 5]
        jbz = k0 * axis_bar[i, 4] - k1 * axis_bar[i, 3]
    else:
        rot_bar[body, 0, 2] += axis_bar[i, 3]
        rot_bar[body, 1, 2] += axis_bar[i, 4]
        rot_bar[body, 2, 2] += axis_bar[i, 5]
        jbx, jby, jbz = 0.0, 0.0, 0.0
    # pos = jp + A o, o = -cj (+ q e_z prismatic)
    o2 = -cj[2]
    if not revolute[i]:
        o2 += qi
    o = (-cj[0], -cj[1], o2)
    pb = (pos_bar[body, 0], pos_bar[body, 1], pos_bar[body, 2])
    jbx, jby, jbz = jbx + pb[0], jby + pb[1], jbz + pb[2]
    for r in range(3):
        for k in range(3):
            rot_bar[body, r, k] += pb[r] * o[k]
    for k in range(3):
        centroid_to_joint_bar[i, k] = -(rot[body, 0, k] * pb[0] + rot[body, 1, k] * pb[1] + rot[body, 2, k] * pb[2])
    if not revolute[i]:
        q_bar[i] -= centroid_to_joint_bar[i, 2]
    # jp = pos_p + A_p pj
    jb = (jbx, jby, jbz)
    for r in range(3):
        pos_bar[p, r] += jb[r]
        for k in range(3):
            rot_bar[p, r, k] += jb[r] * pj[k]
    for k in range(3):
        parent_to_joint_bar[i, k] = rot[p, 0, k] * jbx + rot[p, 1, k] * jby + rot[p, 2, k] * jbz
    # A = A_p T, T = F Rz(q) (revolute) or F: A_p_bar += A_bar T^T, T_bar = A_p^T A_bar
    if revolute[i]:
        c, sn = joint_trig[i, 0], joint_trig[i, 1]
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
            rot_bar[p, r, k] += (
                rot_bar[body, r, 0] * tmp[k, 0] + rot_bar[body, r, 1] * tmp[k, 1] + rot_bar[body, r, 2] * tmp[k, 2]
            )
    for r in range(3):
        for k in range(3):
            tmp[r, k] = (
                rot[p, 0, r] * rot_bar[body, 0, k]
                + rot[p, 1, r] * rot_bar[body, 1, k]
                + rot[p, 2, r] * rot_bar[body, 2, k]
            )
    if revolute[i]:
        angle_bar = 0.0
        for r in range(3):
            frame_bar[i, r, 0] = c * tmp[r, 0] - sn * tmp[r, 1]
            frame_bar[i, r, 1] = sn * tmp[r, 0] + c * tmp[r, 1]
            frame_bar[i, r, 2] = tmp[r, 2]
            angle_bar += tmp[r, 0] * (c * fixed[r, 1] - sn * fixed[r, 0]) - tmp[r, 1] * (
                sn * fixed[r, 1] + c * fixed[r, 0]
            )
        q_bar[i] += angle_bar
    else:
        for r in range(3):
            for k in range(3):
                frame_bar[i, r, k] = tmp[r, k]


@_inline
def _base_frame_adjoint(quaternion, bq, rot_bar, quaternion_bar):  # pragma: no cover - compiled by Numba
    """Transposes :func:`_base_frame`: ``A = E + s P(x, y, z, w)``, ``s = 2 / |quat|^2``, so
    ``quat_bar = s sum A_bar . dP - s^2 (A_bar : P) quat``."""
    x, y, z, w = quaternion[bq, 0], quaternion[bq, 1], quaternion[bq, 2], quaternion[bq, 3]
    s = 2.0 / (x * x + y * y + z * z + w * w)
    g = rot_bar[0]
    pp = (
        -g[0, 0] * (y * y + z * z)
        + g[0, 1] * (x * y - z * w)
        + g[0, 2] * (x * z + y * w)
        + g[1, 0] * (x * y + z * w)
        - g[1, 1] * (x * x + z * z)
        + g[1, 2] * (y * z - x * w)
        + g[2, 0] * (x * z - y * w)
        + g[2, 1] * (y * z + x * w)
        - g[2, 2] * (x * x + y * y)
    )
    dx = (
        g[0, 1] * y
        + g[0, 2] * z
        + g[1, 0] * y
        - 2 * g[1, 1] * x
        - g[1, 2] * w
        + g[2, 0] * z
        + g[2, 1] * w
        - 2 * g[2, 2] * x
    )
    dy = (
        -2 * g[0, 0] * y
        + g[0, 1] * x
        + g[0, 2] * w
        + g[1, 0] * x
        + g[1, 2] * z
        - g[2, 0] * w
        + g[2, 1] * z
        - 2 * g[2, 2] * y
    )
    dz = (
        -2 * g[0, 0] * z
        - g[0, 1] * w
        + g[0, 2] * x
        + g[1, 0] * w
        - 2 * g[1, 1] * z
        + g[1, 2] * y
        + g[2, 0] * x
        + g[2, 1] * y
    )
    dw = -g[0, 1] * z + g[0, 2] * y + g[1, 0] * z - g[1, 2] * x - g[2, 0] * y + g[2, 1] * x
    quaternion_bar[0] = s * dx - s * s * pp * x
    quaternion_bar[1] = s * dy - s * s * pp * y
    quaternion_bar[2] = s * dz - s * s * pp * z
    quaternion_bar[3] = s * dw - s * s * pp * w


@_inline
def _vjp_work(n, nv, q):  # pragma: no cover - compiled by Numba
    """Working arrays of :func:`_newton_euler_reverse`: :func:`scratch`'s, the
    cotangents of the rotations, centroids, twists, accelerations, motion axes and wrenches,
    the joint positions, their joints' ``(cos q, sin q)``, the bodies' inertias in the inertial
    frame (:func:`_newton_euler_pass`'s) and one body's parameter cotangents."""
    dtype = q.dtype
    return (
        scratch(n, nv, q),
        np.zeros((n + 1, 3, 3), dtype),
        np.zeros((n + 1, 3), dtype),
        np.zeros((n + 1, 6), dtype),
        np.zeros((n + 1, 6), dtype),
        np.zeros((n, 6), dtype),
        np.zeros((n + 1, 6), dtype),
        np.zeros((n, 3), dtype),
        np.zeros((n, 2), dtype),
        np.zeros((n + 1, 3, 3), dtype),
        np.zeros(13, dtype),
    )


# Inlined into its two callers at Numba's IR level (inline="always"): called as a compiled
# function it passes ~50 arrays per sample, each reference-counted, and the forward dynamics'
# reverse kernel ran 8 % slower (4.35 against 4.00 us per sample, 7-joint arm, batch 1024, one
# thread, three alternating runs); its compile time is the same either way (12 s). (Inlined by
# LLVM instead, as the pieces are by _inline, the reference counts stay and nothing changes.)
@_inline_ir
def _newton_euler_reverse(
    b, row, parent, revolute, end_point_link, inputs, wrench_cot, tau_cot, outputs, work
):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s vector-Jacobian product of the inverse dynamics (eqs 3.1-3.39, each
    piece transposed), once :func:`_newton_euler_pass` has filled ``work``'s frames, motion,
    wrenches and joint positions for it: ``inputs`` and ``outputs`` the tuples of
    :func:`inverse_dynamics_vjp_range`'s inputs and cotangent outputs (the inputs read at the
    sample's row, the outputs written at row ``row``), ``wrench_cot (6,)`` and ``tau_cot (n,)``
    the cotangents of the base wrench and the joint loads, ``work`` from :func:`_vjp_work`."""
    (
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        base_acceleration,
        qdd,
        end_point_force,
        end_point_torque,
    ) = inputs
    (
        quaternion_bar,
        linear_velocity_bar,
        angular_velocity_bar,
        q_bar,
        qd_bar,
        base_mass_bar,
        base_inertia_bar,
        link_mass_bar,
        link_inertia_bar,
        joint_frame_bar,
        parent_to_joint_bar,
        centroid_to_joint_bar,
        centroid_to_end_point_bar,
        stiffness_bar,
        damping_bar,
        gravity_bar,
        base_acceleration_bar,
        qdd_bar,
        end_point_force_bar,
        end_point_torque_bar,
    ) = outputs
    (
        (rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y),
        rot_bar,
        pos_bar,
        twist_bar,
        accel_bar,
        axis_bar,
        wrench_bar,
        joint_position,
        joint_trig,
        body_world,
        body_bar,
    ) = work
    n = parent.shape[0]
    bj, bd, bdd = _pick(b, q), _pick(b, qd), _pick(b, qdd)
    bf, bpj, bcj = _pick(b, joint_frame), _pick(b, parent_to_joint), _pick(b, centroid_to_joint)
    bm, bbm, bbi, bli = _pick(b, link_mass), _pick(b, base_mass), _pick(b, base_inertia), _pick(b, link_inertia)
    bw, bv = _pick(b, angular_velocity), _pick(b, linear_velocity)
    g = gravity[_pick(b, gravity)]
    fe, te = end_point_force[_pick(b, end_point_force), 0], end_point_torque[_pick(b, end_point_torque), 0]
    ce = centroid_to_end_point[_pick(b, centroid_to_end_point)]
    # The reverse pass. Outputs: tau = axis . subtree wrench + K q + D qd, base = wrench[0].
    rot_bar[:] = 0.0
    pos_bar[:] = 0.0
    twist_bar[:] = 0.0
    accel_bar[:] = 0.0
    axis_bar[:] = 0.0
    wrench_bar[:] = 0.0
    tb = tau_cot
    bk, bdamp = _pick(b, stiffness), _pick(b, damping)
    for a in range(6):
        wrench_bar[0, a] = wrench_cot[a]
    for i in range(n):
        t = tb[i]
        stiffness_bar[row, i] = t * q[bj, i]
        damping_bar[row, i] = t * qd[bd, i]
        q_bar[row, i] = t * stiffness[bk, i]
        qd_bar[row, i] = t * damping[bdamp, i]
        for a in range(3):
            axis_bar[i, a] = t * wrench[i + 1, 3 + a]
            axis_bar[i, 3 + a] = t * wrench[i + 1, a]
            wrench_bar[i + 1, 3 + a] = t * axis[i, a]
            wrench_bar[i + 1, a] = t * axis[i, 3 + a]
    # Subtree sums transposed, root to leaves: each body's own wrench cotangent.
    for i in range(n):
        for a in range(6):
            wrench_bar[i + 1, a] += wrench_bar[parent[i], a]
    _end_point_loads_adjoint(
        end_point_link,
        ce,
        fe,
        te,
        rot,
        pos,
        wrench_bar,
        pos_bar,
        rot_bar,
        centroid_to_end_point_bar[row],
        end_point_force_bar[row],
        end_point_torque_bar[row],
    )
    for a in range(3):
        gravity_bar[row, a] = 0.0
    for body in range(n + 1):
        if body == 0:
            m, inertia = base_mass[bbm], base_inertia[bbi]
        else:
            m, inertia = link_mass[bm, body - 1], link_inertia[bli, body - 1]
        for r in range(3):
            for k in range(3):
                world[r, k] = body_world[body, r, k]
        _body_wrench_adjoint(
            body,
            m,
            inertia,
            world,
            g,
            pos,
            twist,
            accel,
            wrench_bar,
            twist_bar,
            accel_bar,
            pos_bar,
            rot,
            rot_bar,
            tmp,
            body_bar,
        )
        for a in range(3):
            gravity_bar[row, a] += body_bar[1 + a]
        if body == 0:
            base_mass_bar[row] = body_bar[0]
            for r in range(3):
                for k in range(3):
                    base_inertia_bar[row, r, k] = body_bar[4 + 3 * r + k]
        else:
            link_mass_bar[row, body - 1] = body_bar[0]
            for r in range(3):
                for k in range(3):
                    link_inertia_bar[row, body - 1, r, k] = body_bar[4 + 3 * r + k]
    # Motion, leaves to root (eqs 3.8-3.15 transposed), then the base's (dw0, dv0 - w0 x v0).
    for i in range(n - 1, -1, -1):
        _link_motion_adjoint(
            i, parent, qd, bd, qdd, bdd, axis, twist, accel_bar, twist_bar, axis_bar, qd_bar[row], qdd_bar[row]
        )
    w0, v0 = angular_velocity[bw], linear_velocity[bv]
    for a in range(3):
        base_acceleration_bar[row, 3 + a] = accel_bar[0, a]
        base_acceleration_bar[row, a] = accel_bar[0, 3 + a]
        angular_velocity_bar[row, a] = twist_bar[0, a]
        linear_velocity_bar[row, a] = twist_bar[0, 3 + a]
    c0, c1, c2 = accel_bar[0, 3], accel_bar[0, 4], accel_bar[0, 5]
    angular_velocity_bar[row, 0] -= v0[1] * c2 - v0[2] * c1
    angular_velocity_bar[row, 1] -= v0[2] * c0 - v0[0] * c2
    angular_velocity_bar[row, 2] -= v0[0] * c1 - v0[1] * c0
    linear_velocity_bar[row, 0] -= c1 * w0[2] - c2 * w0[1]
    linear_velocity_bar[row, 1] -= c2 * w0[0] - c0 * w0[2]
    linear_velocity_bar[row, 2] -= c0 * w0[1] - c1 * w0[0]
    # Frames, leaves to root (eq 3.1 transposed), then the base rotation's quaternion.
    for i in range(n - 1, -1, -1):
        _link_frame_adjoint(
            i,
            parent,
            revolute,
            q,
            bj,
            joint_frame,
            bf,
            parent_to_joint,
            bpj,
            centroid_to_joint,
            bcj,
            rot,
            joint_position,
            joint_trig,
            axis_bar,
            rot_bar,
            pos_bar,
            q_bar[row],
            joint_frame_bar[row],
            parent_to_joint_bar[row],
            centroid_to_joint_bar[row],
            tmp,
        )
    _base_frame_adjoint(quaternion, _pick(b, quaternion), rot_bar, quaternion_bar[row])


@_jit
def inverse_dynamics_vjp_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    base_acceleration,
    qdd,
    end_point_force,
    end_point_torque,
    base_wrench_bar,
    tau_bar,
    quaternion_bar,
    linear_velocity_bar,
    angular_velocity_bar,
    q_bar,
    qd_bar,
    base_mass_bar,
    base_inertia_bar,
    link_mass_bar,
    link_inertia_bar,
    joint_frame_bar,
    parent_to_joint_bar,
    centroid_to_joint_bar,
    centroid_to_end_point_bar,
    stiffness_bar,
    damping_bar,
    gravity_bar,
    base_acceleration_bar,
    qdd_bar,
    end_point_force_bar,
    end_point_torque_bar,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against JAX's reverse mode
    """The vector-Jacobian product of :func:`inverse_dynamics_range` (reverse mode of the
    Newton-Euler inverse dynamics, eqs 3.1-3.39, transposed piece by piece) for the samples
    ``start <= b < stop``: given the cotangents ``base_wrench_bar (.., 6)`` and ``tau_bar (.., n)``
    of its outputs, the cotangent of every floating-point input, one row per sample (``(B,
    ...)``, a shared input's too), each ``*_bar`` output shaped as its input without the
    leading axis (the end-point loads without their step axis)."""
    inputs = (
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        base_acceleration,
        qdd,
        end_point_force,
        end_point_torque,
    )
    outputs = (
        quaternion_bar,
        linear_velocity_bar,
        angular_velocity_bar,
        q_bar,
        qd_bar,
        base_mass_bar,
        base_inertia_bar,
        link_mass_bar,
        link_inertia_bar,
        joint_frame_bar,
        parent_to_joint_bar,
        centroid_to_joint_bar,
        centroid_to_end_point_bar,
        stiffness_bar,
        damping_bar,
        gravity_bar,
        base_acceleration_bar,
        qdd_bar,
        end_point_force_bar,
        end_point_torque_bar,
    )
    work = _vjp_work(parent.shape[0], free.shape[0], q)
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y = work[0]
    joint_position, joint_trig, body_world = work[7], work[8], work[9]
    for b in range(start, stop):
        _newton_euler_pass(
            b,
            parent,
            revolute,
            end_point_link,
            inputs,
            rot,
            pos,
            twist,
            accel,
            axis,
            wrench,
            world,
            jp,
            tmp,
            joint_position,
            joint_trig,
            body_world,
        )
        _newton_euler_reverse(
            b,
            b,
            parent,
            revolute,
            end_point_link,
            inputs,
            base_wrench_bar[_pick(b, base_wrench_bar)],
            tau_bar[_pick(b, tau_bar)],
            outputs,
            work,
        )


@_jit
def forward_dynamics_vjp_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    base_acceleration,
    qdd,
    end_point_force,
    end_point_torque,
    acceleration_bar,
    quaternion_bar,
    linear_velocity_bar,
    angular_velocity_bar,
    q_bar,
    qd_bar,
    base_mass_bar,
    base_inertia_bar,
    link_mass_bar,
    link_inertia_bar,
    joint_frame_bar,
    parent_to_joint_bar,
    centroid_to_joint_bar,
    centroid_to_end_point_bar,
    stiffness_bar,
    damping_bar,
    gravity_bar,
    base_acceleration_bar,
    qdd_bar,
    end_point_force_bar,
    end_point_torque_bar,
    multiplier_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against JAX's reverse mode
    """Reverse mode of the forward dynamics (eq 3.29) for the samples ``start <= b < stop``, by
    the implicit-function rule: the forward dynamics ``a`` zeroes the residual ``H a + c - Q``
    (the inverse dynamics at ``a`` less the applied loads), so a cotangent ``a_bar`` gives the
    multiplier ``lambda = H^-1 a_bar`` (free coordinates) and the inputs' cotangents are those
    of the inverse dynamics at ``a`` for the cotangent ``-lambda``, and ``+lambda`` for the
    applied loads. ``H`` (eqs 3.18-3.28) and its factor are recomputed here, sample by sample,
    rather than stored by the forward pass: a 13-DOF factor is 1.4 kB per sample and stage,
    most of what a reverse-mode rollout kept per step, and copying it in and out of the
    kernels cost more than refactorising (benchmarks/README.md, *Gradient of a rollout*).
    One Newton-Euler pass at the solution serves both: ``H`` is built from its frames and body
    inertias, and its joint angles' sines and cosines and body inertias are reused by the
    transpose (each computed once per sample: 3.4 us per sample instead of 5.1 with the frames
    computed twice and the transpose called as a function; 7-joint arm, one thread).

    Inputs as :func:`inverse_dynamics_vjp_range`'s, with ``base_acceleration`` and ``qdd`` the
    forward dynamics' solution and ``acceleration_bar (.., 6 + n)`` (floating order) in place
    of the output cotangents. Outputs as :func:`inverse_dynamics_vjp_range`'s, and
    ``multiplier_out (B, 6 + n)``: ``lambda`` in floating order (zero along the components the
    base mode fixes), the cotangent of the applied loads ``[F0, N0, tau]``."""
    n, nv = parent.shape[0], free.shape[0]
    inputs = (
        quaternion,
        linear_velocity,
        angular_velocity,
        q,
        qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        base_acceleration,
        qdd,
        end_point_force,
        end_point_torque,
    )
    outputs = (
        quaternion_bar,
        linear_velocity_bar,
        angular_velocity_bar,
        q_bar,
        qd_bar,
        base_mass_bar,
        base_inertia_bar,
        link_mass_bar,
        link_inertia_bar,
        joint_frame_bar,
        parent_to_joint_bar,
        centroid_to_joint_bar,
        centroid_to_end_point_bar,
        stiffness_bar,
        damping_bar,
        gravity_bar,
        base_acceleration_bar,
        qdd_bar,
        end_point_force_bar,
        end_point_torque_bar,
    )
    work = _vjp_work(n, nv, q)
    cotangents = (np.zeros(6, q.dtype), np.zeros(n, q.dtype))
    for b in range(start, stop):
        _forward_dynamics_vjp_sample(
            b,
            b,
            parent,
            revolute,
            free,
            end_point_link,
            dof_parent,
            inputs,
            acceleration_bar,
            multiplier_out,
            outputs,
            work,
            cotangents,
        )


@_inline_ir
def _forward_dynamics_vjp_sample(
    b,
    row,
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    inputs,
    acceleration_bar,
    multiplier_out,
    outputs,
    work,
    cotangents,
):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s reverse mode of the forward dynamics (:func:`forward_dynamics_vjp_range`):
    ``inputs``, ``acceleration_bar (.., 6 + n)`` (read at the sample's row), ``outputs`` and
    ``multiplier_out (.., 6 + n)`` (written at row ``row``) as there; ``work`` from
    :func:`_vjp_work`, ``cotangents`` two working vectors ``(6,)`` and ``(n,)``. (Rows are
    indexed in place: a view per sample costs its reference counts.)"""
    base_mass, link_mass = inputs[5], inputs[7]
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, multiplier = work[0]
    joint_position, joint_trig, body_world = work[7], work[8], work[9]
    wrench_cot, tau_cot = cotangents
    n, nv = parent.shape[0], free.shape[0]
    # One Newton-Euler pass at the solution; H from its frames and body inertias (eqs 3.18-3.28).
    _newton_euler_pass(
        b,
        parent,
        revolute,
        end_point_link,
        inputs,
        rot,
        pos,
        twist,
        accel,
        axis,
        wrench,
        world,
        jp,
        tmp,
        joint_position,
        joint_trig,
        body_world,
    )
    bm, bbm = _pick(b, link_mass), _pick(b, base_mass)
    for body in range(n + 1):
        for r in range(3):
            for k in range(3):
                world[r, k] = body_world[body, r, k]
        m = base_mass[bbm] if body == 0 else link_mass[bm, body - 1]
        _body_moments(body, m, world, pos, mass, first, second)
    _subtree_inertia_matrix(parent, axis, mass, first, second, h)
    ab = _pick(b, acceleration_bar)
    for r in range(nv):
        multiplier[r] = acceleration_bar[ab, free[r]]
    if dof_parent.shape[0] == 0:
        _cholesky(h, free, nv, factor)
        _cholesky_solve(factor, nv, multiplier)
    else:
        _tree_factor(h, free, dof_parent, factor)
        _tree_solve(factor, dof_parent, nv, multiplier)
    for r in range(6 + n):
        multiplier_out[row, r] = 0.0
    for r in range(nv):
        multiplier_out[row, free[r]] = multiplier[r]
    for a in range(6):
        wrench_cot[a] = -multiplier_out[row, a]
    for i in range(n):
        tau_cot[i] = -multiplier_out[row, 6 + i]
    _newton_euler_reverse(b, row, parent, revolute, end_point_link, inputs, wrench_cot, tau_cot, outputs, work)


@_jit
def inertia_matrix_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    h_out,
    factor_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """The inertia matrix (:func:`sdjax.inertia_matrix` of a model without mimic joints, eqs
    3.18-3.28) of the samples ``start <= b < stop``, in the base mode's free coordinates
    ``free (nv,)``: ``h_out (B, nv, nv)``, and ``factor_out (B, nv, nv)`` its lower Cholesky
    factor (zero above the diagonal, as :func:`forward_dynamics_range`'s); either output may be
    a ``(0, nv, nv)`` array: not computed. Inputs as :func:`forward_dynamics_range`'s (the
    velocities, end points, passive joints and gravity are not read)."""
    rot, pos, twist, accel, axis, wrench, mass, first, second, world, jp, tmp, h, rhs, factor, y = scratch(
        parent.shape[0], free.shape[0], q
    )
    nv = free.shape[0]
    for b in range(start, stop):
        _frames_and_inertia_matrix(
            b,
            parent,
            revolute,
            quaternion,
            q,
            base_mass,
            base_inertia,
            link_mass,
            link_inertia,
            joint_frame,
            parent_to_joint,
            centroid_to_joint,
            rot,
            pos,
            axis,
            mass,
            first,
            second,
            world,
            jp,
            tmp,
            h,
        )
        if h_out.shape[0]:
            for r in range(nv):
                for c in range(nv):
                    h_out[b, r, c] = h[free[r], free[c]]
        if factor_out.shape[0]:
            _cholesky(h, free, nv, factor)
            for r in range(nv):
                for c in range(nv):
                    factor_out[b, r, c] = factor[r, c] if c <= r else 0.0


#: Joint laws of :func:`rk4_rollout`, evaluated at the start of each step and held over it
#: (``sdjax.batch_kernel`` names them "none", "pd", "computed_torque"): open loop, PD,
#: computed torque.
LAW_NONE = 0
LAW_PD = 1
LAW_COMPUTED_TORQUE = 2


@_jit
def rk4_rollout(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    law,
    position,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    tau,
    base_force,
    base_torque,
    end_point_force,
    end_point_torque,
    dt,
    law_base_mass,
    law_base_inertia,
    law_link_mass,
    law_link_inertia,
    law_joint_frame,
    law_parent_to_joint,
    law_centroid_to_joint,
    law_centroid_to_end_point,
    law_stiffness,
    law_damping,
    law_gravity,
    kp,
    kd,
    goal,
    limit,
    bias,
    noise,
    states_out,
    tau_out,
    stages_out,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against the JAX path
    """RK4 rollouts of the samples ``start <= b < stop``: ``states_out (B, N, 13 + 2 n)``
    receives the state after each of the ``N`` steps, packed as ``[r0, quat, v0, w0, q, qd]``;
    ``stages_out (B, 4, 16 + 3 n)`` (or ``(0, 4, 16 + 3 n)``: not stored) the four stages of the
    last step, each packed as ``[quat, v0, w0, q, qd, acceleration (6 + n)]``
    (what the reverse kernel :func:`rk4_step_vjp_range` reads).

    Inputs as :func:`forward_dynamics`'s (leading axis ``B`` or 1), plus the initial
    ``position (.., 3)``; the loads have a step axis after the batch axis, of ``N`` (held over
    each step) or 1 (the same at every step); ``dt (B or 1,)`` in s. Each step is that of
    :func:`sdjax.integrate.rk4_step`: stage states ``y + c_k dt k_(k-1)`` with the quaternion
    un-normalised, ``y + dt sum_k b_k k_k``, then the quaternion normalised (a zero quaternion
    stays zero, as :func:`sdjax.rotation.quat_normalize` leaves it).

    ``law``: :data:`LAW_NONE` (open loop: the joint torques are ``tau``), or a joint law
    evaluated on the state at the start of each step and held over it, whose torques replace
    ``tau`` and are written to ``tau_out (B, N, n)``: :data:`LAW_PD` (:class:`sdjax.JointPD`
    to the set point ``goal`` at rest, ``kp (goal - q) + kd (0 - qd)``) or
    :data:`LAW_COMPUTED_TORQUE` (:class:`sdjax.ComputedTorque`, floating base at zero
    momentum, with the controller's model ``law_*`` (model arrays as the plant's): ``H* u + C*
    - tau_passive`` for ``u = kd (0 - qd) + kp (goal - q)``; :func:`computed_torque_range`).
    Either is saturated at ``+-limit``, then ``bias`` and the step's ``noise`` row are added
    (the law of :class:`sdjax.montecarlo.ControlScenario`). ``kp, kd, goal, limit, bias (.., n)``,
    ``noise (.., N or 1, n)``; unread for ``LAW_NONE``.
    """
    n, nv = parent.shape[0], free.shape[0]
    size = 13 + 2 * n
    count, num_steps = states_out.shape[0], states_out.shape[1]
    dtype = q.dtype
    # Per sample (rows start..stop of batch-sized arrays: np.zeros leaves the other rows'
    # pages untouched): the state [r0, quat, v0, w0, q, qd], its time derivative at the last
    # stage, sum_k b_k k_k, and the stage state as forward_dynamics_range reads it.
    y = np.zeros((count, size), dtype)
    rate = np.zeros((count, size), dtype)
    total = np.zeros((count, size), dtype)
    stage_quaternion = np.zeros((count, 4), dtype)
    stage_v0 = np.zeros((count, 3), dtype)
    stage_w0 = np.zeros((count, 3), dtype)
    stage_q = np.zeros((count, n), dtype)
    stage_qd = np.zeros((count, n), dtype)
    acceleration = np.zeros((count, 6 + n), dtype)
    no_factor = np.zeros((0, nv, nv), dtype)
    # The law's command and torques, and the torques held over a step (step axis of one).
    command = np.zeros((count, n), dtype)
    law_tau = np.zeros((count, n), dtype)
    held = np.zeros((count, 1, n), dtype)
    stage_tau = tau if law == LAW_NONE else held
    for b in range(start, stop):
        bp, bq, bv, bw, bj, bd = (
            _pick(b, position),
            _pick(b, quaternion),
            _pick(b, linear_velocity),
            _pick(b, angular_velocity),
            _pick(b, q),
            _pick(b, qd),
        )
        for a in range(3):
            y[b, a] = position[bp, a]
            y[b, 7 + a] = linear_velocity[bv, a]
            y[b, 10 + a] = angular_velocity[bw, a]
        for a in range(4):
            y[b, 3 + a] = quaternion[bq, a]
        for a in range(n):
            y[b, 13 + a] = q[bj, a]
            y[b, 13 + n + a] = qd[bd, a]
    # Blocks of samples step together, so that their arrays stay in the cache.
    for lo in range(start, stop, _ROLLOUT_BLOCK):
        hi = min(lo + _ROLLOUT_BLOCK, stop)
        for step in range(num_steps):
            if law != LAW_NONE:
                for b in range(lo, hi):
                    bkp, bkd, bgoal = _pick(b, kp), _pick(b, kd), _pick(b, goal)
                    for a in range(4):
                        stage_quaternion[b, a] = y[b, 3 + a]
                    for a in range(n):
                        qa, qda = y[b, 13 + a], y[b, 13 + n + a]
                        stage_q[b, a], stage_qd[b, a] = qa, qda
                        if law == LAW_PD:
                            law_tau[b, a] = kp[bkp, a] * (goal[bgoal, a] - qa) + kd[bkd, a] * (0.0 - qda)
                        else:
                            command[b, a] = kd[bkd, a] * (0.0 - qda) + kp[bkp, a] * (goal[bgoal, a] - qa)
                if law == LAW_COMPUTED_TORQUE:
                    computed_torque_range(
                        parent,
                        revolute,
                        stage_quaternion,
                        stage_q,
                        stage_qd,
                        law_base_mass,
                        law_base_inertia,
                        law_link_mass,
                        law_link_inertia,
                        law_joint_frame,
                        law_parent_to_joint,
                        law_centroid_to_joint,
                        law_stiffness,
                        law_damping,
                        law_gravity,
                        command,
                        law_tau,
                        lo,
                        hi,
                    )
                for b in range(lo, hi):
                    blim, bbias, bnoise = _pick(b, limit), _pick(b, bias), _pick(b, noise)
                    snoise = _pick_step(step, noise)
                    for a in range(n):
                        value = law_tau[b, a]
                        # Saturation as jnp.clip (max with the lower bound, then min with the upper).
                        if value < -limit[blim, a]:
                            value = -limit[blim, a]
                        if value > limit[blim, a]:
                            value = limit[blim, a]
                        value = value + bias[bbias, a] + noise[bnoise, snoise, a]
                        held[b, 0, a] = value
                        tau_out[b, step, a] = value
            for b in range(lo, hi):
                for a in range(size):
                    total[b, a] = 0.0
                    rate[b, a] = 0.0
            for k in range(4):
                for b in range(lo, hi):
                    c = _RK4_OFFSETS[k] * dt[_pick(b, dt)]
                    for a in range(4):
                        stage_quaternion[b, a] = y[b, 3 + a] + c * rate[b, 3 + a]
                    for a in range(3):
                        stage_v0[b, a] = y[b, 7 + a] + c * rate[b, 7 + a]
                        stage_w0[b, a] = y[b, 10 + a] + c * rate[b, 10 + a]
                    for a in range(n):
                        stage_q[b, a] = y[b, 13 + a] + c * rate[b, 13 + a]
                        stage_qd[b, a] = y[b, 13 + n + a] + c * rate[b, 13 + n + a]
                forward_dynamics_range(
                    parent,
                    revolute,
                    free,
                    end_point_link,
                    dof_parent,
                    stage_quaternion,
                    stage_v0,
                    stage_w0,
                    stage_q,
                    stage_qd,
                    base_mass,
                    base_inertia,
                    link_mass,
                    link_inertia,
                    joint_frame,
                    parent_to_joint,
                    centroid_to_joint,
                    centroid_to_end_point,
                    stiffness,
                    damping,
                    gravity,
                    step,
                    stage_tau,
                    base_force,
                    base_torque,
                    end_point_force,
                    end_point_torque,
                    acceleration,
                    no_factor,
                    lo,
                    hi,
                )
                weight = _RK4_WEIGHTS[k]
                if stages_out.shape[0]:
                    for b in range(lo, hi):
                        _store_stage(
                            stage_quaternion, stage_v0, stage_w0, stage_q, stage_qd, acceleration, b, stages_out[b, k]
                        )
                for b in range(lo, hi):
                    # State derivative (sdjax.integrate.state_derivative): dr0/dt = v0,
                    # dquat/dt = 1/2 [w0, 0] * quat, the accelerations, dq/dt = qd.
                    rate[b, 3], rate[b, 4], rate[b, 5], rate[b, 6] = _quaternion_rate(
                        stage_quaternion[b, 0],
                        stage_quaternion[b, 1],
                        stage_quaternion[b, 2],
                        stage_quaternion[b, 3],
                        stage_w0[b, 0],
                        stage_w0[b, 1],
                        stage_w0[b, 2],
                    )
                    for a in range(3):
                        rate[b, a] = stage_v0[b, a]
                    for a in range(6):
                        rate[b, 7 + a] = acceleration[b, a]
                    for a in range(n):
                        rate[b, 13 + a] = stage_qd[b, a]
                        rate[b, 13 + n + a] = acceleration[b, 6 + a]
                    for a in range(size):
                        total[b, a] += weight * rate[b, a]
            for b in range(lo, hi):
                h = dt[_pick(b, dt)]
                for a in range(size):
                    y[b, a] += h * total[b, a]
                norm_sq = y[b, 3] * y[b, 3] + y[b, 4] * y[b, 4] + y[b, 5] * y[b, 5] + y[b, 6] * y[b, 6]
                if norm_sq > 0:
                    norm = np.sqrt(norm_sq)
                    for a in range(3, 7):
                        y[b, a] /= norm
                for a in range(size):
                    states_out[b, step, a] = y[b, a]


@_inline
def _store_stage(quaternion, v0, w0, q, qd, acceleration, b, out):  # pragma: no cover - compiled by Numba
    """Sample ``b``'s RK4 stage (state rows of ``(B, ..)`` arrays and its acceleration) packed
    into ``out (16 + 3 n,)`` as ``[quat, v0, w0, q, qd, acceleration]``."""
    n = q.shape[1]
    for a in range(4):
        out[a] = quaternion[b, a]
    for a in range(3):
        out[4 + a] = v0[b, a]
        out[7 + a] = w0[b, a]
    for a in range(n):
        out[10 + a] = q[b, a]
        out[10 + n + a] = qd[b, a]
    for a in range(6 + n):
        out[10 + 2 * n + a] = acceleration[b, a]


@_inline
def _quaternion_rate(x, y, z, w, wx, wy, wz):  # pragma: no cover - compiled by Numba
    """``1/2 [w0, 0] * quat`` (:func:`sdjax.rotation.quat_rate`): the rate of the quaternion
    ``(x, y, z, w)`` under the inertial-frame angular velocity ``(wx, wy, wz)``."""
    return (
        0.5 * (w * wx + wy * z - wz * y),
        0.5 * (w * wy + wz * x - wx * z),
        0.5 * (w * wz + wx * y - wy * x),
        -0.5 * (wx * x + wy * y + wz * z),
    )


@_inline
def _stage_rate(stage, n, rate):  # pragma: no cover - compiled by Numba
    """The state's time derivative ``rate (13 + 2 n,)`` at a packed stage (:func:`_store_stage`):
    ``[v0, 1/2 [w0, 0] * quat, dv0/dt, dw0/dt, qd, qdd]`` (:func:`sdjax.integrate.state_derivative`)."""
    for a in range(3):
        rate[a] = stage[4 + a]
    rate[3], rate[4], rate[5], rate[6] = _quaternion_rate(
        stage[0], stage[1], stage[2], stage[3], stage[7], stage[8], stage[9]
    )
    for a in range(6):
        rate[7 + a] = stage[10 + 2 * n + a]
    for a in range(n):
        rate[13 + a] = stage[10 + n + a]
        rate[13 + n + a] = stage[16 + 2 * n + a]


@_inline
def _sum_row(total, b, part, first):  # pragma: no cover - compiled by Numba
    """``total[b] = part[0]`` (``first``) or ``total[b] += part[0]`` for ``(.., m)`` arrays."""
    for i in range(part.shape[1]):
        total[b, i] = part[0, i] + (0.0 if first else total[b, i])


@_inline
def _sum_row_of_vectors(total, b, part, first):  # pragma: no cover - compiled by Numba
    """:func:`_sum_row` for ``(.., m, k)`` arrays."""
    for i in range(part.shape[1]):
        for j in range(part.shape[2]):
            total[b, i, j] = part[0, i, j] + (0.0 if first else total[b, i, j])


@_inline
def _sum_row_of_matrices(total, b, part, first):  # pragma: no cover - compiled by Numba
    """:func:`_sum_row` for ``(.., m, 3, 3)`` arrays."""
    for i in range(part.shape[1]):
        for r in range(3):
            for c in range(3):
                total[b, i, r, c] = part[0, i, r, c] + (0.0 if first else total[b, i, r, c])


@_jit
def rk4_step_vjp_range(
    parent,
    revolute,
    free,
    end_point_link,
    dof_parent,
    quaternion,
    linear_velocity,
    angular_velocity,
    q,
    qd,
    base_mass,
    base_inertia,
    link_mass,
    link_inertia,
    joint_frame,
    parent_to_joint,
    centroid_to_joint,
    centroid_to_end_point,
    stiffness,
    damping,
    gravity,
    tau,
    base_force,
    base_torque,
    end_point_force,
    end_point_torque,
    dt,
    stages,
    state_bar_in,
    state_bar,
    base_mass_bar,
    base_inertia_bar,
    link_mass_bar,
    link_inertia_bar,
    joint_frame_bar,
    parent_to_joint_bar,
    centroid_to_joint_bar,
    centroid_to_end_point_bar,
    stiffness_bar,
    damping_bar,
    gravity_bar,
    tau_bar,
    base_force_bar,
    base_torque_bar,
    end_point_force_bar,
    end_point_torque_bar,
    dt_bar,
    start,
    stop,
):  # pragma: no cover - compiled by Numba; its results are tested against JAX's reverse mode
    """Reverse mode of one RK4 step (:func:`sdjax.integrate.rk4_step`, the step of
    :func:`rk4_rollout`) for the samples ``start <= b < stop``: the step's four stages
    transposed, last to first, each stage's forward dynamics by the implicit-function rule of
    :func:`forward_dynamics_vjp_range` (which refactorises ``H``), the quaternion's
    normalisation after the step transposed first.

    Inputs: the step's start state (``position`` is not read: nothing depends on it), model and
    loads as :func:`forward_dynamics_range`'s (loads with a step axis of 1: held), ``dt (.., )``,
    ``stages (B, 4, 16 + 3 n)`` the step's stages as :func:`rk4_rollout` stores them, and the
    cotangent of the state after the step ``state_bar_in (.., 13 + 2 n)`` (packed as
    ``[r0, quat, v0, w0, q, qd]``). Outputs, one row per sample: the start state's cotangent
    ``state_bar (B, 13 + 2 n)`` (packed), the model arrays' (each shaped as its input without
    the leading axis), the loads' (``tau_bar (B, n)``, ``base_force_bar, base_torque_bar (B,
    3)``, end-point ``(B, ne, 3)``) and ``dt_bar (B,)``.
    """
    n, nv, ne = parent.shape[0], free.shape[0], end_point_link.shape[0]
    size = 13 + 2 * n
    dtype = q.dtype
    work = _vjp_work(n, nv, q)
    cotangents = (np.zeros(6, dtype), np.zeros(n, dtype))
    # One stage as the forward dynamics' reverse mode reads it (one row: picked at 0) and its
    # cotangents (one row, accumulated into the outputs after each stage).
    stage_quaternion = np.zeros((1, 4), dtype)
    stage_v0 = np.zeros((1, 3), dtype)
    stage_w0 = np.zeros((1, 3), dtype)
    stage_q = np.zeros((1, n), dtype)
    stage_qd = np.zeros((1, n), dtype)
    stage_base_acceleration = np.zeros((1, 6), dtype)
    stage_qdd = np.zeros((1, n), dtype)
    inputs = (
        stage_quaternion,
        stage_v0,
        stage_w0,
        stage_q,
        stage_qd,
        base_mass,
        base_inertia,
        link_mass,
        link_inertia,
        joint_frame,
        parent_to_joint,
        centroid_to_joint,
        centroid_to_end_point,
        stiffness,
        damping,
        gravity,
        stage_base_acceleration,
        stage_qdd,
        end_point_force,
        end_point_torque,
    )
    model_bars = (
        np.zeros((1,), dtype),
        np.zeros((1, 3, 3), dtype),
        np.zeros((1, n), dtype),
        np.zeros((1, n, 3, 3), dtype),
        np.zeros((1, n, 3, 3), dtype),
        np.zeros((1, n, 3), dtype),
        np.zeros((1, n, 3), dtype),
        np.zeros((1, ne, 3), dtype),
        np.zeros((1, n), dtype),
        np.zeros((1, n), dtype),
        np.zeros((1, 3), dtype),
    )
    stage_bars = (
        np.zeros((1, 4), dtype),
        np.zeros((1, 3), dtype),
        np.zeros((1, 3), dtype),
        np.zeros((1, n), dtype),
        np.zeros((1, n), dtype),
        *model_bars,
        np.zeros((1, 6), dtype),
        np.zeros((1, n), dtype),
        np.zeros((1, ne, 3), dtype),
        np.zeros((1, ne, 3), dtype),
    )
    quaternion_cot, v0_cot, w0_cot, q_cot, qd_cot = stage_bars[:5]
    force_cot, torque_cot = stage_bars[18], stage_bars[19]
    acceleration_cot = np.zeros((1, 6 + n), dtype)
    multiplier = np.zeros((1, 6 + n), dtype)
    rates = np.zeros((4, size), dtype)
    rate_bars = np.zeros((4, size), dtype)
    y_bar = np.zeros(size, dtype)
    u, rate_total = np.zeros(4, dtype), np.zeros(4, dtype)
    for b in range(start, stop):
        h = dt[_pick(b, dt)]
        bq = _pick(b, quaternion)
        cot = state_bar_in[_pick(b, state_bar_in)]
        for k in range(4):
            _stage_rate(stages[b, k], n, rates[k])
        # The quaternion after the step, before its normalisation (as rk4_rollout sums it).
        for a in range(4):
            rate_total[a] = 0.0
            for k in range(4):
                rate_total[a] += _RK4_WEIGHTS[k] * rates[k, 3 + a]
            u[a] = quaternion[bq, a] + h * rate_total[a]
        for a in range(size):
            y_bar[a] = cot[a]
        norm_sq = u[0] * u[0] + u[1] * u[1] + u[2] * u[2] + u[3] * u[3]
        if norm_sq > 0:  # quat / |quat|, transposed (a zero quaternion stays zero: identity)
            norm = np.sqrt(norm_sq)
            projection = 0.0
            for a in range(4):
                projection += u[a] * cot[3 + a]
            for a in range(4):
                y_bar[3 + a] = (cot[3 + a] - u[a] * projection / norm_sq) / norm
        # y1 = y0 + h sum_k b_k k_k
        dt_total = 0.0
        for k in range(4):
            for a in range(size):
                dt_total += _RK4_WEIGHTS[k] * rates[k, a] * y_bar[a]
                rate_bars[k, a] = h * _RK4_WEIGHTS[k] * y_bar[a]
        for a in range(size):
            state_bar[b, a] = y_bar[a]
        for a in range(n):
            tau_bar[b, a] = 0.0
        for a in range(3):
            base_force_bar[b, a] = 0.0
            base_torque_bar[b, a] = 0.0
        for k in range(3, -1, -1):
            stage = stages[b, k]
            kb = rate_bars[k]
            for a in range(4):
                stage_quaternion[0, a] = stage[a]
            for a in range(3):
                stage_v0[0, a] = stage[4 + a]
                stage_w0[0, a] = stage[7 + a]
            for a in range(n):
                stage_q[0, a] = stage[10 + a]
                stage_qd[0, a] = stage[10 + n + a]
                stage_qdd[0, a] = stage[16 + 2 * n + a]
            for a in range(6):
                stage_base_acceleration[0, a] = stage[10 + 2 * n + a]
            # The accelerations' cotangent: that of the rates dv0/dt, dw0/dt and qdd.
            for a in range(6):
                acceleration_cot[0, a] = kb[7 + a]
            for a in range(n):
                acceleration_cot[0, 6 + a] = kb[13 + n + a]
            _forward_dynamics_vjp_sample(
                b,
                0,
                parent,
                revolute,
                free,
                end_point_link,
                dof_parent,
                inputs,
                acceleration_cot,
                multiplier,
                stage_bars,
                work,
                cotangents,
            )
            # Each stage's cotangents of the model and the end-point loads, summed (the last
            # stage, transposed first, writes them), element by element: as array expressions
            # on row views (or np.ndindex) they cost 2-5 us per sample (7-joint arm; the
            # whole step's reverse mode 15 us).
            last = k == 3
            base_mass_bar[b] = model_bars[0][0] + (0.0 if last else base_mass_bar[b])
            _sum_row_of_vectors(base_inertia_bar, b, model_bars[1], last)
            _sum_row(link_mass_bar, b, model_bars[2], last)
            _sum_row_of_matrices(link_inertia_bar, b, model_bars[3], last)
            _sum_row_of_matrices(joint_frame_bar, b, model_bars[4], last)
            _sum_row_of_vectors(parent_to_joint_bar, b, model_bars[5], last)
            _sum_row_of_vectors(centroid_to_joint_bar, b, model_bars[6], last)
            _sum_row_of_vectors(centroid_to_end_point_bar, b, model_bars[7], last)
            _sum_row(stiffness_bar, b, model_bars[8], last)
            _sum_row(damping_bar, b, model_bars[9], last)
            _sum_row(gravity_bar, b, model_bars[10], last)
            _sum_row_of_vectors(end_point_force_bar, b, force_cot, last)
            _sum_row_of_vectors(end_point_torque_bar, b, torque_cot, last)
            for a in range(3):
                base_force_bar[b, a] += multiplier[0, a]
                base_torque_bar[b, a] += multiplier[0, 3 + a]
            for a in range(n):
                tau_bar[b, a] += multiplier[0, 6 + a]
            # The other rates: dr0/dt = v0, dq/dt = qd, dquat/dt = 1/2 [w0, 0] * quat.
            for a in range(3):
                v0_cot[0, a] += kb[a]
            for a in range(n):
                qd_cot[0, a] += kb[13 + a]
            x, yq, z, w = stage[0], stage[1], stage[2], stage[3]
            wx, wy, wz = stage[7], stage[8], stage[9]
            g3, g4, g5, g6 = kb[3], kb[4], kb[5], kb[6]
            quaternion_cot[0, 0] += 0.5 * (g4 * wz - g5 * wy - g6 * wx)
            quaternion_cot[0, 1] += 0.5 * (g5 * wx - g3 * wz - g6 * wy)
            quaternion_cot[0, 2] += 0.5 * (g3 * wy - g4 * wx - g6 * wz)
            quaternion_cot[0, 3] += 0.5 * (g3 * wx + g4 * wy + g5 * wz)
            w0_cot[0, 0] += 0.5 * (g3 * w - g4 * z + g5 * yq - g6 * x)
            w0_cot[0, 1] += 0.5 * (g3 * z + g4 * w - g5 * x - g6 * yq)
            w0_cot[0, 2] += 0.5 * (g4 * x - g3 * yq + g5 * w - g6 * z)
            # The stage state y0 + c_k h k_(k-1) (all but r0), transposed.
            for a in range(4):
                y_bar[3 + a] = quaternion_cot[0, a]
            for a in range(3):
                y_bar[7 + a] = v0_cot[0, a]
                y_bar[10 + a] = w0_cot[0, a]
            for a in range(n):
                y_bar[13 + a] = q_cot[0, a]
                y_bar[13 + n + a] = qd_cot[0, a]
            for a in range(3, size):
                state_bar[b, a] += y_bar[a]
            if k > 0:
                c = _RK4_OFFSETS[k]
                for a in range(3, size):
                    dt_total += c * rates[k - 1, a] * y_bar[a]
                    rate_bars[k - 1, a] += c * h * y_bar[a]
        dt_bar[b] = dt_total
