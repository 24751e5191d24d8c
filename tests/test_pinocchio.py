"""Cross-check of sdjax against Pinocchio, an independent rigid-body dynamics engine.

Every sdjax model is converted to a Pinocchio model (:func:`sdjax.io.pinocchio.to_pinocchio`,
depth-first joint order: see :func:`sdjax.io.pinocchio.depth_first_order`) and the two
engines are compared on random trees (revolute and prismatic joints, branches, end points,
gravity, passive joints) and on the built-in models: forward kinematics, the inertia
matrix, the bias forces, inverse and forward dynamics (with end-point loads) and the
end-point Jacobians.

Coordinates. sdjax's generalized velocity is ``nu_sd = [v0, w0, qd]`` with ``v0``, ``w0`` the
base centroid velocity and base angular velocity in the *inertial* frame. Pinocchio's free
flyer (placed on the base centroid) uses the *base-frame* twist, so

    nu_pin = T nu_sd,    T = blockdiag(A0^T, A0^T, P),

``A0`` the base-to-inertial rotation and ``P`` the permutation from sdjax's joint order to
Pinocchio's (the identity unless the links are numbered non-depth-first, see
:func:`sdjax.io.pinocchio.depth_first_order`). Power conservation gives ``tau_sd = T^T tau_pin`` (base
part: force at and torque about the base centroid, inertial frame), hence ``H_sd = T^T M T``.
Pinocchio's free-flyer acceleration is the time derivative of the base-frame twist:
``a_pin = T a_sd + Tdot nu_sd`` with ``Tdot nu_sd = [-A0^T (w0 x v0); 0; 0]`` (the angular
part vanishes because ``w0 x w0 = 0``). Therefore ``c_sd = T^T (M Tdot nu_sd + nle)``.
``T`` is orthogonal, so ``T^-1 = T^T`` and ``T^-T = T``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample
from sdjax.io.pinocchio import PinocchioTwin, pinocchio_acceleration_offset, pinocchio_coordinates, to_pinocchio
from helpers import random_state, with_frames

pin = pytest.importorskip("pinocchio")


# ------------------------------------------------------------------------------------------
# Test cases: one model, one state, random inputs, the sdjax results and the Pinocchio twin.


def _random(n: int, seed: int, chain_probability: float = 0.7, base: str = "floating") -> Callable[[], sdjax.Model]:
    """Random tree with gravity; passive joints on odd seeds so that the ``-K q - D qd`` terms
    of inverse and forward dynamics are checked too; on seeds 1 (mod 4) four more end points
    (several on one body, one on the base, out of body order) checked as Pinocchio frames.
    ``base``: the base mode (planar and fixed bases become Pinocchio's PX-PY-RZ joints and a
    universe body)."""

    def build() -> sdjax.Model:
        model = random_model(seed, n, chain_probability=chain_probability, gravity=True, passive=seed % 2 == 1)
        model = sdjax.edit_model(model, base=base)
        return with_frames(model, seed) if seed % 4 == 1 else model

    return build


def _with_gravity(builder: Callable[[], sdjax.Model]) -> Callable[[], sdjax.Model]:
    """A built-in model given a gravity vector (they have none), to exercise gravity too."""

    def build() -> sdjax.Model:
        model = builder()
        return eqx.tree_at(lambda m: m.gravity, model, jnp.array([0.3, -1.2, -9.81], model.dtype))

    return build


#: The built-ins and 12 random trees (branches, prismatic joints, end points; passive joints
#: on odd seeds). Sizes are few on purpose: evaluating sdjax costs ~1-3 s of one-off XLA
#: compilation for every new number of links n (see :func:`sdjax_results`) and ~0.1-1 s per
#: further topology of the same n; Pinocchio's side is negligible. n = 6 and 7 share those
#: compilations with the built-ins. The n = 20 trees (chain probability 0.9) are deep (depths
#: 12 to 19: five pointer-jumping steps). Trees beyond ``sdjax.tree.DENSE_MAX_LINKS`` (the
#: ``lax.scan`` path of the subtree sums) are checked against the NumPy oracle in
#: test_edge_cases.py. random_n7_seed1 and random_n20_seed34/35 are numbered
#: non-depth-first, which exercises the joint permutation.
CASES = {
    "spacedyn_sample": _with_gravity(spacedyn_sample),
    "free_flying_arm_7dof": _with_gravity(free_flying_arm_7dof),
    **{
        f"random_n{n}_seed{seed}": _random(n, seed, chain_probability)
        for n, seeds, chain_probability in (
            (6, (10, 11, 12, 13), 0.7),
            (7, (0, 1, 2, 3), 0.7),
            (20, (32, 33, 34, 35), 0.9),
        )
        for seed in seeds
    },
    # Base modes: a tilted base (the planar twin's reference attitude is the state's), frames
    # on the base, passive joints and a non-depth-first numbering among them.
    **{f"{base}_n7_seed{seed}": _random(7, seed, 0.7, base) for base in ("planar", "fixed") for seed in (1, 2)},
}
CASE_IDS = list(CASES)


@dataclasses.dataclass
class Case:
    model: sdjax.Model
    state: sdjax.State
    twin: PinocchioTwin
    data: pin.Data
    q_pin: np.ndarray  # (7 + n,) [r0, quat(x, y, z, w), P q]
    nu_sd: np.ndarray  # (6 + n,) [v0, w0, qd]
    v_pin: np.ndarray  # (6 + n,) T nu_sd
    T: np.ndarray  # (6 + n, 6 + n) blockdiag(A0^T, A0^T, P), orthogonal
    tdot_nu: np.ndarray  # (6 + n,) Tdot nu_sd = [-A0^T (w0 x v0); 0; 0]
    passive: np.ndarray  # (n,) sdjax passive joint torques -K q - D qd
    inputs: dict[str, np.ndarray]  # random accelerations and loads
    sd: dict[str, np.ndarray]  # sdjax results

    @property
    def pm(self) -> pin.Model:
        return self.twin.model

    def mass_matrix(self) -> np.ndarray:
        """Pinocchio's joint-space inertia matrix (CRBA), symmetrised from its upper triangle
        (the part every Pinocchio release fills; 4.1.0 fills both)."""
        m = pin.crba(self.pm, self.data, self.q_pin)
        return np.triu(m) + np.triu(m, 1).T

    def end_point_fext(self, force: np.ndarray, torque: np.ndarray) -> list:
        """Pinocchio external forces (one per joint, local joint frame, moment about the joint
        origin) for end-point loads in the inertial frame (sdjax's convention: applied to the
        robot, force at the end point). Runs ``forwardKinematics`` at ``q_pin`` first."""
        pin.forwardKinematics(self.pm, self.data, self.q_pin)
        pin.updateFramePlacements(self.pm, self.data)
        fext = [pin.Force.Zero() for _ in range(self.pm.njoints)]
        for k, link in enumerate(self.model.end_point_link):
            jid = self.twin.joint_id[link]
            joint = self.data.oMi[jid]
            lever = self.data.oMf[self.twin.frame_id[k]].translation - joint.translation
            fext[jid] += pin.Force(
                joint.rotation.T @ force[k], joint.rotation.T @ (torque[k] + np.cross(lever, force[k]))
            )
        return fext


def random_inputs(model: sdjax.Model, seed: int) -> dict[str, np.ndarray]:
    """Random generalized accelerations (inverse dynamics) and applied forces (forward
    dynamics), with end-point loads for both."""
    rng = np.random.default_rng(seed)
    n, ne = model.num_joints, model.num_end_points
    return dict(
        acceleration=np.asarray(sdjax.model.floating_coordinates(model, rng.normal(size=model.num_velocities))),
        id_force=rng.normal(scale=10.0, size=(ne, 3)),
        id_torque=rng.normal(scale=5.0, size=(ne, 3)),
        tau=rng.normal(scale=5.0, size=n),
        base_force=rng.normal(scale=20.0, size=3),
        base_torque=rng.normal(scale=20.0, size=3),
        fd_force=rng.normal(scale=10.0, size=(ne, 3)),
        fd_torque=rng.normal(scale=5.0, size=(ne, 3)),
    )


def sdjax_results(model: sdjax.Model, state: sdjax.State, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every sdjax quantity the tests compare, computed once per case.

    Run op by op (``jax.disable_jit``): XLA compiles each primitive once per shape and reuses
    it across models, whereas jitting recompiles every function for every model (a topology
    or a name is static data), which would cost seconds per case. The arithmetic is the same.
    """
    with jax.disable_jit():
        kin = sdjax.forward_kinematics(model, state)
        acc = inputs["acceleration"]
        base_wrench, tau = sdjax.inverse_dynamics(
            model, state, acc[:6], acc[6:], end_point_force=inputs["id_force"], end_point_torque=inputs["id_torque"]
        )
        base_acc, qdd = sdjax.forward_dynamics(
            model,
            state,
            inputs["tau"],
            base_force=inputs["base_force"],
            base_torque=inputs["base_torque"],
            end_point_force=inputs["fd_force"],
            end_point_torque=inputs["fd_torque"],
        )
        loads = sdjax.joint_reaction_loads(
            model, state, acc[:6], acc[6:], end_point_force=inputs["id_force"], end_point_torque=inputs["id_torque"]
        )
        out = dict(
            joint_force=loads.force,
            joint_moment=loads.moment,
            joint_force_local=loads.force_joint_frame,
            joint_moment_local=loads.moment_joint_frame,
            rotation=kin.rotation,
            centroid=kin.centroid,
            joint_position=kin.joint_position,
            joint_axis=kin.joint_axis,
            end_point_position=kin.end_point_position,
            end_point_rotation=kin.end_point_rotation,
            center_of_mass=sdjax.center_of_mass(model, state),
            inertia_matrix=sdjax.inertia_matrix(model, state),
            bias_forces=sdjax.bias_forces(model, state),
            inverse_dynamics=jnp.concatenate([base_wrench, tau]),
            forward_dynamics=jnp.concatenate([base_acc, qdd]),
            end_point_jacobians=sdjax.end_point_jacobians(model, state),
            passive=sdjax.passive_joint_torques(model, state),
        )
        return {k: np.asarray(v) for k, v in out.items()}


@pytest.fixture(scope="module", params=CASE_IDS)
def case(request) -> Case:
    model = CASES[request.param]()
    index = CASE_IDS.index(request.param)
    state = random_state(model, 1000 + index)
    inputs = random_inputs(model, 2000 + index)
    sd = sdjax_results(model, state, inputs)
    twin = to_pinocchio(model, base_pose=state)
    q_pin, v_pin, t = pinocchio_coordinates(twin, state)
    nu_sd = np.asarray(sdjax.generalized_velocity(model, state))
    tdot_nu = pinocchio_acceleration_offset(state, model.base)
    return Case(
        model=model,
        state=state,
        twin=twin,
        data=twin.model.createData(),
        q_pin=q_pin,
        nu_sd=nu_sd,
        v_pin=v_pin,
        T=t,
        tdot_nu=tdot_nu,
        passive=sd["passive"],
        inputs=inputs,
        sd=sd,
    )


def relative_error(actual, expected, scale=None) -> float:
    """``max |actual - expected| / scale``, ``scale = max |expected|`` unless given."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(np.max(np.abs(expected), initial=0.0)) if scale is None else float(scale)
    return float(np.max(np.abs(actual - expected), initial=0.0)) / max(scale, 1e-300)


def assert_close(actual, expected, rtol, what, scale=None) -> None:
    err = relative_error(actual, expected, scale)
    print(f"{what}: relative error {err:.2e}")
    assert err <= rtol, (
        f"{what}: relative error {err:.3e} > {rtol:.1e}\nsdjax:\n{np.asarray(actual)}\npinocchio:\n{np.asarray(expected)}"
    )


# ------------------------------------------------------------------------------------------
# 1. Forward kinematics.


def test_forward_kinematics(case: Case):
    c, sd = case, case.sd
    pin.forwardKinematics(c.pm, c.data, c.q_pin)
    pin.updateFramePlacements(c.pm, c.data)
    oMi = [c.data.oMi[j] for j in c.twin.joint_id]
    centroid = np.array([m.act(c.pm.inertias[j].lever) for j, m in zip(c.twin.joint_id, oMi)])
    rotation = np.array([m.rotation for m in oMi])
    rotation[0] = (oMi[0] * c.twin.base_placement).rotation  # the base frame in its Pinocchio joint
    axis = rotation[1:, :, 2]
    # sdjax's joint position of a prismatic joint is the slider origin at zero displacement.
    slide = np.where(np.array([t == "P" for t in c.model.joint_type]), np.asarray(c.state.q), 0.0)
    joint_position = np.array([m.translation for m in oMi[1:]]) - slide[:, None] * axis
    # Positions: 1e-12 relative to the largest coordinate (|r0| ~ 1 m plus up to 20 chained
    # offsets of ~1 m); float64 round-off through <= 20 chained rotation products and
    # translations is ~1e-15 relative (measured <= 7e-16), so this leaves ~1000x margin.
    scale = np.max(np.abs(centroid))
    assert_close(sd["centroid"], centroid, 1e-12, "link centroids", scale)
    assert_close(sd["joint_position"], joint_position, 1e-12, "joint positions", scale)
    # Rotations and axes: O(1) entries, <= 20 chained 3x3 products, ~1e-15 round-off.
    assert_close(sd["rotation"], rotation, 1e-12, "link rotations", 1.0)
    assert_close(sd["joint_axis"], axis, 1e-12, "joint axes", 1.0)
    # Centre of mass: mass-weighted mean of the centroids, same round-off as the centroids.
    com = pin.centerOfMass(c.pm, c.data, c.q_pin)
    if c.model.base == "fixed":  # Pinocchio leaves the universe's bodies out; sdjax counts the base
        moving, base = c.data.mass[0], float(c.model.base_mass)
        com = (moving * com + base * np.asarray(c.state.base_position)) / (moving + base)
    assert_close(sd["center_of_mass"], com, 1e-12, "centre of mass", scale)
    if c.model.num_end_points:
        end_pos = np.array([c.data.oMf[f].translation for f in c.twin.frame_id])
        end_rot = np.array([c.data.oMf[f].rotation for f in c.twin.frame_id])
        # Same budgets as the centroids and rotations (one more offset and rotation).
        assert_close(
            sd["end_point_position"], end_pos, 1e-12, "end-point positions", max(scale, np.max(np.abs(end_pos)))
        )
        assert_close(sd["end_point_rotation"], end_rot, 1e-12, "end-point rotations", 1.0)


# ------------------------------------------------------------------------------------------
# 2. Inertia matrix.


def test_inertia_matrix(case: Case):
    c = case
    expected = c.T.T @ c.mass_matrix() @ c.T
    h = c.sd["inertia_matrix"]
    # 1e-12 relative to the largest entry (the total mass or the system inertia about r0):
    # both sides are sums of O(n) composite-inertia terms built from O(1) geometry (n <= 20),
    # so the round-off is ~n * 1e-16 of the largest entry (measured <= 7e-16); ~1000x margin.
    assert_close(h, expected, 1e-12, "inertia matrix")
    # sdjax builds H symmetric by construction; allow only round-off of its largest entry.
    assert_close(h, h.T, 1e-14, "inertia matrix symmetry", np.max(np.abs(h)))


# ------------------------------------------------------------------------------------------
# 3. Bias forces (Coriolis, centrifugal, gravity).


def test_bias_forces(case: Case):
    c = case
    nle = pin.rnea(c.pm, c.data, c.q_pin, c.v_pin, np.zeros(c.pm.nv))  # Pinocchio's nle
    frame_term = c.mass_matrix() @ c.tdot_nu
    expected = c.T.T @ (frame_term + nle)
    # 1e-12 relative to the largest of the terms summed (gravity forces ~ total mass * |g|,
    # velocity products ~ |H| |nu|^2): each side adds and cancels O(n) such terms (n <= 20),
    # so the round-off is ~n * 1e-16 of the largest, measured <= 1.1e-15; scaling by the
    # terms rather than the result keeps the bound meaningful after cancellation.
    scale = max(np.max(np.abs(expected)), np.max(np.abs(nle)), np.max(np.abs(frame_term)))
    assert_close(c.sd["bias_forces"], expected, 1e-12, "bias forces", scale)


# ------------------------------------------------------------------------------------------
# 4. Inverse dynamics (with end-point loads and passive joints).


def test_inverse_dynamics(case: Case):
    c, inputs = case, case.inputs
    fext = c.end_point_fext(inputs["id_force"], inputs["id_torque"])
    free = lambda x: np.asarray(sdjax.model.free_coordinates(c.model, x))  # noqa: E731
    a_pin = c.T @ free(inputs["acceleration"]) + c.tdot_nu
    tau_pin = pin.rnea(c.pm, c.data, c.q_pin, c.v_pin, a_pin, fext)
    expected = c.T.T @ tau_pin
    expected[c.model.num_base_velocities :] -= c.passive  # sdjax's tau is what the actuators add to -K q - D qd
    # 1e-12 relative to the largest generalized force: as for the bias forces, both sides sum
    # O(n) wrenches (n <= 20) of O(1)-conditioned products: ~n * 1e-16 round-off (measured
    # <= 1.5e-15), so ~500x margin.
    # (A planar or fixed base's other wrench components are the bearing's or mount's reaction,
    # which Pinocchio's reduced model does not compute.)
    assert_close(free(c.sd["inverse_dynamics"]), expected, 1e-12, "inverse dynamics")


def test_joint_reaction_loads(case: Case):
    """SpaceDyn's f_i, n_i (eqs 3.32-3.35) against Pinocchio's ``data.f`` after RNEA: the
    spatial force the parent transmits to each joint's subtree, in the joint frame after the
    joint's motion, about that frame's origin (for a prismatic joint that origin slides: the
    moment is moved to sdjax's joint point, the slider origin on the parent)."""
    c, inputs = case, case.inputs
    fext = c.end_point_fext(inputs["id_force"], inputs["id_torque"])
    free = lambda x: np.asarray(sdjax.model.free_coordinates(c.model, x))  # noqa: E731
    pin.rnea(c.pm, c.data, c.q_pin, c.v_pin, c.T @ free(inputs["acceleration"]) + c.tdot_nu, fext)
    force, moment = [], []
    for i in range(1, c.model.num_joints + 1):
        frame, f = c.data.oMi[c.twin.joint_id[i]], c.data.f[c.twin.joint_id[i]]
        world_force = frame.rotation @ f.linear
        lever = frame.translation - c.sd["joint_position"][i - 1]  # Pinocchio's origin minus sdjax's joint point
        force.append(world_force)
        moment.append(frame.rotation @ f.angular + np.cross(lever, world_force))
    force, moment = np.array(force), np.array(moment)
    # The same sums of O(n) wrenches as inverse dynamics: ~n * 1e-16 round-off of the largest load.
    scale = max(np.max(np.abs(force)), np.max(np.abs(moment)))
    assert_close(c.sd["joint_force"], force, 1e-12, "joint forces", scale)
    assert_close(c.sd["joint_moment"], moment, 1e-12, "joint moments", scale)
    # In the joint frame the axial load is the joint's actuator + passive torque (eqs 3.36-3.37).
    axial = np.where(
        np.array(c.model.joint_type) == "R", c.sd["joint_moment_local"][:, 2], c.sd["joint_force_local"][:, 2]
    )
    tau = free(c.sd["inverse_dynamics"])[c.model.num_base_velocities :]
    assert_close(axial, tau + c.passive, 1e-12, "axial joint loads", scale)


# ------------------------------------------------------------------------------------------
# 5. Forward dynamics (with end-point loads and passive joints).


def test_forward_dynamics(case: Case):
    c, inputs = case, case.inputs
    fext = c.end_point_fext(inputs["fd_force"], inputs["fd_torque"])
    free = lambda x: np.asarray(sdjax.model.free_coordinates(c.model, x))  # noqa: E731
    tau_sd = free(np.concatenate([inputs["base_force"], inputs["base_torque"], inputs["tau"] + c.passive]))
    tau_pin = c.T @ tau_sd  # T^-T = T (orthogonal)
    a_pin = pin.aba(c.pm, c.data, c.q_pin, c.v_pin, tau_pin, fext)
    expected = c.T.T @ (a_pin - c.tdot_nu)  # T^-1 = T^T
    # Both engines solve H a = f - c, so they may differ by up to ~cond(H) * eps relative to
    # |a| (sdjax: Cholesky of the assembled H; Pinocchio: articulated-body recursion). cond(H)
    # reaches ~5e4 here (200 kg bases, 1 kg links, short levers): the bound 1e-14 * cond(H)
    # is ~50x that worst case (measured errors stay below 2e-13), with a floor of 1e-12.
    cond = np.linalg.cond(c.mass_matrix())
    assert_close(
        free(c.sd["forward_dynamics"]), expected, max(1e-12, 1e-14 * cond), f"forward dynamics (cond(H) {cond:.1e})"
    )
    # The components a planar or fixed base cannot move along stay exactly zero.
    assert np.all(np.delete(c.sd["forward_dynamics"], c.model.velocity_indices) == 0)


# ------------------------------------------------------------------------------------------
# 6. End-point Jacobians.


def test_end_point_jacobians(case: Case):
    c = case
    if c.model.num_end_points == 0:
        pytest.skip("no end points")
    pin.computeJointJacobians(c.pm, c.data, c.q_pin)
    pin.updateFramePlacements(c.pm, c.data)
    expected = np.array([pin.getFrameJacobian(c.pm, c.data, f, pin.LOCAL_WORLD_ALIGNED) @ c.T for f in c.twin.frame_id])
    jac = c.sd["end_point_jacobians"]
    # 1e-12 relative to the largest entry (~ the longest lever, a few m): entries are single
    # cross products of positions computed as in the kinematics test (~1e-15 round-off).
    assert_close(jac, expected, 1e-12, "end-point Jacobians")
    # The Jacobian maps the generalized velocity to the end-point twist (Pinocchio's frame
    # velocity in LOCAL_WORLD_ALIGNED, from forwardKinematics with v). Same budget, relative
    # to |J| |nu| (one more product of O(1) factors).
    pin.forwardKinematics(c.pm, c.data, c.q_pin, c.v_pin)
    twist = np.array([pin.getFrameVelocity(c.pm, c.data, f, pin.LOCAL_WORLD_ALIGNED).vector for f in c.twin.frame_id])
    assert_close(jac @ c.nu_sd, twist, 1e-12, "end-point velocities", np.max(np.abs(jac)) * np.max(np.abs(c.nu_sd)))
