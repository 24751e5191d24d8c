# %% [markdown]
# # Seed 003: the numerical simulations (Figures 5-8)
#
# Wilde et al. (seed 003, section *Numerical Simulations*) drive one joint at a time through the cycle +0.1 rad/s for 10 s, rest 2 s, -0.1 rad/s for 20 s, rest 2 s, +0.1 rad/s for 10 s (back to zero), with computed-torque control (eqs 112-115, `Kp = Kd = 1`, exact model `H~ = H`, `C~ = C`) on a *floating* (zero-momentum) system, for two spacecraft-manipulators:
#
# - the **planar four-link** system (Figures 5-6): all joint axes along the base z axis, the arm fully extended along x at q = 0;
# - the **spatial six-link** system (Figures 7-8): joint 1 along the base x axis, joints 2-6 parallel (along base y at q = 0).
#
# Each model is built from a customised DH table (eqs 1-10) with `sdjax.io.model_from_dh`; the seed's Tables 3-6 are not available, so the parameters are chosen (see the builders' docstrings). The same code runs both systems. Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) simulates only joint 1's cycle with a coarser step.

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
from sdjax.models import planar_four_link, spatial_six_link

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
plt.rcParams["figure.dpi"] = 80
print("quick mode" if QUICK else "full run")

# %% [markdown]
# ## Desired joint trajectory
#
# The rate switches between 0, +-0.1 rad/s through 1 s smooth (cubic) ramps starting at the switch times 0, 10, 12, 32, 34, 44 s (so the plateaus last 10, 2, 20, 2 and 10 s between ramp mid-points) and the reference acceleration `qdd_d` is finite; each joint's cycle lasts 45 s and returns it exactly to zero before the next joint starts.

# %%
RATE, RAMP, CYCLE = 0.1, 1.0, 45.0
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


def reference_for(n):
    """The reference (q, qd, qdd) of an n-joint arm at time t: joint k (0-based) runs its cycle
    during [45 k, 45 (k + 1)) s."""

    def reference(t):
        tau = t - CYCLE * jnp.arange(n)
        active = (tau >= 0) & (tau < CYCLE)
        q, qd, qdd = joint_cycle(jnp.where(active, tau, 0.0))
        return jnp.where(active, q, 0.0), jnp.where(active, qd, 0.0), jnp.where(active, qdd, 0.0)

    return reference


t_check = jnp.linspace(0.0, CYCLE - 1e-9, 4501)
q1, qd1, _ = jax.vmap(reference_for(1))(t_check)
print("joint 1: max rate %.4f rad/s, max angle %.4f rad, angle and rate at the end of its cycle %.1e rad, %.1e rad/s"
      % (qd1[:, 0].max(), q1[:, 0].max(), q1[-1, 0], qd1[-1, 0]))

# %% [markdown]
# ## Floating rollout under computed-torque control, and the figures
#
# `sdjax.ComputedTorque` with `base="floating"` uses the generalized (momentum-reduced) inertia `H*` and bias of the exact model; `sdjax.rollout` integrates the full free-floating dynamics with RK4 (base free, zero initial momentum). Each body's momentum (linear `m v`, angular `I w + r x m v` about the inertial origin) splits the system's momentum into the base's and the manipulator's: they cancel, and the totals stay at zero to round-off.

# %%
def describe(model):
    """The model's size, masses, joint axes and end point at q = 0."""
    print(model.name, '| links:', model.num_joints, '| base mass', float(model.base_mass), 'kg | arm mass', float(jnp.sum(model.link_mass)), 'kg')
    kin0 = sdjax.forward_kinematics(model, sdjax.make_state(model))
    print('joint axes at q = 0 (base frame):')
    print(np.round(np.asarray(kin0.joint_axis), 6))
    print('end effector at q = 0:', np.round(np.asarray(kin0.end_point_position[0]), 4))


def simulate(model):
    """Every joint's cycle in turn (joint 1's alone in quick mode) under the floating
    computed-torque law; prints the conservation checks. Returns the trajectory and the base's
    and the manipulator's linear and angular momentum over it."""
    n = model.num_joints
    reference = reference_for(n)
    dt = 0.05 if QUICK else 0.01
    horizon = CYCLE if QUICK else CYCLE * n
    num_steps = int(round(horizon / dt))
    law = sdjax.ComputedTorque(model, kp=1.0, kd=1.0, reference=reference, base="floating")
    start = time.perf_counter()
    traj = sdjax.rollout(model, sdjax.make_state(model), dt, num_steps, law)
    jax.block_until_ready(traj.states.q)
    print(f"{num_steps} RK4 steps of {dt} s ({horizon:.0f} s) in {time.perf_counter() - start:.1f} s (compile included)")

    masses = jnp.concatenate([model.base_mass[None], model.link_mass])
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
    momentum = {
        "p_base": np.asarray(p[:, 0]), "p_arm": np.asarray(p[:, 1:].sum(1)),
        "h_base": np.asarray(h[:, 0]), "h_arm": np.asarray(h[:, 1:].sum(1)),
    }
    p_sum, h_sum = momentum["p_base"] + momentum["p_arm"], momentum["h_base"] + momentum["h_arm"]
    q_ref = np.asarray(jax.vmap(reference)(traj.time)[0])
    print("max |total linear momentum|  = %.2e N s" % np.abs(p_sum).max())
    print("max |total angular momentum| = %.2e N m s" % np.abs(h_sum).max())
    print("  (sdjax.linear_momentum / angular_momentum agree: %.1e, %.1e)" % (np.abs(p_total - p_sum).max(), np.abs(h_total - h_sum).max()))
    print("centre-of-mass drift         = %.2e m" % np.abs(np.asarray(com) - np.asarray(com[0])).max())
    print("max joint tracking error     = %.2e rad" % np.abs(np.asarray(traj.states.q) - q_ref).max())
    print("final joint angles           =", np.round(np.asarray(traj.states.q[-1]), 5))
    return traj, momentum


def plot_motion(model, traj):
    """(A) joint rates and base angular velocity; (B) joint angles and base position."""
    t, s = np.asarray(traj.time), traj.states
    fig, ax = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
    for j in range(model.num_joints):
        ax[0, 0].plot(t, s.qd[:, j], label=f"joint {j + 1}")
        ax[1, 0].plot(t, s.q[:, j], label=f"joint {j + 1}")
    for k, c in enumerate("xyz"):
        ax[0, 1].plot(t, s.base_angular_velocity[:, k], label=f"$\\omega_{{0,{c}}}$")
        ax[1, 1].plot(t, s.base_position[:, k] - s.base_position[0, k], label=f"$\\Delta r_{{0,{c}}}$")
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
    plt.show()


def plot_momentum(model, traj, momentum):
    """(A) linear and (B) angular momentum of the base, the manipulator and their sum."""
    t = np.asarray(traj.time)
    fig, ax = plt.subplots(2, 3, figsize=(12, 6), sharex=True)
    for k, c in enumerate("xyz"):
        for row, (kind, title, unit) in enumerate((("p", "linear", "N s"), ("h", "angular", "N m s"))):
            base, arm = momentum[f"{kind}_base"][:, k], momentum[f"{kind}_arm"][:, k]
            ax[row, k].plot(t, base, label="base")
            ax[row, k].plot(t, arm, "--", label="manipulator")
            ax[row, k].plot(t, base + arm, "k:", label="total")
            ax[row, k].set_title(f"{title} momentum {c} ({unit})")
        ax[1, k].set_xlabel("time (s)")
    for a in ax.flat:
        a.grid(alpha=0.3)
    ax[0, 0].legend(fontsize=8)
    fig.suptitle(f"{model.name}: (A) linear and (B) angular momentum about the inertial origin")
    fig.tight_layout()
    plt.show()


# %% [markdown]
# ## The planar four-link system

# %%
planar = planar_four_link()
describe(planar)
planar_traj, planar_momentum = simulate(planar)

# %% [markdown]
# ### Figure 5: joint rates and base angular velocity; joint angles and base position

# %%
plot_motion(planar, planar_traj)

# %% [markdown]
# ### Figure 6: momentum of base and manipulator (they cancel)

# %%
plot_momentum(planar, planar_traj, planar_momentum)

# %% [markdown]
# ## The spatial six-link system

# %%
spatial = spatial_six_link()
describe(spatial)
spatial_traj, spatial_momentum = simulate(spatial)

# %% [markdown]
# ### Figure 7: joint rates and base angular velocity; joint angles and base position

# %%
plot_motion(spatial, spatial_traj)

# %% [markdown]
# ### Figure 8: momentum of base and manipulator (they cancel)

# %%
plot_momentum(spatial, spatial_traj, spatial_momentum)
