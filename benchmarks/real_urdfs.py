"""Every URDF of a public robot-description package, loaded as a user would (issue: real models).

For each URDF file of ``example-robot-data`` (pip install example-robot-data==6.0.0; 69 files:
arms, humanoids, quadrupeds, hands), with sdjax's defaults:

1. ``sdjax.import_urdf``: loaded, or refused with the reason (the first words of the message);
2. loaded files are compared with Pinocchio's own URDF parser (free-flyer root) at random
   states: the inertia matrix (``H_sd = T^T M T``, ``T`` the velocity map of
   :func:`sdjax.io.urdf.pinocchio_from_state`) and forward dynamics at rest under gravity
   (``a_pin = T a_sd``), as relative errors;
3. a 1 s unforced rollout at dt = 1 ms from a random state with moderate rates must stay finite
   (joint damping from the file included): with RK4, and with the integrator ``sdjax simulate``
   picks by default (RK4, or the step with implicit passive joint terms where RK4's largest
   stable step, ``sdjax.max_stable_step``, is below 1 ms).

Files with ``<mimic>`` joints load by default with mimic joints in the model (reduced
coordinates) and are compared with Pinocchio's mimic model of the file (``buildModelFromUrdf(...,
mimic=True)``: ``crba``, and forward dynamics as ``crba``/``rnea`` solved, since Pinocchio's
``aba`` takes no mimic joints); NaN where Pinocchio cannot build that model.

Writes ``results/real_urdfs.md`` (per file) and prints the counts.

    python benchmarks/real_urdfs.py [--states 3] [--no-rollout]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import pathlib
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax.io.urdf import import_urdf, pinocchio_from_state  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
GRAVITY = np.array([0.0, 0.0, -9.81])

#: Message fragments that name why a file is refused (first match wins).
REASONS = (
    ("<mimic", "mimic joints"),
    ("no <link> elements", "no links in the file"),
    ("moves no mass", "a joint moves only massless links"),
    ("singular", "singular inertia matrix"),
    ("has no mass", "massless base"),
    ("triangle inequality", "inertia breaks the triangle inequality (loads with inertia_check='positive_definite')"),
    ("not positive", "inertia not positive (semi)definite"),
    ("floating", "floating/planar joint inside the tree"),
    ("planar", "floating/planar joint inside the tree"),
)


def robot_files() -> list[str]:
    import site

    roots = [os.path.join(p, "cmeel.prefix", "share", "example-robot-data", "robots") for p in site.getsitepackages()]
    files = sorted(f for root in roots for f in glob.glob(os.path.join(root, "**", "*.urdf"), recursive=True))
    if not files:
        sys.exit("example-robot-data is not installed: pip install example-robot-data==6.0.0")
    return files


def random_state(model: sdjax.Model, seed: int, rate: float) -> sdjax.State:
    """Random joints and rates; a random base pose and twist for a floating base (a fixed base
    stays at the file's world: Pinocchio's model of it has no base coordinates)."""
    rng = np.random.default_rng(seed)
    n = model.num_joint_coordinates  # (mimic joints follow their leaders)
    floating = model.base == "floating"
    return sdjax.make_state(
        model,
        base_position=rng.normal(size=3) if floating else np.zeros(3),
        base_rpy=rng.uniform(-np.pi, np.pi, size=3) if floating else np.zeros(3),
        base_linear_velocity=rate * rng.normal(size=3) if floating else np.zeros(3),
        base_angular_velocity=rate * rng.normal(size=3) if floating else np.zeros(3),
        q=rng.uniform(-1.0, 1.0, size=n),
        qd=rate * rng.normal(size=n),
    )


def velocity_map(info, pm, state: sdjax.State) -> np.ndarray:
    """``T`` with ``v_pin = T nu_sd`` (``nu_sd``: the model's generalized velocity, its base
    mode's free components and joint coordinates; linear in the velocities), column by column."""
    model = info.model
    columns = []
    for j in range(model.num_velocities):
        unit = np.asarray(sdjax.model.floating_coordinates(model, jnp.zeros(model.num_velocities).at[j].set(1.0)))
        moved = sdjax.State(
            state.base_position,
            state.base_quaternion,
            jnp.asarray(unit[:3]),
            jnp.asarray(unit[3:6]),
            state.q,
            jnp.asarray(unit[6:]),
        )
        columns.append(pinocchio_from_state(info, pm, moved)[1])
    return np.stack(columns, axis=1)


def relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def compare_with_pinocchio(path: str, info, pin, num_states: int) -> dict:
    """Largest relative errors of the inertia matrix and of forward dynamics at rest under
    gravity against Pinocchio's parse of the file (its mimic model for a model with mimic joints,
    else its plain model's equations projected onto the joint coordinates)."""
    model = info.model
    root = (pin.JointModelFreeFlyer(),) if model.base == "floating" else ()
    try:
        pm = pin.buildModelFromUrdf(path, *root, mimic=model.has_mimic)
        reference = "mimic model" if model.has_mimic else "model"
    except ValueError:  # (Pinocchio 4.1 needs a mimic joint's leader earlier in its joint order)
        pm = pin.buildModelFromUrdf(path, *root)  # every joint free: its equations projected below
        reference = "plain model, projected"
    pm.gravity = pin.Motion(GRAVITY, np.zeros(3))
    h_err, a_err = 0.0, 0.0
    for seed in range(num_states):
        state = random_state(model, seed, rate=0.0)
        q_pin, _ = pinocchio_from_state(info, pm, state)
        t = velocity_map(info, pm, state)
        data = pm.createData()  # (Pinocchio 4.1's crba on a mimic model reads stale data when reused)
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        h_err = max(h_err, relative(sdjax.inertia_matrix(model, state), t.T @ m @ t))
        base_acc, qdd = sdjax.forward_dynamics(model, state, jnp.zeros(model.num_joints))
        a_sd = sdjax.model.free_motion(model, jnp.concatenate([base_acc, qdd]))
        if model.has_mimic:  # Pinocchio's equations in the joint coordinates (its aba takes no mimic joints):
            # T^T (M T a + nle) = 0 at rest (T maps sdjax's coordinates to Pinocchio's velocity).
            nle = pin.rnea(pm, data, q_pin, np.zeros(pm.nv), np.zeros(pm.nv))
            a_err = max(a_err, relative(a_sd, np.linalg.solve(t.T @ m @ t, -t.T @ nle)))
        else:
            a_err = max(a_err, relative(t @ a_sd, pin.aba(pm, data, q_pin, np.zeros(pm.nv), np.zeros(pm.nv))))
    return {"h_err": h_err, "fd_err": a_err, "reference": reference}


def check_file(path: str, pin, num_states: int, rollout: bool) -> dict:
    name = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.dirname(path))))
    row = {"file": name}
    try:
        info = import_urdf(path, gravity=GRAVITY)
    except ValueError as err:
        message = str(err).replace(f"{path}: ", "")  # (the file is the row)
        row["status"] = "refused"
        row["reason"] = next((label for key, label in REASONS if key in message), "other")
        row["message"] = message[:160]
        return row
    model = info.model
    row.update(
        status="loaded",
        dof=model.num_velocities,
        links=model.num_joints,
        frames=model.num_end_points,
        mimic=sum(1 for leader in model.mimic_leader if leader),
    )
    if model.base != "planar":  # (Pinocchio's URDF reader has no planar root joint: not compared)
        row.update(compare_with_pinocchio(path, info, pin, num_states))
    if rollout:
        state = random_state(model, 99, rate=0.5)

        def finite(integrator: str) -> bool:
            return bool(
                np.all(
                    np.isfinite(np.asarray(sdjax.rollout(model, state, 1e-3, 1000, integrator=integrator).states.qd))
                )
            )

        row["rollout_finite"] = finite("rk4")
        row["auto"] = "rk4" if 1e-3 <= sdjax.max_stable_step(model, state) else "implicit"
        row["auto_finite"] = row["rollout_finite"] if row["auto"] == "rk4" else finite("implicit")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=3)
    parser.add_argument("--no-rollout", action="store_true")
    args = parser.parse_args()
    import pinocchio as pin

    rows = []
    t0 = time.perf_counter()
    for path in robot_files():
        row = check_file(path, pin, args.states, not args.no_rollout)
        rows.append(row)
        print({k: (f"{v:.1e}" if isinstance(v, float) else v) for k, v in row.items() if k != "message"}, flush=True)
        jax.clear_caches()
    loaded = [r for r in rows if r["status"] == "loaded"]
    refused = collections.Counter(r["reason"] for r in rows if r["status"] == "refused")
    lines = [
        f"# example-robot-data 6.0.0: {len(rows)} URDF files with sdjax {sdjax.__version__} defaults",
        "",
        f"Loaded {len(loaded)}; refused {len(rows) - len(loaded)}: "
        + ", ".join(f"{count} {reason}" for reason, count in refused.most_common())
        + ".",
        f"Largest relative error against Pinocchio's parser (float64): inertia matrix "
        f"{max((r['h_err'] for r in loaded if 'h_err' in r), default=0):.1e}, forward dynamics at rest under gravity "
        f"{max((r['fd_err'] for r in loaded if 'fd_err' in r), default=0):.1e} (planar bases not compared: "
        "Pinocchio's URDF reader has no planar root joint).",
    ]
    mimic = [r for r in loaded if r["mimic"]]
    if mimic:
        projected = [r["file"] for r in mimic if r.get("reference") == "plain model, projected"]
        lines.append(
            f"{len(mimic)} of the loaded files have `<mimic>` joints (loaded as mimic joints of the model, reduced "
            f"coordinates; {sum(r['mimic'] for r in mimic)} mimic joints in all): compared with Pinocchio's mimic model "
            f"(`mimic=True`) where Pinocchio 4.1 builds it, else with its plain model's equations projected onto the "
            f"joint coordinates ({', '.join(projected) or 'none'}); the largest errors above include them: "
            f"inertia matrix {max(r['h_err'] for r in mimic):.1e}, forward dynamics {max(r['fd_err'] for r in mimic):.1e}."
        )
    if not args.no_rollout:
        bad = [r["file"] for r in loaded if not r["rollout_finite"]]
        lines.append(
            f"1 s unforced RK4 rollout at dt = 1 ms: {len(loaded) - len(bad)} of {len(loaded)} finite"
            + (f" (not: {', '.join(bad)})" if bad else "")
            + "."
        )
        implicit = [r["file"] for r in loaded if r["auto"] == "implicit"]
        bad = [r["file"] for r in loaded if not r["auto_finite"]]
        lines.append(
            f"With `sdjax simulate`'s default choice (implicit passive joint terms on the {len(implicit)} files whose largest stable RK4 "
            f"step is below 1 ms): {len(loaded) - len(bad)} of {len(loaded)} finite"
            + (f" (not: {', '.join(bad)})" if bad else "")
            + "."
        )
    lines += [
        "", f"Run time {time.perf_counter() - t0:.0f} s.", "",
        "| file | status | DOF | mimic joints | frames | H rel. err | FD rel. err | RK4 rollout finite | default integrator: finite | reason |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        if r["status"] == "loaded":
            finite = r.get("rollout_finite", "")
            auto = f"{r['auto']}: {r['auto_finite']}" if "auto" in r else ""
            lines.append(
                f"| {r['file']} | loaded | {r['dof']} | {r['mimic']} | {r['frames']} | {r.get('h_err', float('nan')):.1e} "
                f"| {r.get('fd_err', float('nan')):.1e} "
                f"| {finite} | {auto} | |"
            )
        else:
            lines.append(f"| {r['file']} | refused | | | | | | | | {r['reason']}: {r['message'].replace('|', '/')} |")
    out = HERE / "results" / "real_urdfs.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
