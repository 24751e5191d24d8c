"""Batch Monte-Carlo (sdjax.montecarlo): sampling, perturbed models, batched == looped,
independence from chunking / devices / processes, reproducibility, files, errors.

The sharded and multi-process checks run in subprocesses, because the number of CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count``) and ``jax.distributed`` must be set
before JAX starts; the subprocesses set their own config (x64, strict promotion).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
import sdjax.montecarlo as mc
from sdjax.model import validate

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

#: Samples of the small study (odd, so chunks of 2 and device counts of 4 need padding).
B = 7
NUM_STEPS = 12


def make_case(num_steps: int = NUM_STEPS, controller: str = "pd"):
    """A small study on the SpaceDyn sample: mass/inertia scale, inertia axes, a payload on
    the first arm's slider, initial joint angles, gains and disturbances all random."""
    from sdjax.models import spacedyn_sample

    model = spacedyn_sample()
    n = model.num_joints
    goal = np.array([0.3, 0.2, 0.1, 0.6, 0.5, 0.4])
    uncertainty = mc.Uncertainty(
        model={
            "mass": mc.Scale("link_mass", mc.LogNormal(1.0, 0.1, shape=(n,))),
            "inertia": mc.Scale("link_inertia", mc.Uniform(0.8, 1.2, shape=(n,))),
            "axes": mc.InertiaRotation("link_inertia", mc.Normal(0.0, 0.05, shape=(n, 3))),
            "geometry": mc.Offset("parent_centroid_to_joint", mc.Normal(0.0, 0.01, shape=(n, 3))),
            "payload": mc.Payload(
                3,
                mass=mc.Uniform(0.0, 20.0),
                offset=mc.Normal(0.0, 0.1, shape=(3,)),
                radius_of_gyration=mc.Uniform(0.0, 0.2),
            ),
        },
        parameters={
            "q0": mc.Normal(0.0, 0.05, shape=(n,)),
            "kp": mc.Uniform(8.0, 12.0),
            "kd": mc.LogNormal(10.0, 0.1, shape=(n,)),
            "base_torque": mc.Normal(0.0, 0.5, shape=(3,)),
            "tau_noise": mc.Normal(0.0, 0.2, shape=(num_steps, n)),
        },
    )
    scenario = mc.ControlScenario(
        model, q_goal=goal, kp=10.0, kd=10.0, dt=0.01, num_steps=num_steps, controller=controller
    )
    metrics = {
        "attitude_error": mc.final_attitude_error,
        "peak_torque": mc.peak_joint_torque,
        "joint_error": mc.final_joint_error(goal),
        "base_drift": mc.final_base_drift,
    }
    return model, uncertainty, scenario, metrics


@pytest.fixture(scope="module")
def case():
    return make_case()


@pytest.fixture(scope="module")
def reference_run(case):
    model, uncertainty, scenario, metrics = case
    return mc.run_monte_carlo(
        model, uncertainty, scenario, metrics, num_samples=B, seed=3, chunk_size=B, progress=False
    )


# ------------------------------------------------------------------------------------------
# Distributions and perturbed models.


def test_distributions_shapes_support_and_moments():
    key = jax.random.key(0)
    n = 20000
    draws = {
        "normal": mc.Normal(1.0, 2.0, shape=(n,)),
        "uniform": mc.Uniform(-1.0, 3.0, shape=(n,)),
        "lognormal": mc.LogNormal(2.0, 0.1, shape=(n,)),
        "truncated": mc.TruncatedNormal(0.0, 1.0, -0.5, 2.0, shape=(n,)),
        "fixed": mc.Fixed([1.0, 2.0]),
    }
    x = {k: np.asarray(d.sample(key, jnp.float64)) for k, d in draws.items()}
    # 20000 draws: standard errors of the mean ~ 1.4e-2 (normal), 8e-3 (uniform); 5 sigma margins.
    assert abs(x["normal"].mean() - 1.0) < 0.07 and abs(x["normal"].std() - 2.0) < 0.07
    assert x["uniform"].min() >= -1.0 and x["uniform"].max() < 3.0 and abs(x["uniform"].mean() - 1.0) < 0.05
    assert x["lognormal"].min() > 0 and abs(np.median(x["lognormal"]) - 2.0) < 0.02
    assert x["truncated"].min() >= -0.5 and x["truncated"].max() <= 2.0
    np.testing.assert_array_equal(x["fixed"], [1.0, 2.0])
    assert mc.Normal([0.0, 1.0], 1.0).shape == (2,)
    assert mc.Uniform(0.0, 1.0, shape=(2, 3)).shape == (2, 3)
    assert mc.LogNormal(1.0, 0.1).support() == (0.0, float("inf"))
    assert x["normal"].dtype == np.float64
    assert mc.Normal(0.0, 1.0, shape=(3,)).sample(key, jnp.float32).dtype == jnp.float32


def test_sampled_models_are_valid_and_draws_recorded(case):
    model, uncertainty, _, _ = case
    key = jax.random.key(11)
    for i in range(4):
        model_i, params_i, draws_i = uncertainty.sample(model, key, i)
        validate(model_i)  # positive masses, symmetric positive-definite inertias, triangle inequality
        assert set(params_i) == {"q0", "kp", "kd", "base_torque", "tau_noise"}
        assert "model/payload/mass" in draws_i and "param/kp" in draws_i
        assert draws_i["model/mass/factor"].shape == (6,) and draws_i["param/tau_noise"].shape == (NUM_STEPS, 6)
    # Independent items: adding a parameter leaves the others' draws unchanged (keys by name).
    more = mc.Uncertainty(
        model=dict(zip(uncertainty.model_names, uncertainty.perturbations)),
        parameters={**uncertainty.parameters, "extra": mc.Normal()},
    )
    _, p1, _ = uncertainty.sample(model, key, 2)
    _, p2, _ = more.sample(model, key, 2)
    np.testing.assert_array_equal(p1["kd"], p2["kd"])


def test_payload_parallel_axis_rule(sample_model):
    """A payload (mass mp at r from the link centroid, gyration radius k) adds exactly
    ``mp J_r^T J_r + mp k^2 J_w^T J_w`` to the system inertia matrix and moves no joint or end
    point (J_r: linear Jacobian of the payload point, J_w: angular Jacobian of the link)."""
    from helpers import assert_close, random_state

    model = sample_model
    mp, r, k = 7.0, np.array([0.1, -0.2, 0.3]), 0.15
    link = 3  # carries an end point; link 2 is its parent
    payload = mc.Payload(link, mass=mp, offset=r, radius_of_gyration=k)
    payload.check(model)
    loaded = payload.apply(model, payload.draw(jax.random.key(0), model, model.dtype))
    validate(loaded)
    state = random_state(model, 5)
    jac = sdjax.point_jacobian(model, state, link, r)
    expected = sdjax.inertia_matrix(model, state) + mp * jac[:3].T @ jac[:3] + mp * k**2 * jac[3:].T @ jac[3:]
    assert_close(sdjax.inertia_matrix(loaded, state), expected, 1e-12, "H with payload")  # round-off of O(100) entries
    k0, k1 = sdjax.forward_kinematics(model, state), sdjax.forward_kinematics(loaded, state)
    assert_close(k1.end_point_position, k0.end_point_position, 1e-13, "end points unchanged")
    assert_close(k1.joint_position, k0.joint_position, 1e-13, "joints unchanged")
    # Payload on a link with a child (link 2, parent of link 3): children keep their joints.
    mid = mc.Payload(2, mass=mp, offset=r)
    loaded2 = mid.apply(model, mid.draw(jax.random.key(0), model, model.dtype))
    assert_close(sdjax.forward_kinematics(loaded2, state).joint_position, k0.joint_position, 1e-13, "joints (mid link)")


def test_inertia_rotation_keeps_principal_moments(sample_model):
    rot = mc.InertiaRotation("link_inertia", mc.Normal(0.0, 0.5, shape=(6, 3)))
    rotated = rot.apply(sample_model, rot.draw(jax.random.key(1), sample_model, sample_model.dtype))
    validate(rotated)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(np.asarray(rotated.link_inertia)),
        np.linalg.eigvalsh(np.asarray(sample_model.link_inertia)),
        atol=1e-13,
    )
    assert not np.allclose(rotated.link_inertia, sample_model.link_inertia)


# ------------------------------------------------------------------------------------------
# The engine.


def test_batched_equals_looped(case, reference_run):
    model, uncertainty, scenario, metrics = case
    res = reference_run
    assert res.num_samples == B and all(v.shape == (B,) for v in res.metrics.values())
    key = jax.random.key(3)
    for i in range(B):
        model_i, params_i, draws_i = uncertainty.sample(model, key, i)
        traj = scenario(model_i, params_i)
        for name, fn in metrics.items():
            # vmapped vs unbatched kernels differ by float64 round-off only.
            np.testing.assert_allclose(
                res.metrics[name][i], float(fn(traj, model_i, params_i)), rtol=1e-10, atol=1e-13, err_msg=name
            )
        for name, value in draws_i.items():
            np.testing.assert_allclose(res.draws[name][i], value, rtol=1e-14, atol=0, err_msg=name)
    assert np.all(res.metrics["peak_torque"] > 0) and np.all(np.isfinite(res.metrics["attitude_error"]))
    assert np.ptp(res.metrics["attitude_error"]) > 0  # the samples differ


def test_chunking_and_seed_reproducibility(case, reference_run):
    """Sample i depends only on (seed, i): chunks of 3 (padded) reproduce the first B samples of
    a single-chunk run; another seed gives other samples."""
    model, uncertainty, scenario, metrics = case
    longer = mc.run_monte_carlo(
        model,
        uncertainty,
        scenario,
        metrics,
        num_samples=B + 2,
        seed=3,
        chunk_size=3,
        progress=False,
        keep_draws=["param/kp"],
    )
    assert longer.info["num_chunks"] == 3 and longer.info["chunk_size"] == 3
    for name in metrics:
        # Different chunk size = different vmap width: round-off only.
        np.testing.assert_allclose(
            longer.metrics[name][:B], reference_run.metrics[name], rtol=1e-10, atol=1e-14, err_msg=name
        )
    assert list(longer.draws) == ["param/kp"]
    np.testing.assert_array_equal(longer.draws["param/kp"][:B], reference_run.draws["param/kp"])
    _, _, draws_other = uncertainty.sample(model, jax.random.key(4), 0)
    assert not np.allclose(draws_other["param/q0"], reference_run.draws["param/q0"][0])


def test_computed_torque_scenario_with_torque_limit():
    """The computed-torque variant (nominal model as the controller's estimate) with an
    actuator limit: batched == direct, and the applied torque respects limit + disturbances."""
    model, uncertainty, _, metrics = make_case(num_steps=4)
    scenario = mc.ControlScenario(
        model,
        q_goal=np.full(6, 0.2),
        kp=4.0,
        kd=4.0,
        dt=0.01,
        num_steps=4,
        controller="computed_torque",
        torque_limit=3.0,
    )
    no_noise = mc.Uncertainty(
        model=dict(zip(uncertainty.model_names, uncertainty.perturbations)), parameters={"kp": mc.Uniform(3.0, 5.0)}
    )
    res = mc.run_monte_carlo(model, no_noise, scenario, metrics, num_samples=2, seed=0, progress=False)
    model_1, params_1, _ = no_noise.sample(model, jax.random.key(0), 1)
    traj = scenario(model_1, params_1)
    np.testing.assert_allclose(res.metrics["peak_torque"][1], float(mc.peak_joint_torque(traj)), rtol=1e-10)
    assert np.all(res.metrics["peak_torque"] <= 3.0 + 1e-12)  # saturated at the limit


def test_scenario_with_a_brake_engaging_mid_manoeuvre():
    """A joint brake (:class:`sdjax.constraints.JointLock`) that engages at step 6 of a sampled
    PD manoeuvre of the free-floating SpaceDyn sample: in every sample the braked joint stops
    at that step and stays still, the system momentum (no external load; the brake is internal)
    is unchanged across the impulse, and the batched study equals the direct constrained rollout."""
    from sdjax import constraints as C

    model, uncertainty, _, _ = make_case(num_steps=10)
    schedule = np.zeros((10, 1), bool)
    schedule[6:] = True
    scenario = mc.ControlScenario(
        model, q_goal=np.full(6, 0.3), kp=2.0, kd=1.0, dt=0.01, num_steps=10,
        constraints=[C.JointLock(2)], active=schedule,
    )  # fmt: skip
    metrics = {
        "braked_rate_after": lambda traj, m, p: jnp.max(jnp.abs(traj.states.qd[7:, 1])),
        "momentum_change": lambda traj, m, p: jnp.max(
            jnp.abs(jax.vmap(lambda s: sdjax.system_momentum(m, s))(traj.states) - sdjax.system_momentum(
                m, jax.tree.map(lambda x: x[0], traj.states)))
        ),
        "final_q1": lambda traj, m, p: traj.states.q[-1, 1],
    }  # fmt: skip
    no_disturbance = mc.Uncertainty(
        model=dict(zip(uncertainty.model_names, uncertainty.perturbations)), parameters={"kp": mc.Uniform(1.0, 3.0)}
    )
    res = mc.run_monte_carlo(model, no_disturbance, scenario, metrics, num_samples=3, seed=2, progress=False)
    # Projection keeps the brake's rate at round-off; momentum: RK4 on the constrained dynamics
    # conserves it to round-off per step (the lock's impulse and force are internal).
    assert np.all(res.metrics["braked_rate_after"] < 1e-12)
    assert np.all(res.metrics["momentum_change"] < 1e-10)
    model_2, params_2, _ = no_disturbance.sample(model, jax.random.key(2), 2)
    traj = scenario(model_2, params_2)
    assert isinstance(traj, C.ConstrainedTrajectory)
    np.testing.assert_allclose(res.metrics["final_q1"][2], float(traj.states.q[-1, 1]), rtol=1e-12)
    with pytest.raises(ValueError, match=r"ControlScenario: active must have shape \(1,\) or \(num_steps, 1\)"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3,
                           constraints=[C.JointLock(2)], active=np.ones((4, 1), bool))  # fmt: skip
    with pytest.raises(ValueError, match="ControlScenario: active schedules constraints; none were given"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3, active=[True])


def test_summary_save_load_plot(reference_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    res = reference_run
    summary = res.summary()
    values = res.metrics["peak_torque"]
    row = summary["peak_torque"]
    assert row["mean"] == pytest.approx(values.mean()) and row["max"] == values.max() and row["min"] == values.min()
    assert row["p50"] == pytest.approx(np.median(values)) and row["p5"] <= row["p50"] <= row["p95"]
    assert row["nonfinite"] == 0
    assert "peak_torque" in res.summary_table()
    path = tmp_path / "mc.npz"
    res.save(path)
    back = mc.MonteCarloResults.load(path)
    assert back.seed == res.seed and back.num_samples == res.num_samples and back.info == res.info
    for name in res.metrics:
        np.testing.assert_array_equal(back.metrics[name], res.metrics[name])
    for name in res.draws:
        np.testing.assert_array_equal(back.draws[name], res.draws[name])
    with np.load(path, allow_pickle=False) as raw:  # the documented layout
        assert "metric/peak_torque" in raw.files and "draw/param/kp" in raw.files and "meta" in raw.files
    fig = res.plot()
    assert len([ax for ax in fig.axes if ax.get_visible()]) == len(res.metrics)
    import matplotlib.pyplot as plt

    plt.close(fig)
    with pytest.raises(ValueError, match="unknown metric"):
        res.plot(["nope"])
    with pytest.raises(ValueError, match="percentiles"):
        res.summary((5, 150))
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="no 'meta' entry; not a sdjax Monte-Carlo results file"):
        mc.MonteCarloResults.load(tmp_path / "other.npz")
    # Every door names the file and the problem (no raw FileNotFoundError, BadZipFile,
    # KeyError or JSONDecodeError; no wrong shapes accepted).
    with pytest.raises(ValueError, match="missing.npz: no such file"):
        mc.MonteCarloResults.load(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="text.npz: not a sdjax Monte-Carlo results file"):
        mc.MonteCarloResults.load(tmp_path / "text.npz")
    with np.load(path, allow_pickle=False) as raw:
        entries = dict(raw)
    meta = json.loads(str(entries["meta"]))
    broken = tmp_path / "broken.npz"
    for change, message in (
        ({"meta": np.array("{oops")}, "entry 'meta' is not valid JSON"),
        ({"meta": np.array(json.dumps({**meta, "num_samples": "many"}))}, "'meta' num_samples must be a int"),
        ({"meta": np.array(json.dumps({**meta, "metric_names": ["nope"]}))}, "no entry 'metric/nope'"),
        ({"metric/peak_torque": entries["metric/peak_torque"][:-1]}, "'metric/peak_torque' has shape"),
        ({"metric/peak_torque": np.empty(res.num_samples, dtype=object)}, "dtype object, expected numbers"),
    ):
        np.savez(broken, **{**entries, **change})
        with pytest.raises(ValueError, match=re.escape(message)):
            mc.MonteCarloResults.load(broken)


def test_parquet_table_read_by_pandas(reference_run, tmp_path):
    """``to_parquet``: one row per sample, metrics bit for bit (float64), every draw entry a
    named column, the statistics recomputed by pandas equal ``summary()``, the run's metadata
    in the schema; ``from_parquet`` gives back what ``save`` stores; ``to_pandas`` is the same table."""
    pq = pytest.importorskip("pyarrow.parquet")
    pd = pytest.importorskip("pandas")
    res = reference_run
    path = tmp_path / "mc.parquet"
    res.to_parquet(path)
    frame = pd.read_parquet(path)
    assert len(frame) == res.num_samples == B and frame["sample"].tolist() == list(range(B))
    for name, values in res.metrics.items():
        assert frame[name].dtype == np.float64
        np.testing.assert_array_equal(frame[name].to_numpy().view(np.int64), values.view(np.int64))
    n = res.draws["param/kd"].shape[1]
    assert [f"param/kd[{j}]" for j in range(n)] == [c for c in frame.columns if c.startswith("param/kd[")]
    np.testing.assert_array_equal(frame["param/kd[3]"], res.draws["param/kd"][:, 3])
    np.testing.assert_array_equal(frame["param/tau_noise[11,5]"], res.draws["param/tau_noise"][:, 11, 5])
    np.testing.assert_array_equal(frame["param/kp"], res.draws["param/kp"])  # a scalar draw keeps its name
    width = 1 + len(res.metrics) + sum(int(np.prod(v.shape[1:])) for v in res.draws.values())
    assert frame.shape == (B, width)
    # The statistics from the table equal the results' own (pandas' linear quantiles are numpy's).
    summary = res.summary()
    for name in res.metrics:
        column, row = frame[name], summary[name]
        assert column.mean() == pytest.approx(row["mean"], rel=1e-15, abs=0)
        assert column.std(ddof=0) == pytest.approx(row["std"], rel=1e-15, abs=0)
        assert column.quantile([0.05, 0.5, 0.95]).tolist() == [row["p5"], row["p50"], row["p95"]]
        assert (column.min(), column.max()) == (row["min"], row["max"])
    meta = json.loads(pq.read_schema(path).metadata[b"sdjax.montecarlo"])
    assert meta["format"] == "sdjax.montecarlo.parquet/1" and meta["sdjax_version"] == sdjax.__version__
    assert (meta["seed"], meta["num_samples"], meta["model"]) == (3, B, res.info["model"])
    assert meta["info"] == json.loads(json.dumps(res.info))
    back = mc.MonteCarloResults.from_parquet(path)
    assert (back.seed, back.num_samples, back.info) == (res.seed, res.num_samples, res.info)
    assert list(back.metrics) == list(res.metrics) and list(back.draws) == list(res.draws)
    for name in res.metrics:
        np.testing.assert_array_equal(back.metrics[name], res.metrics[name], strict=True)
    for name in res.draws:
        np.testing.assert_array_equal(back.draws[name], res.draws[name], strict=True)
    table = res.to_pandas()
    pd.testing.assert_frame_equal(table, frame)
    assert table.attrs["seed"] == 3 and table.attrs["metric_names"] == list(res.metrics)
    # Other dtypes, shapes and NaN (a diverged sample) round-trip too.
    odd = mc.MonteCarloResults(
        {"error": np.array([0.5, np.nan, -0.0])},
        {"param/n": np.arange(18, dtype=np.float32).reshape(3, 2, 3), "param/i": np.array([1, 2, 3]),
         "param/empty": np.zeros((3, 0))},
        seed=1, num_samples=3, info={"model": "toy"},
    )  # fmt: skip
    odd.to_parquet(tmp_path / "odd.parquet")
    again = mc.MonteCarloResults.from_parquet(tmp_path / "odd.parquet")
    assert again.metrics["error"].tobytes() == odd.metrics["error"].tobytes()
    for name, values in odd.draws.items():
        np.testing.assert_array_equal(again.draws[name], values, strict=True)


def test_parquet_refusals(reference_run, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    res = reference_run
    path = tmp_path / "mc.parquet"
    res.to_parquet(path)
    with pytest.raises(ValueError, match="mc.parquet: exists; pass overwrite=True"):
        res.to_parquet(path)
    res.to_parquet(path, overwrite=True)
    clash = mc.MonteCarloResults({"sample": np.zeros(2)}, {}, 0, 2)
    with pytest.raises(ValueError, match="two columns would be named 'sample'"):
        clash.to_parquet(tmp_path / "clash.parquet")
    assert not (tmp_path / "clash.parquet").exists()
    # two draws whose entries would share a column name ("a" of shape (1,) and a scalar "a[0]")
    twins = mc.MonteCarloResults({"m": np.zeros(2)}, {"a": np.zeros((2, 1)), "a[0]": np.ones(2)}, 0, 2)
    with pytest.raises(ValueError, match=r"two columns would be named 'a\[0\]'"):
        twins.to_parquet(tmp_path / "twins.parquet")
    with pytest.raises(ValueError, match="missing.parquet: no such file"):
        mc.MonteCarloResults.from_parquet(tmp_path / "missing.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"text.parquet: not a sdjax Monte-Carlo Parquet table \(Parquet\)"):
        mc.MonteCarloResults.from_parquet(tmp_path / "text.parquet")
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"sdjax.montecarlo"])
    broken = tmp_path / "broken.parquet"
    for change, message in (
        (lambda t: t.replace_schema_metadata({}), "broken.parquet: no 'sdjax.montecarlo' schema metadata"),
        (lambda t: t.replace_schema_metadata({"sdjax.montecarlo": "{oops"}), "is not valid JSON"),
        (lambda t: t.replace_schema_metadata({"sdjax.montecarlo": json.dumps({**meta, "format": "x/1"})}),
         "format 'x/1', expected 'sdjax.montecarlo.parquet/1'"),
        (lambda t: t.replace_schema_metadata({"sdjax.montecarlo": json.dumps({**meta, "seed": "s"})}),
         "metadata seed must be a int"),
        (lambda t: t.slice(0, B - 1), f"{B - 1} rows, metadata num_samples {B}"),
        (lambda t: t.drop_columns(["peak_torque"]), "broken.parquet: no column 'peak_torque'"),
        (lambda t: t.drop_columns(["param/kd[2]"]), "no column 'param/kd[2]'"),
        (lambda t: t.set_column(t.column_names.index("peak_torque"), "peak_torque", pa.array(np.zeros(B, np.float32))),
         "column 'peak_torque' has dtype float32, expected float64"),
        (lambda t: t.set_column(0, "sample", pa.array(np.arange(B)[::-1].copy())), "column 'sample' is not 0, 1"),
    ):  # fmt: skip
        pq.write_table(change(table), broken)
        with pytest.raises(ValueError, match=re.escape(message)):
            mc.MonteCarloResults.from_parquet(broken)
    # Without the optional dependencies: an ImportError naming the extra.
    for module in ("pyarrow", "pyarrow.parquet", "pandas"):
        monkeypatch.setitem(sys.modules, module, None)
    for call in (lambda: res.to_parquet(tmp_path / "new.parquet"), lambda: mc.MonteCarloResults.from_parquet(path),
                 res.to_pandas):  # fmt: skip
        with pytest.raises(ImportError, match=re.escape('pip install "sdjax[data]"')):
            call()


# ------------------------------------------------------------------------------------------
# Errors.


def test_bad_configuration_errors(case):
    model, uncertainty, scenario, metrics = case
    run = lambda **kw: mc.run_monte_carlo(  # noqa: E731
        kw.pop("model", model),
        kw.pop("uncertainty", uncertainty),
        kw.pop("simulate", scenario),
        kw.pop("metrics", metrics),
        progress=False,
        **{"num_samples": 2, **kw},
    )
    with pytest.raises(ValueError, match="num_samples: must be an integer >= 1, got 0"):
        run(num_samples=0)
    with pytest.raises(TypeError, match="num_samples: expected an integer, got float 2.5"):
        run(num_samples=2.5)
    with pytest.raises(ValueError, match="chunk_size: must be an integer >= 1"):
        run(chunk_size=0)
    with pytest.raises(ValueError, match="at least one metric"):
        run(metrics={})
    with pytest.raises(ValueError, match="devices is empty"):
        run(devices=[])
    # Mismatched shapes.
    with pytest.raises(ValueError, match="do not broadcast"):
        mc.Normal(np.zeros(3), np.ones(2))
    with pytest.raises(ValueError, match="requested shape"):
        mc.Uniform(np.zeros(3), 1.0, shape=(2,))
    bad_factor = mc.Uncertainty(model={"m": mc.Scale("link_mass", mc.LogNormal(1.0, 0.1, shape=(5,)))})
    with pytest.raises(ValueError, match=r"factor shape \(5,\) does not match Model.link_mass"):
        run(uncertainty=bad_factor)
    with pytest.raises(ValueError, match="one per body"):
        mc.Scale("link_inertia", mc.LogNormal(1.0, 0.1, shape=(6, 3, 3))).check(model)
    bad_param = mc.Uncertainty(parameters={"q0": mc.Normal(0.0, 0.1, shape=(5,))})
    with pytest.raises(ValueError, match="parameter 'q0' has shape"):
        run(uncertainty=bad_param)
    with pytest.raises(ValueError, match="must return a scalar"):
        run(metrics={"q": lambda traj, m, p: traj.states.q[-1]})
    with pytest.raises(ValueError, match="does not exist"):
        mc.Payload(7, mass=1.0).check(model)
    with pytest.raises(ValueError, match="cannot be perturbed"):
        mc.Scale("base_quaternion", 1.0)
    with pytest.raises(ValueError, match="use Scale"):
        mc.Offset("link_mass", mc.Normal(0.0, 1.0))
    with pytest.raises(TypeError, match=r"Uncertainty: model\['x'\]: expected a Perturbation"):
        mc.Uncertainty(model={"x": mc.Normal()})
    with pytest.raises(ValueError, match="Uncertainty: parameter name: must be a non-empty string without '/'"):
        mc.Uncertainty(parameters={"a/b": 1.0})
    with pytest.raises(TypeError, match="Uncertainty: parameter name: expected a string, got int"):
        mc.Uncertainty(parameters={3: 1.0})
    # Impossible limits.
    with pytest.raises(ValueError, match="low must not exceed high"):
        mc.Uniform(2.0, 1.0)
    with pytest.raises(ValueError, match="impossible limits"):
        mc.TruncatedNormal(0.0, 1.0, 1.0, -1.0)
    with pytest.raises(ValueError, match="impossible limits"):
        mc.Scale("link_mass", mc.Normal(1.0, 0.1))  # a Gaussian factor can make a mass negative
    with pytest.raises(ValueError, match="impossible limits"):
        mc.Scale("link_inertia", mc.Uniform(-0.5, 1.5))
    with pytest.raises(ValueError, match="impossible limits"):
        mc.Payload(3, mass=mc.Uniform(-1.0, 1.0))
    with pytest.raises(ValueError, match="std must be non-negative"):
        mc.Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="median must be positive"):
        mc.LogNormal(0.0, 0.1)
    with pytest.raises(ValueError, match="can make joint_damping negative"):
        mc.Offset("joint_damping", mc.Normal(0.0, 1.0)).check(model)
    with pytest.raises(ValueError, match=r"ControlScenario: torque_limit: must be positive and finite"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3, torque_limit=0.0)
    with pytest.raises(ValueError, match="ControlScenario: num_steps: must be an integer >= 1"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=0)
    with pytest.raises(ValueError, match="ControlScenario: controller: unknown controller 'lqr'"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3, controller="lqr")
    with pytest.raises(ValueError, match="ControlScenario: dt: must be positive and finite"):
        mc.ControlScenario(model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=float("nan"), num_steps=3)
    with pytest.raises(ValueError, match="q_goal: expected shape"):
        mc.ControlScenario(model, q_goal=np.zeros(5), kp=1.0, kd=1.0, dt=0.01, num_steps=3)


# ------------------------------------------------------------------------------------------
# Scale-out: several devices (jax.sharding) and several processes (jax.distributed).

WORKER = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=" + sys.argv[1]
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    num_processes, process_id, port, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    if num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"localhost:{{port}}", num_processes, process_id)
    sys.path.insert(0, {tests!r})
    import sdjax.montecarlo as mc
    from test_montecarlo import B, make_case
    model, uncertainty, scenario, metrics = make_case()
    devices = jax.devices()
    assert len(devices) == int(sys.argv[1]) * num_processes, devices
    res = mc.run_monte_carlo(model, uncertainty, scenario, metrics, num_samples=B, seed=3, chunk_size=4, progress=False)
    assert res.info["num_devices"] == len(devices) and res.info["num_processes"] == num_processes
    if num_processes == 1:  # also one device only, in the same process
        single = mc.run_monte_carlo(model, uncertainty, scenario, metrics, num_samples=B, seed=3, chunk_size=4, devices=devices[:1], progress=False)
        single.save(out + ".single.npz")
    res.save(out + f".{{process_id}}.npz")
    print("done", process_id, len(devices))
    """
).format(tests=str(HERE))


def _worker(tmp_path, devices: int, num_processes: int):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = str(tmp_path / "mc")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(devices), str(num_processes), str(i), str(port), out],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    logs = []
    for p in procs:
        try:
            log, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        logs.append(log)
        assert p.returncode == 0, f"worker failed:\n{log[-4000:]}"
    return out, logs


def _assert_same(a: mc.MonteCarloResults, b: mc.MonteCarloResults, what: str):
    assert a.num_samples == b.num_samples
    for name in a.metrics:
        # Different vmap widths per device: float64 round-off only.
        np.testing.assert_allclose(a.metrics[name], b.metrics[name], rtol=1e-10, atol=1e-14, err_msg=f"{what}: {name}")
    for name in a.draws:
        # The same random numbers per sample whatever the sharding; the draw (nominal + spread *
        # normal) may round a few ulp apart in differently compiled programs (up to 3 ulp seen with
        # the test suite's LLVM opt level 0; bitwise equal at the default level).
        np.testing.assert_allclose(a.draws[name], b.draws[name], rtol=1e-15, atol=0, err_msg=f"{what}: {name}")


def test_sharded_over_four_cpu_devices_equals_unsharded(tmp_path, reference_run):
    out, _ = _worker(tmp_path, devices=4, num_processes=1)
    sharded = mc.MonteCarloResults.load(out + ".0.npz")
    single = mc.MonteCarloResults.load(out + ".single.npz")
    assert sharded.info["num_devices"] == 4 and single.info["num_devices"] == 1
    _assert_same(sharded, single, "4 devices vs 1")
    _assert_same(sharded, reference_run, "4 devices vs this process")


def test_two_processes_with_jax_distributed_equal_one(tmp_path, reference_run):
    out, _ = _worker(tmp_path, devices=2, num_processes=2)
    first = mc.MonteCarloResults.load(out + ".0.npz")
    second = mc.MonteCarloResults.load(out + ".1.npz")
    assert first.info["num_processes"] == 2 and first.info["num_devices"] == 4
    _assert_same(first, second, "process 0 vs process 1")
    _assert_same(first, reference_run, "2 processes vs 1")


def test_confidence_intervals_and_probabilities():
    """Order-statistic intervals: the textbook ranks (median of 10 samples at 95 %: x_(2) and
    x_(9), coverage 97.9 %), and coverage at least the level over repeated studies of a known
    distribution; the Wilson interval of a probability covers the true value as often."""
    rng = np.random.default_rng(11)
    samples = rng.normal(size=10)
    res = mc.MonteCarloResults({"x": samples}, {}, 0, 10)
    ordered = np.sort(samples)
    assert res.confidence_intervals(0.95, (50,))["x"]["p50"] == (ordered[1], ordered[8])
    assert res.confidence_intervals(0.95, (5,))["x"]["p5"][0] == -np.inf  # too few samples below p5
    trials, size = 2000, 200
    covered = {"p50": 0, "p95": 0, "mean": 0}
    hits = 0
    true = {"p50": 0.0, "p95": 1.6448536269514722, "mean": 0.0}
    for k in range(trials):
        study = mc.MonteCarloResults({"x": rng.normal(size=size)}, {}, k, size)
        intervals = study.confidence_intervals(0.95, (50, 95))["x"]
        for key in covered:
            low, high = intervals[key]
            covered[key] += low <= true[key] <= high
        _, low, high = study.probability("x", above=1.2815515655446004)  # P(x > z_0.9) = 0.1
        hits += low <= 0.1 <= high
    # 2000 trials: the coverage estimate has a standard error of 0.5 %; the order-statistic
    # intervals are conservative (>= 95 % by construction), the normal and Wilson ones near 95 %
    # (measured: median 95.7 %, p95 96.4 %, mean 94.6 %, probability 95.5 %).
    assert covered["p50"] / trials >= 0.94 and covered["p95"] / trials >= 0.94
    assert 0.93 <= covered["mean"] / trials <= 0.97
    assert 0.93 <= hits / trials <= 0.97
    with pytest.raises(ValueError, match="confidence_intervals: confidence: must lie strictly between 0 and 1"):
        res.confidence_intervals(1.5)
    with pytest.raises(TypeError, match="probability: confidence: expected a number strictly between 0 and 1"):
        res.probability("x", below=0.0, confidence="95 %")
    with pytest.raises(ValueError, match="give below= and/or above="):
        res.probability("x")
    with pytest.raises(ValueError, match="unknown metric 'y'"):
        res.probability("y", below=0.0)
    # Diverged samples count as outside the requirement.
    diverged = mc.MonteCarloResults({"x": np.array([0.0, np.nan, 0.0, np.inf])}, {}, 0, 4)
    assert diverged.probability("x", below=1.0)[0] == 0.5


def test_samples_needed_against_the_binomial_distribution():
    """The smallest sample count whose binomial tail P(N <= failures) is within 1 - confidence,
    checked against SciPy's binomial CDF one sample either side; closed forms of the zero-failure
    case (the success-run theorem: 299 samples for 1 % at 95 %)."""
    binom = pytest.importorskip("scipy.stats").binom
    assert mc.samples_needed(0.01) == 299  # ceil(ln 0.05 / ln 0.99) = ceil(298.07)
    assert mc.samples_needed(0.001, confidence=0.99) == 4603  # ceil(ln 0.01 / ln 0.999) = ceil(4602.87)
    for p, confidence, failures in [(0.01, 0.95, 0), (0.01, 0.95, 1), (0.05, 0.9, 2), (0.001, 0.99, 3), (0.3, 0.5, 7)]:
        n = mc.samples_needed(p, confidence=confidence, failures=failures)
        alpha = 1 - confidence
        assert binom.cdf(failures, n, p) <= alpha < binom.cdf(failures, n - 1, p), (p, confidence, failures, n)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="samples_needed: max_probability: must lie strictly between 0 and 1"):
            mc.samples_needed(bad)
    for bad in (True, "0.1"):  # (not numbers)
        with pytest.raises(TypeError, match="samples_needed: max_probability: expected a number strictly"):
            mc.samples_needed(bad)
    with pytest.raises(ValueError, match="failures: must be an integer >= 0"):
        mc.samples_needed(0.1, failures=-1)
    with pytest.raises(ValueError, match="samples_needed: confidence: must lie strictly between 0 and 1"):
        mc.samples_needed(0.1, confidence=1.0)


def test_sensitivity_ranks_the_inputs_that_drive_a_metric():
    """Synthetic study: the metric follows draw a strongly (monotone, not linear), b weakly and c
    not at all; a Fixed draw is left out. Rank correlations equal SciPy's spearmanr; the ranking
    is a, b, c; over repeated studies the interval of the independent input covers 0 at the
    stated confidence."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)

    def study(size, seed):
        r = np.random.default_rng(seed)
        a, b, c = r.uniform(size=size), r.normal(size=(size, 2)), r.normal(size=size)
        metric = np.exp(3 * a) + 0.5 * b[:, 1] + 0.3 * r.normal(size=size)
        draws = {"model/a": a, "param/b": b, "param/c": c, "param/fixed": np.full(size, 2.0)}
        return mc.MonteCarloResults({"m": metric}, draws, seed, size), draws, metric

    res, draws, metric = study(500, 1)
    rows = res.sensitivity("m")
    assert [row.input for row in rows[:2]] == ["model/a", "param/b[1]"]
    assert {row.input for row in rows} == {"model/a", "param/b[0]", "param/b[1]", "param/c"}
    columns = {"model/a": draws["model/a"], "param/b[0]": draws["param/b"][:, 0],
               "param/b[1]": draws["param/b"][:, 1], "param/c": draws["param/c"]}  # fmt: skip
    for row in rows:
        # float64 round-off of a correlation of 500 ranks
        assert row.rank_correlation == pytest.approx(stats.spearmanr(columns[row.input], metric)[0], abs=1e-12)
        assert row.low < row.rank_correlation < row.high
    assert rows[0].low > 0.5 and rows[1].low > 0  # both dependences shown by their intervals
    # Ties get average ranks (SciPy's rankdata 'average').
    tied = rng.integers(0, 4, size=50).astype(float)
    from sdjax.montecarlo import _average_ranks

    np.testing.assert_array_equal(_average_ranks(tied), stats.rankdata(tied))
    # Coverage of the independent input's interval (400 studies of 100 samples: the estimate's
    # standard error is 1.1 %, tolerance 3 of them around 95 %; the Fieller variance is itself an
    # approximation: measured 96.0 % here, 95.8 % over 4000 other studies).
    covered = 0
    for seed in range(400):
        row = {r.input: r for r in study(100, 100 + seed)[0].sensitivity("m")}["param/c"]
        covered += row.low <= 0.0 <= row.high
    assert 0.915 <= covered / 400 <= 0.985
    with pytest.raises(ValueError, match="unknown metric 'x'"):
        res.sensitivity("x")
    few = mc.MonteCarloResults({"m": np.array([1.0, 2.0, np.nan, 3.0])}, {"param/a": np.arange(4.0)}, 0, 4)
    with pytest.raises(ValueError, match="3 finite samples; the interval needs at least 4"):
        few.sensitivity("m")
    assert mc.MonteCarloResults({"m": metric}, {}, 0, 500).sensitivity("m") == []
    constant = mc.MonteCarloResults({"m": np.ones(500)}, {"param/c": draws["param/c"]}, 0, 500)
    assert constant.sensitivity("m") == []  # a metric that does not vary follows no input


def test_manoeuvre_metrics_are_the_four_metrics():
    """The named set equals the four metrics written out (the notebook's definition), evaluated
    on one short rollout; the attitude error in degrees."""
    model = sdjax.models.free_flying_arm_7dof()
    q_goal = np.full(7, 0.2)
    traj = sdjax.rollout(model, sdjax.make_state(model), 0.01, 10, np.full((10, 7), 0.5))
    metrics = mc.manoeuvre_metrics(q_goal)
    assert list(metrics) == ["attitude_error_deg", "peak_joint_torque", "final_joint_error", "base_drift"]
    expected = {
        "attitude_error_deg": np.degrees(float(mc.final_attitude_error(traj))),
        "peak_joint_torque": float(mc.peak_joint_torque(traj)),
        "final_joint_error": float(np.max(np.abs(np.asarray(traj.states.q[-1]) - q_goal))),
        "base_drift": float(mc.final_base_drift(traj)),
    }
    for name, metric in metrics.items():
        # the same float64 operations (degrees: one multiplication by 180/pi)
        assert float(metric(traj, model, None)) == pytest.approx(expected[name], rel=1e-14, abs=1e-300)
    assert expected["attitude_error_deg"] > 0 and expected["final_joint_error"] > 0  # not vacuous


# ------------------------------------------------------------------------------------------
# Input validation: tail sampling, keep_draws, bounds, shapes, scenario states, files.


def _truncated_normal_moments(mean: float, std: float, low: float, high: float) -> tuple[float, float]:
    """Exact mean and variance of ``N(mean, std^2)`` conditioned on ``[low, high]``: with
    ``a, b`` the standardized bounds and ``Z = Phi(b) - Phi(a)``, ``E = mean + std (phi(a) -
    phi(b)) / Z`` and ``Var = std^2 (1 + (a phi(a) - b phi(b)) / Z - ((phi(a) - phi(b)) / Z)^2)``.
    An interval above the mean is mirrored below it first, where ``Phi(x) = erfc(-x / sqrt 2) / 2``
    keeps its relative precision (no ``1 - Phi`` cancellation) down to ~37 standard deviations."""
    a, b = (low - mean) / std, (high - mean) / std
    sign = 1.0
    if a > -b:
        a, b, sign = -b, -a, -1.0
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    pdf = lambda x: 0.0 if math.isinf(x) else math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # noqa: E731
    x_pdf = lambda x: 0.0 if math.isinf(x) else x * pdf(x)  # noqa: E731
    z = cdf(b) - cdf(a)
    shift = (pdf(a) - pdf(b)) / z
    return mean + sign * std * shift, std**2 * (1.0 + (x_pdf(a) - x_pdf(b)) / z - shift**2)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_truncated_normal_is_exact_in_the_tails(dtype):
    """Sample mean and variance against the closed form, for intervals around the mean and far
    in both tails (jax.random.truncated_normal, inverting erf, gave the upper bound for every
    draw from 9 standard deviations out in float64, 5 in float32: a mean of 2.0 for
    (1, 0.01, [1.1, 2]), whose exact mean is 1.101).

    Tolerances from the sample size N = 40000: the sample mean's standard error is
    ``sd / sqrt(N)`` = 0.5 % of the spread; the sample variance's is ``Var sqrt((kappa - 1) / N)``
    with the kurtosis ``kappa <= 9`` of any log-concave law (a truncated normal is one; 9 is the
    exponential's, the far-tail limit), at most 1.4 % of the variance. Both are asserted to 5
    standard errors (a fixed key: deterministic; another key fails with probability < 1e-6)."""

    n = 40000
    cases = [
        (0.0, 1.0, -0.5, 2.0),  # around the mean
        (0.0, 1.0, -1.0, math.inf),  # one-sided
        (1.0, 0.01, 1.1, 2.0),  # 10 standard deviations above
        (0.0, 1.0, 9.0, 10.0),
        (1.0, 0.1, 1.7, 2.0),  # 7 standard deviations above: float32's erf gave up at ~5
        (0.0, 1.0, -10.0, -9.0),  # the lower tail
        (0.0, 1.0, 30.0, 31.0),
        (2.0, 3.0, -math.inf, -70.0),  # 24 standard deviations below, unbounded
    ]
    for k, (mean, std, low, high) in enumerate(cases):
        exact_mean, exact_var = _truncated_normal_moments(mean, std, low, high)
        dist = mc.TruncatedNormal(mean, std, low, high, shape=(n,))
        x = dist.sample(jax.random.key(k), dtype)
        assert x.dtype == dtype
        x = np.asarray(x, np.float64)
        assert np.all((low <= x) & (x <= high)), (mean, std, low, high)
        sd = math.sqrt(exact_var)
        assert abs(x.mean() - exact_mean) <= 5 * sd / math.sqrt(n), (mean, std, low, high, x.mean(), exact_mean)
        assert abs(x.var() - exact_var) <= 5 * exact_var * math.sqrt(8 / n), (mean, std, low, high, x.var(), exact_var)
    # The closed form against scipy.stats.truncnorm (1.10098, 9.10846, 1.71375: the erf sampler
    # gave 2.0, 10.0 and, in float32, 2.0).
    assert _truncated_normal_moments(1.0, 0.01, 1.1, 2.0)[0] == pytest.approx(1.1009809323396256, rel=1e-13)
    assert _truncated_normal_moments(0.0, 1.0, 9.0, 10.0)[0] == pytest.approx(9.108456288012421, rel=1e-13)
    assert _truncated_normal_moments(1.0, 0.1, 1.7, 2.0)[0] == pytest.approx(1.7137545613208873, rel=1e-13)


def test_truncated_normal_extremes_stay_in_the_interval():
    """Bounds beyond what log Phi can hold, a spread that rounds to 0 in float32, batched
    bounds under jit: every draw inside its interval, none NaN."""
    for dtype in (jnp.float64, jnp.float32):
        far = np.asarray(mc.TruncatedNormal(0.0, 1.0, 1e30, np.inf, shape=(100,)).sample(jax.random.key(0), dtype))
        assert np.all(far >= np.float32(1e30) if dtype == jnp.float32 else far >= 1e30) and np.all(np.isfinite(far))
        narrow = mc.TruncatedNormal(0.0, 1e-50, 1.0, 2.0, shape=(100,)).sample(jax.random.key(1), dtype)
        np.testing.assert_array_equal(narrow, np.ones(100))  # the point of [1, 2] nearest the mean
        both = mc.TruncatedNormal([0.0, 0.0], 1.0, [5.0, -np.inf], [6.0, np.inf], shape=(1000, 2))
        x = np.asarray(jax.jit(lambda key, d=both, t=dtype: d.sample(key, t))(jax.random.key(2)))
        assert np.all((5 <= x[:, 0]) & (x[:, 0] <= 6)) and np.all(np.isfinite(x[:, 1]))
    for dtype in (jnp.float16, jnp.bfloat16):  # (sampled in float32: log_ndtr takes 32 and 64 bits only)
        x = mc.TruncatedNormal(1.0, 0.1, 0.9, 1.3, shape=(1000,)).sample(jax.random.key(3), dtype)
        low, high = (float(jnp.asarray(b, dtype)) for b in (0.9, 1.3))  # (the bounds as the dtype holds them)
        assert x.dtype == dtype and bool(jnp.all((low <= x) & (x <= high)))


def test_keep_draws_refuses_a_string_and_unknown_names(case):
    model, uncertainty, scenario, metrics = case
    run = lambda keep: mc.run_monte_carlo(  # noqa: E731
        model, uncertainty, scenario, metrics, num_samples=2, progress=False, keep_draws=keep
    )
    with pytest.raises(TypeError, match=r"run_monte_carlo: keep_draws: expected True, False or a list of draw names"):
        run("param/kp")  # (iterated, it was the characters 'p', 'a', ...: nothing kept, no error)
    with pytest.raises(TypeError, match=r"run_monte_carlo: keep_draws: expected draw names, got int 3"):
        run(["param/kp", 3])
    with pytest.raises(
        ValueError,
        match=r"run_monte_carlo: keep_draws: unknown draw name\(s\) \['param/kpp'\]; the study draws \[.*'param/kp'.*\]",
    ):
        run(["param/kpp"])
    # Named draws are kept, the others not (a cheap simulation: the sampled gain itself).
    kept = mc.run_monte_carlo(
        model, uncertainty, lambda m, p: p["kp"], {"kp": lambda r, m, p: r},
        num_samples=3, progress=False, keep_draws=("param/kp", "model/payload/mass"),
    )  # fmt: skip
    assert set(kept.draws) == {"param/kp", "model/payload/mass"}
    np.testing.assert_array_equal(kept.draws["param/kp"], kept.metrics["kp"])
    again = mc.run_monte_carlo(  # (any iterable of names: another study's dict keys, a NumPy array)
        model, uncertainty, lambda m, p: p["kp"], {"kp": lambda r, m, p: r},
        num_samples=3, progress=False, keep_draws=np.array(list(kept.draws.keys())),
    )  # fmt: skip
    assert set(again.draws) == set(kept.draws)


def test_probability_bounds_refuse_nan_and_accept_inf():
    """A NaN bound compares false with every sample (a silent 0); ``below=inf`` is the share of
    runs that did not diverge, a legitimate question."""
    res = mc.MonteCarloResults({"att": np.array([0.0, 1.0, np.nan, np.inf])}, {}, 0, 4)
    for call, name in (
        (lambda b: res.probability("att", below=b), "probability: below"),
        (lambda b: res.probability("att", above=b), "probability: above"),
        (lambda b: res.requirements_met({"att": b}), r"requirements_met: bounds\['att'\]"),
    ):
        for nan in (np.nan, np.float32("nan"), np.array(np.nan)):
            with pytest.raises(
                ValueError, match=rf"MonteCarloResults.{name}: must be a number \(inf allowed\), got nan"
            ):
                call(nan)
        with pytest.raises(TypeError, match=rf"MonteCarloResults.{name}: expected a number, got str '1'"):
            call("1")
    assert res.probability("att", below=np.inf)[0] == 0.5  # the finite samples
    assert res.requirements_met({"att": np.inf})[0] == 0.5
    assert res.probability("att", above=-np.inf)[0] == 0.5 and res.probability("att", below=-np.inf)[0] == 0.0


def test_distribution_shape_must_be_integers():
    for shape in (2.5, "3", True, (2, 2.0), (2, True), np.array([2.0])):
        with pytest.raises(TypeError, match=r"Uniform: shape: expected an integer or a tuple of integers, got"):
            mc.Uniform(0.0, 1.0, shape=shape)
    for shape in (-1, (2, -3)):
        with pytest.raises(ValueError, match=r"Normal: shape: sizes must be non-negative, got \("):
            mc.Normal(0.0, 1.0, shape=shape)
    assert mc.Uniform(0.0, 1.0, shape=2).shape == (2,)
    assert mc.Uniform(0.0, 1.0, shape=[2, np.int64(3)]).shape == (2, 3)
    assert mc.Uniform(0.0, 1.0, shape=np.array([4])).shape == (4,)  # an integer array (np.shape of one)
    assert mc.TruncatedNormal(0.0, 1.0, -1.0, 1.0, shape=()).shape == ()


def test_control_scenario_checks_its_initial_state(case):
    from sdjax.models import free_flying_arm_7dof

    model = case[0]
    scenario = lambda state: mc.ControlScenario(  # noqa: E731
        model, q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3, initial_state=state
    )
    with pytest.raises(TypeError, match=r"ControlScenario: initial_state: expected a sdjax.State .*, got ndarray"):
        scenario(np.zeros(6))
    other = sdjax.make_state(free_flying_arm_7dof())
    with pytest.raises(
        ValueError,
        match=r"ControlScenario: initial_state: State.q has shape \(7,\); expected \(6,\) for model 'spacedyn_sample'",
    ):
        scenario(other)
    batch = jax.vmap(lambda q: sdjax.make_state(model, q=q))(jnp.zeros((2, 6)))
    with pytest.raises(ValueError, match=r"State.base_position has shape \(2, 3\); expected \(3,\)"):
        scenario(batch)
    with pytest.raises(TypeError, match=r"ControlScenario: model: expected a sdjax.Model, got str"):
        mc.ControlScenario("model.urdf", q_goal=np.zeros(6), kp=1.0, kd=1.0, dt=0.01, num_steps=3)
    assert scenario(sdjax.make_state(model, q=np.full(6, 0.1))).initial_state.q[0] == 0.1


def test_results_file_meta_must_match_its_entries(tmp_path):
    """``meta`` accounts for every entry: num_samples is the metrics' length (a count no entry
    backs, 10**15 with no metric, made to_pandas ask for 7 PiB), names are not repeated (two
    listings of one metric merged), an entry meta does not list is refused (it was dropped)."""
    res = mc.MonteCarloResults({"peak": np.arange(5.0), "drift": np.ones(5)}, {"mass": np.ones((5, 2))}, 1, 5, {})
    good = tmp_path / "good.npz"
    res.save(good)
    with np.load(good, allow_pickle=False) as raw:
        entries = dict(raw)
    meta = json.loads(str(entries["meta"]))
    broken = tmp_path / "broken.npz"

    def with_meta(**change):
        return {"meta": np.array(json.dumps({**meta, **change}))}

    only_meta = {"meta": with_meta(num_samples=10**15, metric_names=[], draw_names=[])["meta"]}
    for contents, message in (
        (only_meta, "broken.npz: 'meta' metric_names is empty; a results file holds at least one metric"),
        ({**entries, **with_meta(num_samples=10**15)}, r"entry 'metric/peak' has shape (5,), expected (1000000000000000"),
        ({**entries, **with_meta(num_samples=4)}, r"entry 'metric/peak' has shape (5,), expected (4"),
        ({**entries, **with_meta(metric_names=["peak", "peak"])}, "'meta' metric_names lists ['peak'] more than once"),
        ({**entries, **with_meta(draw_names=["mass", "mass"])}, "'meta' draw_names lists ['mass'] more than once"),
        ({**entries, "metric/other": np.zeros(5)}, "entries ['metric/other'] are not listed in 'meta'"),
        ({**entries, "draw/extra": np.zeros((5, 3))}, "entries ['draw/extra'] are not listed in 'meta'"),
        ({**entries, **with_meta(metric_names=["peak"])}, "entries ['metric/drift'] are not listed in 'meta'"),
        ({**entries, "notes": np.zeros(1)}, "entries ['notes'] are not listed in 'meta'"),
    ):  # fmt: skip
        np.savez(broken, **contents)
        with pytest.raises(ValueError, match=re.escape(message)):
            mc.MonteCarloResults.load(broken)
    np.savez(broken, **entries)  # the same entries, rewritten: still a results file
    back = mc.MonteCarloResults.load(broken)
    assert back.num_samples == 5 and list(back.metrics) == ["peak", "drift"] and list(back.draws) == ["mass"]
    with pytest.raises(ValueError, match=r"MonteCarloResults.save: no metrics; a results file holds at least one"):
        mc.MonteCarloResults({}, {}, 0, 10**15).save(tmp_path / "empty.npz")
    assert not (tmp_path / "empty.npz").exists()


def test_parquet_table_meta_must_match_its_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    res = mc.MonteCarloResults({"peak": np.arange(5.0)}, {"mass": np.ones((5, 2))}, 1, 5, {})
    path = tmp_path / "good.parquet"
    res.to_parquet(path)
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"sdjax.montecarlo"])
    broken = tmp_path / "broken.parquet"
    twice = {**meta, "metric_names": ["peak", "peak"], "metric_dtypes": ["<f8", "<f8"]}
    for change, message in (
        (lambda t: t.replace_schema_metadata({"sdjax.montecarlo": json.dumps(twice)}),
         "metadata metric_names lists ['peak'] more than once"),
        (lambda t: t.append_column("other", pa.array(np.zeros(5))),
         "columns ['other'] are not listed in the metadata (or repeated)"),
        (lambda t: t.replace_schema_metadata({"sdjax.montecarlo": json.dumps({**meta, "draws": {}})}),
         "columns ['mass[0]', 'mass[1]'] are not listed in the metadata"),
    ):  # fmt: skip
        pq.write_table(change(table), broken)
        with pytest.raises(ValueError, match=re.escape(message)):
            mc.MonteCarloResults.from_parquet(broken)
    assert mc.MonteCarloResults.from_parquet(path).num_samples == 5
