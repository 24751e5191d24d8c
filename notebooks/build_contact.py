"""Write (and optionally execute) notebooks/touchdown.ipynb and notebooks/capture_detumble.ipynb.

    python notebooks/build_contact.py            # write the notebooks (no outputs)
    python notebooks/build_contact.py --execute  # write and run them full size (outputs stored)

Follows build_notebooks.py (same setup cell, same quick-mode switch).
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_notebooks import SETUP, _metadata, write_notebooks  # noqa: E402


def touchdown_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Touchdown on a small body, restitution, and a rover on a slope\n\n"
            "Seed 000 (section 3.8) simulates the MUSES-C asteroid touchdown with a ground-contact force model. "
            "`sdjax.contact` provides a smooth penalty contact: a clipped Kelvin-Voigt normal force (never pulling, "
            "smooth onset) and regularised Coulomb friction, between spheres on bodies and a plane or a height field, "
            "plugged into `sdjax.rollout(..., environment=...)` (evaluated at every RK4 stage).\n\n"
            "Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) shortens the runs."
        ),
        new_code_cell(SETUP.format(models="random_model") + "\nfrom sdjax import contact as sc\nfrom sdjax.models.lander import lander, point_mass_probe\nfrom sdjax.models.rover import rover"),
        new_markdown_cell(
            "## 1. Restitution of one contact vs damping\n\nA 500 kg probe hits a plane at 5 cm/s on one point "
            "under its centroid (no gravity). The sim's coefficient of restitution is compared with the clipped "
            "spring-damper closed form (`restitution_no_adhesion`: the contact ends when `k delta + c delta_dot = 0`) and "
            "with the textbook `exp(-zeta pi / sqrt(1 - zeta^2))` of a spring-damper that may pull."
        ),
        new_code_cell(
            '''probe = point_mass_probe(mass=500.0, inertia=100.0, gravity=0.0)
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
print(f"rebound at zeta = 0.3 in {g_small} m/s^2: height {(e_sim[4] * v0) ** 2 / (2 * g_small):.2f} m, flight {2 * e_sim[4] * v0 / g_small:.0f} s")'''
        ),
        new_markdown_cell(
            "## 2. Lander touchdown in micro-gravity\n\n`sdjax.models.lander()`: a 500 kg bus on four telescopic "
            "visco-elastic legs, foot pads (10 cm spheres) on the leg tips, gravity 1e-4 m/s^2, touchdown at 5 cm/s "
            "with some lateral drift and tilt. The step comes from `stable_time_step` with the peak normal force "
            "estimated as `m v0 w_n` (explicit RK4: the regularised friction is the stiffest term)."
        ),
        new_code_cell(
            '''model = lander()
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
plt.show()'''
        ),
        new_markdown_cell(
            "## 3. Rover on a slope: stick or slide\n\n`sdjax.models.rover()` (40 kg body, four legs on compliant hips, "
            "Mars gravity) stands on a 0.3 rad slope. With `mu < tan(0.3) = 0.31` it slides with acceleration "
            "`g (sin - mu cos)`; above it stays, creeping at the regularised-friction speed."
        ),
        new_code_cell(
            '''rov = rover()
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
plt.show()'''
        ),
    ]
    return new_notebook(cells=cells, metadata=_metadata())


def capture_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Capture and detumbling of a free-floating target\n\n"
            "A 500 kg servicer with a 7-joint arm (`free_flying_arm_7dof`) grasps the handle of a tumbling 250 kg "
            "target (`sdjax.models.target.tumbling_target`). The grasp is a virtual cut (seed 000): a stiff 6-D "
            "spring-damper between the hand frame and the handle frame (orientation error from the quaternion log). "
            "`sdjax.capture.pair_rollout` integrates both systems together (RK4, cut loads at every stage); "
            "`DetumbleLaw` damps the hand's motion relative to the servicer base through the arm. All loads are "
            "internal: the pair's total momentum is conserved while the relative tumbling decays.\n\n"
            "Quick mode shortens the run."
        ),
        new_code_cell(SETUP.format(models="free_flying_arm_7dof") + "\nfrom sdjax import capture as cp\nfrom sdjax.models.builtin import free_flying_arm_initial_q\nfrom sdjax.models.target import TARGET_HANDLE_OFFSET, tumbling_target"),
        new_code_cell(
            '''robot, target = free_flying_arm_7dof(), tumbling_target()
q0 = free_flying_arm_initial_q()
robot_state = sdjax.make_state(robot, q=q0)
cut = cp.VirtualCut(cp.BodyFrame.end_point(robot), cp.BodyFrame(0, TARGET_HANDLE_OFFSET), stiffness=2e5, damping=2e3, rotational_stiffness=2e3, rotational_damping=5.0)
pair = cp.PairState(robot_state, cp.place_target(robot, robot_state, target, cut, angular_velocity=[0.05, -0.03, 0.08]))
law = cp.DetumbleLaw(robot, kp=100.0, kd=2.0, q_hold=q0, linear_damping=100.0, angular_damping=20.0)
dt = 5e-4  # the 20 N m s/rad hand damping on the 0.013 kg m^2 wrist roll needs dt < 2 I / D = 1.3 ms (held control)
steps = int((5.0 if QUICK else 20.0) / dt)
start = time.perf_counter()
traj = cp.pair_rollout(robot, target, cut, pair, dt, steps, law)
jax.block_until_ready(traj.states.robot.q)
print(f"{steps} steps in {time.perf_counter() - start:.1f} s (compile included)")
P, L = jax.vmap(lambda s: cp.pair_momentum(robot, target, s))(traj.states)
E = jax.vmap(lambda s: cp.pair_energy(robot, target, cut, s))(traj.states)
err, ang = jax.vmap(lambda s: cp.cut_error(robot, target, cut, s))(traj.states)
rel = np.linalg.norm(np.asarray(traj.states.target.base_angular_velocity - traj.states.robot.base_angular_velocity), axis=1)
print(f"linear momentum drift  {float(jnp.abs(P - P[0]).max()):.1e} N s   (|P| = {float(jnp.linalg.norm(P[0])):.2f})")
print(f"angular momentum drift {float(jnp.abs(L - L[0]).max()):.1e} N m s (|L| = {float(jnp.linalg.norm(L[0])):.2f})")
print(f"relative angular velocity {rel[0]:.4f} -> {rel[-1]:.4f} rad/s; max cut opening {1e3 * float(err.max()):.3f} mm, {float(ang.max()):.4f} rad")
t = np.asarray(traj.time)
fig, ax = plt.subplots(1, 3, figsize=(13, 3.5))
ax[0].plot(t, rel)
ax[0].set_ylabel("|w_target - w_servicer| (rad/s)")
ax[1].plot(t, np.asarray(E))
ax[1].set_ylabel("kinetic + cut spring energy (J)")
ax[2].plot(t, 1e3 * np.asarray(err))
ax[2].set_ylabel("cut opening (mm)")
for a in ax:
    a.set_xlabel("time (s)")
    a.grid(alpha=0.3)
fig.tight_layout()
plt.show()'''
        ),
    ]
    return new_notebook(cells=cells, metadata=_metadata())


NOTEBOOKS = {"touchdown.ipynb": touchdown_notebook, "capture_detumble.ipynb": capture_notebook}


def main(argv: list[str]) -> None:
    write_notebooks(NOTEBOOKS, argv, timeout=1800)


if __name__ == "__main__":
    main(sys.argv[1:])
