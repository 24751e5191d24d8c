"""Write the worked-example notebooks (and optionally execute them, full size, with outputs).

    python notebooks/build_notebooks.py            # write the .ipynb files (no outputs)
    python notebooks/build_notebooks.py --execute  # write and run them (full-size outputs stored)
    python notebooks/build_notebooks.py --execute closed_chains.ipynb   # one of them

Notebooks with a py:percent source (``closed_chains.py``) are built from it with jupytext.

tests/test_notebooks.py runs every notebook with SDJAX_NOTEBOOK_QUICK=1 (short horizons).
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent

SETUP = '''import os
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import matplotlib

if os.environ.get("MPLBACKEND") is None:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import sdjax
from sdjax.models import {models}

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
plt.rcParams["figure.dpi"] = 80
print("quick mode" if QUICK else "full run")'''


def seed003_notebook(builder: str, title: str, figures: tuple[str, str], description: str) -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            f"# Seed 003: {title}\n\n"
            "Wilde et al. (seed 003, section *Numerical Simulations*) drive one joint at a time "
            "through the cycle +0.1 rad/s for 10 s, rest 2 s, -0.1 rad/s for 20 s, rest 2 s, +0.1 rad/s "
            "for 10 s (back to zero), with computed-torque control (eqs 112-115, "
            "`Kp = Kd = 1`, exact model `H~ = H`, `C~ = C`) on a *floating* (zero-momentum) system. "
            f"{description}\n\n"
            "The model is built from a customised DH table (eqs 1-10) with `sdjax.io.model_from_dh`; the "
            "seed's Tables 3-6 are not available, so the parameters are chosen (see the builder's docstring). "
            "Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) simulates only joint 1's cycle with a coarser step."
        ),
        new_code_cell(SETUP.format(models=builder)),
        new_code_cell(
            f"model = {builder}()\n"
            "n = model.num_joints\n"
            "print(model.name, '| links:', n, '| base mass', float(model.base_mass), 'kg | arm mass', float(jnp.sum(model.link_mass)), 'kg')\n"
            "kin0 = sdjax.forward_kinematics(model, sdjax.make_state(model))\n"
            "print('joint axes at q = 0 (base frame):')\n"
            "print(np.round(np.asarray(kin0.joint_axis), 6))\n"
            "print('end effector at q = 0:', np.round(np.asarray(kin0.end_point_position[0]), 4))"
        ),
        new_markdown_cell(
            "## Desired joint trajectory\n\nThe rate switches between 0, +-0.1 rad/s through 1 s smooth (cubic) "
            "ramps starting at the switch times 0, 10, 12, 32, 34, 44 s (so the plateaus last 10, 2, 20, 2 and "
            "10 s between ramp mid-points) and the reference acceleration `qdd_d` is finite; each joint's cycle "
            "lasts 45 s and returns it exactly to zero before the next joint starts."
        ),
        new_code_cell(
            '''RATE, RAMP, CYCLE = 0.1, 1.0, 45.0
# ramps start at these cycle times (s) and change the rate by JUMPS: +0.1, 0, -0.1, 0, +0.1, 0 rad/s
SWITCHES = jnp.array([0.0, 10.0, 12.0, 32.0, 34.0, 44.0])
JUMPS = RATE * jnp.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])


def smooth_step(x):
    """Cubic ramp S(x) from 0 to 1 on [0, 1], its derivative and its integral from 0."""
    xc = jnp.clip(x, 0.0, 1.0)
    s = xc**2 * (3.0 - 2.0 * xc)
    ds = jnp.where((x > 0) & (x < 1), 6.0 * xc * (1.0 - xc), 0.0)
    integral = jnp.where(x < 1, xc**3 - 0.5 * xc**4, x - 0.5)
    return s, ds, jnp.where(x > 0, integral, 0.0)


def joint_cycle(tau):
    """(angle, rate, acceleration) of one joint cycle at cycle time tau (s)."""
    s, ds, integral = smooth_step((tau[..., None] - SWITCHES) / RAMP)
    return (JUMPS * RAMP * integral).sum(-1), (JUMPS * s).sum(-1), (JUMPS * ds / RAMP).sum(-1)


def reference(t):
    """Joint k (0-based) runs its cycle during [45 k, 45 (k + 1)) s."""
    tau = t - CYCLE * jnp.arange(n)
    active = (tau >= 0) & (tau < CYCLE)
    q, qd, qdd = joint_cycle(jnp.where(active, tau, 0.0))
    return jnp.where(active, q, 0.0), jnp.where(active, qd, 0.0), jnp.where(active, qdd, 0.0)


t_check = jnp.linspace(0.0, CYCLE - 1e-9, 4501)
q1, qd1, _ = jax.vmap(reference)(t_check)
print("joint 1: max rate %.4f rad/s, max angle %.4f rad, angle and rate at the end of its cycle %.1e rad, %.1e rad/s"
      % (qd1[:, 0].max(), q1[:, 0].max(), q1[-1, 0], qd1[-1, 0]))'''
        ),
        new_markdown_cell(
            "## Floating rollout under computed-torque control\n\n`sdjax.ComputedTorque` with `mode=\"floating\"` "
            "uses the generalized (momentum-reduced) inertia `H*` and bias of the exact model; `sdjax.rollout` "
            "integrates the full free-floating dynamics with RK4 (base free, zero initial momentum)."
        ),
        new_code_cell(
            '''dt = 0.05 if QUICK else 0.01
horizon = CYCLE if QUICK else CYCLE * n
num_steps = int(round(horizon / dt))
law = sdjax.ComputedTorque(model, kp=1.0, kd=1.0, reference=reference, mode="floating")
state0 = sdjax.make_state(model)
start = time.perf_counter()
traj = sdjax.rollout(model, state0, dt, num_steps, law)
jax.block_until_ready(traj.states.q)
print(f"{num_steps} RK4 steps of {dt} s ({horizon:.0f} s) in {time.perf_counter() - start:.1f} s (compile included)")'''
        ),
        new_code_cell(
            '''masses = jnp.concatenate([model.base_mass[None], model.link_mass])
inertias = jnp.concatenate([model.base_inertia[None], model.link_inertia])


@jax.jit
@jax.vmap
def diagnostics(state):
    """Per-body linear momentum m v and angular momentum I w + r x m v (about the inertial origin)."""
    kin = sdjax.forward_kinematics(model, state)
    v, w = sdjax.link_velocities(model, state)
    p = masses[:, None] * v
    spin = jnp.einsum("bij,bjk,blk,bl->bi", kin.rotation, inertias, kin.rotation, w)
    h = spin + jnp.cross(kin.centroid, p)
    return p, h, sdjax.center_of_mass(model, state), sdjax.linear_momentum(model, state), sdjax.angular_momentum(model, state)


p, h, com, p_total, h_total = diagnostics(traj.states)
t = np.asarray(traj.time)
p_base, p_arm = np.asarray(p[:, 0]), np.asarray(p[:, 1:].sum(1))
h_base, h_arm = np.asarray(h[:, 0]), np.asarray(h[:, 1:].sum(1))
q_ref = np.asarray(jax.vmap(reference)(traj.time)[0])
print("max |total linear momentum|  = %.2e N s" % np.abs(p_base + p_arm).max())
print("max |total angular momentum| = %.2e N m s" % np.abs(h_base + h_arm).max())
print("  (sdjax.linear_momentum / angular_momentum agree: %.1e, %.1e)" % (np.abs(p_total - (p_base + p_arm)).max(), np.abs(h_total - (h_base + h_arm)).max()))
print("centre-of-mass drift         = %.2e m" % np.abs(np.asarray(com) - np.asarray(com[0])).max())
print("max joint tracking error     = %.2e rad" % np.abs(np.asarray(traj.states.q) - q_ref).max())
print("final joint angles           =", np.round(np.asarray(traj.states.q[-1]), 5))'''
        ),
        new_markdown_cell(f"## {figures[0]}: joint rates and base angular velocity; joint angles and base position"),
        new_code_cell(
            '''s = traj.states
fig, ax = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
for j in range(n):
    ax[0, 0].plot(t, s.qd[:, j], label=f"joint {j + 1}")
    ax[1, 0].plot(t, s.q[:, j], label=f"joint {j + 1}")
for k, c in enumerate("xyz"):
    ax[0, 1].plot(t, s.base_angular_velocity[:, k], label=f"$\\\\omega_{{0,{c}}}$")
    ax[1, 1].plot(t, s.base_position[:, k] - s.base_position[0, k], label=f"$\\\\Delta r_{{0,{c}}}$")
ax[0, 0].set_ylabel("joint rate (rad/s)")
ax[0, 1].set_ylabel("base angular velocity (rad/s)")
ax[1, 0].set_ylabel("joint angle (rad)")
ax[1, 1].set_ylabel("base position deviation (m)")
for a in ax.flat:
    a.grid(alpha=0.3)
    a.legend(fontsize=8, ncol=2)
for a in ax[1]:
    a.set_xlabel("time (s)")
fig.suptitle(f"{model.name}: (A) rates, (B) angles and base position")
fig.tight_layout()
plt.show()'''
        ),
        new_markdown_cell(f"## {figures[1]}: momentum of base and manipulator (they cancel)"),
        new_code_cell(
            '''fig, ax = plt.subplots(2, 3, figsize=(12, 6), sharex=True)
for k, c in enumerate("xyz"):
    ax[0, k].plot(t, p_base[:, k], label="base")
    ax[0, k].plot(t, p_arm[:, k], "--", label="manipulator")
    ax[0, k].plot(t, p_base[:, k] + p_arm[:, k], "k:", label="total")
    ax[0, k].set_title(f"linear momentum {c} (N s)")
    ax[1, k].plot(t, h_base[:, k], label="base")
    ax[1, k].plot(t, h_arm[:, k], "--", label="manipulator")
    ax[1, k].plot(t, h_base[:, k] + h_arm[:, k], "k:", label="total")
    ax[1, k].set_title(f"angular momentum {c} (N m s)")
    ax[1, k].set_xlabel("time (s)")
for a in ax.flat:
    a.grid(alpha=0.3)
ax[0, 0].legend(fontsize=8)
fig.suptitle(f"{model.name}: (A) linear and (B) angular momentum about the inertial origin")
fig.tight_layout()
plt.show()'''
        ),
    ]
    return new_notebook(cells=cells, metadata=_metadata())


def ets7_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# ETS-VII-like robot: resolved-rate reach with the generalized Jacobian\n\n"
            "A 2550 kg satellite with a 6-R arm (`sdjax.models.ets7_like`, published masses, lengths and "
            "`I_zz` of Yoshida 2003, the rest filled in) moves its end point along a straight line to a "
            "target 0.3 m away in 20 s. Resolved motion rate control (seed 003 eqs 110-111) with damped "
            "least squares computes joint rates from the end-point velocity; a computed-torque joint-rate "
            "servo (`sdjax.RateServo` inside `sdjax.ResolvedRateLaw`) makes the joints follow them, and the "
            "base floats freely (zero momentum).\n\n"
            "Both laws below are *feed-forward only* (`position_gain = 0`): joint rates `qd = J^# v_d`. "
            "With the generalized Jacobian `J*` the end point follows the line while the base reacts; with "
            "the fixed-base Jacobian `J_m` the same plan misses, because the base moves under the arm."
        ),
        new_code_cell(SETUP.format(models="ets7_like")),
        new_code_cell(
            '''model = ets7_like()
q0 = jnp.array([0.0, 0.6, -1.2, 0.3, 0.8, 0.2])
state0 = sdjax.make_state(model, q=q0)
start_point = sdjax.forward_kinematics(model, state0).end_point_position[0]
goal = start_point + jnp.array([0.2, -0.15, -0.15])
print("start", np.round(np.asarray(start_point), 4), "goal", np.round(np.asarray(goal), 4),
      "distance %.3f m" % float(jnp.linalg.norm(goal - start_point)))
duration = 20.0
path = sdjax.LinePath(start_point, goal, duration)
dt = 0.05 if QUICK else 0.01
horizon = duration + (2.0 if QUICK else 5.0)
num_steps = int(round(horizon / dt))'''
        ),
        new_code_cell(
            '''def run(base, position_gain=0.0):
    law = sdjax.ResolvedRateLaw(model, path, position_gain=position_gain, rate_gain=5.0, task="position", base=base)
    return sdjax.rollout(model, state0, dt, num_steps, law)


start = time.perf_counter()
runs = {
    "generalized Jacobian J* (floating)": run("floating"),
    "fixed-base Jacobian J_m": run("fixed"),
}
jax.block_until_ready(runs)
print(f"2 x {num_steps} RK4 steps in {time.perf_counter() - start:.1f} s (compile included)")


@jax.jit
@jax.vmap
def end_point(state):
    return sdjax.forward_kinematics(model, state).end_point_position[0]


t = np.asarray(runs["fixed-base Jacobian J_m"].time)
target = np.asarray(jax.vmap(lambda s: path(s)[0])(jnp.asarray(t)))
errors = {}
for name, traj in runs.items():
    errors[name] = np.linalg.norm(np.asarray(end_point(traj.states)) - target, axis=1)
    print(f"{name:38s}: max path error {errors[name].max() * 1e6:10.2f} um, final miss {errors[name][-1] * 1e6:10.2f} um")'''
        ),
        new_markdown_cell("## End-point tracking error and base attitude disturbance (1-2-3 Euler angles, eq 6)"),
        new_code_cell(
            '''def euler123(rotation):
    """(phi, theta, psi) of R = Rz(psi) Ry(theta) Rx(phi) (seed 003 eq 6), degrees."""
    r = np.asarray(rotation)
    return np.degrees(np.stack([np.arctan2(r[:, 2, 1], r[:, 2, 2]), -np.arcsin(np.clip(r[:, 2, 0], -1, 1)), np.arctan2(r[:, 1, 0], r[:, 0, 0])], axis=1))


fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
for (name, traj), style in zip(runs.items(), ("-", "--")):
    ax[0].semilogy(t, np.maximum(errors[name] * 1000, 1e-6), style, label=name)
    angles = euler123(jax.vmap(lambda qt: sdjax.quat_to_matrix(qt))(traj.states.base_quaternion))
    for k, lab in enumerate(("roll", "pitch", "yaw")):
        ax[1].plot(t, angles[:, k], style, color=f"C{k}", label=f"{lab} ({name.split()[0]})")
    deviation = np.asarray(traj.states.base_position - traj.states.base_position[0]) * 1000
    for k, c in enumerate("xyz"):
        ax[2].plot(t, deviation[:, k], style, color=f"C{k}", label=f"{c} ({name.split()[0]})")
ax[0].set_ylabel("|end point - path| (mm)")
ax[1].set_ylabel("base attitude (deg)")
ax[2].set_ylabel("base position deviation x, y, z (mm)")
for a in ax:
    a.set_xlabel("time (s)")
    a.grid(alpha=0.3)
ax[0].legend(fontsize=8)
ax[1].legend(fontsize=7, ncol=2)
ax[2].legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()'''
        ),
        new_markdown_cell(
            "## Manipulability along the path\n\nYoshida's measure `w = prod(singular values)` of the "
            "translational generalized Jacobian `J*` (free-floating) and of the fixed-base `J_m`, evaluated "
            "along the floating run. `J*` is smaller: part of each joint motion is lost to the base reaction."
        ),
        new_code_cell(
            '''traj = runs["generalized Jacobian J* (floating)"]
stride = max(1, num_steps // 200)
states = jax.tree.map(lambda x: x[::stride], traj.states)


@jax.jit
@jax.vmap
def measures(state):
    j_star = sdjax.task_jacobian(model, state, task="position", base="floating")[0]
    j_fixed = sdjax.task_jacobian(model, state, task="position", base="fixed")[0]
    return sdjax.manipulability(j_star).measure, sdjax.manipulability(j_fixed).measure


w_star, w_fixed = measures(states)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(t[::stride], w_star, label="generalized $J^*$ (floating)")
ax.plot(t[::stride], w_fixed, "--", label="fixed-base $J_m$")
ax.set_xlabel("time (s)")
ax.set_ylabel("manipulability (m$^3$)")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()
print("ratio w*/w_m along the path: %.3f .. %.3f" % (np.min(w_star / w_fixed), np.max(w_star / w_fixed)))'''
        ),
        new_markdown_cell(
            "With task-space feedback (`position_gain > 0`) even the fixed-base plan converges to the "
            "target (the feedback corrects the base-induced drift), at the price of larger errors on the way:"
        ),
        new_code_cell(
            '''closed = run("fixed", position_gain=1.0)
err = np.linalg.norm(np.asarray(end_point(closed.states)) - target, axis=1)
print(f"fixed-base Jacobian with K_x = 1/s: max path error {err.max() * 1e6:.1f} um, final miss {err[-1] * 1e6:.2f} um")'''
        ),
    ]
    return new_notebook(cells=cells, metadata=_metadata())


def lagrangian_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Lagrangian dynamics: mass dependence and agreement with the recursive algorithms\n\n"
            "SPACEMAPLE (seed 002) derives `H` and `C` explicitly from the kinetic energy and observes "
            "(section 5) that the fixed-base inertia matrix of a manipulator does not depend on every "
            "link's mass properties everywhere (element `H_jk` only sees links outboard of both joints), "
            "while on a floating base every body reaches every element. `sdjax.lagrange` gets `H` and "
            "`C` by automatic differentiation of the kinetic energy, an independent route from the "
            "recursive composite-body / Newton-Euler code; `mass_parameter_dependence` differentiates `H` "
            "with respect to every body's mass and inertia."
        ),
        new_code_cell(SETUP.format(models="spacedyn_sample") + "\nfrom IPython.display import Markdown, display"),
        new_markdown_cell("## Which bodies reach which element of H (SpaceDyn sample: two 3-joint arms on a base)"),
        new_code_cell(
            '''model = spacedyn_sample()
state = sdjax.make_state(model, q=jnp.array([0.3, -0.4, 0.2, 0.5, 0.7, -0.1]), base_rpy=jnp.array([0.1, -0.2, 0.3]))
for kind in ("fixed_base", "floating_base", "generalized"):
    dependence = sdjax.mass_parameter_dependence(model, state, kind=kind)
    display(Markdown(sdjax.mass_dependence_table(model, dependence)))'''
        ),
        new_markdown_cell(
            "Fixed base: arm 1 (links 1-3) and arm 2 (links 4-6) decouple (`-` in the cross blocks) and "
            "`H_jk` depends only on the links outboard of joints `j` and `k`. Floating base `H`: its joint "
            "block is the same, but the base rows collect every body (the base mass and inertia only enter "
            "the base block). Generalized `H* = H_m - H_0m^T H_0^-1 H_0m` (free floating, zero momentum): "
            "every body, base included, reaches every element, and the two arms are coupled through the "
            "base, so every body's mass properties must be known (or identified) to control either arm."
        ),
        new_markdown_cell(
            "## Recursive vs Lagrangian on a three-arm tree (SPACEMAPLE Table 1 style)\n\n"
            "Three arms of 5, 5 and 4 joints (one prismatic) on one base, random geometry and masses, "
            "with gravity; random states. `H` from composite rigid bodies vs `d2T/dnu2`; `C` from "
            "Newton-Euler (`bias_forces`) vs Lagrange's equation."
        ),
        new_code_cell(
            '''from sdjax.models import random_model


def three_arm_tree(seed):
    base = random_model(seed, 14, gravity=True)
    rng = np.random.default_rng(seed + 1000)
    return sdjax.Model(
        parent=(0, 1, 2, 3, 4, 0, 6, 7, 8, 9, 0, 11, 12, 13),
        joint_type=tuple("P" if i == 8 else "R" for i in range(1, 15)),
        base_mass=base.base_mass, base_inertia=base.base_inertia,
        link_mass=base.link_mass, link_inertia=base.link_inertia,
        parent_centroid_to_joint=base.parent_centroid_to_joint, centroid_to_joint=base.centroid_to_joint,
        joint_rpy=base.joint_rpy, end_point_link=(5, 10, 14),
        centroid_to_end_point=rng.normal(scale=0.3, size=(3, 3)), end_point_rpy=rng.uniform(-np.pi, np.pi, size=(3, 3)),
        gravity=base.gravity, name=f"three_arm_{seed}",
    )


tree = three_arm_tree(0)
rng = np.random.default_rng(1)
num_states = 3 if QUICK else 10
print(f"{'state':>5} {'max|H_rec - H_lag|/max|H|':>27} {'max|c_rec - c_lag|/max|c|':>27}")
for k in range(num_states):
    st = sdjax.make_state(
        tree, base_position=rng.normal(size=3), base_rpy=rng.uniform(-1, 1, 3),
        base_linear_velocity=rng.normal(size=3), base_angular_velocity=rng.normal(size=3),
        q=rng.uniform(-1.5, 1.5, 14), qd=rng.normal(size=14),
    )
    lag = sdjax.lagrangian_terms(tree, st)
    h_rec, c_rec = sdjax.inertia_matrix(tree, st), sdjax.bias_forces(tree, st)
    dh = float(jnp.abs(h_rec - lag.inertia).max() / jnp.abs(h_rec).max())
    dc = float(jnp.abs(c_rec - lag.bias).max() / jnp.abs(c_rec).max())
    print(f"{k:5d} {dh:27.2e} {dc:27.2e}")'''
        ),
        new_markdown_cell(
            "Both routes agree to round-off (~1e-15 relative) on the 20-DOF (6 + 14) system, which is "
            "SPACEMAPLE's verification criterion."
        ),
    ]
    return new_notebook(cells=cells, metadata=_metadata())


def _metadata() -> dict:
    return {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }


NOTEBOOKS = {
    "seed003_planar_four_link.ipynb": lambda: seed003_notebook(
        "planar_four_link",
        "planar four-link spacecraft-manipulator (Figures 5-6)",
        ("Figure 5", "Figure 6"),
        "Planar system: all joint axes along the base z axis, the arm fully extended along x at q = 0.",
    ),
    "seed003_spatial_six_link.ipynb": lambda: seed003_notebook(
        "spatial_six_link",
        "spatial six-link spacecraft-manipulator (Figures 7-8)",
        ("Figure 7", "Figure 8"),
        "Spatial system: joint 1 along the base x axis, joints 2-6 parallel (along base y at q = 0).",
    ),
    "ets7_resolved_rate.ipynb": ets7_notebook,
    "lagrangian_mass_dependence.ipynb": lagrangian_notebook,
}


def write_notebooks(makers: dict, argv: list[str], *, timeout: int = 3600, finish=None) -> None:
    """Write the notebooks ``{file name: () -> notebook}`` into ``notebooks/``, the one writer
    of every ``build_*.py``.

    With ``--execute`` in ``argv`` each is first run full size (outputs stored) and then
    passed to ``finish(notebook)`` if given (e.g. to append a cell that quotes the results);
    other arguments select notebooks by file name.
    """
    execute = "--execute" in argv
    only = [a for a in argv if not a.startswith("--")]
    for name, make in makers.items():
        if only and name not in only:
            continue
        nb = make()
        path = HERE / name
        if execute:
            import nbclient

            nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
            if finish is not None:
                finish(nb)
        nbformat.write(nb, path)
        print("wrote", path, f"{path.stat().st_size / 1e6:.2f} MB")


def percent_sources() -> dict:
    """Notebooks whose source is a py:percent script beside them (``NAME.py`` -> ``NAME.ipynb``,
    read by jupytext): code that linters and reviewers see; tests/test_notebooks.py checks that
    the stored notebook matches it."""
    import jupytext

    return {p.with_suffix(".ipynb").name: (lambda p=p: jupytext.read(p)) for p in sorted(HERE.glob("*.py")) if p.read_text().startswith("# %%")}


def main(argv: list[str]) -> None:
    write_notebooks({**NOTEBOOKS, **percent_sources()}, argv, timeout=1800)


if __name__ == "__main__":
    main(sys.argv[1:])
