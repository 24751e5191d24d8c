"""Model editing (sdjax.editing): rigid-body algebra, payloads, appended trees, locked joints.

References: point clouds summed in NumPy (mass, centroid, inertia about the centroid, the 10
parameters about the origin), the closed-form inertia of a box, and models built whole with
``sdjax.Model``: a payload or an appended base welded by an extra joint held still, the whole
tree built at once, the full model with the locked joints' rows and columns removed (and, when a
merge moves the base centroid, the velocity map between the two base frames).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import editing
from sdjax.editing import (
    append_links,
    append_model,
    combine_bodies,
    from_inertial_vector,
    inertial_vector,
    lock_joints,
    merge_payload,
    parallel_axis,
    rotate_inertia,
    set_inertial_parameters,
    transform_body,
)
from helpers import MODEL_ARRAY_FIELDS, assert_close, random_state, three_arm_tree, with_frames

#: Relative tolerance of results computed two ways from O(1..100) model values in float64: a
#: few hundred flops each way, so a few hundred ulps (2e-16) at most.
ROUND_OFF = 1e-12


# ------------------------------------------------------------------------------------------
# Independent NumPy references.


def _rpy(angles) -> np.ndarray:
    """Rx(a) Ry(b) Rz(c), written out from the three elementary rotations."""
    a, b, c = angles
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


def _cloud(masses: np.ndarray, points: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Mass, centroid and inertia about the centroid of point masses, summed point by point."""
    mass = float(np.sum(masses))
    centroid = np.sum(masses[:, None] * points, axis=0) / mass
    inertia = np.zeros((3, 3))
    for m, p in zip(masses, points - centroid):
        inertia += m * (p @ p * np.eye(3) - np.outer(p, p))
    return mass, centroid, inertia


def _box(mass: float, sides) -> np.ndarray:
    a, b, c = sides
    return mass / 12.0 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b])


def _state(model, q, qd, rotation, position=(0.3, -0.2, 0.5), v0=(0.1, -0.3, 0.2), w0=(0.4, 0.1, -0.5)):
    free = np.zeros(6)
    free[list(model.base_coordinates)] = 1.0
    return sdjax.make_state(
        model,
        base_rotation=rotation,
        base_position=position,
        base_linear_velocity=np.asarray(v0) * free[:3],
        base_angular_velocity=np.asarray(w0) * free[3:],
        q=q,
        qd=qd,
    )


def _without(matrix: np.ndarray, rows) -> np.ndarray:
    """``matrix`` without the given rows and columns (a vector: entries)."""
    keep = np.setdiff1d(np.arange(matrix.shape[0]), rows)
    return matrix[np.ix_(keep, keep)] if matrix.ndim == 2 else matrix[keep]


# ------------------------------------------------------------------------------------------
# Rigid-body algebra.


def test_combine_bodies_matches_the_point_cloud():
    rng = np.random.default_rng(0)
    clouds = [
        (rng.uniform(0.1, 2.0, size=6), rng.normal(size=(6, 3)) + rng.normal(scale=2.0, size=3)) for _ in range(4)
    ]
    parts = [_cloud(m, p) for m, p in clouds]
    mass, centroid, inertia = combine_bodies(
        np.array([p[0] for p in parts]), np.stack([p[1] for p in parts]), np.stack([p[2] for p in parts])
    )
    want = _cloud(np.concatenate([m for m, _ in clouds]), np.concatenate([p for _, p in clouds]))
    assert isinstance(centroid, np.ndarray) and centroid.dtype == np.float64  # NumPy in, NumPy float64 out
    assert mass == pytest.approx(want[0], rel=ROUND_OFF)
    assert_close(centroid, want[1], ROUND_OFF, "centroid")
    assert_close(inertia, want[2], ROUND_OFF, "inertia about the combined centroid")
    # The same from JAX arrays, and batched over a leading axis.
    args = [
        jnp.asarray(np.stack([x, x])) for x in ([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
    ]
    mass2, centroid2, inertia2 = combine_bodies(*args)
    assert isinstance(inertia2, jax.Array) and inertia2.shape == (2, 3, 3)
    assert_close(inertia2[1], want[2], ROUND_OFF, "JAX, batched")


def test_numpy_in_numpy_float64_out_whatever_the_x64_flag():
    """The body algebra on NumPy arrays stays in NumPy float64 (the file readers rely on it),
    also with JAX's x64 flag off, where a JAX product would round to float32 (1e-7)."""
    rng = np.random.default_rng(3)
    rotation, centroid = _rpy(rng.normal(size=3)), rng.normal(size=3)
    inertia = _box(2.0, (0.3, 0.5, 0.7)) + 0.01 * np.ones((3, 3))
    with jax.enable_x64(False):
        rotated = rotate_inertia(inertia, rotation)
        _, moved, moved_inertia = transform_body(2.0, centroid, inertia, rotation, np.ones(3))
    for value in (rotated, moved, moved_inertia):
        assert isinstance(value, np.ndarray) and value.dtype == np.float64
    # NumPy's own products, in float64: equal to round-off
    assert_close(rotated, rotation @ inertia @ rotation.T, ROUND_OFF, "R I R^T")
    assert_close(moved_inertia, rotated, ROUND_OFF, "transform_body's inertia")
    assert_close(moved, rotation @ centroid + 1.0, ROUND_OFF, "R c + t")


def test_two_boxes_make_one_box():
    """Two equal boxes a x b x c side by side along x are one box 2a x b x c (closed form),
    also after a rigid move of both (the union moves with them)."""
    m, (a, b, c) = 3.0, (0.4, 0.7, 1.1)
    mass, centroid, inertia = combine_bodies(
        np.array([m, m]), np.array([[-a / 2, 0, 0], [a / 2, 0, 0]]), np.stack([_box(m, (a, b, c))] * 2)
    )
    assert mass == 2 * m
    np.testing.assert_array_equal(centroid, np.zeros(3))  # m (-a/2) + m (a/2) = 0 exactly
    assert_close(inertia, _box(2 * m, (2 * a, b, c)), ROUND_OFF, "box")
    rotation, shift = _rpy([0.3, -1.1, 2.0]), np.array([1.0, -2.0, 0.5])
    moved = transform_body(
        np.array([m, m]), np.array([[-a / 2, 0, 0], [a / 2, 0, 0]]), np.stack([_box(m, (a, b, c))] * 2), rotation, shift
    )
    _, centroid_moved, inertia_moved = combine_bodies(*moved)
    assert_close(centroid_moved, shift, ROUND_OFF, "moved centroid")
    assert_close(inertia_moved, rotation @ _box(2 * m, (2 * a, b, c)) @ rotation.T, ROUND_OFF, "moved box")
    assert_close(rotate_inertia(_box(m, (a, b, c)), rotation), rotation @ _box(m, (a, b, c)) @ rotation.T, ROUND_OFF)


def test_parallel_axis_and_the_ten_parameters_match_the_point_cloud():
    rng = np.random.default_rng(1)
    masses, points = rng.uniform(0.1, 2.0, size=8), rng.normal(size=(8, 3)) + [1.0, -0.5, 2.0]
    mass, centroid, inertia = _cloud(masses, points)
    about_origin = sum(m * (p @ p * np.eye(3) - np.outer(p, p)) for m, p in zip(masses, points))
    assert_close(inertia + parallel_axis(mass, centroid), about_origin, ROUND_OFF, "parallel axis")
    vector = inertial_vector(mass, centroid, inertia)
    first_moment = np.sum(masses[:, None] * points, axis=0)
    want = np.concatenate(
        [[mass], first_moment, [about_origin[i, j] for i, j in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))]]
    )
    assert_close(vector, want, ROUND_OFF, "10 parameters")
    assert editing.PARAMETER_NAMES[4:] == ("Ixx", "Iyy", "Izz", "Ixy", "Ixz", "Iyz")
    back = from_inertial_vector(vector)
    assert_close(back[0], mass, ROUND_OFF)
    assert_close(back[1], centroid, ROUND_OFF, "centroid back")
    assert_close(back[2], inertia, ROUND_OFF, "inertia back")
    # A massless body: centroid at the origin, no division by zero.
    zero = from_inertial_vector(np.zeros(10))
    assert np.all(np.isfinite(zero[1])) and np.all(zero[1] == 0)


def test_pseudo_inertia_is_the_second_moment_of_the_point_cloud():
    """The pseudo-inertia of bodies is their second moment in homogeneous coordinates,
    ``sum m [p; 1][p; 1]^T`` over a point cloud (its definition, summed point by point): from the
    ten parameters about the origin, in NumPy and in JAX (batched), and back."""
    rng = np.random.default_rng(4)
    clouds = [(rng.uniform(0.1, 2.0, size=7), rng.normal(size=(7, 3)) + rng.normal(size=3)) for _ in range(3)]
    want = np.stack([sum(m * np.outer(np.append(x, 1.0), np.append(x, 1.0)) for m, x in zip(*c)) for c in clouds])
    vector = np.stack([inertial_vector(*_cloud(*c)) for c in clouds])
    mass, first_moment = vector[:, 0], vector[:, 1:4]
    _, _, about_origin = from_inertial_vector(np.concatenate([np.zeros((3, 4)), vector[:, 4:]], axis=1))
    pseudo = editing.pseudo_inertia(mass, first_moment, about_origin)
    assert isinstance(pseudo, np.ndarray) and pseudo.dtype == np.float64
    assert_close(pseudo, want, ROUND_OFF, "pseudo-inertia")
    batched = editing.pseudo_inertia(*(jnp.asarray(np.stack([x, x])) for x in (mass, first_moment, about_origin)))
    assert isinstance(batched, jax.Array) and batched.shape == (2, 3, 4, 4)
    assert_close(batched[1], want, ROUND_OFF, "JAX, batched")
    back = editing.from_pseudo_inertia(want)
    for got, expected, what in zip(back, (mass, first_moment, about_origin), ("mass", "first moment", "inertia")):
        assert_close(got, expected, ROUND_OFF, what)
    # A body spread in 3-D has a positive definite J; a flat one (point masses in the plane
    # z = 0) is on the boundary: J's z row and column vanish (to round-off of O(1) entries).
    assert np.linalg.eigvalsh(pseudo).min() > 0.0
    masses, points = clouds[0][0], clouds[0][1] * [1.0, 1.0, 0.0]
    flat_vector = inertial_vector(*_cloud(masses, points))
    _, _, flat_inertia = from_inertial_vector(np.concatenate([np.zeros(4), flat_vector[4:]]))
    flat = editing.pseudo_inertia(flat_vector[0], flat_vector[1:4], flat_inertia)
    eig = np.linalg.eigvalsh(flat)
    assert abs(eig[0]) < ROUND_OFF * eig[-1] and eig[1] > 0.0
    with pytest.raises(ValueError, match=r"pseudo_inertia: expected shapes"):
        editing.pseudo_inertia(mass, first_moment[:2], about_origin)
    with pytest.raises(ValueError, match=r"from_pseudo_inertia: pseudo: expected shape \(\.\.\., 4, 4\)"):
        editing.from_pseudo_inertia(np.eye(3))


def test_massless_union_and_derivatives():
    mass, centroid, inertia = combine_bodies(np.zeros(2), np.ones((2, 3)), np.stack([np.eye(3), 2 * np.eye(3)]))
    assert mass == 0 and np.all(centroid == 0)
    np.testing.assert_array_equal(inertia, 3 * np.eye(3))  # the plain sum, exactly

    def yy(masses):
        return combine_bodies(masses, jnp.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), jnp.zeros((2, 3, 3)))[2][1, 1]

    # Two point masses 1 m apart: I_yy = m1 m2 / (m1 + m2), d/dm1 = m2^2 / (m1 + m2)^2.
    grad = jax.jit(jax.grad(yy))(jnp.array([1.0, 3.0]))
    np.testing.assert_allclose(grad, [9.0 / 16.0, 1.0 / 16.0], rtol=ROUND_OFF)
    assert np.all(np.isfinite(jax.grad(yy)(jnp.array([0.0, 0.0]))))  # the massless branch has finite gradients


# ------------------------------------------------------------------------------------------
# Payloads and new bodies.


def _with_welded_link(model, body, mass, inertia, joint_position, joint_rpy, centroid_to_joint):
    """``model`` plus one revolute link on ``body``, built whole with ``sdjax.Model``."""
    arrays = dict(
        link_mass=np.append(np.asarray(model.link_mass), mass),
        link_inertia=np.concatenate([np.asarray(model.link_inertia), inertia[None]]),
        parent_centroid_to_joint=np.concatenate([np.asarray(model.parent_centroid_to_joint), joint_position[None]]),
        centroid_to_joint=np.concatenate([np.asarray(model.centroid_to_joint), centroid_to_joint[None]]),
        joint_rpy=np.concatenate([np.asarray(model.joint_rpy), joint_rpy[None]]),
        joint_stiffness=np.append(np.asarray(model.joint_stiffness), 0.0),
        joint_damping=np.append(np.asarray(model.joint_damping), 0.0),
    )
    return sdjax.Model(
        model.parent + (body,),
        model.joint_type + ("R",),
        base_mass=model.base_mass,
        base_inertia=model.base_inertia,
        end_point_link=model.end_point_link,
        centroid_to_end_point=model.centroid_to_end_point,
        end_point_rpy=model.end_point_rpy,
        gravity=model.gravity,
        base=model.base,
        **arrays,
    )


@pytest.mark.parametrize("body", [2, 3])  # link 2 has a child, link 3 (prismatic) an end point
def test_merged_payload_equals_a_welded_link(body):
    """The payload as its own link on a revolute joint held at ``theta`` (zero rate and
    acceleration): the same H (the extra row and column removed), bias forces and inverse
    dynamics; the payload's pose on the body computed here in NumPy."""
    model = sdjax.edit_model(with_frames(three_arm_tree(2)), gravity=[0.3, -9.81, 1.2])
    n = model.num_joints
    mp, ip = 4.0, np.diag([0.3, 0.5, 0.6])
    joint, rpy, c2j, theta = np.array([0.2, -0.1, 0.4]), np.array([0.5, -0.3, 1.2]), np.array([-0.3, 0.1, 0.2]), 0.7
    full = _with_welded_link(model, body, mp, ip, joint, rpy, c2j)
    turn = _rpy(rpy) @ _rpy([0.0, 0.0, theta])
    merged = merge_payload(model, body, mp, joint - turn @ c2j, turn @ ip @ turn.T)
    rng = np.random.default_rng(3)
    q, qd, qdd = rng.uniform(-np.pi, np.pi, n), rng.normal(size=n), rng.normal(size=n)
    rotation, a0 = _rpy(rng.uniform(-np.pi, np.pi, 3)), rng.normal(size=6)
    state = _state(model, q, qd, rotation)
    state_full = _state(full, np.append(q, theta), np.append(qd, 0.0), rotation)
    h_full = np.asarray(sdjax.inertia_matrix(full, state_full))
    assert_close(sdjax.inertia_matrix(merged, state), _without(h_full, [6 + n]), ROUND_OFF, "H")
    bias_full = np.asarray(sdjax.bias_forces(full, state_full))
    assert_close(sdjax.bias_forces(merged, state), _without(bias_full, [6 + n]), ROUND_OFF, "bias forces")
    base_full, tau_full = sdjax.inverse_dynamics(full, state_full, a0, np.append(qdd, 0.0))
    base, tau = sdjax.inverse_dynamics(merged, state, a0, qdd)
    assert_close(base, base_full, ROUND_OFF, "base wrench")
    assert_close(tau, np.asarray(tau_full)[:n], ROUND_OFF, "joint torques")
    kin, kin0 = sdjax.forward_kinematics(merged, state), sdjax.forward_kinematics(model, state)
    assert_close(kin.end_point_position, kin0.end_point_position, ROUND_OFF, "end points stay")
    assert_close(kin.joint_position, kin0.joint_position, ROUND_OFF, "joints stay")


def test_merged_payload_on_the_base_moves_its_centroid():
    """Welded to the base, the payload moves the base centroid by d = mp r / (m0 + mp): at the
    state with r0' = r0 + A0 d and v0' = v0 + w0 x A0 d the system is the same (momenta,
    energy, centre of mass, end points) and H' = T^T H T for v0 = v0' - w0 x A0 d."""
    model = with_frames(three_arm_tree(4))
    n, mp, r, ip = model.num_joints, 25.0, np.array([0.4, -0.3, 0.8]), np.diag([1.0, 2.0, 2.5])
    merged = merge_payload(model, 0, mp, r, ip)
    full = _with_welded_link(model, 0, mp, ip, r, np.zeros(3), np.zeros(3))
    d = mp * r / (float(model.base_mass) + mp)
    rng = np.random.default_rng(5)
    q, qd, rotation = rng.uniform(-np.pi, np.pi, n), rng.normal(size=n), _rpy(rng.uniform(-np.pi, np.pi, 3))
    r0, v0, w0 = np.array([0.3, -0.2, 0.5]), np.array([0.1, -0.3, 0.2]), np.array([0.4, 0.1, -0.5])
    offset = rotation @ d
    state_full = _state(full, np.append(q, 0.0), np.append(qd, 0.0), rotation, r0, v0, w0)
    state = _state(merged, q, qd, rotation, r0 + offset, v0 + np.cross(w0, offset), w0)
    for quantity in (sdjax.linear_momentum, sdjax.angular_momentum, sdjax.kinetic_energy, sdjax.center_of_mass):
        assert_close(quantity(merged, state), quantity(full, state_full), ROUND_OFF, quantity.__name__)
    kin, kin_full = sdjax.forward_kinematics(merged, state), sdjax.forward_kinematics(full, state_full)
    assert_close(kin.end_point_position, kin_full.end_point_position, ROUND_OFF, "end points")
    assert_close(kin.joint_position, kin_full.joint_position[:n], ROUND_OFF, "joints")
    t = np.eye(6 + n)
    t[:3, 3:6] = np.array([[0, -offset[2], offset[1]], [offset[2], 0, -offset[0]], [-offset[1], offset[0], 0]])
    h_full = _without(np.asarray(sdjax.inertia_matrix(full, state_full)), [6 + n])
    assert_close(sdjax.inertia_matrix(merged, state), t.T @ h_full @ t, ROUND_OFF, "H in the moved base frame")


def test_set_inertial_parameters_replaces_the_body():
    """A link given a new body: H changes by the new body's minus the old body's contribution
    (m J_c^T J_c + J_w^T A I A^T J_w, from sdjax.point_jacobian); joints and end points stay."""
    model = with_frames(three_arm_tree(6))
    link, mass, shift, inertia = (
        4,
        7.0,
        np.array([0.1, 0.3, -0.2]),
        np.array([[0.5, 0.1, 0.0], [0.1, 0.6, 0.05], [0.0, 0.05, 0.7]]),
    )
    edited = set_inertial_parameters(model, [link], [mass], [shift], [inertia])
    state = random_state(model, 7)
    rotation = np.asarray(sdjax.forward_kinematics(model, state).rotation[link])

    def contribution(m, point, body_inertia):
        jac = np.asarray(sdjax.point_jacobian(model, state, link, point))
        world = rotation @ body_inertia @ rotation.T
        return m * jac[:3].T @ jac[:3] + jac[3:].T @ world @ jac[3:]

    old = contribution(float(model.link_mass[link - 1]), np.zeros(3), np.asarray(model.link_inertia[link - 1]))
    want = np.asarray(sdjax.inertia_matrix(model, state)) - old + contribution(mass, shift, inertia)
    assert_close(sdjax.inertia_matrix(edited, state), want, ROUND_OFF, "H")
    k0, k1 = sdjax.forward_kinematics(model, state), sdjax.forward_kinematics(edited, state)
    assert_close(k1.joint_position, k0.joint_position, ROUND_OFF, "joints")
    assert_close(k1.end_point_position, k0.end_point_position, ROUND_OFF, "end points")
    assert_close(k1.end_point_rotation, k0.end_point_rotation, ROUND_OFF, "end-point axes")


# ------------------------------------------------------------------------------------------
# Appending links and trees.


def test_append_links_equals_the_model_built_at_once():
    whole = with_frames(three_arm_tree(8))
    first = [e for e, b in enumerate(whole.end_point_link) if b <= 5]
    later = [e for e, b in enumerate(whole.end_point_link) if b > 5]

    def part(field, rows):
        return np.asarray(getattr(whole, field))[rows]

    arm = sdjax.Model(
        whole.parent[:5],
        whole.joint_type[:5],
        base_mass=whole.base_mass,
        base_inertia=whole.base_inertia,
        **{
            f: part(f, slice(0, 5))
            for f in (
                "link_mass",
                "link_inertia",
                "parent_centroid_to_joint",
                "centroid_to_joint",
                "joint_rpy",
                "joint_stiffness",
                "joint_damping",
            )
        },
        end_point_link=tuple(whole.end_point_link[e] for e in first),
        centroid_to_end_point=part("centroid_to_end_point", first),
        end_point_rpy=part("end_point_rpy", first),
        end_point_names=tuple(whole.end_point_names[e] for e in first),
        link_names=whole.link_names[:5],
        gravity=whole.gravity,
        name=whole.name,
    )
    grown = append_links(
        arm,
        whole.parent[5:],
        "".join(whole.joint_type[5:]),
        **{
            f: part(f, slice(5, None))
            for f in (
                "link_mass",
                "link_inertia",
                "parent_centroid_to_joint",
                "centroid_to_joint",
                "joint_rpy",
                "joint_stiffness",
                "joint_damping",
            )
        },
        link_names=whole.link_names[5:],
        end_point_link=tuple(whole.end_point_link[e] for e in later),
        centroid_to_end_point=part("centroid_to_end_point", later),
        end_point_rpy=part("end_point_rpy", later),
        end_point_names=tuple(whole.end_point_names[e] for e in later),
    )
    order = first + later  # the appended end points come after the arm's own
    for field in MODEL_ARRAY_FIELDS:
        want = np.asarray(getattr(whole, field))
        if field in ("centroid_to_end_point", "end_point_rpy"):
            want = want[order]
        np.testing.assert_array_equal(np.asarray(getattr(grown, field)), want, err_msg=field)  # copied, not computed
    assert grown.parent == whole.parent and grown.link_names == whole.link_names
    assert grown.end_point_link == tuple(whole.end_point_link[e] for e in order)
    state = random_state(whole, 9)
    np.testing.assert_array_equal(sdjax.inertia_matrix(grown, state), sdjax.inertia_matrix(whole, state))
    # Default names follow the model's numbering.
    extra = append_links(
        arm,
        (5,),
        "R",
        link_mass=[1.0],
        link_inertia=[np.eye(3)],
        parent_centroid_to_joint=[[0, 0, 0.1]],
        centroid_to_joint=[[0, 0, -0.1]],
    )
    assert extra.link_names[-1] == "link6" and extra.num_joints == 6


@pytest.mark.parametrize("mount", ["rpy", "rotation"])
def test_append_model_equals_the_tree_welded_by_a_held_joint(mount, sample_model):
    """``other``'s base as one more link on a revolute joint held at zero, its links behind it,
    built whole with sdjax.Model: the same H without that joint, bias forces and end points."""
    model, other = sample_model, with_frames(three_arm_tree(10))
    n, m = model.num_joints, other.num_joints
    body, position, rpy = 2, np.array([0.2, -0.4, 0.3]), np.array([0.4, 1.0, -0.7])
    given = {"rpy": rpy} if mount == "rpy" else {"rotation": _rpy(rpy)}
    appended = append_model(model, other, body, position=position, prefix="b/", **given)
    parents = model.parent + (body,) + tuple(n + 1 + p for p in other.parent)

    def cat(field, base_row):
        return np.concatenate([np.asarray(getattr(model, field)), base_row[None], np.asarray(getattr(other, field))])

    full = sdjax.Model(
        parents,
        model.joint_type + ("R",) + other.joint_type,
        base_mass=model.base_mass,
        base_inertia=model.base_inertia,
        link_mass=np.concatenate([np.asarray(model.link_mass), [float(other.base_mass)], np.asarray(other.link_mass)]),
        link_inertia=cat("link_inertia", np.asarray(other.base_inertia)),
        parent_centroid_to_joint=cat("parent_centroid_to_joint", position),
        centroid_to_joint=cat("centroid_to_joint", np.zeros(3)),
        joint_rpy=cat("joint_rpy", rpy),
        joint_stiffness=np.concatenate([np.asarray(model.joint_stiffness), [0.0], np.asarray(other.joint_stiffness)]),
        joint_damping=np.concatenate([np.asarray(model.joint_damping), [0.0], np.asarray(other.joint_damping)]),
        end_point_link=model.end_point_link + tuple(n + 1 + b for b in other.end_point_link),
        centroid_to_end_point=np.concatenate(
            [np.asarray(model.centroid_to_end_point), np.asarray(other.centroid_to_end_point)]
        ),
        end_point_rpy=np.concatenate([np.asarray(model.end_point_rpy), np.asarray(other.end_point_rpy)]),
    )
    assert appended.num_joints == n + m and appended.link_names[n:] == tuple("b/" + s for s in other.link_names)
    assert appended.end_point_names[-1] == "b/" + other.end_point_names[-1]
    rng = np.random.default_rng(11)
    q, qd, rotation = rng.uniform(-np.pi, np.pi, n + m), rng.normal(size=n + m), _rpy(rng.uniform(-np.pi, np.pi, 3))
    held = n  # the 0-based row of the weld joint's coordinate among the joints
    state = _state(appended, q, qd, rotation)
    state_full = _state(full, np.insert(q, held, 0.0), np.insert(qd, held, 0.0), rotation)
    h_full = np.asarray(sdjax.inertia_matrix(full, state_full))
    assert_close(sdjax.inertia_matrix(appended, state), _without(h_full, [6 + held]), ROUND_OFF, "H")
    bias_full = np.asarray(sdjax.bias_forces(full, state_full))
    assert_close(sdjax.bias_forces(appended, state), _without(bias_full, [6 + held]), ROUND_OFF, "bias forces")
    kin, kin_full = sdjax.forward_kinematics(appended, state), sdjax.forward_kinematics(full, state_full)
    assert_close(kin.end_point_position, kin_full.end_point_position, ROUND_OFF, "end points")
    assert_close(kin.end_point_rotation, kin_full.end_point_rotation, ROUND_OFF, "end-point axes")


# ------------------------------------------------------------------------------------------
# Locking joints.


@pytest.mark.parametrize("locked", [(3,), (8,), (2, 3, 4), (12, 14, 9)])  # a leaf, a slider, a chain, two arms
def test_locked_joints_remove_their_rows_and_columns(locked):
    """Locked joints not on the base: the reduced model at the remaining q is the full model
    with the locked joints at their positions (zero rate, zero acceleration)."""
    model = sdjax.edit_model(with_frames(three_arm_tree(12)), gravity=[0.5, -9.81, 0.2])
    n = model.num_joints
    rng = np.random.default_rng(13)
    q, qd, qdd = rng.uniform(-2.0, 2.0, n), rng.normal(size=n), rng.normal(size=n)
    rows = np.asarray(locked) - 1
    qd[rows], qdd[rows] = 0.0, 0.0
    keep = np.setdiff1d(np.arange(n), rows)
    reduced = lock_joints(model, locked, q[rows])
    assert reduced.num_joints == n - len(locked)
    assert reduced.link_names == tuple(model.link_names[k] for k in keep)
    assert reduced.end_point_names == model.end_point_names
    rotation, a0 = _rpy(rng.uniform(-np.pi, np.pi, 3)), rng.normal(size=6)
    state, state_red = _state(model, q, qd, rotation), _state(reduced, q[keep], qd[keep], rotation)
    assert_close(
        sdjax.inertia_matrix(reduced, state_red),
        _without(np.asarray(sdjax.inertia_matrix(model, state)), 6 + rows),
        ROUND_OFF,
        "H",
    )
    assert_close(
        sdjax.bias_forces(reduced, state_red),
        _without(np.asarray(sdjax.bias_forces(model, state)), 6 + rows),
        ROUND_OFF,
        "bias",
    )
    base, tau = sdjax.inverse_dynamics(reduced, state_red, a0, qdd[keep])
    base_full, tau_full = sdjax.inverse_dynamics(model, state, a0, qdd)
    assert_close(base, base_full, ROUND_OFF, "base wrench")
    assert_close(tau, np.asarray(tau_full)[keep], ROUND_OFF, "joint torques")
    kin, kin_full = sdjax.forward_kinematics(reduced, state_red), sdjax.forward_kinematics(model, state)
    assert_close(kin.end_point_position, kin_full.end_point_position, ROUND_OFF, "end points")
    assert_close(kin.end_point_rotation, kin_full.end_point_rotation, ROUND_OFF, "end-point axes")
    assert_close(kin.joint_position, np.asarray(kin_full.joint_position)[keep], ROUND_OFF, "joints")


def test_locking_a_joint_on_the_base_merges_into_it():
    """Fixed base: H restricted as above. Floating base: the base centroid moves to the centre
    of mass of the base and the merged links (from the full model's kinematics here), and the
    reduced model is the full one seen from there (momenta, energy, T^T H T)."""
    fixed = sdjax.edit_model(with_frames(three_arm_tree(14)), base="fixed")
    n = fixed.num_joints
    rng = np.random.default_rng(15)
    q, qd, rotation = rng.uniform(-2.0, 2.0, n), rng.normal(size=n), _rpy(rng.uniform(-np.pi, np.pi, 3))
    locked = np.array([1, 2, 6])  # arm 1's first two joints and arm 2's first joint
    qd[locked - 1] = 0.0
    keep = np.setdiff1d(np.arange(n), locked - 1)
    reduced = lock_joints(fixed, tuple(locked), q[locked - 1])
    h_full = np.asarray(sdjax.inertia_matrix(fixed, _state(fixed, q, qd, rotation)))
    assert_close(
        sdjax.inertia_matrix(reduced, _state(reduced, q[keep], qd[keep], rotation)),
        _without(h_full, locked - 1),
        ROUND_OFF,
        "fixed H",
    )

    model = sdjax.edit_model(fixed, base="floating")
    reduced = lock_joints(model, tuple(locked), q[locked - 1])
    r0, v0, w0 = np.array([0.3, -0.2, 0.5]), np.array([0.1, -0.3, 0.2]), np.array([0.4, 0.1, -0.5])
    state = _state(model, q, qd, rotation, r0, v0, w0)
    kin = sdjax.forward_kinematics(model, state)
    merged = [0, 1, 2, 6]  # the base and the links of the locked joints
    masses = np.array([float(model.base_mass)] + [float(model.link_mass[b - 1]) for b in merged[1:]])
    offset = np.sum(masses[:, None] * (np.asarray(kin.centroid)[merged] - r0), axis=0) / np.sum(masses)  # inertial
    state_red = _state(reduced, q[keep], qd[keep], rotation, r0 + offset, v0 + np.cross(w0, offset), w0)
    for quantity in (sdjax.linear_momentum, sdjax.angular_momentum, sdjax.kinetic_energy, sdjax.center_of_mass):
        assert_close(quantity(reduced, state_red), quantity(model, state), ROUND_OFF, quantity.__name__)
    # locked_state maps the state as written out above, and unlocked_state maps it back.
    mapped = sdjax.locked_state(model, state, tuple(locked))
    for field in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
        assert_close(getattr(mapped, field), getattr(state_red, field), ROUND_OFF, f"locked_state {field}")
    back = sdjax.editing.unlocked_state(model, mapped, tuple(locked), q[locked - 1])
    for field in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
        assert_close(getattr(back, field), getattr(state, field), ROUND_OFF, f"unlocked_state {field}")
    t = np.eye(6 + len(keep))
    t[:3, 3:6] = np.array([[0, -offset[2], offset[1]], [offset[2], 0, -offset[0]], [-offset[1], offset[0], 0]])
    h_full = _without(np.asarray(sdjax.inertia_matrix(model, state)), 6 + locked - 1)
    assert_close(sdjax.inertia_matrix(reduced, state_red), t.T @ h_full @ t, ROUND_OFF, "floating H")


def test_locked_state_of_joints_off_the_base_and_its_refusals():
    """Joints off the base: the base is unchanged and the locked entries drop out; a moving
    joint cannot lock without an impact; the shapes of unlocked_state are checked."""
    model = with_frames(three_arm_tree(12))
    n = model.num_joints
    rng = np.random.default_rng(17)
    q, qd = rng.uniform(-2.0, 2.0, n), rng.normal(size=n)
    locked = (3, 9)
    qd[[2, 8]] = 0.0
    state = _state(model, q, qd, _rpy(rng.uniform(-np.pi, np.pi, 3)), np.array([0.1, 0.2, 0.3]), rng.normal(size=3))
    mapped = sdjax.locked_state(model, state, locked)
    keep = np.setdiff1d(np.arange(n), [2, 8])
    assert_close(mapped.q, q[keep], 0.0, "q")
    assert_close(mapped.qd, qd[keep], 0.0, "qd")
    assert_close(mapped.base_position, state.base_position, 0.0, "r0")
    reduced = lock_joints(model, locked, q[[2, 8]])
    assert_close(sdjax.kinetic_energy(reduced, mapped), sdjax.kinetic_energy(model, state), ROUND_OFF, "energy")
    moving = eqx.tree_at(lambda s: s.qd, state, state.qd.at[8].set(0.1))
    with pytest.raises(ValueError, match=r"locked_state: joint\(s\) \[9\] move"):
        sdjax.locked_state(model, moving, locked)
    with pytest.raises(ValueError, match=r"unlocked_state: reduced_state.q and .qd must have shape \(12,\)"):
        sdjax.editing.unlocked_state(model, state, locked, [0.0, 0.0])
    with pytest.raises(ValueError, match=r"locked_state: joints\[0\]: index 0 out of range; expected 1\.\."):
        sdjax.locked_state(model, state, (0,))


def test_lock_position_derivative(sample_model):
    """d H_reduced / d q_lock by JAX matches a central difference (h = 1e-5: truncation
    O(h^2) ~ 1e-10 against round-off O(eps / h) ~ 1e-11 on O(10) entries)."""
    state = random_state(lock_joints(sample_model, (2, 6), [0.0, 0.0]), 16)

    def h(positions):
        return sdjax.inertia_matrix(lock_joints(sample_model, (2, 6), positions), state)

    x = np.array([0.4, 0.05])
    jac = jax.jacfwd(h)(jnp.asarray(x))
    for k in range(2):
        step = np.eye(2)[k] * 1e-5
        fd = (np.asarray(h(x + step)) - np.asarray(h(x - step))) / 2e-5
        assert_close(jac[..., k], fd, 1e-8, f"dH/dq_lock[{k}]")  # the difference's errors (docstring), x100 margin


# ------------------------------------------------------------------------------------------
# Refusals.


def test_refusals(sample_model):
    model = sample_model
    with pytest.raises(ValueError, match=r"merge_payload: body: index 7 out of range; expected 0\.\.6 \(0 = base"):
        merge_payload(model, 7, 1.0)
    with pytest.raises(TypeError, match="merge_payload: body: expected a static int"):
        merge_payload(model, 1.5, 1.0)
    with pytest.raises(ValueError, match="merge_payload: mass: must be non-negative"):
        merge_payload(model, 1, -1.0)
    with pytest.raises(ValueError, match=r"merge_payload: centroid: expected shape \(3,\)"):
        merge_payload(model, 1, 1.0, [0.0, 1.0])
    # (the merged tensor is symmetrised: an asymmetric payload inertia was changed silently)
    with pytest.raises(ValueError, match=r"merge_payload: inertia: not symmetric \(largest \|I - I\^T\| entry 0\.5\)"):
        merge_payload(model, 1, 1.0, inertia=[[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(TypeError, match=r"merge_payload: model: expected a sdjax\.Model, got str"):
        merge_payload("model", 1, 1.0)
    # A rotated tensor computed in float32 is symmetric to float32's round-off only (~1e-8): taken.
    rotation = np.asarray(sdjax.rpy_to_matrix(jnp.asarray([0.3, -0.2, 1.1])), np.float32)
    rotated = rotation @ np.diag(np.array([0.1, 0.2, 0.25], np.float32)) @ rotation.T
    merge_payload(model.astype(jnp.float32), 1, 2.0, inertia=rotated)
    with pytest.raises(ValueError, match=r"lock_joints: joints\[0\]: index 0 out of range; expected 1\.\."):
        lock_joints(model, (0,), [0.0])
    with pytest.raises(ValueError, match=r"lock_joints: joints: \[2\] listed more than once"):
        lock_joints(model, (2, 2), [0.0, 0.1])
    with pytest.raises(ValueError, match=r"lock_joints: positions: expected a scalar or shape \(2,\)"):
        lock_joints(model, (2, 3), [0.0, 0.1, 0.2])
    with pytest.raises(TypeError, match="lock_joints: joints: expected a sequence"):
        lock_joints(model, 2, 0.0)
    with pytest.raises(ValueError, match=r"append_links: parent\[1\] = 8 is neither"):
        append_links(
            model,
            (1, 8),
            "RR",
            link_mass=[1, 1],
            link_inertia=np.stack([np.eye(3)] * 2),
            parent_centroid_to_joint=np.zeros((2, 3)),
            centroid_to_joint=np.zeros((2, 3)),
        )
    with pytest.raises(ValueError, match=r"append_links: joint_type\[0\]: unknown joint type 'X'"):
        append_links(
            model,
            (1,),
            "X",
            link_mass=[1],
            link_inertia=[np.eye(3)],
            parent_centroid_to_joint=np.zeros((1, 3)),
            centroid_to_joint=np.zeros((1, 3)),
        )
    with pytest.raises(ValueError, match=r"append_links: link_names\[0\]: 'arm1_link1' is already used"):
        append_links(
            model,
            (1,),
            "R",
            link_mass=[1],
            link_inertia=[np.eye(3)],
            parent_centroid_to_joint=np.zeros((1, 3)),
            centroid_to_joint=np.zeros((1, 3)),
            link_names=["arm1_link1"],
        )
    with pytest.raises(ValueError, match=r"append_links: link_inertia: expected shape \(1, 3, 3\)"):
        append_links(
            model,
            (1,),
            "R",
            link_mass=[1],
            link_inertia=np.eye(3),
            parent_centroid_to_joint=np.zeros((1, 3)),
            centroid_to_joint=np.zeros((1, 3)),
        )
    with pytest.raises(ValueError, match="append_model: names .* give a prefix"):
        append_model(model, model, 1)
    with pytest.raises(ValueError, match="append_model: give rpy or rotation, not both"):
        append_model(model, model, 1, rpy=[0, 0, 0], rotation=np.eye(3), prefix="x/")
    with pytest.raises(ValueError, match="append_model: rotation: expected a proper rotation matrix"):
        append_model(model, model, 1, rotation=np.diag([1.0, 1.0, -1.0]), prefix="x/")
    with pytest.raises(ValueError, match=r"combine_bodies: expected shapes \(\.\.\., k\)"):
        combine_bodies(np.ones(2), np.zeros((3, 3)), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"transform_body: rotation: expected shape \(\.\.\., 3, 3\)"):
        transform_body(1.0, np.zeros(3), np.eye(3), np.eye(2))
    with pytest.raises(ValueError, match=r"set_inertial_parameters: mass: expected shape \(1,\)"):
        set_inertial_parameters(model, [1], [1.0, 2.0], [np.zeros(3)], [np.eye(3)])
    with pytest.raises(ValueError, match="inertia tensor of link 1 .* is not symmetric"):  # the model's own validation
        set_inertial_parameters(model, [1], [1.0], [np.zeros(3)], [np.triu(np.ones((3, 3)))])
