"""Algorithm identities between sdjax's own algorithms (Pinocchio-style), and finite
differences / forward-mode autodiff of positions for velocities and Jacobians."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample
from sdjax.rotation import quat_rate
from helpers import assert_close, random_state, three_arm_tree, with_frames

# Identities between two float64 algorithms on O(1-1e3) quantities: round-off ~1e-13
# relative; 1e-11 leaves margin for the 20-link tree.
RTOL = 1e-11

MODELS = {
    "sample": spacedyn_sample,
    "arm7": free_flying_arm_7dof,
    "three_arm": lambda: three_arm_tree(1),
    "random12": lambda: with_frames(
        random_model(21, 12, gravity=True, passive=True)
    ),  # several frames per body, base frames
    "random20": lambda: random_model(22, 20, gravity=True, chain_probability=0.5),
}


@pytest.fixture(params=sorted(MODELS), scope="module")
def model(request):
    return MODELS[request.param]()


def test_inertia_columns_from_newton_euler(model):
    """Column j of H = RNE(q, qd, e_j) - RNE(q, qd, 0) (SpaceDyn calc_hh == r_ne differences)."""
    state = random_state(model, 0)
    h = sdjax.inertia_matrix(model, state)
    rne = jax.jit(lambda a: jnp.concatenate(sdjax.inverse_dynamics(model, state, a[:6], a[6:])))
    zero = rne(jnp.zeros(model.num_velocities))
    columns = jax.vmap(rne)(jnp.eye(model.num_velocities)) - zero
    assert_close(columns.T, h, RTOL, "H columns from RNE")


def test_inertia_matrix_symmetric_positive_definite(model):
    h = np.asarray(sdjax.inertia_matrix(model, random_state(model, 1)))
    np.testing.assert_array_equal(h, h.T)  # built symmetric by construction
    assert np.linalg.eigvalsh(h).min() > 0


def test_bias_is_inverse_dynamics_at_zero_acceleration(model):
    state = random_state(model, 2)
    base, tau = sdjax.inverse_dynamics(model, state)
    passive = sdjax.passive_joint_torques(model, state)
    # inverse_dynamics returns actuator torques on top of the passive ones.
    assert_close(jnp.concatenate([base, tau + passive]), sdjax.bias_forces(model, state), RTOL, "bias")


def test_gravity_term(model):
    """With zero velocity the bias is the gravity load: -sum m_i J_i^T g (Pinocchio's
    computeGeneralizedGravity identity)."""
    state = random_state(model, 3, scale=0.0)
    jac = sdjax.link_jacobians(model, state)
    masses = jnp.concatenate([model.base_mass[None], model.link_mass])
    expected = -jnp.einsum("b,bkv,k->v", masses, jac[:, :3, :], model.gravity)
    assert_close(sdjax.bias_forces(model, state), expected, RTOL, "gravity")


def test_forward_of_inverse(model):
    rng = np.random.default_rng(4)
    state = random_state(model, 4)
    acc = rng.normal(size=model.num_velocities)
    fe, te = rng.normal(size=(2, model.num_end_points, 3))
    base, tau = sdjax.inverse_dynamics(model, state, acc[:6], acc[6:], end_point_force=fe, end_point_torque=te)
    base_acc, qdd = sdjax.forward_dynamics(
        model, state, tau, base_force=base[:3], base_torque=base[3:], end_point_force=fe, end_point_torque=te
    )
    # The Cholesky solve amplifies round-off by cond(H) ~ 1e4.
    assert_close(jnp.concatenate([base_acc, qdd]), acc, 1e-9, "forward(inverse(a))")


def test_end_point_loads_enter_through_jacobian_transpose(model):
    """RNE(F_e) - RNE(0) = -J_e^T [F_e; T_e] (eq 3.18), J_e = [J_b | J_m] of each end point."""
    rng = np.random.default_rng(5)
    state = random_state(model, 5)
    fe, te = rng.normal(size=(2, model.num_end_points, 3))
    loaded = jnp.concatenate(sdjax.inverse_dynamics(model, state, end_point_force=fe, end_point_torque=te))
    free = jnp.concatenate(sdjax.inverse_dynamics(model, state))
    jac = sdjax.end_point_jacobians(model, state)
    expected = -jnp.einsum("erv,er->v", jac, jnp.concatenate([fe, te], axis=-1))
    assert_close(loaded - free, expected, RTOL, "J^T F")


def test_passive_joints(model):
    """Stiffness and damping act as tau = -K q - D qd."""
    state = random_state(model, 6)
    rng = np.random.default_rng(6)
    tau = rng.normal(size=model.num_joints)
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
    passive = -model.joint_stiffness * state.q - model.joint_damping * state.qd
    import equinox as eqx

    rigid = eqx.tree_at(
        lambda m: (m.joint_stiffness, m.joint_damping), model, (jnp.zeros_like(passive), jnp.zeros_like(passive))
    )
    base_acc2, qdd2 = sdjax.forward_dynamics(rigid, state, tau + passive)
    assert_close(jnp.concatenate([base_acc, qdd]), jnp.concatenate([base_acc2, qdd2]), RTOL, "passive joints")


def test_momentum_and_energy_from_inertia_matrix(model):
    """[P; L about r0] = H[:6] nu and T = 1/2 nu^T H nu (momentum.py sums bodies directly)."""
    state = random_state(model, 7)
    h = sdjax.inertia_matrix(model, state)
    nu = state.generalized_velocity
    momentum = h[:6] @ nu
    assert_close(sdjax.linear_momentum(model, state), momentum[:3], RTOL, "P")
    assert_close(sdjax.angular_momentum(model, state, about="base"), momentum[3:], RTOL, "L about r0")
    origin = sdjax.angular_momentum(model, state)
    assert_close(origin, momentum[3:] + jnp.cross(state.base_position, momentum[:3]), RTOL, "L about origin")
    com = sdjax.center_of_mass(model, state)
    about_com = sdjax.angular_momentum(model, state, about="com")
    assert_close(about_com, origin - jnp.cross(com, momentum[:3]), RTOL, "L about CoM")
    assert_close(sdjax.angular_momentum(model, state, about=com), about_com, RTOL, "L about a point")
    assert_close(sdjax.kinetic_energy(model, state), 0.5 * nu @ h @ nu, RTOL, "kinetic energy")
    assert_close(sdjax.center_of_mass_velocity(model, state), momentum[:3] / model.total_mass, RTOL, "CoM velocity")


def _positions(model, base_position, base_quaternion, q):
    state = sdjax.State(base_position, base_quaternion, jnp.zeros(3), jnp.zeros(3), q, jnp.zeros_like(q))
    kin = sdjax.forward_kinematics(model, state)
    return kin.centroid, kin.end_point_position, kin.rotation, kin.end_point_rotation


def _time_derivative(model, state, fn):
    """d/dt of fn(base_position, base_quaternion, q) along the state's motion (forward mode)."""
    primal = (state.base_position, state.base_quaternion, state.q)
    tangent = (state.base_linear_velocity, quat_rate(state.base_quaternion, state.base_angular_velocity), state.qd)
    return jax.jvp(lambda *x: fn(model, *x), primal, tangent)


def test_velocities_are_time_derivatives_of_positions(model):
    """Centroid velocities and J nu equal d/dt of the positions (autodiff), angular velocities
    equal unskew(dA/dt A^T)."""
    state = random_state(model, 8)
    (centroid, end_pos, rot, end_rot), (d_centroid, d_end, d_rot, d_end_rot) = _time_derivative(
        model, state, _positions
    )
    linear, angular = sdjax.link_velocities(model, state)
    assert_close(linear, d_centroid, RTOL, "centroid velocities")
    omega = 0.5 * jnp.stack(
        [
            jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 2, 1] - jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 1, 2],
            jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 0, 2] - jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 2, 0],
            jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 1, 0] - jnp.einsum("bij,bkj->bik", d_rot, rot)[:, 0, 1],
        ],
        axis=-1,
    )
    assert_close(angular, omega, RTOL, "angular velocities")
    nu = state.generalized_velocity
    jac = sdjax.link_jacobians(model, state)
    assert_close(jac[:, :3] @ nu, d_centroid, RTOL, "J_T nu")
    assert_close(jac[:, 3:] @ nu, omega, RTOL, "J_R nu")
    jac_e = sdjax.end_point_jacobians(model, state)
    assert_close(jac_e[:, :3] @ nu, d_end, RTOL, "end-point J nu")


def test_jacobian_derivatives_match_autodiff(model):
    """dJ/dt (closed form via spatial cross products) == forward-mode derivative of J along
    the motion; and dJ/dt nu + J a == link accelerations (eq 3.17)."""
    state = random_state(model, 9)

    def jacobians(m, r0, quat, q):
        s = sdjax.State(r0, quat, state.base_linear_velocity, state.base_angular_velocity, q, state.qd)
        return (
            sdjax.link_jacobians(m, s),
            sdjax.end_point_jacobians(m, s),
            sdjax.point_jacobian(m, s, m.num_joints, jnp.array([0.1, -0.2, 0.3])),
        )

    _, (d_links, d_ends, d_point) = _time_derivative(model, state, jacobians)
    assert_close(sdjax.link_jacobian_derivatives(model, state), d_links, RTOL, "link dJ/dt")
    assert_close(sdjax.end_point_jacobian_derivatives(model, state), d_ends, RTOL, "end-point dJ/dt")
    assert_close(
        sdjax.point_jacobian_derivative(model, state, model.num_joints, jnp.array([0.1, -0.2, 0.3])),
        d_point,
        RTOL,
        "point dJ/dt",
    )
    acc = jnp.asarray(np.random.default_rng(9).normal(size=model.num_velocities))
    linear, angular = sdjax.link_accelerations(model, state, acc[:6], acc[6:])
    jac, djac = sdjax.link_jacobians(model, state), sdjax.link_jacobian_derivatives(model, state)
    predicted = djac @ state.generalized_velocity + jac @ acc
    assert_close(predicted[:, :3], linear, RTOL, "eq 3.17 linear")
    assert_close(predicted[:, 3:], angular, RTOL, "eq 3.17 angular")


def test_point_jacobian_of_centroid_and_end_point(model):
    state = random_state(model, 10)
    links = sdjax.link_jacobians(model, state)
    for body in (0, 1, model.num_joints):
        assert_close(sdjax.point_jacobian(model, state, body), links[body], RTOL, f"centroid {body}")
    ends = sdjax.end_point_jacobians(model, state)
    for e, link in enumerate(model.end_point_link):
        jac = sdjax.point_jacobian(model, state, link, model.centroid_to_end_point[e])
        assert_close(jac, ends[e], RTOL, f"end point {e}")
    with pytest.raises(ValueError, match=r"link: index \d+ out of range; expected 0\.\.\d+ \(0 = base"):
        sdjax.point_jacobian(model, state, model.num_joints + 1)


def test_generalized_jacobian_predicts_zero_momentum_motion(model):
    """With zero momentum, the base follows -H_b^-1 H_bm qd and the end points move with
    J* qd (seed 003 eq 110); H* = H_m - H_bm^T H_b^-1 H_bm is SPD."""
    base = random_state(model, 11)
    h = sdjax.inertia_matrix(model, base)
    base_twist = -jnp.linalg.solve(h[:6, :6], h[:6, 6:] @ base.qd)
    state = sdjax.State(base.base_position, base.base_quaternion, base_twist[:3], base_twist[3:], base.q, base.qd)
    assert_close(sdjax.linear_momentum(model, state), jnp.zeros(3), RTOL, "zero P")
    jac = sdjax.end_point_jacobians(model, state)
    gj = sdjax.end_point_generalized_jacobians(model, state)
    assert_close(gj @ state.qd, jac @ state.generalized_velocity, RTOL, "J* qd")
    assert_close(
        sdjax.generalized_jacobian(model, state, model.end_point_link[0], model.centroid_to_end_point[0]),
        gj[0],
        RTOL,
        "GJ of a point",
    )
    h_star = np.asarray(sdjax.generalized_inertia_matrix(model, state))
    assert_close(h_star, h_star.T, RTOL, "H* symmetric")
    assert np.linalg.eigvalsh(h_star).min() > 0
