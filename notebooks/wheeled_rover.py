# %% [markdown]
# # A wheeled rover on slopes: steady slip, the climbable slope, sliding back
#
# SpaceDyn's papers (seed 001, Fig 7d) show an articulated off-road vehicle simulated with a
# contact model for tyre mechanics. `sdjax.wheels` is that model: wheel rims touching a terrain of
# `sdjax.contact` (plane, inclined plane, height field) with the penalty normal force and a
# regularised slip traction law, Pacejka's Magic Formula `mu f_n MF(s)` on the slip ratio
# `s = (r omega - v_x) / max(|r omega|, |v_x|, eps)`.
#
# Here a four-wheeled rover (`sdjax.models.wheeled_rover`, 48 kg, Mars gravity) drives up slopes
# with its wheel motors held near 2 rad/s. Below the climbable slope `atan(mu)` it reaches a steady
# slip that the closed form `MF(s) = tan(alpha) / mu` predicts; beyond it the traction saturates
# and the rover slides back down with its wheels spinning.

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
from sdjax import contact, wheels
from sdjax.models import wheeled_rover

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
plt.rcParams["figure.dpi"] = 80
print("quick mode" if QUICK else "full run")

# %% [markdown]
# ## The rover and the traction law
#
# Four wheels of radius 0.15 m on two axles 0.7 m apart; the chassis is the floating base. The
# contact is stiff (`k = 2e4 N/m` per wheel, critically damped), the peak friction `mu = 0.6`, and
# the Magic Formula has Pacejka's typical shape (`B = 10`, `C = 1.65`, `E = 0`): traction rises
# with slip to its peak `mu f_n` at `s = tan(pi / 2C) / B ~ 0.14` and falls towards
# `mu f_n sin(C pi / 2)` at full slip.

# %%
model, rover_wheels = wheeled_rover()
mass = float(model.base_mass + jnp.sum(model.link_mass))
g, mu, k, radius = 3.711, 0.6, 2.0e4, 0.15
parameters = contact.ContactParameters(k, contact.damping_for_ratio(1.0, k, mass / 4), friction=mu, slip_velocity=0.02)
formula = wheels.MagicFormula()
print(model.name, "| mass", mass, "kg | wheels at joints", rover_wheels.joints, "| climbable slope",
      np.degrees(float(wheels.climbable_slope(mu, formula))), "deg")

s = np.linspace(0, 1, 201)
plt.figure(figsize=(5, 3))
plt.plot(s, np.asarray(formula(s)))
plt.xlabel("slip ratio s")
plt.ylabel("traction / (mu f_n)")
plt.title("Magic Formula, B = 10, C = 1.65")
plt.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## Driving up three slopes
#
# The slopes have `tan(alpha) / mu = 0.5, 0.9, 1.1`; the third is steeper than `atan(mu)`. Each
# wheel motor gives `20 (2 - qd) N m` (a DC motor at constant voltage). The plane rises along `+x`
# (`inclined_plane(angle, downhill=-x)`) and the rover starts on it, moving uphill at 0.28 m/s.
# One `vmap`ped rollout runs the three slopes (explicit RK4, `dt = 0.5 ms`: the traction law's
# viscous rate at 0.25 m/s is ~1.6e3 /s on the rim, RK4-stable below ~1.8 ms).

# %%
ratios = jnp.asarray([0.5, 0.9, 1.1])
angles = jnp.arctan(ratios * mu)
dt = 5e-4
duration = 1.5 if QUICK else 4.0
num_steps = int(round(duration / dt))
rate, gain = 2.0, 20.0


def climb(angle):
    plane = contact.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])  # chassis on the slope
    height = 0.25 - mass * g * c / 4 / k  # centroid above the plane, minus the static sink
    state = sdjax.make_state(model, base_position=height * rotation[:, 2], base_rotation=rotation,
                             base_linear_velocity=0.28 * rotation[:, 0], qd=jnp.full(4, rate))
    env = wheels.wheel_environment(model, rover_wheels, plane, parameters, drive=wheels.WheelDrive(rate, gain))
    traj = sdjax.rollout(model, state, dt, num_steps, environment=env)
    diagnostics = jax.vmap(lambda x: wheels.wheel_diagnostics(model, x, rover_wheels, plane, parameters))(traj.states)
    uphill = jnp.sum(traj.states.base_linear_velocity * rotation[:, 0], axis=-1)
    distance = (traj.states.base_position - traj.states.base_position[0]) @ rotation[:, 0]
    return traj.time, uphill, distance, diagnostics.slip_ratio, diagnostics.traction, diagnostics.normal_force


start = time.perf_counter()
t, uphill, distance, slip, traction, normal = jax.block_until_ready(jax.vmap(climb)(angles))
print(f"{len(ratios)} slopes x {num_steps} steps in {time.perf_counter() - start:.1f} s (with compilation)")

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
for i, ratio in enumerate(np.asarray(ratios)):
    label = f"{np.degrees(float(angles[i])):.1f} deg (tan/mu = {ratio})"
    axes[0].plot(t[i], uphill[i], label=label)
    axes[1].plot(t[i], slip[i, :, 0], label=label + ", front")
    axes[1].plot(t[i], slip[i, :, 2], "--", color=axes[1].lines[-1].get_color(), label="rear")
    axes[2].plot(t[i], distance[i], label=label)
axes[0].set_ylabel("uphill speed, m/s")
axes[1].set_ylabel("slip ratio")
axes[1].set_ylim(-0.05, 1.2)
axes[2].set_ylabel("distance uphill, m")
for ax in axes:
    ax.set_xlabel("t, s")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
axes[1].legend(fontsize=7, ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Comparison with the closed forms
#
# At a steady climb the tractions balance the weight along the slope, `sum F = M g sin(alpha)`,
# and the normal loads sum to `M g cos(alpha)` however they are distributed. The rover's centre of
# mass sits 0.23 m above the ground, so climbing shifts load to the rear wheels and the front
# wheels slip more; the slip `s*` with `MF(s*) = tan(alpha) / mu` (all wheels at one slip) lies
# between them, and the load-weighted traction `sum mu f_n MF(s_i)` equals `M g sin(alpha)`.
# Beyond `atan(mu)` the traction cannot exceed `mu M g cos(alpha)`: the rover decelerates at least
# at `g (sin(alpha) - mu cos(alpha))` and slides back.

# %%
print(f"{'slope':>8} {'s* closed form':>15} {'front s':>9} {'rear s':>9} {'sum F / M g sin':>16} {'sum f_n / M g cos':>18}")
for i, ratio in enumerate(np.asarray(ratios)):
    a = float(angles[i])
    closed = float(wheels.steady_slope_slip(a, mu, formula))
    print(f"{np.degrees(a):7.2f}° {closed:15.5f} {float(slip[i, -1, 0]):9.5f} {float(slip[i, -1, 2]):9.5f} "
          f"{float(traction[i, -1].sum()) / (mass * g * np.sin(a)):16.8f} {float(normal[i, -1].sum()) / (mass * g * np.cos(a)):18.8f}")
late = np.asarray(t[2]) > 0.5 * duration
deceleration = -np.polyfit(np.asarray(t[2])[late], np.asarray(uphill[2])[late], 1)[0]
bound = g * (np.sin(float(angles[2])) - mu * np.cos(float(angles[2])))
print(f"steepest slope: deceleration {deceleration:.3f} m/s^2 >= g (sin - mu cos) = {bound:.3f} m/s^2; "
      f"final speed {float(uphill[2, -1]):.2f} m/s (sliding back)")

# %% [markdown]
# ## Steady slip against slope
#
# A test rig with its centre of mass in the contact plane (hubs 0.18 m above the chassis centroid)
# transfers no load while climbing: all four wheels turn at one rate and carry `M g cos / 4`, so
# the steady slip equals the closed form exactly (tests/test_wheels.py checks it to 1e-8). Here
# it is swept over slopes up to 95 % of `atan(mu)` in one `vmap`.

# %%
rig, rig_wheels = wheeled_rover(hub_height=0.18)
sweep = jnp.linspace(0.1, 0.95, 4 if QUICK else 8)
rig_steps = int(round((1.0 if QUICK else 2.5) / dt))


def rig_slip(ratio):
    angle = jnp.arctan(ratio * mu)
    plane = contact.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])
    state = sdjax.make_state(rig, base_position=(-0.03 - mass * g * c / 4 / k) * rotation[:, 2], base_rotation=rotation,
                             base_linear_velocity=0.28 * rotation[:, 0], qd=jnp.full(4, rate))
    env = wheels.wheel_environment(rig, rig_wheels, plane, parameters, drive=wheels.WheelDrive(rate, gain))
    final = jax.tree.map(lambda x: x[-1], sdjax.rollout(rig, state, dt, rig_steps, environment=env).states)
    return wheels.wheel_diagnostics(rig, final, rig_wheels, plane, parameters).slip_ratio[0]


simulated = np.asarray(jax.vmap(rig_slip)(sweep))
closed = np.asarray(formula.slip(sweep))
print("max |simulated - closed form| =", float(np.max(np.abs(simulated - closed))))
fine = np.linspace(0, 0.999, 200)
plt.figure(figsize=(5, 3.2))
plt.plot(np.degrees(np.arctan(fine * mu)), np.asarray(formula.slip(fine)), label="closed form MF(s) = tan / mu")
plt.plot(np.degrees(np.arctan(np.asarray(sweep) * mu)), simulated, "o", label="simulated (steady)")
plt.axvline(np.degrees(np.arctan(mu)), color="k", ls=":", label="atan(mu)")
plt.xlabel("slope, deg")
plt.ylabel("steady slip ratio")
plt.legend(fontsize=8)
plt.grid(alpha=0.3)
plt.show()

# %% [markdown]
# ## An articulated rover: rocker-bogie suspension, steering, rolling resistance
#
# Planetary rovers from Sojourner to Perseverance ride on a rocker-bogie: on each side a rocker
# pivoted on the chassis carries the front wheel and, at its rear end, a bogie with the middle and
# rear wheels; a differential turns the two rockers by opposite angles, so the chassis pitches by
# their mean. `sdjax.models.rocker_bogie_rover()` (74 kg) is that vehicle: the differential is a
# mimic joint (the right rocker is joint 8, `q_8 = -q_1`), the four corner wheels steer about
# vertical axes. Below, its left front wheel stands on a 5 cm step: all six wheels keep their
# load, where a rigid six-wheeler of the same layout rocks onto three wheels.

# %%
from sdjax.models import rocker_bogie_rover

rb_model, rb_wheels, rb_steering = rocker_bogie_rover()
rb_mass = float(rb_model.base_mass + jnp.sum(rb_model.link_mass))
rb_parameters = contact.ContactParameters(k, contact.damping_for_ratio(1.0, k, rb_mass / 6), friction=mu, slip_velocity=0.1)
grid = np.arange(-1.5, 1.5 + 1e-9, 0.1)
step = contact.HeightField(0.05 * ((grid[:, None] >= 0.3 - 1e-9) & (grid[None, :] >= 0.2 - 1e-9)),
                           origin=(grid[0], grid[0]), spacing=0.1)  # 5 cm plateau under the left front wheel
rigid6, rigid6_wheels = wheeled_rover(axles=(0.5, 0.0, -0.5), track=1.0, hub_height=-0.3, wheel_radius=0.125)
settle_steps = 3000 if QUICK else 6000  # dt = 0.1 ms at rest (traction viscous below eps: see sdjax.wheels)


def settled_loads(vehicle, vehicle_wheels):
    state = sdjax.make_state(vehicle, base_position=[0.0, 0.0, 0.425 - rb_mass * g / 6 / k])
    env = wheels.wheel_environment(vehicle, vehicle_wheels, step, rb_parameters)
    final = jax.tree.map(lambda x: x[-1], sdjax.rollout(vehicle, state, 1e-4, settle_steps, environment=env).states)
    return final, np.asarray(wheels.wheel_diagnostics(vehicle, final, vehicle_wheels, step, rb_parameters).normal_force)


rb_final, rb_loads = settled_loads(rb_model, rb_wheels)
_, rigid_loads = settled_loads(rigid6, rigid6_wheels)
labels = [f"{a} {s}" for a in ("front", "middle", "rear") for s in ("left", "right")]
rotation = np.asarray(rb_final.base_rotation)
print(f"chassis pitch {np.degrees(np.arctan2(rotation[2, 0], rotation[0, 0])):.3f} deg (closed form: half the left "
      f"rocker's {np.degrees(np.arctan(0.05 / 0.75)):.3f} deg); rockers {np.degrees(float(rb_final.q[0])):.3f}, "
      f"{np.degrees(float(rb_final.q[7])):.3f} deg")
fig, ax = plt.subplots(figsize=(7, 3))
positions = np.arange(6)
ax.bar(positions - 0.2, rb_loads, 0.4, label="rocker-bogie")
ax.bar(positions + 0.2, rigid_loads, 0.4, label="rigid six-wheeler")  # same wheel order
ax.set_xticks(positions, labels, fontsize=8)
ax.set_ylabel("normal load, N")
ax.set_title("left front wheel on a 5 cm step")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### A steered turn with rolling resistance
#
# `wheels.turn_commands` gives the steering angles and wheel rates that turn the rover about one
# point (every wheel axis through it: the Ackermann condition); steering PD loops hold the angles,
# the wheel speed loops the rates. Loose soil resists rolling: `rolling_resistance=0.05` moves each
# normal force ahead of its contact point (`c_rr r`, Wong's model), a couple the motors overcome.
# The rover follows the 2 m circle at about the yaw rate `v / R` the geometry gives: a little
# below it, because each speed loop droops by the torque the couple needs (`c_rr r f_n / gain`,
# ~0.014 rad/s of 1.2-2 rad/s); without rolling resistance the test suite finds `v / R` to 3e-3.

# %%
kappa, speed = 0.5, 0.2
angles, rates = wheels.turn_commands(rb_model, rb_wheels, rb_steering, kappa, speed)
steered = np.array(rb_steering)
joints_q = jnp.zeros(rb_model.num_joints).at[steered[steered > 0] - 1].set(angles[steered > 0])
kp = jnp.zeros(rb_model.num_joints).at[steered[steered > 0] - 1].set(100.0)
steering_pd = sdjax.JointPD(kp, 0.02 * kp, (joints_q, jnp.zeros(rb_model.num_joints)))
independent = np.asarray(rb_model.independent_joints) - 1
joint_rates = jnp.zeros(rb_model.num_joints).at[np.asarray(rb_wheels.joints) - 1].set(rates)
turn_state = sdjax.make_state(rb_model, base_position=[0.0, 0.0, 0.425 - rb_mass * g / 6 / k],
                              base_linear_velocity=[speed, 0.0, 0.0], base_angular_velocity=[0.0, 0.0, speed * kappa],
                              q=joints_q[independent], qd=joint_rates[independent])
turn_parameters = contact.ContactParameters(k, contact.damping_for_ratio(1.0, k, rb_mass / 6), friction=mu,
                                            slip_velocity=0.02)
turn_env = wheels.wheel_environment(rb_model, rb_wheels, contact.Plane(), turn_parameters,
                                    drive=wheels.WheelDrive(rates, 20.0), rolling_resistance=0.05)
turn_steps = int(round((4.0 if QUICK else 2 * np.pi / (speed * kappa)) / dt))  # full run: one lap
start = time.perf_counter()
turn = jax.block_until_ready(sdjax.rollout(rb_model, turn_state, dt, turn_steps, steering_pd, environment=turn_env))
print(f"{turn_steps} steps in {time.perf_counter() - start:.1f} s (with compilation)")
yaw_rate = np.asarray(turn.states.base_angular_velocity[:, 2])
print(f"yaw rate at the end {yaw_rate[-1]:.5f} rad/s, v / R = {speed * kappa:.5f} rad/s")
path = np.asarray(turn.states.base_position)
circle = np.linspace(0, 2 * np.pi, 200)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
axes[0].plot(path[:, 0], path[:, 1], label="chassis centroid")
axes[0].plot(2.0 * np.sin(circle), 2.0 - 2.0 * np.cos(circle), "k:", label="circle of radius 1 / kappa")
axes[0].set_aspect("equal")
axes[0].set_xlabel("x, m")
axes[0].set_ylabel("y, m")
axes[0].legend(fontsize=8)
axes[1].plot(np.asarray(turn.time), yaw_rate, label="simulated")
axes[1].axhline(speed * kappa, color="k", ls=":", label="v / R")
axes[1].set_ylim(0.09, 0.11)  # (the first 0.2 s: the wheels settle onto the ground)
axes[1].set_xlabel("t, s")
axes[1].set_ylabel("yaw rate, rad/s")
axes[1].legend(fontsize=8)
for ax in axes:
    ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()
