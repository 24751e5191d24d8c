# %% [markdown]
# # sdjax quick start
#
# From a model to a simulated, plotted and animated run in a few calls:
#
# 1. build (or load) a **model**: a base with a tree of links;
# 2. pick an initial **state** and a **controller**;
# 3. **simulate** it (`sdjax.simulation.simulate`: `sdjax.rollout` in chunks, with a progress bar);
# 4. save and reload the **run file** (`.npz`, model included);
# 5. **plot** the time histories and **animate** the motion (`sdjax.plotting`).
#
# The same steps from a shell: `sdjax info`, `sdjax simulate`, `sdjax plot` (last section). Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) simulates 2 s with a coarser step and animates a few frames; the stored outputs are from the full run (8 s at 0.01 s).

# %%
import base64
import os
import pathlib
import tempfile

import jax

jax.config.update("jax_enable_x64", True)   # sdjax never changes JAX's configuration itself
import jax.numpy as jnp
import matplotlib

if os.environ.get("MPLBACKEND") is None:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, display

import sdjax
from sdjax import plotting
from sdjax.cli import main as sdjax_cli
from sdjax.models import spacedyn_sample
from sdjax.simulation import SimulationRun, load_run, simulate

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
WORK = pathlib.Path(tempfile.mkdtemp(prefix="sdjax_quickstart_"))
plt.rcParams["figure.dpi"] = 70
print("quick mode" if QUICK else "full run", "| files in", WORK)

# %% [markdown]
# ## 1. A model
#
# `spacedyn_sample()` is SpaceDyn's sample robot: a 100 kg base with two revolute-revolute-prismatic arms. Any model can be written to and read from a JSON file (`sdjax.save_json_model` / `sdjax.load_json_model`; the format is documented in `sdjax/io/json_model.py`). `sdjax info` describes a model: its tree, masses, end points and a check of its inertia matrix.

# %%
path = WORK / "robot.json"
sdjax.save_json_model(spacedyn_sample(), path)
model = sdjax.load_json_model(path)      # exactly the model that was saved
sdjax_cli(["info", str(path)]);          # the command line `sdjax info robot.json`

# %% [markdown]
# ## 2. Initial state and controller
#
# The robot starts at rest with its joints at zero and floats free (no gravity, no external force). A joint PD law tracks a smooth rest-to-rest (quintic) path to the target in 4 s. The gains are scaled by each joint's effective inertia (diagonal of the generalized inertia `H*`, which accounts for the base reacting), for a critically damped 2 rad/s response.

# %%
state = sdjax.make_state(model)                           # q = 0, base at rest at the origin
target = jnp.array([0.3, 0.2, 0.1, 0.6, 0.5, 0.4])       # rad, rad, m, rad, rad, m
inertia = jnp.diagonal(sdjax.generalized_inertia_matrix(model, state))
bandwidth = 2.0                                           # rad/s
controller = sdjax.JointPD(
    kp=inertia * bandwidth**2,
    kd=2.0 * inertia * bandwidth,
    reference=sdjax.QuinticJointReference(state.q, target, duration=4.0),
)
print('kp [N m/rad | N/m]:', np.round(np.asarray(controller.kp), 2))

# %% [markdown]
# ## 3. Simulate
#
# `simulate` runs `sdjax.rollout` (RK4, control held over each step) in chunks of `chunk_steps` steps: one compiled program is reused for every chunk, each chunk's states go to host memory, and a progress bar (or a callback) reports after each chunk. The result equals one `sdjax.rollout` call.

# %%
dt, duration = (0.02, 2.0) if QUICK else (0.01, 8.0)
trajectory = simulate(model, state, dt, duration=duration, control=controller, chunk_steps=200, progress=True)
last = jax.tree.map(lambda x: x[-1], trajectory.states)
print(f'{trajectory.time.shape[0] - 1} steps of {dt} s')
print('final q :', np.round(np.asarray(last.q), 4))
print('target  :', np.asarray(target))

# %% [markdown]
# ## 4. Run files
#
# A `SimulationRun` bundles the model, the trajectory, derived time series (momenta, energies, centre of mass, the work of the joint torques) and free-form facts. `save` writes a compressed `.npz` without pickles (`time`, `state/<field>`, `controls/<field>`, `quantity/<name>` and a JSON `meta` entry holding the model), so a run can be plotted later without the model file (`sdjax plot run.npz`).

# %%
run = SimulationRun(model, trajectory, info={"dt": dt, "controller": "joint PD, quintic path"})
run.save(WORK / "run.npz")
run = load_run(WORK / "run.npz")
print(run)
momentum = np.concatenate([run.quantities["linear_momentum"], run.quantities["angular_momentum"]], axis=1)
print(f'largest momentum over the run: {np.max(np.abs(momentum)):.1e} (started at rest: conserved at zero)')

# %% [markdown]
# ## 5. Time histories
#
# Each function returns a matplotlib Figure. The joints reach their targets; the base moves and turns in reaction (a free-floating system keeps its momentum, here zero); the energy plot checks the balance *total energy = initial energy + work of the joint torques* (bottom panel: the residual, at the integrator's error).

# %%
plotting.plot_joints(run.model, run.trajectory)
plt.show()

# %%
plotting.plot_base(run.model, run.trajectory)
plt.show()

# %%
plotting.plot_momentum(run.model, run.trajectory, run.quantities)
plotting.plot_energy(run.model, run.trajectory, run.quantities)
plt.show()

# %% [markdown]
# ## 6. Stick figure and animation
#
# Links are drawn as bones from each body's centroid to its joint, its children's joints and its end points; joints are white circles, end points orange triangles (with their paths), the base is its inertia-equivalent box with its frame axes (x red, y green, z blue). `plot_frame` draws one state; `animate` writes a GIF (or an MP4 with ffmpeg) with fixed, equal-scale axes covering the whole motion.

# %%
plotting.plot_frame(run.model, last, time=float(run.trajectory.time[-1]), figsize=(5, 5))
plt.show()

# %%
gif = plotting.animate(run.model, run.trajectory, WORK / "run.gif", fps=10, speed=2.0,
                       max_frames=8 if QUICK else 40, dpi=60, figsize=(5, 5))
data = base64.b64encode(pathlib.Path(gif).read_bytes()).decode()
display(HTML(f'<img src="data:image/gif;base64,{data}" width="360">'))

# %% [markdown]
# ## 7. The same from a shell
#
# ```bash
# sdjax info robot.json                      # or a built-in name: sdjax info spacedyn_sample
# sdjax simulate robot.json --duration 8 --dt 0.01 --controller pd \
#       --target 0.3 0.2 0.1 0.6 0.5 0.4 --move-time 4 --bandwidth 2 --out run.npz
# sdjax plot run.npz --out plots/ --animate run.gif
# ```
#
# `sdjax simulate --help` lists the options (initial joint positions and rates, base attitude, computed-torque control, explicit gains, the integrator, chunk size).

# %%
status = sdjax_cli(["simulate", str(path), "--duration", "3", "--dt", "0.02", "--controller", "pd",
                   "--target", "0.3", "0.2", "0.1", "0.6", "0.5", "0.4", "--move-time", "1.5",
                   "--bandwidth", "3", "--out", str(WORK / "cli_run.npz")])
print('exit status', status)
