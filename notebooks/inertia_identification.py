# %% [markdown]
# # Inertia identification of a captured payload
#
# A 500 kg servicer with a 7-joint arm (`sdjax.models.free_flying_arm_7dof`) has grasped an unknown rigid object with its last link. From measured base pose and twist, joint angles and rates (and, optionally, joint torques) of a floating manoeuvre, `sdjax.identify` recovers the payload's mass, centre of mass and inertia tensor (10 parameters).
#
# * **Parameterisation**: log-Cholesky coordinates of the 4x4 pseudo-inertia `J = [[Sigma, h], [h^T, m]]` (Rucker and Wensing 2022): every iterate is a physically consistent rigid body (positive mass, triangle inequality).
# * **Residual**: conservation of the system momentum `[P; L_O]` (no torque sensing); the unknown constant momentum is eliminated by subtracting the sample mean. The residual is linear in the 10 parameters; the known base anchors the mass scale (momentum conservation alone cannot fix it).
# * **Optimiser**: Levenberg-Marquardt on the log-Cholesky coordinates (optax optimisers also accepted).
#
# Quick mode (`SDJAX_NOTEBOOK_QUICK=1`) uses a short record and a reduced table.

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
from sdjax.models import free_flying_arm_7dof, planar_four_link

QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"
plt.rcParams["figure.dpi"] = 80
print("quick mode" if QUICK else "full run")
from sdjax import excitation as ex
from sdjax import identification as ident
from sdjax.models.builtin import free_flying_arm_initial_q

# %% [markdown]
# ## The manoeuvre
#
# The arm tracks joint sinusoids (amplitude 0.1-0.2 rad, 1-3 rad/s; with 0.4 rad the PD-controlled arm diverges after about 5 s) with an independent-joint PD law (gains from the joint inertia at the start: 5 rad/s bandwidth, damping ratio 0.7) while the whole system tumbles slowly (non-zero initial momentum). RK4 with a 5 ms step; the data are sampled every 20 ms.

# %%
arm = free_flying_arm_7dof()
LINK = 7  # the wrist link holds the payload
payload_inertia = np.array([[0.9, 0.05, -0.03], [0.05, 0.7, 0.02], [-0.03, 0.02, 0.6]])
truth = sdjax.payload_parameters(30.0, np.array([0.3, 0.05, -0.04]), payload_inertia)
loaded = sdjax.attach_payload(arm, LINK, truth)
print(f"payload: {float(truth.mass[0])} kg, centroid {np.asarray(truth.centroid[0])} m from the wrist centroid")


TWIST = (0.02, -0.01, 0.01, 0.01, 0.02, -0.015)  # the base's initial twist [v0; w0], m/s and rad/s


def manoeuvre(model, q0, duration, dt=0.005, seed=0, base_twist=TWIST, scale=0.2):
    rng = np.random.default_rng(seed)
    n = model.num_joints
    amplitude = jnp.asarray(scale * rng.uniform(0.5, 1.0, n))
    frequency = jnp.asarray(rng.uniform(1.0, 3.0, n))
    phase = jnp.asarray(rng.uniform(0.0, 2 * np.pi, n))
    q0 = jnp.asarray(q0)

    def reference(t):
        arg = frequency * t + phase
        return q0 + amplitude * jnp.sin(arg), amplitude * frequency * jnp.cos(arg)

    state = sdjax.make_state(model, q=q0, base_linear_velocity=base_twist[:3], base_angular_velocity=base_twist[3:])
    joint_inertia = jnp.diag(sdjax.generalized_inertia_matrix(model, state))  # PD: 5 rad/s, damping ratio 0.7
    law = sdjax.JointPD(25.0 * joint_inertia, 7.0 * joint_inertia, reference)
    return sdjax.Dataset.from_trajectory(sdjax.rollout(model, state, dt, int(round(duration / dt)), law))


DURATIONS = [1.0] if QUICK else [1.0, 5.0, 20.0]
start = time.perf_counter()
records = {T: manoeuvre(loaded, free_flying_arm_initial_q(), T).subsample(4) for T in DURATIONS}
print(f"simulated {DURATIONS} s in {time.perf_counter() - start:.1f} s; samples:", [d.num_samples for d in records.values()])
data = records[DURATIONS[-1]]
fig, ax = plt.subplots(1, 2, figsize=(10, 3))
ax[0].plot(data.time, data.states.q)
ax[0].set(xlabel="t [s]", ylabel="q [rad]", title="joint angles")
ax[1].plot(data.time, data.states.base_angular_velocity)
ax[1].set(xlabel="t [s]", ylabel="w0 [rad/s]", title="base angular velocity")
fig.tight_layout()

# %% [markdown]
# ## Noise-free identification
#
# Initial guess: a payload equal to the wrist link (7 kg at its centroid). The momentum residual needs no torques.

# %%
unknowns = sdjax.Unknowns(payload_link=LINK)
start = time.perf_counter()
result = sdjax.identify(arm, data, unknowns, residual="momentum", truth=truth)
print(f"identified in {time.perf_counter() - start:.1f} s (compile included), {len(result.loss_history) - 1} LM steps")
est = result.parameters
print("mass      true %.6f  estimated %.9f kg" % (float(truth.mass[0]), float(est.mass[0])))
print("centroid  true", np.asarray(truth.centroid[0]), " estimated", np.round(np.asarray(est.centroid[0]), 9))
print("inertia about its centroid, estimated:")
print(np.round(np.asarray(est.centroidal_inertia[0]), 7))
print({k: float(v[0]) for k, v in result.errors.items()})
print(result.identifiability.describe())
plt.figure(figsize=(5, 3))
plt.semilogy(np.asarray(result.loss_history), "o-")
plt.xlabel("LM step")
plt.ylabel("loss 1/2 |r|^2")
plt.title("convergence (noise-free)")
plt.tight_layout()

# %% [markdown]
# ## Error against noise level and data length
#
# Gaussian noise of standard deviation *level* times each measured channel's standard deviation over the record is added to every measured signal (base position, attitude, twist, joint angles and rates). Errors are relative (mass, inertia about the payload centroid in Frobenius norm) and the centroid error is relative to |c| = 0.31 m; each entry is the median over noise seeds.

# %%
LEVELS = [0.0, 1e-3] if QUICK else [0.0, 1e-4, 1e-3, 1e-2]
SEEDS = [0] if QUICK else [0, 1, 2]
rows = []
start = time.perf_counter()
for T, clean in records.items():
    for level in LEVELS:
        errs = []
        for seed in (SEEDS if level > 0 else [0]):
            noisy = ident.add_noise(clean, level, seed) if level > 0 else clean
            r = sdjax.identify(arm, noisy, unknowns, residual="momentum", truth=truth)
            errs.append([r.errors["mass"][0], r.errors["com_relative"][0], r.errors["inertia"][0]])
        rows.append((T, level, *np.median(np.asarray(errs), axis=0)))
print(f"table computed in {time.perf_counter() - start:.1f} s")
print(f"{'T [s]':>6} {'noise':>8} {'mass err':>10} {'CoM err':>10} {'inertia err':>12}")
for T, level, em, ec, ei in rows:
    print(f"{T:6.0f} {level:8.0e} {em:10.2e} {ec:10.2e} {ei:12.2e}")

# %% [markdown]
# ## Momentum vs inverse-dynamics residual
#
# The inverse-dynamics residual uses the measured torques and accelerations from difference quotients of the velocities, so it carries an O(dt^2) bias on clean data and amplifies velocity noise by 1/dt; the momentum residual needs neither torques nor differentiation.

# %%
T = DURATIONS[-1] if QUICK else 5.0
print(f"{'residual':>9} {'noise':>8} {'mass err':>10} {'CoM err':>10} {'inertia err':>12}")
for residual in ("momentum", "dynamics", "both"):
    for level in (0.0, 1e-3):
        noisy = ident.add_noise(records[T], level, 0) if level > 0 else records[T]
        r = sdjax.identify(arm, noisy, unknowns, residual=residual, truth=truth)
        print(f"{residual:>9} {level:8.0e} {r.errors['mass'][0]:10.2e} {r.errors['com_relative'][0]:10.2e} {r.errors['inertia'][0]:12.2e}")

# %% [markdown]
# ## Identifiability
#
# `sdjax.identifiability` takes the SVD of the regressor `d r / d pi` (columns scaled to unit norm) and names the unobservable directions. Three cases: the payload (10 parameters, full rank); all seven arm links unknown from the same manoeuvre (70 parameters); and the planar four-link system of seed 003 moving in its plane, where each link's `Ixx`, `Iyy`, `Ixy` (link frame, z along the joint axis) never multiply an angular velocity and are unobservable.

# %%
reports = {}
reports["payload (10)"] = sdjax.identifiability(arm, data, unknowns, truth)
reports["7 arm links (70)"] = sdjax.identifiability(loaded, data, sdjax.Unknowns(links=tuple(range(1, 8))))
planar = planar_four_link()
planar_data = manoeuvre(planar, np.array([0.4, 0.6, -0.5, 0.7]), 1.0 if QUICK else 4.0, dt=0.01, base_twist=(0.01, -0.02, 0.0, 0.0, 0.0, 0.02)).subsample(2)
reports["planar 4 links (40)"] = sdjax.identifiability(planar, planar_data, sdjax.Unknowns(links=(1, 2, 3, 4)))
fig, ax = plt.subplots(figsize=(7, 4))
for label, rep in reports.items():
    s = rep.singular_values / rep.singular_values[0]
    ax.semilogy(np.arange(1, s.size + 1), np.maximum(s, 1e-18), "o-", ms=3, label=f"{label}: rank {rep.rank}")
ax.axhline(reports["payload (10)"].tolerance, color="k", ls="--", lw=0.8, label="rank threshold")
ax.set(xlabel="index", ylabel="normalised singular value", title="regressor SVD (momentum residual)")
ax.legend()
fig.tight_layout()
for label, rep in reports.items():
    print(label)
    lines = rep.describe(threshold=0.1).splitlines()
    print("\n".join(lines[:8]) + ("\n  ..." if len(lines) > 8 else ""))

# %% [markdown]
# With every arm link unknown, several combinations stay unobservable from one manoeuvre: for example the inertia components of the first link about axes it never rotates around, and combinations where only the sum over links (fixed relative to each other in a posture family) enters. A captured payload with known arm parameters, in contrast, is fully identifiable from a single tumbling manoeuvre.

# %% [markdown]
# ## Which arm-link combinations can any experiment reach? The base parameters
#
# Are the 18 unobservable directions of the arm links a weakness of this manoeuvre or of physics? `sdjax.identification.base_parameters` answers by QR with column pivoting of the regressor of several random, large Fourier excitations (`sdjax.excitation.random_excitation`; Gautier 1991's numerical base parameters): every motion's regressor satisfies `Y pi = Y_b beta` with `beta = pi_b + K pi_d`, the identifiable combinations. If random rich motions reach the same rank as the notebook's manoeuvre, the rest is structural: no experiment of this kind (momentum residual, base known) can identify it, and the base parameters are what to estimate and report.

# %%
links = sdjax.Unknowns(links=tuple(range(1, 8)))
start = time.perf_counter()
rich = [ex.random_excitation(arm, free_flying_arm_initial_q(), 2.0 if QUICK else 5.0, amplitude=0.4, seed=s, base_twist=TWIST).subsample(4) for s in range(3)]
base = ident.base_parameters(arm, rich, links)
print(f"base parameters from 3 random records: {base.rank} of {links.num_bodies * 10} ({time.perf_counter() - start:.1f} s)")
print(f"rank of the sinusoidal manoeuvre alone: {reports['7 arm links (70)'].rank}")
lines = base.describe(digits=3).splitlines()
print("\n".join(lines[:9] + ["  ..."] + lines[-1:]))

# %% [markdown]
# ## Optimal excitation
#
# `sdjax.excitation.optimal_excitation` designs the joint motion for the 52 base parameters: a finite Fourier series per joint (Swevers et al. 1997) in a `sin^2` window, so the experiment starts and ends at rest, tracked by the same PD law, with the A-optimal criterion `log(trace((Y_b^T Y_b)^-1) / r)` (the mean variance of the base parameters, in equilibrated units) of the simulated record minimised by L-BFGS through the rollout. For a fair comparison it gets the sinusoidal manoeuvre's own envelope: each joint's largest excursion from the start and its largest rate over that record are the limits, enforced exactly on the simulated record at the end. The design uses only the nominal arm (the unknowns are unknown); the experiment is then run on the true arm.

# %%
T_DESIGN = 1.0 if QUICK else 5.0
# What the experimenter knows: a nominal arm whose link masses and inertias are 20 % off (same centroids).
rng = np.random.default_rng(7)
factor = 1.0 + 0.2 * rng.choice([-1.0, 1.0], size=7)
true_links = ident.link_parameters(arm, links.links)
nominal = ident.apply_parameters(
    arm, links.links, ident.InertialParameters(true_links.mass * factor, true_links.first_moment, true_links.inertia * factor[:, None, None])
)
sine = ident.sinusoidal_excitation(arm, free_flying_arm_initial_q(), T_DESIGN, base_twist=TWIST)
envelope = dict(
    max_excursion=np.max(np.abs(np.asarray(sine.states.q) - free_flying_arm_initial_q()), axis=0),
    rate_limit=np.max(np.abs(np.asarray(sine.states.qd)), axis=0),
)
start = time.perf_counter()
design = ex.optimal_excitation(nominal, links, free_flying_arm_initial_q(), T_DESIGN, max_iterations=5 if QUICK else 100, base_twist=TWIST, **envelope)
print(f"designed in {time.perf_counter() - start:.1f} s (compile included), {design.iterations} L-BFGS iterations, final scale {design.scale:.3f}, limits used {design.peaks}")
sv_sine = np.asarray(ex.base_singular_values(nominal, sine.subsample(4), links, design.base))
print(f"{'excitation':>12} {'log tr/r':>11} {'condition':>10} {'smallest sv':>12}")
for name, sv in (("sinusoidal", sv_sine), ("optimal", design.singular_values)):
    print(f"{name:>12} {float(ex.excitation_criterion(sv)):11.3f} {sv[0] / sv[-1]:10.1f} {sv[-1]:12.2e}")
fig, ax = plt.subplots(1, 3, figsize=(13, 3))
ax[0].plot(design.history, "o-", ms=3)
ax[0].set(xlabel="L-BFGS iteration", ylabel="objective", title="design convergence")
ax[1].semilogy(sv_sine / sv_sine[0], "o-", ms=3, label="sinusoidal")
ax[1].semilogy(design.singular_values / design.singular_values[0], "o-", ms=3, label="optimal")
ax[1].set(xlabel="index", ylabel="normalised singular value", title="base regressor")
ax[1].legend()
ax[2].plot(design.record.time, design.record.states.q)
ax[2].set(xlabel="t [s]", ylabel="q [rad]", title="optimal excitation (nominal arm)")
fig.tight_layout()

# %% [markdown]
# ## Base-parameter errors: sinusoidal against optimal excitation
#
# Both experiments are run on the true arm and identified from the nominal model (20 % off; same centroids, so the parameters share their reference points), with measurement noise 1e-3; all 70 link parameters are estimated and the 52 base parameters compared with the truth's. Errors are in the equilibrated units of the structural regressor (each base parameter times its column's norm): the norm of the error over the norm of the truth's base parameters, and the largest single error over the largest base parameter; median over noise seeds.

# %%
weights = design.base.column_scale[design.base.independent]
beta_true = design.base.values(true_links) * weights
experiments = {
    "sinusoidal": sine,
    "optimal": ident.tracking_record(arm, free_flying_arm_initial_q(), design.reference, T_DESIGN, base_twist=TWIST),
}
NOISE_SEEDS = [0] if QUICK else [0, 1, 2]
print(f"{'excitation':>12} {'base error':>11} {'worst base parameter':>21}")
for name, record in experiments.items():
    errs = []
    for seed in NOISE_SEEDS:
        r = sdjax.identify(nominal, ident.add_noise(record.subsample(4), 1e-3, seed), links)
        err = design.base.values(r.parameters) * weights - beta_true
        errs.append([np.linalg.norm(err) / np.linalg.norm(beta_true), np.max(np.abs(err)) / np.max(np.abs(beta_true))])
    print(f"{name:>12} {np.median([e[0] for e in errs]):11.2e} {np.median([e[1] for e in errs]):21.2e}")

# %% [markdown]
# All 18 directions the sinusoidal manoeuvre leaves unobservable are structural: three random rich motions reach the same rank, 52 of 70, so the 52 base parameters are what any such experiment can identify (the list names each combination; for example a link's inertia about its joint axis regrouped with the masses beyond it). What the design changes is how well they are identified: within the sinusoid's own excursion and rate envelope the optimal excitation lowers the condition number of the base regressor from 364.7 to 115.8 and raises its smallest singular value from 1.10e-02 to 3.05e-02, and the base-parameter error at noise 1e-3 falls from 1.35e-02 to 4.31e-03 (largest single error 7.98e-03 to 2.86e-03). The design took 69.5 s here, compilation included. (With `criterion="log_det"`, D-optimality, this arm's error fell further, to 3.84e-03; on three other arms the A-optimal default did better: `benchmarks/README.md`, *Optimal excitation*.)
