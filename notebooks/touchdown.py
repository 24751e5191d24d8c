# %% [markdown]
# # Touchdown on a small body, restitution, and a rover on a slope
#
# Seed 000 (section 3.8) simulates the MUSES-C asteroid touchdown with a ground-contact force model. `sdjax.contact` provides a smooth penalty contact: a clipped Kelvin-Voigt normal force (never pulling, smooth onset) and regularised Coulomb friction, between spheres on bodies and a plane or a height field, plugged into `sdjax.rollout(..., environment=...)` (evaluated at every RK4 stage).
#
# Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) shortens the runs.

# %%
import os
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
from sdjax import contact as sc
from sdjax.models.lander import lander, point_mass_probe
from sdjax.models.rover import rover

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
plt.rcParams["figure.dpi"] = 80
print("quick mode" if QUICK else "full run")

# %% [markdown]
# ## 1. Restitution of one contact vs damping
#
# A 500 kg probe hits a plane at 5 cm/s on one point under its centroid (no gravity). The sim's coefficient of restitution is compared with the clipped spring-damper closed form (`restitution_no_adhesion`: the contact ends when `k delta + c delta_dot = 0`) and with the textbook `exp(-zeta pi / sqrt(1 - zeta^2))` of a spring-damper that may pull.

# %%
probe = point_mass_probe(mass=500.0, inertia=100.0, gravity=0.0)
point = sc.ContactSpheres([0], [[0.0, 0.0, 0.0]])
k, v0 = 5.0e4, 0.05
wn = np.sqrt(k / 500.0)
zetas = np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7])
state = sdjax.make_state(probe, base_position=[0, 0, 1e-4], base_linear_velocity=[0, 0, -v0])
dt = 0.005 / wn


def rebound(c):
    env = sc.contact_environment(probe, point, sc.Plane(), sc.ContactParameters(k, c, smoothing=1e-6))
    return sdjax.rollout(probe, state, jnp.asarray(dt), int(4.5 / 0.005), environment=env).states.base_linear_velocity[-1, 2] / v0


e_sim = np.asarray(jax.vmap(rebound)(jnp.asarray(np.asarray(sc.damping_for_ratio(zetas, k, 500.0)))))
e_clip = np.asarray(sc.restitution_no_adhesion(zetas))
e_lin = np.asarray(sc.restitution_linear(zetas))
print(" zeta   e (sim)   e (clipped closed form)   e (linear, may pull)   |sim - clipped|")
for z, a, b, c in zip(zetas, e_sim, e_clip, e_lin):
    print(f"{z:5.2f}  {a:8.5f}  {b:12.5f}  {c:22.5f}  {abs(a - b):14.1e}")
g_small = 1e-4
print(f"rebound at zeta = 0.3 in {g_small} m/s^2: height {(e_sim[4] * v0) ** 2 / (2 * g_small):.2f} m, flight {2 * e_sim[4] * v0 / g_small:.0f} s")

# %% [markdown]
# ## 2. Lander touchdown in micro-gravity
#
# `sdjax.models.lander()`: a 500 kg bus on four telescopic visco-elastic legs, foot pads (10 cm spheres) on the leg tips, gravity 1e-4 m/s^2, touchdown at 5 cm/s with some lateral drift and tilt. The step comes from `stable_time_step` with the peak normal force estimated as `m v0 w_n` (explicit RK4: the regularised friction is the stiffest term).

# %%
model = lander()
feet = sc.ContactSpheres.at_end_points(model, 0.1)
params = sc.ContactParameters(5.0e4, 1.0e3, friction=0.3, slip_velocity=0.01, smoothing=1e-5)
ground = sc.Plane()
foot_depth = -float(sdjax.forward_kinematics(model, sdjax.make_state(model)).end_point_position[0, 2]) + 0.1
state0 = sdjax.make_state(model, base_position=[0, 0, foot_depth + 0.06], base_linear_velocity=[0.01, 0.0, -0.05], base_rpy=[0.04, -0.02, 0.0])
peak = 500.0 * 0.05 * np.sqrt(4 * 5.0e4 / 500.0)
dt = sc.stable_time_step(model, state0, feet, ground, params, normal_force=peak / 2)
horizon = 2.0 if QUICK else 6.0  # 6 cm gap: the 0.04 rad tilt lowers one foot by ~4 cm
steps = int(horizon / dt)
env = sc.contact_environment(model, feet, ground, params)
start = time.perf_counter()
traj = sdjax.rollout(model, state0, jnp.asarray(dt), steps, environment=env)
jax.block_until_ready(traj.states.q)
print(f"dt = {dt * 1e3:.3f} ms, {steps} steps in {time.perf_counter() - start:.1f} s (compile included)")
diag = jax.vmap(lambda s: sc.contact_diagnostics(model, s, feet, ground, params))(traj.states)
t = np.asarray(traj.time)
vz = np.asarray(traj.states.base_linear_velocity[:, 2])
print(f"vertical velocity: {vz[0]:+.4f} -> {vz[-1]:+.4f} m/s (system restitution {vz[-1] / -vz[0]:.3f})")
print(f"peak foot force {float(diag.normal_force.max()):.0f} N, peak penetration {1e3 * float(diag.penetration.max()):.2f} mm, max leg stroke {1e3 * float(jnp.abs(traj.states.q).max()):.2f} mm")
fig, ax = plt.subplots(1, 3, figsize=(13, 3.5))
ax[0].plot(t, np.asarray(traj.states.base_position[:, 2]) - foot_depth)
ax[0].set_ylabel("bus height above touchdown height (m)")
ax[1].plot(t, np.asarray(diag.normal_force))
ax[1].set_ylabel("foot normal force (N)")
ax[2].plot(t, 1e3 * np.asarray(traj.states.q))
ax[2].set_ylabel("leg stroke (mm)")
for a in ax:
    a.set_xlabel("time (s)")
    a.grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Rover on a slope: stick or slide
#
# `sdjax.models.rover()` (40 kg body, four legs on compliant hips, Mars gravity) stands on a 0.3 rad slope. With `mu < tan(0.3) = 0.31` it slides with acceleration `g (sin - mu cos)`; above it stays, creeping at the regularised-friction speed.

# %%
rov = rover()
feet = sc.ContactSpheres.at_end_points(rov, 0.03)
angle, g = 0.3, 3.711
slope = sc.inclined_plane(angle)
rotation = np.asarray(sdjax.rpy_to_matrix(jnp.array([0.0, angle, 0.0])))
state0 = sdjax.make_state(rov, base_position=(0.1 + 0.35 + 0.03 + 1e-3) * np.asarray(slope.normal), base_rotation=rotation)
downhill = jnp.array([np.cos(angle), 0.0, -np.sin(angle)])
dt, steps = 1e-4, (15000 if QUICK else 30000)


def slide(mu):
    env = sc.contact_environment(rov, feet, slope, sc.ContactParameters(2.0e4, 300.0, friction=mu, slip_velocity=1e-3, smoothing=1e-5))
    states = sdjax.rollout(rov, state0, jnp.asarray(dt), steps, environment=env).states
    return jax.vmap(lambda s: sdjax.center_of_mass_velocity(rov, s))(states) @ downhill


mus = np.array([0.1, 0.2, 0.25, 0.4, 0.6])
speed = np.asarray(jax.vmap(slide)(jnp.asarray(mus)))
t = dt * np.arange(steps + 1)
late = t > 0.5 * t[-1]
print("  mu   COM acceleration (sim)   g (sin - mu cos)   final speed (m/s)")
for mu, v in zip(mus, speed):
    a = np.polyfit(t[late], v[late], 1)[0]
    print(f"{mu:4.2f}  {a:14.5f}  {max(g * (np.sin(angle) - mu * np.cos(angle)), 0.0):16.5f}  {v[-1]:14.5f}")
plt.figure(figsize=(6, 3.5))
for mu, v in zip(mus, speed):
    plt.plot(t, v, label=f"mu = {mu}")
plt.xlabel("time (s)")
plt.ylabel("downhill COM speed (m/s)")
plt.legend()
plt.grid(alpha=0.3)
plt.show()
