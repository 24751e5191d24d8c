"""Chunked simulation (sdjax.simulation): equal to one rollout, progress, derived quantities, run files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.simulation import FILE_FORMAT, SimulationRun, load_run, simulate, trajectory_quantities

Q_DES = [0.3, 0.2, 0.1, 0.6, 0.5, 0.4]  # SpaceDyn sample_v1r2 targets


def _law():
    return sdjax.JointPD(10.0, 10.0, jnp.asarray(Q_DES))


def _max_difference(a, b):
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


@pytest.fixture(scope="module")
def pd_run(sample_model):
    """Free-floating sample robot from rest under joint PD: 60 steps of 0.02 s."""
    state = sdjax.make_state(sample_model)
    return sample_model, state, sdjax.rollout(sample_model, state, 0.02, 60, _law())


def test_chunks_equal_one_rollout_with_a_control_law(pd_run):
    model, state, reference = pd_run
    # 60 = 25 + 25 + 10: the last chunk is padded and its extra steps dropped.
    chunked = simulate(model, state, 0.02, 60, _law(), chunk_steps=25)
    assert chunked.time.shape == (61,) and chunked.states.q.shape == (61, 6) and chunked.controls.tau.shape == (60, 6)
    # Same operations in the same order; only the time handed to the law is formed as
    # (t0 + 25 c dt) + k dt instead of t0 + (25 c + k) dt: round-off (the PD law here does
    # not even depend on t), so agreement to a few ulps of the O(1) values.
    assert _max_difference(chunked, reference) <= 1e-13


def test_chunks_equal_one_rollout_with_a_torque_sequence(sample_model):
    state = sdjax.make_state(sample_model, q=[0.1, -0.2, 0.05, 0.3, 0.1, 0.0])
    torques = jax.random.normal(jax.random.key(0), (60, 6))
    reference = sdjax.rollout(sample_model, state, 0.02, 60, torques)
    chunked = simulate(sample_model, state, 0.02, 60, torques, chunk_steps=25)  # zero-padded last chunk
    assert _max_difference(chunked, reference) <= 1e-13  # same arithmetic; round-off margin only


@pytest.mark.slow
def test_chunks_equal_one_rollout_with_controls_and_checks(sample_model):
    state = sdjax.make_state(sample_model, q=[0.1, -0.2, 0.05, 0.3, 0.1, 0.0])
    controls = sdjax.make_controls(sample_model, base_torque=jnp.asarray([0.0, 0.0, 1.0]), tau=jnp.ones(6))
    sequence = jax.tree.map(lambda x: jnp.broadcast_to(x, (45,) + x.shape), controls)
    reference = sdjax.rollout(sample_model, state, 0.01, 45, sequence)
    for check in (False, True):  # padded last chunk / exact-length last chunk
        chunked = simulate(sample_model, state, 0.01, 45, sequence, chunk_steps=20, check=check)
        assert _max_difference(chunked, reference) <= 1e-13  # as above
    empty = simulate(sample_model, state, 0.05, 0)
    assert empty.states.q.shape == (1, 6) and empty.controls.tau.shape == (0, 6)


def test_duration_and_start_time(pd_run):
    model, state, reference = pd_run
    traj = simulate(model, state, 0.02, duration=0.5, t0=2.0, chunk_steps=25, control=_law())
    assert traj.states.q.shape == (26, 6)  # round(0.5 / 0.02) = 25 steps
    # Times are t0 + k dt; 1e-14 allows the rounding of k * 0.02 in binary.
    np.testing.assert_allclose(np.asarray(traj.time), 2.0 + 0.02 * np.arange(26), rtol=0, atol=1e-14)
    # A time-invariant law: the start time changes nothing else (round-off margin as above).
    assert _max_difference(traj.states, jax.tree.map(lambda x: x[:26], reference.states)) <= 1e-13


def test_progress_callback_and_bar(pd_run, capsys):
    model, state, reference = pd_run
    calls = []
    simulate(
        model, state, 0.02, 60, _law(), chunk_steps=25, progress=lambda done, total, s: calls.append((done, total, s))
    )
    assert [(d, t) for d, t, _ in calls] == [(25, 60), (50, 60), (60, 60)]
    # The state handed to the callback is the state after `done` steps.
    for done, _, s in calls:
        last = jax.tree.map(lambda x: x[done], reference.states)
        assert _max_difference(s, last) <= 1e-13  # round-off only, as in the first test
    simulate(model, state, 0.02, 60, _law(), chunk_steps=25, progress=True)
    err = capsys.readouterr().err
    assert "60/60" in err and "simulate spacedyn_sample" in err


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_steps=10, duration=1.0), "exactly one of num_steps and duration"),
        (dict(), "exactly one of num_steps and duration"),
        (dict(num_steps=-1), "num_steps: must be an integer >= 0"),
        (dict(duration=float("nan")), "simulate: duration: must be finite"),
        (dict(duration=-1.0), "simulate: duration: must be non-negative"),
        (dict(duration="0.03"), "simulate: duration: expected a number, got str"),  # (was run as 0.03 s)
        (dict(duration=True), "simulate: duration: expected a number, got bool"),  # (was 1 s)
        (dict(duration=1e300, dt=1e-10), r"duration / dt = inf steps exceeds the longest rollout"),
        (dict(num_steps=10, dt=0.0), "simulate: dt: must be positive"),
        (dict(num_steps=10, dt="0.01"), "simulate: dt: expected a number, got str"),  # (named rollout before)
        (dict(num_steps=10, dt="fast"), "dt: expected a number, got str"),
        (dict(num_steps=10, chunk_steps=0), "chunk_steps: must be an integer >= 1"),
        (dict(num_steps=10, progress="yes"), "progress: expected True, False or a callable"),
        (dict(num_steps=10, control=np.zeros((9, 6))), "leading axis of num_steps=10"),
    ],
)
def test_bad_arguments(sample_model, kwargs, message):
    state = sdjax.make_state(sample_model)
    kwargs = dict(dt=0.01) | kwargs
    # (a wrong type raises TypeError, a wrong value ValueError)
    wrong_type = "expected a number" in message or "expected True" in message
    with pytest.raises(TypeError if wrong_type else ValueError, match=message):
        simulate(sample_model, state, **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_steps=2.5), "simulate: num_steps: expected an integer, got float 2.5"),
        (dict(num_steps=10, chunk_steps=True), "simulate: chunk_steps: expected an integer, got bool True"),
    ],
)
def test_counts_of_the_wrong_type(sample_model, kwargs, message):
    with pytest.raises(TypeError, match=message):
        simulate(sample_model, sdjax.make_state(sample_model), dt=0.01, **kwargs)


def test_quantities_conservation_and_energy_balance(pd_run):
    model, _, traj = pd_run
    values = trajectory_quantities(model, traj)
    assert values["linear_momentum"].shape == (61, 3) and values["kinetic_energy"].shape == (61,)
    # Free floating from rest, no external forces: momentum stays zero. RK4 at dt = 0.02 s
    # conserves it only up to its O(dt^4) truncation error (~1e-10 here), hence 1e-8.
    assert np.max(np.abs(values["linear_momentum"])) < 1e-8
    assert np.max(np.abs(values["angular_momentum"])) < 1e-8
    # The centre of mass stays put (P = 0), to the same RK4 error.
    assert np.max(np.abs(values["center_of_mass"] - values["center_of_mass"][0])) < 1e-8
    # Energy balance: the kinetic energy gained equals the work of the joint torques (no
    # gravity, no passive joints). Same RK4 error bound, relative to ~1 J.
    energy = values["kinetic_energy"] + values["potential_energy"]
    assert np.max(np.abs(energy - energy[0] - values["joint_work"])) < 1e-8
    assert values["joint_work"][-1] > 0.1  # the arms did move (not a vacuous balance)
    # Rows are the per-state values of the momentum functions.
    last = jax.tree.map(lambda x: x[-1], traj.states)
    np.testing.assert_allclose(
        values["kinetic_energy"][-1], float(sdjax.kinetic_energy(model, last)), rtol=1e-12
    )  # vmap vs single call: round-off


def test_run_file_round_trip(pd_run, tmp_path):
    model, _, traj = pd_run
    run = SimulationRun(model, traj, info={"dt": 0.02, "controller": "pd"})
    path = tmp_path / "run.npz"
    run.save(path)
    back = load_run(path)
    # Lossless: every array is stored in its own dtype.
    for a, b in zip(jax.tree.leaves(traj), jax.tree.leaves(back.trajectory)):
        assert np.asarray(b).dtype == np.asarray(a).dtype
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
    assert sdjax.model_to_dict(back.model) == sdjax.model_to_dict(model)
    assert back.model.parent == model.parent and back.model.link_names == model.link_names
    assert back.info == {"dt": 0.02, "controller": "pd"}
    assert set(back.quantities) == set(run.quantities)
    for k, v in run.quantities.items():
        np.testing.assert_array_equal(back.quantities[k], v)
    assert back.num_steps == 60 and "spacedyn_sample" in repr(back)
    # The layout is documented: plain arrays and a JSON meta entry.
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        assert meta["format"] == FILE_FORMAT and meta["model"]["name"] == "spacedyn_sample"
        assert data["state/q"].shape == (61, 6) and data["controls/end_point_force"].shape == (60, 2, 3)


def test_run_file_errors(pd_run, tmp_path):
    model, _, traj = pd_run
    with pytest.raises(ValueError, match="missing.npz: no such file"):
        load_run(tmp_path / "missing.npz")
    text = tmp_path / "text.npz"
    text.write_text("not a zip file")
    with pytest.raises(ValueError, match="not a sdjax run file"):
        load_run(text)
    array = tmp_path / "array.npy"
    np.save(array, np.zeros(3))
    with pytest.raises(ValueError, match="not a sdjax run file"):
        load_run(array)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ValueError, match="no 'meta' entry"):
        load_run(other)
    np.savez(other, meta=np.array("{not json"))
    with pytest.raises(ValueError, match="entry 'meta' is not valid JSON"):
        load_run(other)
    np.savez(other, meta=np.array(json.dumps({"format": "sdjax.montecarlo/1"})))
    with pytest.raises(ValueError, match="unsupported format"):
        load_run(other)
    good = tmp_path / "good.npz"
    SimulationRun(model, traj).save(good)
    with np.load(good, allow_pickle=False) as data:
        entries = dict(data)
    missing = {k: v for k, v in entries.items() if k != "state/qd"}
    np.savez(other, **missing)
    with pytest.raises(ValueError, match=r"missing entries \['state/qd'\]"):
        load_run(other)
    entries["state/q"] = entries["state/q"][:, :5]
    np.savez(other, **entries)
    with pytest.raises(ValueError, match=r"'state/q' has shape \(61, 5\), expected \(61, 6\)"):
        load_run(other)
    # Object arrays (pickles) are refused, not loaded.
    np.savez(other, **{**entries, "state/q": np.empty((61, 6), dtype=object)})
    with pytest.raises(ValueError, match=r"'state/q' has dtype object, expected numbers"):
        load_run(other)
    # A hostile header (a tiny entry declaring 16 GiB) is refused from the header, before any
    # allocation; so is a damaged archive member.
    import io
    import zipfile

    def with_member(name, raw):
        path = tmp_path / "crafted.npz"
        with zipfile.ZipFile(path, "w") as z:
            for key, value in entries.items():
                if key != name:
                    buffer = io.BytesIO()
                    np.lib.format.write_array(buffer, value, allow_pickle=False)
                    z.writestr(key + ".npy", buffer.getvalue())
            z.writestr(name + ".npy", raw)
        return path

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2 * 1024**3,)})
    with pytest.raises(ValueError, match=r"entry 'time' would take 16.0 GiB \(limit 4 GiB\)"):
        load_run(with_member("time", header.getvalue() + b"\0" * 16))
    with pytest.raises(ValueError, match=r"entry 'time' is not a readable array"):
        load_run(with_member("time", b"garbage"))
    truncated = io.BytesIO()
    np.lib.format.write_array(truncated, entries["time"])
    with pytest.raises(ValueError, match=r"entry 'time' could not be read"):
        load_run(with_member("time", truncated.getvalue()[:-40]))
    # Contents the shapes do not show: time, attitude, precision, listed quantities.
    with np.load(good, allow_pickle=False) as data:
        entries = dict(data)
    meta = json.loads(str(entries["meta"]))
    for change, message in [
        (dict(time=np.concatenate([[np.nan], entries["time"][1:]])), "'time' must be finite and strictly increasing"),
        (dict(time=entries["time"][::-1].copy()), "'time' must be finite and strictly increasing"),
        ({"state/base_quaternion": np.zeros_like(entries["state/base_quaternion"])}, r"has a zero row \(step 0\)"),
        ({"state/q": entries["state/q"].astype(np.float32)}, "entry 'state/q' is float32, but 'meta' says the run is float64"),
        ({"meta": np.array(json.dumps({**meta, "quantity_names": ["energy"]}))}, r"lists quantities \['energy'\] that the file does not hold"),
    ]:  # fmt: skip
        np.savez(other, **{**entries, **change})
        with pytest.raises(ValueError, match=message):
            load_run(other)
    empty = {
        k: (v[:0] if k.startswith(("time", "state/")) else v)
        for k, v in entries.items()
        if not k.startswith("controls/")
    }
    empty.update({k: v[:0] for k, v in entries.items() if k.startswith("controls/")})
    np.savez(other, **empty)
    with pytest.raises(ValueError, match="'time' holds no samples"):
        load_run(other)


def test_run_file_refuses_entries_meta_does_not_list(pd_run, tmp_path):
    """Every entry of a run file is one ``meta`` accounts for: an extra ``quantity/<name>`` (or
    an unknown entry) is refused, not silently dropped; a quantity listed twice is refused."""
    model, _, traj = pd_run
    good = tmp_path / "good.npz"
    SimulationRun(model, traj).save(good)
    with np.load(good, allow_pickle=False) as data:
        entries = dict(data)
    meta = json.loads(str(entries["meta"]))
    other = tmp_path / "other.npz"
    for change, message in [
        ({"quantity/extra": entries["time"]}, r"other\.npz: entries \['quantity/extra'\] are not listed in 'meta'"),
        ({"notes": np.zeros(3)}, r"other\.npz: entries \['notes'\] are not listed in 'meta'"),
        ({"meta": np.array(json.dumps({**meta, "quantity_names": meta["quantity_names"][1:]}))},
         rf"entries \['quantity/{meta['quantity_names'][0]}'\] are not listed in 'meta'"),
        ({"meta": np.array(json.dumps({**meta, "quantity_names": meta["quantity_names"] * 2}))},
         r"'meta' quantity_names lists \[.*'kinetic_energy'.*\] more than once"),
    ]:  # fmt: skip
        np.savez(other, **{**entries, **change})
        with pytest.raises(ValueError, match=message):
            load_run(other)
    np.savez(other, **entries)  # the same entries, rewritten: still a run file
    assert list(load_run(other).quantities) == meta["quantity_names"]
