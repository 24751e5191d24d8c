"""model_from_dh (seed 003 eqs 1-10) against an independent homogeneous-matrix evaluation."""

import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.io import model_from_dh
from sdjax.models import ets7_like, planar_four_link, spatial_six_link


def A(theta, d, alpha, c):
    """Eq 2 written out: Rz(theta) Tz(d) Tx(c) Rx(alpha)."""
    ct, st, ca, sa = np.cos(theta), np.sin(theta), np.cos(alpha), np.sin(alpha)
    return np.array([[ct, -st * ca, st * sa, c * ct], [st, ct * ca, -ct * sa, c * st], [0, sa, ca, d], [0, 0, 0, 1.0]])


def homogeneous(rotation, position):
    t = np.eye(4)
    t[:3, :3], t[:3, 3] = rotation, position
    return t


def euler123(angles):
    """Eq 6/8: Rz(eta) Ry(zeta) Rx(epsilon), elementary matrices written out here."""
    e, z, h = angles
    rx = np.array([[1, 0, 0], [0, np.cos(e), -np.sin(e)], [0, np.sin(e), np.cos(e)]])
    ry = np.array([[np.cos(z), 0, np.sin(z)], [0, 1, 0], [-np.sin(z), 0, np.cos(z)]])
    rz = np.array([[np.cos(h), -np.sin(h), 0], [np.sin(h), np.cos(h), 0], [0, 0, 1]])
    return rz @ ry @ rx


def random_table(rng, n, types):
    """Random DH table, masses and physical inertia tensors (in L_i)."""
    inertia = []
    for _ in range(n):
        spread = rng.uniform(0.2, 1.0, 3)  # second moments along principal axes
        moments = spread.sum() - spread  # always satisfy the triangle inequality
        r = np.linalg.qr(rng.normal(size=(3, 3)))[0]
        inertia.append(r @ np.diag(moments) @ r.T)
    return dict(
        d=rng.uniform(-0.5, 0.5, n),
        theta_offset=rng.uniform(-np.pi, np.pi, n),
        alpha=rng.uniform(-np.pi, np.pi, n),
        a=rng.uniform(-0.5, 1.0, n),
        b=rng.uniform(-0.5, 1.0, n),
        link_mass=rng.uniform(1.0, 10.0, n),
        link_inertia=np.array(inertia),
        base_mass=100.0,
        base_inertia=np.diag([10.0, 12.0, 15.0]),
        joint_type=types,
        mount_position=rng.normal(size=3),
        mount_euler=rng.uniform(-np.pi, np.pi, 3),
    )


def oracle(table, base_rotation, base_position, q):
    """Eqs 1-10: joint frames J_1..J_{N+1} and link frames L_1..L_N (inertial, 4x4)."""
    n = len(q)
    t_j = [
        homogeneous(base_rotation, base_position) @ homogeneous(euler123(table["mount_euler"]), table["mount_position"])
    ]  # eq 8
    t_l = []
    for i in range(n):
        prismatic = table["joint_type"][i] == "P"
        theta = table["theta_offset"][i] + (0.0 if prismatic else q[i])
        d = table["d"][i] + (q[i] if prismatic else 0.0)
        t_l.append(t_j[i] @ A(theta, d, table["alpha"][i], table["a"][i]))  # eq 10
        t_j.append(t_j[i] @ A(theta, d, table["alpha"][i], table["a"][i] + table["b"][i]))  # eqs 1, 9
    return t_j, t_l


@pytest.mark.parametrize("seed,types", [(0, "RRRRR"), (1, "RPRRP"), (2, "PRR"), (3, "R"), (4, "RRPRRRR")])
def test_forward_kinematics_matches_eqs_1_to_10(seed, types):
    rng = np.random.default_rng(seed)
    n = len(types)
    table = random_table(rng, n, types)
    model = model_from_dh(**table)
    for trial in range(3):
        q = rng.uniform(-np.pi, np.pi, n)
        quat = rng.normal(size=4)
        state = sdjax.make_state(model, base_position=rng.normal(size=3), base_quaternion=quat, q=q)
        base_rotation = np.asarray(state.base_rotation)
        kin = sdjax.forward_kinematics(model, state)
        t_j, t_l = oracle(table, base_rotation, np.asarray(state.base_position), q)
        # Tolerance 1e-12: the same products of O(1) rotations and translations, in another
        # order (sdjax composes RPY frames; the oracle composes 4x4 DH matrices).
        tol = 1e-12
        for i in range(n):
            np.testing.assert_allclose(
                kin.joint_position[i], t_j[i][:3, 3], atol=tol, err_msg=f"joint {i + 1} position"
            )
            np.testing.assert_allclose(kin.joint_axis[i], t_j[i][:3, 2], atol=tol, err_msg=f"joint {i + 1} axis (eq 5)")
            np.testing.assert_allclose(
                kin.centroid[i + 1], t_l[i][:3, 3], atol=tol, err_msg=f"link {i + 1} centroid (eq 10)"
            )
            # L_i is oriented as J_{i+1} (eq 4) and equals the sdjax link frame turned by Rx(alpha_i).
            np.testing.assert_allclose(t_l[i][:3, :3], t_j[i + 1][:3, :3], atol=tol)
            alpha = table["alpha"][i]
            rx = np.array([[1, 0, 0], [0, np.cos(alpha), -np.sin(alpha)], [0, np.sin(alpha), np.cos(alpha)]])
            np.testing.assert_allclose(
                np.asarray(kin.rotation[i + 1]) @ rx, t_l[i][:3, :3], atol=tol, err_msg=f"link {i + 1} frame"
            )
            # Inertia about the centroid in the inertial frame: R_L I_L R_L^T.
            world_dh = t_l[i][:3, :3] @ table["link_inertia"][i] @ t_l[i][:3, :3].T
            world_sd = np.asarray(kin.rotation[i + 1] @ model.link_inertia[i] @ kin.rotation[i + 1].T)
            np.testing.assert_allclose(world_sd, world_dh, atol=1e-12 * 10, err_msg=f"link {i + 1} inertia")
        # End effector = J_{N+1}.
        np.testing.assert_allclose(kin.end_point_position[0], t_j[n][:3, 3], atol=tol, err_msg="end-effector position")
        np.testing.assert_allclose(kin.end_point_rotation[0], t_j[n][:3, :3], atol=tol, err_msg="end-effector rotation")


def test_mass_matrix_symmetric_positive_definite():
    rng = np.random.default_rng(7)
    model = model_from_dh(**random_table(rng, 6, "RRPRRR"))
    state = sdjax.make_state(model, q=rng.uniform(-2, 2, 6), base_rpy=rng.uniform(-1, 1, 3))
    h = np.asarray(sdjax.inertia_matrix(model, state))
    assert h.shape == (12, 12)
    np.testing.assert_allclose(h, h.T, atol=1e-12 * np.max(np.abs(h)))
    assert np.linalg.eigvalsh(h)[0] > 0
    # The total mass sits in the translational block.
    np.testing.assert_allclose(h[:3, :3], float(model.total_mass) * np.eye(3), rtol=1e-13)


def test_euler_mount_is_rz_ry_rx():
    from sdjax.io import dh_matrix, euler123_to_matrix

    angles = (0.3, -0.7, 1.1)
    np.testing.assert_allclose(euler123_to_matrix(angles), euler123(angles), atol=1e-15)
    np.testing.assert_allclose(dh_matrix(0.4, 0.2, -0.5, 0.9), A(0.4, 0.2, -0.5, 0.9), atol=1e-15)


def _good(n=3):
    return random_table(np.random.default_rng(0), n, "R" * n)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(alpha=np.zeros(2)), r"alpha expected shape \(3,\)"),
        (dict(link_inertia=np.zeros((3, 3))), r"link_inertia expected shape \(3, 3, 3\)"),
        (dict(link_mass=[1.0, -2.0, 1.0]), r"link_mass\[1\] \(link 2\) must be positive"),
        (dict(base_mass=0.0), r"base_mass must be positive"),
        (dict(joint_type="RXR"), r"joint_type\[1\] \(joint 2\) is 'X'"),
        (dict(joint_type="RR"), r"joint_type expected 3 entries"),
        (dict(d=[[0.0, 1.0]]), r"d expected a non-empty \(N,\) vector"),
        (dict(d=[]), r"d expected a non-empty"),
        (dict(a=[0.0, np.nan, 0.0]), r"a\[1\] \(joint 2\) is not finite"),
        (dict(mount_euler=[0.0, 0.0]), r"mount_euler expected shape \(3,\)"),
        (dict(mount_position=[0.0, np.inf, 0.0]), r"mount_position has non-finite"),
        (dict(base_inertia=np.eye(2)), r"base_inertia expected shape \(3, 3\)"),
        (dict(d=["x", 0.0, 0.0]), r"d must be real numbers"),
    ],
)
def test_bad_tables_raise(change, match):
    table = _good()
    table.update(change)
    with pytest.raises(ValueError, match=match):
        model_from_dh(**table)


def test_unphysical_inertia_is_reported_by_model_validation():
    table = _good()
    table["link_inertia"] = np.array([np.eye(3), np.diag([1.0, 1.0, 5.0]), np.eye(3)])
    with pytest.raises(ValueError, match=r"link_inertia\[1\].*triangle inequality"):
        model_from_dh(**table)


def test_too_many_links_refused_before_allocating():
    with pytest.raises(ValueError, match="exceeds the limit"):
        model_from_dh(np.zeros(20_000), 0, 0, 0, 0, link_mass=0, link_inertia=0, base_mass=1, base_inertia=0)


# ------------------------------------------------------------------------------------------
# Seed 003 models.


def test_planar_four_link_geometry():
    model = planar_four_link()
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    np.testing.assert_allclose(kin.joint_axis, np.tile([0.0, 0.0, 1.0], (4, 1)), atol=1e-15)
    # Fully extended along x at q = 0, in the base x-y plane.
    np.testing.assert_allclose(kin.centroid[1:, 1:], 0.0, atol=1e-15)
    assert np.all(np.diff(np.asarray(kin.centroid[:, 0])) > 0)
    # Any q keeps the arm in the plane z = 0.
    state = sdjax.make_state(model, q=jnp.array([0.3, -0.5, 1.0, 0.2]))
    kin = sdjax.forward_kinematics(model, state)
    np.testing.assert_allclose(kin.centroid[:, 2], 0.0, atol=1e-15)


def test_spatial_six_link_geometry():
    model = spatial_six_link()
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    np.testing.assert_allclose(kin.joint_axis[0], [1.0, 0.0, 0.0], atol=1e-15)
    # Extended along +x at q = 0: joints, centroids and the end point at increasing x.
    xs = np.concatenate([np.asarray(kin.joint_position[:, 0]), np.asarray(kin.end_point_position[:, 0])])
    assert np.all(np.diff(xs) >= -1e-15) and xs[-1] - xs[0] > 2.0
    # Joints 2-6 move the arm in planes parallel to x-z (their axes along base y at q1 = 0).
    np.testing.assert_allclose(np.abs(kin.joint_axis[1:, 1]), 1.0, atol=1e-15)


def test_ets7_like_parameters():
    model = ets7_like()
    np.testing.assert_allclose(model.link_mass, [35.0, 22.5, 21.9, 16.5, 26.0, 18.5])
    assert float(model.base_mass) == 2550.0
    np.testing.assert_allclose(model.parent_centroid_to_joint[0], [-0.79, -0.29, 1.00])
    # I_zz about each joint's own axis (z of the sdjax link frame) as published.
    np.testing.assert_allclose(model.link_inertia[:, 2, 2], [1.69, 3.75, 2.53, 0.072, 0.13, 0.26], rtol=1e-12)
    state = sdjax.make_state(model, q=jnp.array([0.0, 0.5, -1.0, 0.0, 0.5, 0.0]))
    h = np.asarray(sdjax.inertia_matrix(model, state))
    assert np.linalg.eigvalsh(h)[0] > 0
