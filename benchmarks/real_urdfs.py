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

Files refused for ``<mimic>`` joints are loaded again with ``mimic="constraints"`` (every joint a
coordinate, each ``<mimic>`` a :class:`sdjax.constraints.JointCoupling`) and their constrained
forward dynamics at rest under gravity is compared with Pinocchio's mimic model of the file
(``buildModelFromUrdf(..., mimic=True)``: reduced coordinates, ``crba`` and ``rnea``).

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
    n = model.num_joints
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
    """``T`` with ``v_pin = T nu_sd`` (linear in the velocities), column by column."""
    n = info.model.num_joints
    columns = []
    for j in range(6 + n):
        unit = np.zeros(6 + n)
        unit[j] = 1.0
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


def check_mimic(path: str, pin, num_states: int) -> float:
    """Largest relative difference of the constrained forward dynamics at rest under gravity
    (sdjax, couplings as constraints) from Pinocchio's mimic model (reduced coordinates); NaN
    where Pinocchio cannot build that model (its mimic joints need the leader before the
    follower's parent in its joint order)."""
    from sdjax import constraints

    info = import_urdf(path, gravity=GRAVITY, mimic="constraints")
    model = info.model
    floating = model.base == "floating"
    root = (pin.JointModelFreeFlyer(),) if floating else ()
    pm_full = pin.buildModelFromUrdf(path, *root)
    try:
        pm = pin.buildModelFromUrdf(path, *root, mimic=True)
    except ValueError:
        return float("nan")
    pm.gravity = pin.Motion(GRAVITY, np.zeros(3))
    # Reduced Pinocchio velocity slots in the full model's velocity vector (base first).
    keep = list(range(6 if floating else 0))
    q_slots = []
    for j in range(1, pm.njoints):
        jf = pm_full.getJointId(pm.names[j])
        if pm.nvs[j] and pm.names[j] != "root_joint":
            keep.append(pm_full.idx_vs[jf])
        if pm.nqs[j]:
            q_slots.append((pm.idx_qs[j], pm_full.idx_qs[jf], pm.nqs[j]))
    error = 0.0
    for seed in range(num_states):
        state = random_state(model, seed, rate=0.0)
        q = np.asarray(state.q).copy()
        for c in info.couplings:  # the followers where their leaders put them
            q[c.follower] = float(c.multiplier) * q[c.leader] + float(c.offset)
        state = sdjax.make_state(model, base_position=state.base_position, base_quaternion=state.base_quaternion, q=q)
        q_full, _ = pinocchio_from_state(info, pm_full, state)
        q_pin = np.zeros(pm.nq)
        for i, i_full, nq in q_slots:
            q_pin[i : i + nq] = q_full[i_full : i_full + nq]
        t = velocity_map(info, pm_full, state)[:, model.velocity_indices]
        result = constraints.constrained_forward_dynamics(model, state, jnp.zeros(model.num_joints), info.couplings)
        a_sd = t @ np.asarray(
            sdjax.model.free_coordinates(model, jnp.concatenate([result.base_acceleration, result.qdd]))
        )
        data = pm.createData()
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        a_pin = np.linalg.solve(m, -pin.rnea(pm, data, q_pin, np.zeros(pm.nv), np.zeros(pm.nv)))
        error = max(error, relative(a_sd[keep], a_pin))
    return error


def check_file(path: str, pin, num_states: int, rollout: bool) -> dict:
    name = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.dirname(path))))
    row = {"file": name}
    try:
        info = import_urdf(path, gravity=GRAVITY)
    except ValueError as err:
        message = str(err)
        row["status"] = "refused"
        row["reason"] = next((label for key, label in REASONS if key in message), "other")
        row["message"] = message[:160]
        if row["reason"] == "mimic joints":
            try:
                row["mimic_fd_err"] = check_mimic(path, pin, num_states)
            except ValueError as mimic_err:  # a broken <mimic> (a leader that does not exist)
                row["mimic_refused"] = str(mimic_err)[:160]
        return row
    model = info.model
    row.update(status="loaded", dof=model.num_velocities, links=model.num_joints, frames=model.num_end_points)
    if model.base == "planar":  # (Pinocchio's URDF reader has no planar root joint)
        row.update(h_err=float("nan"), fd_err=float("nan"))
        return row
    pm = (
        pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())
        if model.base == "floating"
        else pin.buildModelFromUrdf(path)
    )
    pm.gravity = pin.Motion(GRAVITY, np.zeros(3))
    data = pm.createData()
    h_err, a_err = 0.0, 0.0
    for seed in range(num_states):
        state = random_state(model, seed, rate=0.0)
        q_pin, _ = pinocchio_from_state(info, pm, state)
        t = velocity_map(info, pm, state)[:, model.velocity_indices]  # the base mode's free coordinates
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        h_err = max(h_err, relative(sdjax.inertia_matrix(model, state), t.T @ m @ t))
        base_acc, qdd = sdjax.forward_dynamics(model, state, jnp.zeros(model.num_joints))
        a_pin = pin.aba(pm, data, q_pin, np.zeros(pm.nv), np.zeros(pm.nv))
        a_err = max(a_err, relative(t @ sdjax.model.free_coordinates(model, jnp.concatenate([base_acc, qdd])), a_pin))
    row.update(h_err=h_err, fd_err=a_err)
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
        f"{max((r['h_err'] for r in loaded), default=0):.1e}, forward dynamics at rest under gravity "
        f"{max((r['fd_err'] for r in loaded), default=0):.1e}.",
    ]
    mimic = [r for r in rows if "mimic_fd_err" in r]
    broken = [r for r in rows if "mimic_refused" in r]
    if mimic:
        compared = [r["mimic_fd_err"] for r in mimic if np.isfinite(r["mimic_fd_err"])]
        lines.append(
            f"The {len(mimic)} files with `<mimic>` joints load with `import_urdf(..., mimic='constraints')` (couplings as "
            f"`sdjax.constraints.JointCoupling`); constrained forward dynamics at rest under gravity against Pinocchio's mimic "
            f"model on the {len(compared)} that Pinocchio 4.1 builds: largest relative error {max(compared, default=float('nan')):.1e}."
            + (
                f" {len(broken)} more stay refused with that option (reasons in the table: {', '.join(r['file'] for r in broken)})."
                if broken
                else ""
            )
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
        "| file | status | DOF | frames | H rel. err | FD rel. err | RK4 rollout finite | default integrator: finite | reason |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        if r["status"] == "loaded":
            finite = r.get("rollout_finite", "")
            auto = f"{r['auto']}: {r['auto_finite']}" if "auto" in r else ""
            lines.append(
                f"| {r['file']} | loaded | {r['dof']} | {r['frames']} | {r['h_err']:.1e} | {r['fd_err']:.1e} | {finite} | {auto} | |"
            )
        else:
            mimic_note = (
                f" (with mimic='constraints': FD rel. err {r['mimic_fd_err']:.1e} against Pinocchio's mimic model)"
                if "mimic_fd_err" in r
                else ""
            )
            mimic_note += (
                f" (with mimic='constraints': {r['mimic_refused'].replace('|', '/')})" if "mimic_refused" in r else ""
            )
            lines.append(
                f"| {r['file']} | refused | | | | | | | {r['reason']}{mimic_note}: {r['message'].replace('|', '/')} |"
            )
    out = HERE / "results" / "real_urdfs.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
