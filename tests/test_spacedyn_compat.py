"""sdjax.spacedyn: SpaceDyn v2 names and MATLAB layouts, against the NumPy oracle."""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
import sdjax.spacedyn as sd
from sdjax.models import random_model, spacedyn_sample
from helpers import assert_close
from spacedyn_oracle import SpaceDynOracle

RTOL = 1e-11  # float64 round-off, as in test_against_oracle.py


def random_sv(model, seed):
    rng = np.random.default_rng(seed)
    n = model.num_joints
    SV = sd.init_SV(model)
    SV.update(
        R0=rng.normal(size=3),
        A0=sd.rpy2dc(rng.normal(size=3)).T,
        v0=rng.normal(size=3),
        w0=rng.normal(size=3),
        vd0=rng.normal(size=3),
        wd0=rng.normal(size=3),
        q=rng.normal(size=n),
        qd=rng.normal(size=n),
        qdd=rng.normal(size=n),
        F0=rng.normal(size=3),
        T0=rng.normal(size=3),
        tau=rng.normal(size=n),
    )
    fe, te = np.zeros((3, n)), np.zeros((3, n))
    links = np.asarray(model.end_point_link) - 1
    fe[:, links], te[:, links] = rng.normal(size=(2, 3, len(links)))
    SV.update(Fe=fe, Te=te)
    return {k: np.asarray(v) for k, v in SV.items()}


@pytest.fixture(params=["sample", "tree"], scope="module")
def system(request):
    model = spacedyn_sample() if request.param == "sample" else random_model(71, 7, gravity=True)
    lp = sdjax.model_to_spacedyn_arrays(model)
    return model, lp, SpaceDynOracle(lp, gravity=np.asarray(model.gravity))


def test_kinematics_layouts(system):
    model, lp, oracle = system
    SV = random_sv(model, 0)
    n = model.num_joints
    AA = oracle.rotations(SV["A0"], SV["q"])
    RR, PP = oracle.positions(SV["R0"], SV["A0"], AA, SV["q"])
    out = sd.calc_pos(lp, sd.calc_aa(model, SV))  # an LP dict or a Model
    assert out["AA"].shape == (3, 3 * n) and out["RR"].shape == (3, n)
    assert_close(out["AA"], np.hstack(AA), RTOL, "AA (3, 3n)")
    assert_close(out["RR"], np.column_stack(RR), RTOL, "RR (3, n)")
    vv, ww = oracle.velocities(SV["A0"], AA, SV["q"], SV["v0"], SV["w0"], SV["qd"])
    out = sd.calc_vel(model, SV)
    assert_close(out["vv"], np.column_stack(vv), RTOL, "vv")
    assert_close(out["ww"], np.column_stack(ww), RTOL, "ww")
    vd, wd = oracle.accelerations(SV["A0"], AA, SV["q"], SV["w0"], ww, SV["vd0"], SV["wd0"], SV["qd"], SV["qdd"])
    out = sd.calc_acc(model, SV)
    assert_close(out["vd"], np.column_stack(vd), RTOL, "vd")
    assert_close(out["wd"], np.column_stack(wd), RTOL, "wd")
    ends = oracle.end_points(AA, RR)
    for e in range(model.num_end_points):
        joints = sd.j_num(model, e + 1)
        assert list(joints) == [j + 1 for j in oracle.path(model.end_point_link[e] - 1)]
        pos, ori = sd.f_kin_e(model, SV, joints)
        assert_close(pos, ends[e][0], RTOL, "POS_e")
        assert_close(ori, ends[e][1], RTOL, "ORI_e")
        pos_j, ori_j = sd.f_kin_j(model, SV, joints)
        assert_close(pos_j, np.column_stack([PP[j - 1] for j in joints]), RTOL, "POS_j")
        assert_close(ori_j, np.hstack([AA[j - 1] for j in joints]), RTOL, "ORI_j")


def test_jacobian_layouts(system):
    model, lp, oracle = system
    SV = random_sv(model, 1)
    n = model.num_joints
    AA = oracle.rotations(SV["A0"], SV["q"])
    RR, PP = oracle.positions(SV["R0"], SV["A0"], AA, SV["q"])
    jt, jr = sd.calc_jt(model, SV), sd.calc_jr(model, SV)
    assert jt.shape == (3, n * n)
    for i in range(n):
        J = oracle.point_jacobian_joints(AA, PP, i, RR[i])
        assert_close(jt[:, i * n : (i + 1) * n], J[:3], RTOL, f"JJ_t block {i + 1}")
        assert_close(jr[:, i * n : (i + 1) * n], J[3:], RTOL, f"JJ_r block {i + 1}")
    ends = oracle.end_points(AA, RR)
    H = oracle.inertia_matrix(SV["R0"], SV["A0"], AA, RR, PP)
    for e, link in enumerate(model.end_point_link):
        je = sd.calc_je(model, SV, sd.j_num(model, e + 1))
        Jm = oracle.point_jacobian_joints(AA, PP, link - 1, ends[e][0])
        assert_close(je, Jm, RTOL, "calc_je")
        pe = ends[e][0]
        Js = np.block([[np.eye(3), -sd.tilde(pe - SV["R0"])], [np.zeros((3, 3)), np.eye(3)]])
        gj = Jm - Js @ np.linalg.solve(H[:6, :6], H[:6, 6:])
        assert_close(sd.calc_gj(model, SV, e + 1), gj, 1e-10, "calc_gj")  # 6x6 solve of H_b
    assert_close(sd.calc_hh(model, SV), H, RTOL, "calc_hh")


def test_r_ne_and_f_dyn(system):
    model, lp, oracle = system
    SV = random_sv(model, 2)
    AA = oracle.rotations(SV["A0"], SV["q"])
    RR, _ = oracle.positions(SV["R0"], SV["A0"], AA, SV["q"])
    # r_ne: Fe/Te are the loads on the environment (eq 3.32, SpaceDyn v2r1).
    expected = oracle.newton_euler(
        SV["R0"],
        SV["A0"],
        AA,
        RR,
        SV["q"],
        SV["v0"],
        SV["w0"],
        SV["vd0"],
        SV["wd0"],
        SV["qd"],
        SV["qdd"],
        SV["Fe"],
        SV["Te"],
    )
    assert_close(sd.r_ne(model, SV), expected, RTOL, "r_ne")
    # f_dyn: Fe/Te applied to the robot (eq 3.29).
    expected = oracle.forward_dynamics(
        SV["R0"], SV["A0"], SV["q"], SV["v0"], SV["w0"], SV["qd"], SV["F0"], SV["T0"], SV["tau"], SV["Fe"], SV["Te"]
    )
    out = sd.f_dyn(model, SV)
    assert_close(np.concatenate([out["vd0"], out["wd0"], out["qdd"]]), expected, 1e-9, "f_dyn")  # solve: cond(H)
    # gravity= overrides the model's gravity.
    g = np.array([0.0, 0.0, -9.81])
    oracle_g = SpaceDynOracle(lp, gravity=g)
    expected = oracle_g.forward_dynamics(
        SV["R0"], SV["A0"], SV["q"], SV["v0"], SV["w0"], SV["qd"], SV["F0"], SV["T0"], SV["tau"], SV["Fe"], SV["Te"]
    )
    out = sd.f_dyn(model, SV, gravity=g)
    assert_close(np.concatenate([out["vd0"], out["wd0"], out["qdd"]]), expected, 1e-9, "f_dyn with gravity=")


def test_f_dyn_rk2_matches_design_scheme(system):
    model, lp, oracle = system
    SV = random_sv(model, 3)
    out = SV
    state = [SV["R0"], SV["A0"], SV["v0"], SV["w0"], SV["q"], SV["qd"]]
    for _ in range(5):
        out = sd.f_dyn_rk2(model, out, d_time=0.01)
        state = list(oracle.rk4_step(*state, SV["F0"], SV["T0"], SV["tau"], 0.01, SV["Fe"], SV["Te"]))
    for name, expected in zip(("R0", "A0", "v0", "w0", "q", "qd"), state):
        # Five steps: round-off of each stage's solve (cond(H)) accumulates to ~1e-12.
        assert_close(out[name], expected, 1e-10, name)
    # Untouched fields stay as given (SpaceDyn leaves AA, RR, vd0, ... stale).
    np.testing.assert_array_equal(out["vd0"], SV["vd0"])


def test_sample_v1r2_run_and_core_rollout():
    """sample_v1r2.m: PD to q_des, 2 s of f_dyn_rk2; the core rollout (RK4 without stage
    normalisation) agrees to integration-error level."""
    model = spacedyn_sample()
    q_des = np.array([0.3, 0.2, 0.1, 0.6, 0.5, 0.4])
    SV = sd.init_SV(model)
    for _ in range(200):
        SV["tau"] = 10 * (q_des - SV["q"]) - 10 * SV["qd"]
        SV = sd.f_dyn_rk2(model, SV, d_time=0.01)
    traj = sdjax.rollout(model, sdjax.make_state(model), 0.01, 200, lambda t, s: 10 * (q_des - s.q) - 10 * s.qd)
    end = traj.states
    # The schemes differ in O(dt^5) per step through the stage quaternion normalisation.
    assert_close(SV["q"], end.q[-1], 1e-9, "q")
    assert_close(SV["A0"], sdjax.quat_to_matrix(end.base_quaternion[-1]), 1e-9, "A0")
    assert float(np.max(np.abs(SV["q"]))) > 0.1  # the arms moved


def test_helpers_conventions():
    rpy = np.array([0.3, -0.2, 1.0])
    C = sd.rpy2dc(*rpy)
    assert_close(C, sd.rpy2dc(rpy), 1e-15, "one-vector form")
    assert_close(C.T, sdjax.rpy_to_matrix(rpy), 1e-15, "A = C^T")
    assert_close(sd.dc2rpy(C), rpy, 1e-14, "dc2rpy")
    q = sd.dc2qtn(C)
    assert_close(sd.qtn2dc(q), C, 1e-14, "qtn2dc(dc2qtn)")
    # DESIGN.md's C(Qtn) formula.
    assert_close(SpaceDynOracle.quaternion_dc(np.asarray(q)), C, 1e-14, "C(Qtn)")
    w = np.array([0.1, 0.2, -0.3])
    assert_close(sd.w2dQtn(w, q), SpaceDynOracle.quaternion_rate(w, np.asarray(q)), 1e-15, "dQtn")


def test_compat_errors():
    model = spacedyn_sample()
    SV = sd.init_SV(model)
    with pytest.raises(ValueError, match=r"j_num: end point number: index \d+ out of range; expected 1\.\.2"):
        sd.j_num(model, 3)
    with pytest.raises(ValueError, match="carries no end point"):
        sd.calc_je(model, SV, [1, 2])
    bad = dict(SV, Fe=np.ones((3, 6)))
    with pytest.raises(ValueError, match=r"SV.Fe\(:, 1\): link 1 has no end point"):
        sd.f_dyn(model, bad)
    with pytest.raises(ValueError, match=r"SV.q: expected shape \(6,\)"):
        sd.calc_aa(model, dict(SV, q=np.zeros(4)))
    with pytest.raises(ValueError, match="SV.tau: missing"):
        sd.f_dyn(model, {k: v for k, v in SV.items() if k != "tau"})
    with pytest.raises(TypeError, match="expected an sdjax Model or a SpaceDyn LP"):
        sd.calc_hh("robot.m", SV)
    with pytest.raises(ValueError, match="gravity: expected 3 components"):
        sd.f_dyn(model, SV, gravity=[0, -9.8])
    # MATLAB column vectors are accepted.
    out = sd.calc_aa(model, dict(SV, q=np.zeros((6, 1))))
    assert out["AA"].shape == (3, 18)


def test_model_from_lp_with_shared_file():
    path = pathlib.Path(__file__).resolve().parent / "data" / "spacedyn_sample_v1r2.json"  # copy of shared/models
    data = json.loads(path.read_text())
    data.pop("description")
    model = sd.model_from_lp(data)
    assert model.num_joints == 6 and model.end_point_link == (3, 6)
    assert jnp.allclose(
        sd.calc_hh(model, sd.init_SV(model)), sd.calc_hh(spacedyn_sample(), sd.init_SV(model)), rtol=0, atol=0
    )


def test_fixed_base_functions(system):
    """``f_dyn_fix``/``i_dyn_fix`` against the NumPy oracle's equations restricted to the
    joints (base twist and acceleration zero: ``H_m qdd = tau + J_m^T F_h - c_m``), and the
    mount wrench of ``i_dyn_fix`` against the floating-base dynamics (applied to the free base
    it holds the base still)."""
    model, lp, oracle = system
    SV = random_sv(model, 5)
    zero = np.zeros(3)
    still = dict(SV, v0=zero, w0=zero)
    n = model.num_joints
    AA = oracle.rotations(SV["A0"], SV["q"])
    RR, PP = oracle.positions(SV["R0"], SV["A0"], AA, SV["q"])
    h = oracle.inertia_matrix(SV["R0"], SV["A0"], AA, RR, PP)
    # The oracle's floating forward dynamics with the base force of a still base removed: the
    # joint rows of H a + c = f with a_base = 0, solved on the joint block.
    bias = oracle.newton_euler(
        SV["R0"], SV["A0"], AA, RR, SV["q"], zero, zero, zero, zero, SV["qd"], np.zeros(n), -SV["Fe"], -SV["Te"]
    )
    expected = np.linalg.solve(h[6:, 6:], SV["tau"] - bias[6:])
    out = sd.f_dyn_fix(model, SV)
    assert_close(out["qdd"], expected, 1e-9, "f_dyn_fix")  # a solve: cond(H_m) * eps
    assert np.all(np.asarray(out["vd0"]) == 0) and np.all(np.asarray(out["wd0"]) == 0)
    # i_dyn_fix: the oracle's Newton-Euler with a still base (r_ne's sign of Fe/Te).
    expected = oracle.newton_euler(
        SV["R0"], SV["A0"], AA, RR, SV["q"], zero, zero, zero, zero, SV["qd"], SV["qdd"], SV["Fe"], SV["Te"]
    )
    force = np.asarray(sd.i_dyn_fix(model, SV))
    assert_close(force, expected, RTOL, "i_dyn_fix")
    # The mount wrench holds a free base still: f_dyn of the floating model with F0/T0 = that
    # wrench, tau = the joint forces and the end-point loads reversed (f_dyn's sign) gives zero
    # base acceleration and SV.qdd back (a different solve: the full H; cond(H) * eps).
    back = sd.f_dyn(model, dict(still, F0=force[:3], T0=force[3:6], tau=force[6:], Fe=-SV["Fe"], Te=-SV["Te"]))
    assert_close(np.concatenate([back["vd0"], back["wd0"]]), np.zeros(6), 1e-9, "base held still")  # scale 1: |qdd| ~ 1
    assert_close(back["qdd"], SV["qdd"], 1e-9, "qdd round trip")
    # The other compat functions keep SpaceDyn's floating layouts and refuse other bases.
    with pytest.raises(ValueError, match="has a fixed base; the SpaceDyn-compatible functions.*f_dyn_fix"):
        sd.calc_hh(sdjax.edit_model(model, base="fixed"), SV)


def test_euler_and_tr2diff_conventions():
    angles = np.array([0.3, 1.1, -0.8])
    C = sd.eul2dc(*angles)
    assert_close(C, sd.eul2dc(angles), 1e-15, "one-vector form")
    # C = (Rz(phi) Rx(theta) Rz(psi))^T, from the elementary rotations.
    expected = sdjax.rotation.rot_z(angles[0]) @ sdjax.rotation.rot_x(angles[1]) @ sdjax.rotation.rot_z(angles[2])
    assert_close(C.T, expected, 1e-15, "A = C^T")
    assert_close(sd.dc2eul(C), angles, 1e-14, "dc2eul")
    # tr2diff: translation difference and the small-rotation vector between two poses.
    A1 = sd.rpy2dc(0.1, 0.2, 0.3).T
    dphi = np.array([1e-4, -2e-4, 3e-4])
    A2 = sdjax.rotation.rotation_vector_to_matrix(dphi) @ A1
    # sin(t) u differs from t u by t^3 / 6 ~ 1e-11 here.
    assert_close(sd.tr2diff(A1, A2), dphi, 1e-7, "rotation part")
    T1, T2 = np.eye(4), np.eye(4)
    T1[:3, :3], T1[:3, 3] = A1, [1.0, 2.0, 3.0]
    T2[:3, :3], T2[:3, 3] = A2, [1.5, 2.0, 2.0]
    d = sd.tr2diff(T1, T2)
    assert_close(d[:3], np.array([0.5, 0.0, -1.0]), 1e-15, "translation part")
    assert_close(d[3:], sd.tr2diff(A1, A2), 1e-15, "rotation part of the 4 x 4 form")
    with pytest.raises(ValueError, match="tr2diff"):
        sd.tr2diff(np.eye(3), np.eye(4))
