"""Inertial parameter identification of a free-floating system from measured trajectories.

Each unknown body carries the 10 standard inertial parameters about a body-fixed reference
point ``o`` (the body's *nominal* centroid, from the model given), in the link frame:

    pi = [m, h_x, h_y, h_z, I_xx, I_yy, I_zz, I_xy, I_xz, I_yz]

with ``h = m c`` the first moment (``c`` the centroid's offset from ``o``) and ``I_o`` the
inertia tensor about ``o``. Both residuals used here are *linear* in ``pi``.

Physical consistency: the estimate is parameterised by the log-Cholesky factor of the 4x4
pseudo-inertia ``J = [[Sigma, h], [h^T, m]]`` (``Sigma = tr(I_o)/2 1 - I_o`` the second
moment of the mass distribution; Rucker and Wensing 2022): ``J = U U^T`` with ``U`` upper
triangular and its diagonal ``exp(d)``. Every real 10-vector ``theta`` gives ``J > 0``, i.e. a
positive mass and an inertia tensor that satisfies the triangle inequality, so every iterate
of the optimiser is a rigid body that :class:`sdjax.Model` accepts.

Unknowns (:class:`Unknowns`):

- ``links``: links whose own 10 parameters are unknown; the model's values are the initial
  guess and fix the reference point (nominal centroid).
- ``payload_link``: a link that carries an unknown rigid payload (a captured object); the
  link's own parameters are known and the payload's 10 parameters (about the link's nominal
  centroid, link frame) are estimated. The combined body is link + payload (the 10-vectors
  add).

The base is always known: it anchors the mass scale. Momentum conservation is homogeneous
in the parameters of *all* bodies, so with every body unknown the overall scale (and the
trivial solution ``pi = 0``) cannot be fixed from momentum data alone; a known base mass and
inertia remove that ambiguity.

Residuals (:func:`residuals`):

- ``"momentum"``: the system momentum ``[P; L_O]`` (:func:`sdjax.system_momentum`) computed
  from the measured positions and velocities must be constant. The unknown constant is
  eliminated by subtracting the sample mean (the least-squares estimate of it). No torque
  measurement is needed; valid with no gravity and no external forces.
- ``"dynamics"``: Newton-Euler residual ``[F0; N0; tau] - [0; 0; tau_measured]`` at interval
  mid-points (positions and velocities averaged, accelerations by the difference quotient of
  the velocities), with the zero-order-hold torque of the interval (as
  :func:`sdjax.rollout` applies it). The base wrench of a free-floating system is zero.
- ``"both"``: the two stacked.

Estimation by :func:`identify`: Levenberg-Marquardt on ``theta``
(:func:`sdjax.solvers.levenberg_marquardt`; default, converges to round-off on noise-free data) or any ``optax`` optimiser (``optax.adam``, ``optax.lbfgs``).
Identifiability (:func:`identifiability`): SVD of the column-equilibrated regressor
``d r / d pi`` (exact, the residuals being linear in ``pi``), its numerical rank and the
unobservable directions written in named parameters.
Uncertainty (:func:`estimate_covariance`, ``IdentificationResult.covariance``): the covariance
of the estimate ``s^2 (J^T J)^+`` from the same regressor, restricted to the identifiable
subspace, with standard deviations and confidence intervals of the parameters, the masses and
the centroids (:class:`ParameterCovariance`).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax import editing
from sdjax.dynamics import inverse_dynamics
from sdjax.editing import PARAMETER_NAMES
from sdjax.control import JointPD
from sdjax.gjm import generalized_inertia_matrix, system_momentum
from sdjax.integrate import MAX_ROLLOUT_STEPS, Trajectory, rollout
from sdjax.io.npz import NpzArchive
from sdjax.model import Model, check_no_mimic, free_coordinates, on_independent_joints
from sdjax.rotation import quat_normalize
from sdjax._checks import (
    check_choice,
    check_count,
    check_fraction,
    check_index,
    check_scalar,
    check_type,
    float_array,
    is_traced,
    renamed_keyword,
)
from sdjax.solvers import LeastSquaresResult, equilibrated_lstsq, levenberg_marquardt
from sdjax.state import BASE_TWIST_NAMES, State, make_state

__all__ = [
    "BaseParameters",
    "COVARIANCE_METHODS",
    "DATASET_FORMAT",
    "Dataset",
    "Identifiability",
    "IdentificationResult",
    "InertialParameters",
    "PARAMETER_NAMES",
    "ParameterCovariance",
    "Unknowns",
    "add_noise",
    "apply_parameters",
    "attach_payload",
    "base_parameters",
    "estimate_covariance",
    "from_log_cholesky",
    "identifiability",
    "identify",
    "link_parameters",
    "model_with_estimates",
    "parameter_errors",
    "payload_parameters",
    "regressor",
    "sinusoidal_excitation",
    "residuals",
    "to_log_cholesky",
    "tracking_record",
]

RESIDUALS = ("momentum", "dynamics", "both")

# Upper-triangular entries of the 4x4 log-Cholesky factor U, in theta order: the diagonal
# (stored as logs) first, then the off-diagonal entries row by row.
_DIAG = ((0, 0), (1, 1), (2, 2), (3, 3))
_OFF = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))


# ------------------------------------------------------------------------------------------
# Parameters and their physically consistent parameterisation.


class InertialParameters(eqx.Module):
    """Inertial parameters of ``k`` bodies about their reference points, in their link frames.

    Attributes:
        mass: ``(k,)`` masses, kg.
        first_moment: ``(k, 3)`` first moments ``h = m c``, kg m (``c`` the centroid offset
            from the reference point, link frame).
        inertia: ``(k, 3, 3)`` inertia tensors about the reference point, link frame, kg m^2.
    """

    mass: Array
    first_moment: Array
    inertia: Array

    @property
    def centroid(self) -> Array:
        """``(k, 3)`` centroid offsets ``c = h / m`` from the reference points, m."""
        return self.first_moment / self.mass[:, None]

    @property
    def centroidal_inertia(self) -> Array:
        """``(k, 3, 3)`` inertia about each body's own centroid (parallel-axis theorem; a
        massless body's is its inertia about the reference point)."""
        return editing.from_inertial_vector(self.vector())[2]

    def vector(self) -> Array:
        """``(k, 10)`` parameter vectors (order :data:`PARAMETER_NAMES`), exactly the stored
        numbers, for any parameters (an unconstrained estimate may have a negative mass)."""
        # The inertia entries in editing's layout: inertial_vector of a massless body centred on
        # the reference point is [0, 0, 0, 0, entries of the inertia given].
        zero = jnp.zeros_like(self.mass)
        entries = editing.inertial_vector(zero, jnp.zeros_like(self.first_moment), self.inertia)[:, 4:]
        return jnp.concatenate([self.mass[:, None], self.first_moment, entries], axis=-1)

    def pseudo_inertia(self) -> Array:
        """``(k, 4, 4)`` pseudo-inertia ``J = [[Sigma, h], [h^T, m]]``, ``Sigma = tr(I)/2 1 - I``
        (:func:`sdjax.editing.pseudo_inertia`).

        ``J`` is positive definite exactly when the parameters belong to a rigid body with a
        positive mass and a non-degenerate mass distribution (Wensing et al. 2017). NumPy fields
        give a NumPy result (host-side checks in float64 whatever JAX's precision)."""
        return editing.pseudo_inertia(self.mass, self.first_moment, self.inertia)

    @classmethod
    def from_pseudo_inertia(cls, pseudo: Any) -> InertialParameters:
        """Inverse of :meth:`pseudo_inertia` (:func:`sdjax.editing.from_pseudo_inertia`)."""
        mass, first_moment, inertia = editing.from_pseudo_inertia(jnp.asarray(pseudo))
        return cls(mass=mass, first_moment=first_moment, inertia=inertia)

    @classmethod
    def from_vector(cls, vector: Any) -> InertialParameters:
        """From ``(k, 10)`` parameter vectors (order :data:`PARAMETER_NAMES`), exactly (any
        real vector: the inverse of :meth:`vector`)."""
        v = jnp.asarray(vector)
        if v.ndim != 2 or v.shape[-1] != 10:
            raise ValueError(f"InertialParameters.from_vector: expected shape (k, 10), got {v.shape}")
        # editing.from_inertial_vector of the vector with mass and first moment zeroed: a massless
        # body centred on the reference point, whose inertia about it is the tensor of the entries.
        _, _, inertia = editing.from_inertial_vector(v.at[:, :4].set(0.0))
        return cls(mass=v[:, 0], first_moment=v[:, 1:4], inertia=inertia)

    @classmethod
    def from_centroidal(cls, mass: Any, centroid: Any, centroidal_inertia: Any) -> InertialParameters:
        """From masses ``(k,)``, centroid offsets ``(k, 3)`` from the reference points and
        inertias about the centroids ``(k, 3, 3)``."""
        mass, centroid, inertia = (jnp.asarray(x) for x in (mass, centroid, centroidal_inertia))
        if mass.ndim != 1 or centroid.shape != mass.shape + (3,) or inertia.shape != mass.shape + (3, 3):
            raise ValueError(
                "InertialParameters.from_centroidal: expected shapes (k,), (k, 3), (k, 3, 3), got "
                f"{mass.shape}, {centroid.shape}, {inertia.shape}"
            )
        return cls(
            mass=mass,
            first_moment=mass[:, None] * centroid,
            inertia=inertia + mass[:, None, None] * editing.parallel_axis(1.0, centroid),
        )

    def __add__(self, other: InertialParameters) -> InertialParameters:
        """Parameters of the rigid union of two bodies (same reference points and frames,
        :func:`sdjax.editing.combine_bodies`)."""
        bodies = [editing.from_inertial_vector(p.vector()) for p in (self, other)]
        mass, centroid, inertia = (jnp.stack(x, axis=1) for x in zip(*bodies))
        return InertialParameters.from_centroidal(*editing.combine_bodies(mass, centroid, inertia))


def from_log_cholesky(theta: Any) -> InertialParameters:
    """Parameters from ``(k, 10)`` log-Cholesky coordinates: ``J = U U^T``, ``U`` upper
    triangular with diagonal ``exp(theta[:, :4])`` and off-diagonal ``theta[:, 4:]``
    (entries (0,1), (0,2), (0,3), (1,2), (1,3), (2,3)). Any real ``theta`` is a valid body."""
    theta = jnp.asarray(theta)
    k = theta.shape[0]
    u = jnp.zeros((k, 4, 4), theta.dtype)
    for col, (r, c) in enumerate(_DIAG):
        u = u.at[:, r, c].set(jnp.exp(theta[:, col]))
    for col, (r, c) in enumerate(_OFF):
        u = u.at[:, r, c].set(theta[:, 4 + col])
    return InertialParameters.from_pseudo_inertia(matmul(u, jnp.swapaxes(u, -1, -2)))


def to_log_cholesky(params: InertialParameters) -> Array:
    """``(k, 10)`` log-Cholesky coordinates of physically consistent parameters.

    Raises ``ValueError`` (for concrete inputs) if a pseudo-inertia is not positive definite,
    i.e. the parameters are not those of a rigid body."""
    j = params.pseudo_inertia()
    if not isinstance(j, jax.core.Tracer):
        eig = np.linalg.eigvalsh(np.asarray(j, np.float64))
        bad = np.flatnonzero(~(eig[:, 0] > 0))
        if bad.size:
            raise ValueError(
                f"to_log_cholesky: body {int(bad[0])} is not physically consistent (pseudo-inertia "
                f"eigenvalues {eig[bad[0]].tolist()}; need a positive mass and a positive definite "
                "second moment, i.e. the triangle inequality)"
            )
    flip = jnp.arange(3, -1, -1)
    # J = U U^T with U upper triangular: U = P L P with L = chol(P J P), P the reversal.
    lower = jnp.linalg.cholesky(j[:, flip][:, :, flip])
    u = lower[:, flip][:, :, flip]
    diag = jnp.stack([jnp.log(u[:, r, c]) for r, c in _DIAG], axis=-1)
    off = jnp.stack([u[:, r, c] for r, c in _OFF], axis=-1)
    return jnp.concatenate([diag, off], axis=-1)


# ------------------------------------------------------------------------------------------
# Which bodies are unknown, and how estimates enter the model.


@dataclasses.dataclass(frozen=True)
class Unknowns:
    """Which inertial parameters are estimated (static, hashable).

    Attributes:
        links: links (1..n) whose own 10 parameters are unknown.
        payload_link: link (1..n) carrying an unknown rigid payload, or ``None``; its own
            parameters are known. It cannot also be in ``links`` (the two would not be
            separable: only their sum enters the dynamics).
    """

    links: tuple[int, ...] = ()
    payload_link: int | None = None

    def __post_init__(self) -> None:
        # A list of links is taken as the tuple it stands for (the field must stay hashable: it
        # is static under jit); NumPy integers become Python ints. Each index is checked against
        # a model by check() (check_index: a float or bool refused there, with the valid range).
        links = self.links
        if isinstance(links, (str, bytes)) or not hasattr(links, "__iter__"):
            raise TypeError(f"Unknowns: links: expected a tuple of link indices, got {type(links).__name__} {links!r}")
        links = tuple(np.asarray(links).tolist()) if isinstance(links, np.ndarray) else tuple(links)
        object.__setattr__(self, "links", tuple(int(k) if isinstance(k, np.integer) else k for k in links))
        if isinstance(self.payload_link, np.integer):
            object.__setattr__(self, "payload_link", int(self.payload_link))

    def labels(self, model: Model) -> tuple[str, ...]:
        """One label per estimated body (links first, then the payload)."""
        out = tuple(model.link_names[k - 1] for k in self.links)
        if self.payload_link is not None:
            out += (f"payload@{model.link_names[self.payload_link - 1]}",)
        return out

    def parameter_names(self, model: Model) -> tuple[str, ...]:
        """``10 k`` names ``"<body>.<parameter>"`` of the stacked parameter vector."""
        return tuple(f"{body}.{p}" for body in self.labels(model) for p in PARAMETER_NAMES)

    @property
    def num_bodies(self) -> int:
        return len(self.links) + (self.payload_link is not None)

    def check(self, model: Model) -> None:
        n = model.num_joints
        links = tuple(self.links)
        named = [(f"Unknowns: links[{i}]", k) for i, k in enumerate(links)]
        for name, k in named + (
            [("Unknowns: payload_link", self.payload_link)] if self.payload_link is not None else []
        ):
            check_index(name, k, 1, n, f"the links of model {model.name!r}")
        if len(set(links)) != len(links):
            raise ValueError(f"Unknowns.links: repeated links in {links}")
        if self.payload_link is not None and self.payload_link in links:
            raise ValueError(
                f"Unknowns: link {self.payload_link} is both an unknown link and the payload carrier; only the "
                "sum of link and payload is observable, estimate one of them"
            )
        if not links and self.payload_link is None:
            raise ValueError("Unknowns: nothing to estimate (give links and/or payload_link)")


def link_parameters(model: Model, links: Any = None) -> InertialParameters:
    """Parameters of links (1-based; default all) about their own centroids, link frames."""
    idx = np.arange(model.num_joints) if links is None else np.asarray(links, dtype=np.int64) - 1
    mass = model.link_mass[idx]
    return InertialParameters(
        mass=mass, first_moment=jnp.zeros((idx.size, 3), mass.dtype), inertia=model.link_inertia[idx]
    )


def apply_parameters(model: Model, links: Any, params: InertialParameters) -> Model:
    """``model`` with the given links' inertial parameters replaced.

    ``params`` are about each link's centroid *in ``model``* (the reference point), in its link
    frame. The new centroid is ``o + h/m``; ``centroid_to_joint``, the children's
    ``parent_centroid_to_joint`` and the end-point offsets are shifted so that joints and end
    points stay where they are, and ``link_inertia`` is the inertia about the new centroid
    (:func:`sdjax.editing.set_inertial_parameters`). Works under ``jit`` and ``grad``.

    Arguments:
        model: the reference model.
        links: static sequence of link indices (1..n).
        params: ``(k,)`` bodies, one per link.

    Returns:
        The updated :class:`Model`, validated when its values are concrete (parameters of no
        rigid body are refused there; :func:`residuals` accepts any parameters).
    """
    mass, centroid, inertia = editing.from_inertial_vector(params.vector())
    return editing.set_inertial_parameters(model, tuple(links), mass, centroid, inertia)


def model_with_estimates(model: Model, unknowns: Unknowns, params: InertialParameters) -> Model:
    """The model with the estimated bodies (``unknowns`` order) put in: unknown links replaced
    (:func:`apply_parameters`), the payload merged into its carrier link
    (:func:`sdjax.editing.merge_payload`). Validated when its values are concrete."""
    links = tuple(unknowns.links)
    k = len(links)
    mass, centroid, inertia = editing.from_inertial_vector(params.vector())
    if links:
        model = editing.set_inertial_parameters(model, links, mass[:k], centroid[:k], inertia[:k])
    if unknowns.payload_link is not None:
        model = editing.merge_payload(model, unknowns.payload_link, mass[k], centroid[k], inertia[k])
    return model


# The residuals are defined (affine) for any parameters, also those of no rigid body (an
# unconstrained estimate, a point far from the truth): the model with the estimates is built
# under jit, where Model validation checks the structure and not the values.
_model_with_any_estimates = eqx.filter_jit(model_with_estimates)


def payload_parameters(mass: Any, centroid: Any, centroidal_inertia: Any) -> InertialParameters:
    """One payload body: mass ``()``, centroid ``(3,)`` (from the carrier's nominal centroid,
    carrier link frame) and inertia about its own centroid ``(3, 3)``."""
    return InertialParameters.from_centroidal(
        jnp.asarray(mass)[None], jnp.asarray(centroid)[None], jnp.asarray(centroidal_inertia)[None]
    )


def attach_payload(model: Model, link: int, payload: InertialParameters) -> Model:
    """``model`` with a rigid payload (one body, see :func:`payload_parameters`) fixed to ``link``:
    :func:`sdjax.editing.merge_payload` of its mass, centroid and inertia."""
    if jnp.shape(payload.mass) != (1,):
        raise ValueError(f"attach_payload: expected one payload body, got masses of shape {jnp.shape(payload.mass)}")
    mass, centroid, inertia = editing.from_inertial_vector(payload.vector()[0])
    return editing.merge_payload(model, link, mass, centroid, inertia)


# ------------------------------------------------------------------------------------------
# Data.


#: ``meta`` format of a dataset file (:meth:`Dataset.save`).
DATASET_FORMAT = "sdjax.dataset/1"
#: Per-sample width of each state array of a dataset file (``None``: the number of joints).
_STATE_SIZES = {
    "base_position": 3,
    "base_quaternion": 4,
    "base_linear_velocity": 3,
    "base_angular_velocity": 3,
    "q": None,
    "qd": None,
}


class Dataset(eqx.Module):
    """Measured samples of a free-floating manoeuvre.

    Attributes:
        time: ``(N,)`` sample times, s, strictly increasing.
        states: :class:`sdjax.State` with a leading axis ``N`` (measured base pose and twist,
            joint positions and rates).
        torques: ``(N - 1, n)`` joint torques held over each interval ``[t_k, t_k+1]`` (zero-order
            hold, as :func:`sdjax.rollout` applies them), or ``None`` (momentum residual only).
    """

    time: Array
    states: State
    torques: Array | None = None

    def __check_init__(self):
        time = self.time
        if jnp.ndim(time) != 1:
            raise ValueError(f"Dataset.time: expected a (N,) vector, got shape {jnp.shape(time)}")
        num = jnp.shape(time)[0]
        if num < 2:
            raise ValueError(f"Dataset: expected at least 2 samples, got {num} (empty or single-sample data)")
        for field, size in (
            ("base_position", 3),
            ("base_quaternion", 4),
            ("base_linear_velocity", 3),
            ("base_angular_velocity", 3),
        ):
            shape = jnp.shape(getattr(self.states, field))
            if shape != (num, size):
                raise ValueError(
                    f"Dataset.states.{field}: expected shape ({num}, {size}) for N={num} samples, got {shape}"
                )
        qs, qds = jnp.shape(self.states.q), jnp.shape(self.states.qd)
        if len(qs) != 2 or qs[0] != num or qds != qs:
            raise ValueError(
                f"Dataset.states.q/qd: expected two ({num}, n) arrays for N={num} samples, got {qs} and {qds}"
            )
        if self.torques is not None:
            ts = jnp.shape(self.torques)
            if ts != (num - 1, qs[1]):
                raise ValueError(
                    f"Dataset.torques: expected shape ({num - 1}, {qs[1]}) (one torque per interval between the "
                    f"N={num} samples, n={qs[1]} joints), got {ts}"
                )
        leaves = [time, *jax.tree.leaves(self.states)] + ([self.torques] if self.torques is not None else [])
        if is_traced(*leaves):
            return
        for name, x in zip(("time",) + tuple(f.name for f in dataclasses.fields(State)) + ("torques",), leaves):
            if not np.all(np.isfinite(np.asarray(x))):
                raise ValueError(f"Dataset.{name}: contains NaN or inf")
        if not np.all(np.diff(np.asarray(time)) > 0):
            raise ValueError("Dataset.time: sample times must be strictly increasing")
        zero = np.linalg.norm(np.asarray(self.states.base_quaternion), axis=-1) == 0
        if np.any(zero):  # (no attitude: the identification's solves failed inside LAPACK)
            raise ValueError(f"Dataset.states.base_quaternion: sample {int(np.argmax(zero))} is zero (no attitude)")

    @property
    def num_samples(self) -> int:
        return int(jnp.shape(self.time)[0])

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, *, with_torques: bool = True) -> Dataset:
        """Samples of a :func:`sdjax.rollout` trajectory (its joint torques if ``with_torques``)."""
        torques = trajectory.controls.tau if with_torques else None
        return cls(time=trajectory.time, states=trajectory.states, torques=torques)

    def save(self, path: Any) -> None:
        """Write the record as ``.npz`` (``numpy.savez_compressed``, no pickles): arrays
        ``time`` ``(N,)`` s, ``base_position`` ``(N, 3)`` m, ``base_quaternion`` ``(N, 4)``
        (scalar last, body to inertial), ``base_linear_velocity`` and ``base_angular_velocity``
        ``(N, 3)`` (inertial frame, m/s and rad/s), ``q`` and ``qd`` ``(N, n)``, ``torques``
        ``(N - 1, n)`` when present, and ``meta`` (JSON ``{"format": DATASET_FORMAT}``). A
        measured record from another tool is read by :meth:`load` when it holds the same named
        arrays (``meta`` may be left out)."""
        arrays = {"time": np.asarray(self.time)}
        arrays.update({field.name: np.asarray(getattr(self.states, field.name)) for field in dataclasses.fields(State)})
        if self.torques is not None:
            arrays["torques"] = np.asarray(self.torques)
        arrays["meta"] = np.array(json.dumps({"format": DATASET_FORMAT}))
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]  # (numpy's stubs: keyword arrays)

    @classmethod
    def load(cls, path: Any, num_joints: int | None = None) -> Dataset:
        """Read a record in the layout of :meth:`save` (JAX's float type), every array's shape checked
        from its header before it is read (:class:`sdjax.io.npz.NpzArchive`); ``num_joints``:
        the model's, checked too. Errors name the file and the array."""
        with NpzArchive(path, "measured record (.npz)") as archive:
            if "meta" in archive:
                archive.meta(DATASET_FORMAT)
            time = archive.array("time", (None,))
            num = time.shape[0]
            if num < 2:
                raise ValueError(f"array 'time' holds {num} samples; a record needs at least 2")
            fields = {}
            for field, size in _STATE_SIZES.items():
                fields[field] = archive.array(field, (num, size)).astype(np.float64)
            if num_joints is not None and fields["q"].shape[1] != num_joints:
                raise ValueError(f"array 'q' holds {fields['q'].shape[1]} joints; the model has {num_joints}")
            n = fields["q"].shape[1]
            torques = archive.array("torques", (num - 1, n)).astype(np.float64) if "torques" in archive else None
            # (State checks one sample's shapes: built per sample under vmap)
            states = jax.vmap(lambda values: State(**values))({k: jnp.asarray(v) for k, v in fields.items()})
            return cls(
                time=jnp.asarray(time, jnp.float64),
                states=states,
                torques=None if torques is None else jnp.asarray(torques),
            )

    def subsample(self, every: int) -> Dataset:
        """Every ``every``-th sample (torques averaged over the merged intervals); ``every`` an
        integer >= 1 that leaves at least the 2 samples a :class:`Dataset` needs."""
        every = check_count("Dataset.subsample: every", every, 1)
        kept = -(-self.num_samples // every)  # samples 0, every, 2 every, ...
        if kept < 2:
            raise ValueError(
                f"Dataset.subsample: every={every} keeps {kept} of the {self.num_samples} samples; a Dataset needs "
                f"at least 2 (every <= {self.num_samples - 1})"
            )
        states = jax.tree.map(lambda x: x[::every], self.states)
        num = jnp.shape(states.q)[0]
        torques = None
        if self.torques is not None:
            blocks = self.torques[: (num - 1) * every].reshape(num - 1, every, -1)
            torques = jnp.mean(blocks, axis=1)
        return Dataset(time=self.time[::every][:num], states=states, torques=torques)


def add_noise(data: Dataset, level: float, seed: int = 0) -> Dataset:
    """Data with Gaussian noise of standard deviation ``level`` times each channel's standard
    deviation over the record (base position, attitude quaternion (renormalised), twist,
    joint positions, rates and torques).

    Arguments:
        data: the noise-free :class:`Dataset`.
        level: non-negative relative noise level (``1e-3``: a thousandth of each channel's spread).
        seed: seed of ``jax.random``.
    """
    level = check_scalar("add_noise: level", level, sign="non-negative")
    leaves, treedef = jax.tree.flatten((data.states, data.torques))
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    noisy = []
    for key, x in zip(keys, leaves):
        scale = jnp.std(x, axis=0, keepdims=True)
        noisy.append(x + level * scale * jax.random.normal(key, x.shape, x.dtype))
    states, torques = jax.tree.unflatten(treedef, noisy)
    states = eqx.tree_at(lambda s: s.base_quaternion, states, jax.vmap(quat_normalize)(states.base_quaternion))
    return Dataset(time=data.time, states=states, torques=torques)


def sinusoidal_excitation(
    model: Model,
    q0: Any,
    duration: float,
    dt: float = 0.005,
    *,
    amplitude: float = 0.2,
    frequency: tuple[float, float] = (1.0, 3.0),
    bandwidth: float = 5.0,
    damping_ratio: float = 0.7,
    base_twist: Any = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    seed: int = 0,
) -> Dataset:
    """A tumbling manoeuvre that excites the inertial parameters (the identification
    notebook's): each joint follows ``q0 + a_i sin(w_i t + phi_i)`` (``a_i`` uniform in
    ``[0.5, 1] amplitude`` rad, ``w_i`` uniform in ``frequency`` rad/s, random phases, drawn in
    that order from ``numpy.random.default_rng(seed)``), tracked as :func:`tracking_record`
    does. :func:`sdjax.excitation.optimal_excitation` designs a better one.

    Returns:
        :class:`Dataset` of every step (``round(duration / dt) + 1`` samples, joint torques
        included); subsample and add noise (:func:`add_noise`) as an experiment would.
    """
    rng = np.random.default_rng(seed)
    n = model.num_joints
    amp = jnp.asarray(amplitude * rng.uniform(0.5, 1.0, n))
    omega = jnp.asarray(rng.uniform(frequency[0], frequency[1], n))
    phase = jnp.asarray(rng.uniform(0.0, 2 * np.pi, n))
    start = jnp.asarray(q0)

    def reference(t: Array) -> tuple[Array, Array]:
        arg = omega * t + phase
        return start + amp * jnp.sin(arg), amp * omega * jnp.cos(arg)

    return tracking_record(
        model, start, reference, duration, dt, bandwidth=bandwidth, damping_ratio=damping_ratio, base_twist=base_twist
    )


def tracking_record(
    model: Model,
    q0: Any,
    reference: Any,
    duration: float,
    dt: float = 0.005,
    *,
    bandwidth: float = 5.0,
    damping_ratio: float = 0.7,
    base_twist: Any = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
) -> Dataset:
    """The record of an excitation experiment: the joints track ``reference`` (``t -> (q_d,
    qd_d[, qdd_d])``) under an independent-joint PD law with gains from the diagonal of the
    generalized inertia at the start (natural frequency ``bandwidth`` rad/s, ``damping_ratio``),
    from rest at ``q0`` while the base moves freely from ``base_twist`` ``[v0; w0]`` (m/s,
    rad/s, inertial frame). RK4 with step ``dt`` over ``round(duration / dt)`` steps (static);
    traceable in ``q0`` and the reference (the gradient of
    :func:`sdjax.excitation.optimal_excitation`).

    Returns:
        :class:`Dataset` of every step, joint torques included.
    """
    duration = check_scalar("tracking_record: duration", duration, sign="positive")
    dt = check_scalar("tracking_record: dt", dt, sign="positive")
    if not duration / dt <= MAX_ROLLOUT_STEPS:  # (before round(): 1e300 / 1e-10 is inf)
        raise ValueError(
            f"tracking_record: duration / dt = {duration / dt:.3g} steps exceeds the longest rollout ({MAX_ROLLOUT_STEPS})"
        )
    if round(duration / dt) < 1:
        raise ValueError(f"tracking_record: duration {duration} s is shorter than one step of {dt} s")
    float_array("tracking_record: bandwidth", bandwidth, shape=(), sign="positive")
    float_array("tracking_record: damping_ratio", damping_ratio, shape=(), sign="positive")
    twist = np.asarray(base_twist, dtype=np.float64)
    if twist.shape != (6,):
        raise ValueError(f"tracking_record: base_twist must be [v0; w0] of shape (6,), got shape {twist.shape}")
    state = make_state(model, q=q0, base_linear_velocity=twist[:3], base_angular_velocity=twist[3:])
    inertia = on_independent_joints(model, jnp.diag(generalized_inertia_matrix(model, state)))  # (per joint)
    law = JointPD(bandwidth**2 * inertia, 2 * damping_ratio * bandwidth * inertia, reference)
    return Dataset.from_trajectory(rollout(model, state, dt, int(round(duration / dt)), law))


# ------------------------------------------------------------------------------------------
# Residuals (linear in the physical parameters).


def _check_problem(model: Model, data: Dataset, unknowns: Unknowns, residual: str) -> None:
    check_no_mimic(model, "identification")
    check_type("identification: data", data, Dataset, "a Dataset")
    check_type("identification: unknowns", unknowns, Unknowns, "a sdjax.Unknowns")
    unknowns.check(model)
    n = model.num_joints
    if data.states.q.shape[1] != n:
        raise ValueError(
            f"identification: the data has {data.states.q.shape[1]} joints but model {model.name!r} has n={n}"
        )
    check_choice("identification", residual, RESIDUALS, "residual")
    if residual in ("dynamics", "both") and data.torques is None:
        raise ValueError(f"identification: residual {residual!r} needs measured torques (Dataset.torques is None)")
    if residual in ("momentum", "both") and model.base == "fixed":
        raise ValueError(
            f"identification: the momentum residual needs a moving base; model {model.name!r} has a fixed base "
            "(nothing is conserved): use residual='dynamics'"
        )
    if residual in ("momentum", "both") and not isinstance(model.gravity, jax.core.Tracer):
        # Gravity breaks the conservation unless the base mode's mount carries it (gravity normal
        # to a planar test bed's plane leaves P_x, P_y and L_z conserved).
        translations = [k for k in model.base_coordinates if k < 3]
        if np.any(np.asarray(model.gravity)[translations] != 0):
            raise ValueError(
                "identification: the momentum residual assumes free flight (no gravity along the directions the "
                f"base translates in, {[BASE_TWIST_NAMES[k] for k in translations]}), but model.gravity is "
                f"{np.asarray(model.gravity).tolist()}"
            )


def _checked_weights(owner: str, model: Model, kwargs: dict) -> dict:
    """The residual options ``kwargs`` with the weights checked and made arrays: ``(6,)``
    ``momentum_weights`` and ``(6 + n,)`` ``dynamics_weights``, finite and non-negative (values
    checked when concrete)."""
    out = dict(kwargs)
    sizes = {"momentum_weights": (6, "one per row of [P; L_O]"), "dynamics_weights": (6 + model.num_joints, "")}
    for key, (size, hint) in sizes.items():
        if isinstance(out.get(key), (str, bytes)):  # (jnp.asarray reads "a", "d" as dtype names)
            raise TypeError(f"{owner}: {key}: expected numbers, got {type(out[key]).__name__} {out[key]!r}")
        if out.get(key) is not None:
            hint = hint or f"one per row of [F0; N0; tau], n={model.num_joints} joints"
            out[key] = float_array(f"{owner}: {key}", out[key], shape=(size,), sign="non-negative", hint=hint)
    return out


def _check_parameters(owner: str, unknowns: Unknowns, params: Any, what: str = "params") -> None:
    """``params`` an :class:`InertialParameters` of one body per estimated body."""
    check_type(f"{owner}: {what}", params, InertialParameters, "sdjax.InertialParameters")
    k = unknowns.num_bodies
    if jnp.shape(params.mass) != (k,):
        raise ValueError(
            f"{owner}: {what}: expected {k} bodies (one per body the Unknowns estimate), got masses of shape "
            f"{jnp.shape(params.mass)}"
        )


def _check_optimizer(owner: str, optimizer: Any) -> None:
    """``optimizer`` ``None`` or an ``optax`` gradient transformation (``init``, ``update``)."""
    if optimizer is not None and not (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        raise TypeError(
            f"{owner}: optimizer: expected None (Levenberg-Marquardt) or an optax gradient transformation with "
            f"init and update (e.g. optax.adam(1e-2)), got {type(optimizer).__name__} {optimizer!r}"
        )


def _midpoints(data: Dataset) -> tuple[State, Array]:
    """States at interval mid-points and the ``(N-1, 6+n)`` difference-quotient accelerations."""
    s = data.states
    mid = jax.tree.map(lambda x: 0.5 * (x[1:] + x[:-1]), s)
    mid = eqx.tree_at(lambda m: m.base_quaternion, mid, jax.vmap(quat_normalize)(mid.base_quaternion))
    nu = jnp.concatenate([s.base_linear_velocity, s.base_angular_velocity, s.qd], axis=-1)
    dt = jnp.diff(data.time)[:, None]
    return mid, jnp.diff(nu, axis=0) / dt


def residuals(
    model: Model,
    data: Dataset,
    unknowns: Unknowns,
    params: InertialParameters,
    *,
    residual: str = "momentum",
    momentum_weights: Any = None,
    dynamics_weights: Any = None,
) -> Array:
    """Stacked, weighted residual vector for the given estimates (``unknowns`` order).

    Arguments:
        model: nominal model (known bodies; reference points of the unknown ones).
        data: the measurements.
        unknowns: which bodies ``params`` describes.
        params: ``(k,)`` bodies.
        residual: ``"momentum"``, ``"dynamics"`` or ``"both"`` (module docstring).
        momentum_weights: ``(6,)`` weights of the ``[P; L_O]`` rows (default
            ``1 / total mass`` on ``P`` and ``1 / (total mass * 1 m^2)`` on ``L_O``). A planar
            base keeps only the conserved rows ``P_x, P_y, L_z``; a fixed base has none.
        dynamics_weights: ``(6 + n,)`` weights of the ``[F0; N0; tau]`` rows (default
            ``1 / total mass`` on ``F0``, ``1 / (total mass * 1 m^2)`` on ``N0`` and ``tau``).
            Only the base rows the base mode leaves free are kept.

    Returns:
        ``(R,)`` residuals, each block divided by the square root of its number of samples.
    """
    _check_problem(model, data, unknowns, residual)
    _check_parameters("residuals", unknowns, params)
    weights = _checked_weights(
        "residuals", model, dict(momentum_weights=momentum_weights, dynamics_weights=dynamics_weights)
    )
    momentum_weights, dynamics_weights = weights["momentum_weights"], weights["dynamics_weights"]
    est = _model_with_any_estimates(model, unknowns, params)
    dtype = data.states.q.dtype
    total = jax.lax.stop_gradient(model.total_mass).astype(dtype)
    n = model.num_joints
    out = []
    if residual in ("momentum", "both"):
        w = jnp.ones(6, dtype) / total if momentum_weights is None else jnp.asarray(momentum_weights).astype(dtype)
        momentum = jax.vmap(lambda s: system_momentum(est, s))(data.states)
        # Only the components the base mode conserves (a planar base: P_x, P_y, L_z).
        r = ((momentum - jnp.mean(momentum, axis=0)) * w)[:, np.asarray(model.base_coordinates)]
        out.append(r.ravel() / jnp.sqrt(jnp.asarray(r.shape[0], dtype)))
    if residual in ("dynamics", "both"):
        assert data.torques is not None  # (_check_problem: the dynamics residual needs torques)
        w = jnp.ones(6 + n, dtype) / total if dynamics_weights is None else jnp.asarray(dynamics_weights).astype(dtype)
        mid, acc = _midpoints(data)
        wrench, tau = jax.vmap(lambda s, a: inverse_dynamics(est, s, a[:6], a[6:]))(mid, acc)
        # The base wrench rows the base mode leaves free (a mount or bearing carries the rest).
        r = free_coordinates(model, jnp.concatenate([wrench, tau - data.torques], axis=-1) * w, -1)
        out.append(r.ravel() / jnp.sqrt(jnp.asarray(r.shape[0], dtype)))
    return jnp.concatenate(out)


# ------------------------------------------------------------------------------------------
# Identifiability.


@dataclasses.dataclass(frozen=True)
class Identifiability:
    """Observability of the inertial parameters from one data set.

    Attributes:
        parameter_names: ``(p,)`` names ``"<body>.<parameter>"``.
        singular_values: ``(p,)`` singular values of the column-equilibrated regressor
            ``d r / d pi`` (columns scaled to unit norm), descending.
        rank: numerical rank (singular values above ``tolerance * largest``).
        tolerance: the relative threshold used.
        unobservable: ``(p, p - rank)`` unit directions in physical parameter space (units of
            :data:`PARAMETER_NAMES`) that leave the residuals unchanged; parameters with a zero
            regressor column appear as unit vectors.
        column_norms: ``(p,)`` regressor column norms (sensitivity of the residual to each
            parameter; zero = the parameter never enters).
    """

    parameter_names: tuple[str, ...]
    singular_values: np.ndarray
    rank: int
    tolerance: float
    unobservable: np.ndarray
    column_norms: np.ndarray

    @property
    def num_parameters(self) -> int:
        return len(self.parameter_names)

    def directions(self, threshold: float = 0.05) -> list[dict[str, float]]:
        """Each unobservable direction as ``{name: coefficient}`` (entries above ``threshold``
        in magnitude, sign fixed so the largest is positive)."""
        out = []
        for v in self.unobservable.T:
            v = v * np.sign(v[np.argmax(np.abs(v))])
            out.append({self.parameter_names[j]: float(v[j]) for j in np.argsort(-np.abs(v)) if abs(v[j]) > threshold})
        return out

    def describe(self, threshold: float = 0.05) -> str:
        """Human-readable summary."""
        lines = [
            f"{self.rank} of {self.num_parameters} parameter combinations identifiable "
            f"(singular values {self.singular_values.max():.3g} .. {self.singular_values.min():.3g}, "
            f"threshold {self.tolerance:.1e} relative)"
        ]
        for k, d in enumerate(self.directions(threshold)):
            terms = " ".join(f"{c:+.3f}*{name}" for name, c in d.items())
            lines.append(f"  unobservable {k + 1}: {terms}")
        return "\n".join(lines)


def regressor(
    model: Model, data: Dataset, unknowns: Unknowns, params: InertialParameters | None = None, **kwargs: Any
) -> Array:
    """``(R, 10 k)`` Jacobian of :func:`residuals` with respect to the stacked parameter vectors
    (exact regressor: the residuals are linear in the parameters), at ``params`` (default the
    nominal model's). ``kwargs``: residual options of :func:`residuals`."""
    return _checked_regressor("regressor", model, data, unknowns, params, kwargs)


def _checked_regressor(
    owner: str, model: Model, data: Dataset, unknowns: Unknowns, params: InertialParameters | None, kwargs: dict
) -> Array:
    """:func:`regressor`, its arguments checked (before any tracing) in messages naming ``owner``."""
    _check_problem(model, data, unknowns, kwargs.get("residual", "momentum"))
    kwargs = _checked_weights(owner, model, kwargs)
    if params is None:
        params = _nominal(model, unknowns)
    else:
        _check_parameters(owner, unknowns, params)
    return _regressor(model, data, unknowns, params.vector().ravel(), kwargs)


@eqx.filter_jit
def _regressor(model: Model, data: Dataset, unknowns: Unknowns, vector: Array, kwargs: dict) -> Array:
    k = unknowns.num_bodies
    fn = lambda v: residuals(model, data, unknowns, InertialParameters.from_vector(v.reshape(k, 10)), **kwargs)  # noqa: E731
    return jax.jacfwd(fn)(vector)


def identifiability(
    model: Model,
    data: Dataset,
    unknowns: Unknowns,
    params: InertialParameters | None = None,
    *,
    tolerance: float = 1e-8,
    **kwargs: Any,
) -> Identifiability:
    """Rank and unobservable directions of the parameters from the regressor's SVD.

    Arguments:
        model, data, unknowns, params: as :func:`regressor`.
        tolerance: relative singular-value threshold of the numerical rank, strictly between 0
            and 1 (default 1e-8: well above float64 round-off of the equilibrated regressor, well
            below the smallest singular value of any excited combination in the examples).
        **kwargs: residual options (``residual=``, weights) passed to :func:`residuals`.
    """
    tolerance = check_fraction("identifiability: tolerance", tolerance)
    y = np.asarray(_checked_regressor("identifiability", model, data, unknowns, params, kwargs), np.float64)
    return _identifiability(y, unknowns.parameter_names(model), tolerance)


def _identifiability(y: np.ndarray, parameter_names: tuple[str, ...], tolerance: float) -> Identifiability:
    """:class:`Identifiability` from a regressor ``(R, p)``."""
    norms = np.linalg.norm(y, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    p = y.shape[1]
    # Only V is needed: the thin SVD when there are at least as many residuals as parameters
    # (the full one builds an R x R matrix U: 1.4 GB and seconds for a 13000-row regressor).
    _, s, vt = np.linalg.svd(y / scale, full_matrices=y.shape[0] < p)
    s_full = np.zeros(p)
    s_full[: s.size] = s
    rank = int(np.sum(s_full > tolerance * max(s_full.max(), np.finfo(np.float64).tiny)))
    null = vt[rank:].T / scale[:, None]  # back to physical units: pi = D^-1 pi_scaled
    null = null / np.linalg.norm(null, axis=0, keepdims=True) if null.size else null.reshape(p, 0)
    return Identifiability(
        parameter_names=parameter_names,
        singular_values=s_full,
        rank=rank,
        tolerance=tolerance,
        unobservable=null,
        column_norms=norms,
    )


@dataclasses.dataclass(frozen=True)
class BaseParameters:
    """The base inertial parameters: the identifiable combinations of the stacked parameter
    vector ``pi`` (``(p,)``, :meth:`InertialParameters.vector` order), ``beta = pi_b + K pi_d``
    (Gautier 1991, numerical base parameters by QR with column pivoting).

    The regressor of any motion satisfies ``Y pi = Y_b beta``: the dependent columns are fixed
    combinations of the independent ones (``Y_d = Y_b K``) and the parameters no motion excites
    have zero columns. ``beta`` is what any record of rich motion determines uniquely, whatever
    the unobservable directions of ``pi`` are.

    Attributes:
        parameter_names: ``(p,)`` names ``"<body>.<parameter>"`` of ``pi``.
        independent: ``(r,)`` indices of ``pi`` each base parameter starts from (``pi_b``).
        dependent: ``(p - r,)`` the other indices (``pi_d``).
        regrouping: ``(r, p - r)`` matrix ``K`` (units: those of ``pi_b`` over those of
            ``pi_d``; entries below ``1e-10`` of the column scale set to zero).
        rank: ``r``.
        tolerance: the relative threshold of the rank (on the pivoted ``|R_ii|``).
        column_scale: ``(p,)`` column norms of the regressor the set was found from (1 for
            zero columns): the equilibration that makes a regressor's conditioning comparable
            between records (:func:`sdjax.excitation.base_singular_values`).
    """

    parameter_names: tuple[str, ...]
    independent: np.ndarray
    dependent: np.ndarray
    regrouping: np.ndarray
    rank: int
    tolerance: float
    column_scale: np.ndarray

    @property
    def matrix(self) -> np.ndarray:
        """``(r, p)`` map ``beta = B pi``."""
        out = np.zeros((self.rank, len(self.parameter_names)))
        out[np.arange(self.rank), self.independent] = 1.0
        out[:, self.dependent] = self.regrouping
        return out

    @property
    def unexcited(self) -> tuple[str, ...]:
        """Parameters that enter no base parameter (no motion changes the residuals with them)."""
        dead = self.dependent[~np.any(self.regrouping != 0, axis=0)]
        return tuple(self.parameter_names[j] for j in sorted(dead))

    def labels(self, digits: int = 4) -> tuple[str, ...]:
        """Each base parameter written out, e.g. ``"link3.Izz +0.09*link4.m +1*link4.Izz"``."""
        out = []
        for i, j in enumerate(self.independent):
            terms = [self.parameter_names[j]]
            for c, k in zip(self.regrouping[i], self.dependent):
                if c != 0:
                    terms.append(f"{c:+.{digits}g}*{self.parameter_names[k]}")
            out.append(" ".join(terms))
        return tuple(out)

    def values(self, params: InertialParameters) -> np.ndarray:
        """``(r,)`` base parameters of ``params`` (the bodies of the ``unknowns`` they came from)."""
        vector = np.asarray(params.vector(), np.float64).ravel()
        if vector.size != len(self.parameter_names):
            raise ValueError(
                f"BaseParameters.values: {vector.size} parameters given, the base set was built for "
                f"{len(self.parameter_names)}"
            )
        return self.matrix @ vector

    def describe(self, digits: int = 4) -> str:
        """Human-readable list of the base parameters and the unexcited parameters."""
        lines = [f"{self.rank} base parameters of {len(self.parameter_names)}:"]
        lines += [f"  beta{i + 1}: {label}" for i, label in enumerate(self.labels(digits))]
        if self.unexcited:
            lines.append("  enter no residual: " + ", ".join(self.unexcited))
        return "\n".join(lines)


def base_parameters(
    model: Model,
    records: Dataset | list[Dataset] | tuple[Dataset, ...],
    unknowns: Unknowns,
    *,
    tolerance: float | None = None,
    **kwargs: Any,
) -> BaseParameters:
    """The base parameters (:class:`BaseParameters`) of ``unknowns`` from the regressors of
    ``records`` stacked.

    The result describes the records given: a combination the records do not excite counts as
    unidentifiable. For the structural base set (what physics allows), give records of rich,
    varied motion, e.g. a few :func:`sdjax.excitation.random_excitation` records; the rank is
    then that of any sufficiently exciting experiment.

    Arguments:
        model, unknowns: as :func:`regressor` (the regressor is evaluated at the nominal model:
            it does not depend on the parameters, the residuals being linear in them).
        records: one :class:`Dataset` or several.
        tolerance: relative threshold on the pivoted diagonal ``|R_ii| / |R_11|`` of the
            column-equilibrated regressor (default: 1e-8 in float64, as :func:`identifiability`;
            ``100 eps`` of the records' dtype when that is larger: 1.2e-5 in float32, whose
            round-off would otherwise count as rank).
        **kwargs: residual options (``residual=``, weights) passed to :func:`residuals`.
    """
    if isinstance(records, Dataset):
        records = [records]
    if not records:
        raise ValueError("base_parameters: no records given")
    regressors = [regressor(model, d, unknowns, **kwargs) for d in records]
    if tolerance is None:
        tolerance = max(1e-8, 100.0 * float(np.finfo(regressors[0].dtype).eps))
    else:
        tolerance = check_fraction("base_parameters: tolerance", tolerance)
    y = np.vstack([np.asarray(r, np.float64) for r in regressors])
    return _base_parameters(y, unknowns.parameter_names(model), tolerance)


def _base_parameters(y: np.ndarray, parameter_names: tuple[str, ...], tolerance: float) -> BaseParameters:
    """:class:`BaseParameters` of a regressor ``(R, p)``: QR with column pivoting of the
    column-equilibrated regressor (zero columns are dependent with a zero regrouping)."""
    import scipy.linalg

    norms = np.linalg.norm(y, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    scaled = y / scale
    _, r_factor, pivots = scipy.linalg.qr(scaled, mode="economic", pivoting=True)
    diagonal = np.abs(np.diag(r_factor))
    rank = int(np.sum(diagonal > tolerance * max(diagonal[0] if diagonal.size else 0.0, np.finfo(np.float64).tiny)))
    independent, dependent = pivots[:rank], pivots[rank:]
    # Scaled columns: Y_d D_d^-1 = Y_b D_b^-1 K_s with K_s = R11^-1 R12; in physical units
    # Y_d = Y_b K, K = D_b^-1 K_s D_d.
    k_scaled = scipy.linalg.solve_triangular(r_factor[:rank, :rank], r_factor[:rank, rank:])
    k_scaled = np.where(np.abs(k_scaled) > 1e-10, k_scaled, 0.0)  # round-off of exact zeros
    regrouping = k_scaled / scale[independent][:, None] * scale[dependent][None, :]
    return BaseParameters(
        parameter_names=parameter_names,
        independent=independent,
        dependent=dependent,
        regrouping=regrouping,
        rank=rank,
        tolerance=tolerance,
        column_scale=scale,
    )


# ------------------------------------------------------------------------------------------
# Uncertainty of the estimates.

# A parameter counts as unidentifiable when some unobservable direction (unit vector in
# column-equilibrated coordinates) has a component above this in it: round-off puts ~1e-8 at most
# there (float64 SVD, singular-value gap of at least the rank tolerance 1e-8 relative).
_TOUCH = 1e-6


@dataclasses.dataclass(frozen=True)
class ParameterCovariance:
    """Covariance of estimated inertial parameters (:func:`estimate_covariance`).

    Parameters are the stacked ``(10 k,)`` vectors of :meth:`InertialParameters.vector` (order
    :data:`PARAMETER_NAMES`, bodies in ``unknowns`` order). Parameters that an unobservable
    direction touches have ``inf`` variance (their rows and columns of ``covariance`` are
    ``nan`` off the diagonal), as have the derived quantities that depend on them.

    Attributes:
        parameter_names: ``(p,)`` names ``"<body>.<parameter>"``.
        estimate: ``(k, 10)`` the estimated parameter vectors the intervals are centred on.
        covariance: ``(p, p)`` covariance, ``inf``/``nan`` for unidentifiable parameters.
        identifiable_covariance: ``(p, p)`` finite covariance restricted to the identifiable
            subspace (``s^2 D^-1 V_r S_r^-2 V_r^T D^-1``): right for any linear combination
            ``a^T pi`` with ``D^-1 a`` orthogonal to the unobservable directions (e.g. the
            observable sum of two unidentifiable parameters), meaningless otherwise.
        identifiable: ``(p,)`` whether each parameter has a finite variance.
        noise_variance: ``s^2 = |r_w|^2 / dof`` of the (whitened, when ``noise_std`` was
            given) residual. Without ``noise_std`` it scales the covariance; with it, it is a
            consistency check (about 1 when the given noise level is right) and is not used.
        dof: degrees of freedom ``R - rank``.
        rank: numerical rank of the regressor (as :class:`Identifiability`).
        known_noise: whether ``noise_std`` was given.
        confidence: level of the intervals (default 0.95).
        method: ``"white"`` or ``"sandwich"`` (:data:`COVARIANCE_METHODS`, see
            :func:`estimate_covariance`).
    """

    parameter_names: tuple[str, ...]
    estimate: np.ndarray
    covariance: np.ndarray
    identifiable_covariance: np.ndarray
    identifiable: np.ndarray
    noise_variance: float
    dof: int
    rank: int
    known_noise: bool
    confidence: float = 0.95
    method: str = "white"

    @property
    def std(self) -> np.ndarray:
        """``(p,)`` standard deviations of the parameters (``inf`` where unidentifiable)."""
        return np.sqrt(np.diag(self.covariance))

    @property
    def z(self) -> float:
        """Two-sided normal quantile of :attr:`confidence` (1.96 for 95 %)."""
        return statistics.NormalDist().inv_cdf(0.5 + 0.5 * self.confidence)

    @property
    def intervals(self) -> np.ndarray:
        """``(p, 2)`` lower and upper bounds ``estimate -/+ z std``."""
        mid, half = self.estimate.ravel(), self.z * self.std
        return np.stack([mid - half, mid + half], axis=-1)

    @property
    def mass_std(self) -> np.ndarray:
        """``(k,)`` standard deviations of the masses, kg."""
        return self.std.reshape(-1, 10)[:, 0]

    @property
    def centroid(self) -> np.ndarray:
        """``(k, 3)`` estimated centroid offsets ``c = h / m`` from the reference points, m."""
        return self.estimate[:, 1:4] / self.estimate[:, :1]

    @property
    def centroid_covariance(self) -> np.ndarray:
        """``(k, 3, 3)`` covariance of the centroids by the delta method: ``G C G^T`` with
        ``C`` the ``(m, h)`` block and ``G = d(h/m)/d(m, h) = [-c/m, 1/m]`` (``inf``/``nan``
        where ``m`` or ``h`` is unidentifiable)."""
        out = []
        for body, (m, c) in enumerate(zip(self.estimate[:, 0], self.centroid)):
            block = slice(10 * body, 10 * body + 4)
            cov = self.identifiable_covariance[block, block]
            g = np.concatenate([-c[:, None] / m, np.eye(3) / m], axis=1)
            cc = g @ cov @ g.T
            # c_i depends on m and h_i: infinite if either is unidentifiable.
            ok = self.identifiable[block]
            good = ok[0] & ok[1:]
            cc = np.where(good[:, None] & good[None, :], cc, np.nan)
            cc[np.diag_indices(3)] = np.where(good, np.diag(cc), np.inf)
            out.append(cc)
        return np.stack(out)

    @property
    def centroid_std(self) -> np.ndarray:
        """``(k, 3)`` standard deviations of the centroid coordinates (link frame), m."""
        return np.sqrt(np.diagonal(self.centroid_covariance, axis1=-2, axis2=-1))

    @property
    def mass_interval(self) -> np.ndarray:
        """``(k, 2)`` confidence intervals of the masses, kg."""
        m, half = self.estimate[:, 0], self.z * self.mass_std
        return np.stack([m - half, m + half], axis=-1)

    @property
    def centroid_interval(self) -> np.ndarray:
        """``(k, 3, 2)`` confidence intervals of the centroid coordinates, m."""
        c, half = self.centroid, self.z * self.centroid_std
        return np.stack([c - half, c + half], axis=-1)


def estimate_covariance(
    model: Model,
    data: Dataset,
    unknowns: Unknowns,
    params: InertialParameters,
    *,
    noise_std: Any = None,
    tolerance: float = 1e-8,
    confidence: float = 0.95,
    method: str = "white",
    **kwargs: Any,
) -> ParameterCovariance:
    """Covariance of the parameter estimate ``params`` from the residual Jacobian.

    The residual is affine in the parameter vectors, ``r(pi) = r_0 + J (pi - pi_0)`` with ``J``
    the exact :func:`regressor`, so for residual noise ``e`` the least-squares estimate moves
    by ``-(J^T J)^+ J^T e``, and its covariance is

    - ``Cov = s^2 (J^T J)^+`` with ``s^2 = |r|^2 / (R - rank)`` (residual at ``params``; ``R``
      residuals, ``rank`` identifiable combinations), when the noise level is unknown: the noise
      is taken as white with one variance over all residual entries;
    - ``Cov = (J^T W J)^+``, ``W = diag(1 / noise_std^2)``, when ``noise_std`` is given.

    These hold to first order in the noise, for an estimate inside the physically consistent set
    (the log-Cholesky parameterisation then does not bind, and the estimate is the linear
    least-squares solution), with white noise of one variance on the residual entries (the
    Monte-Carlo test checks standard deviations and 95 % coverage under exactly that). Noise on
    the *measured states* (:func:`add_noise`) is not of that kind: it enters the momentum rows of
    one sample correlated and with a variance that follows the motion, and the regressor itself
    (errors in variables); on the payload case this formula then mis-states individual standard
    deviations by factors of about 0.7 to 3. Read the intervals as indicative there, or use
    ``method="sandwich"``. The momentum residual's mean removal takes 6 more degrees of freedom
    than counted, ``6 / R`` relative.

    ``method="sandwich"``: the cluster-robust (Huber-White) covariance
    ``B (sum_g J_g^T r_g r_g^T J_g) B`` with ``B = (J^T J)^+`` and one cluster ``g`` per
    measured sample (its momentum rows; a dynamics residual's rows of one midpoint), scaled by
    ``G / (G - rank)`` for ``G`` clusters. It assumes only that clusters are independent, so it
    follows noise whose variance changes with the motion and that is correlated within a
    sample, as state noise is; it does not remove the bias of errors in the regressor, and it
    needs many more samples than parameters (its own spread falls as ``1 / sqrt(G)``).

    Unidentifiable directions: ``(J^T J)^+`` alone would give those directions zero variance
    (the minimum-norm pseudo-inverse simply drops them), i.e. a fake certainty about parameters
    the data do not determine. The pseudo-inverse is therefore taken in column-equilibrated
    coordinates and truncated to the numerical rank (same threshold as :func:`identifiability`),
    and every parameter that an unobservable direction touches (component above 1e-6 in a unit
    equilibrated direction) is reported with ``inf`` variance (``nan`` covariances): its value
    is set by the initial guess or the regularisation, not by the data. The truncated covariance
    is kept as ``identifiable_covariance`` for combinations in the identifiable subspace.

    Arguments:
        model, data, unknowns: as :func:`identify`.
        params: the estimate (``(k,)`` bodies, e.g. ``identify(...).parameters``).
        noise_std: standard deviation of the noise of the residual entries, in the units of
            :func:`residuals`' output (weighted, each block divided by the square root of its
            number of samples): a scalar, an ``(R,)`` vector, or for a single-block residual
            one value per channel (``(c,)``, the block's columns, repeated over the samples).
            ``None``: estimated from the residual.
        tolerance: relative singular-value threshold of the rank (:func:`identifiability`),
            strictly between 0 and 1.
        confidence: level of the intervals (default 0.95: ``+- 1.96 std``).
        method: ``"white"`` (default) or ``"sandwich"`` (above).
        **kwargs: residual options (``residual=``, weights) of :func:`residuals`.

    Returns:
        :class:`ParameterCovariance`.
    """
    tolerance = check_fraction("estimate_covariance: tolerance", tolerance)
    check_type("estimate_covariance: params", params, InertialParameters, "sdjax.InertialParameters")
    y = np.asarray(_checked_regressor("estimate_covariance", model, data, unknowns, params, kwargs), np.float64)
    kwargs = _checked_weights("estimate_covariance", model, kwargs)
    r = np.asarray(residuals(model, data, unknowns, params, **kwargs), np.float64)
    groups = _sample_groups(model, data, kwargs.get("residual", "momentum"), r.size)
    return _covariance(
        y,
        r,
        np.asarray(params.vector(), np.float64),
        unknowns.parameter_names(model),
        tolerance,
        noise_std,
        confidence,
        method,
        groups,
    )


#: Covariance estimators of :func:`estimate_covariance`.
COVARIANCE_METHODS = ("white", "sandwich")


def _sample_groups(model: Model, data: Dataset, residual: str, size: int) -> np.ndarray:
    """``(R,)`` cluster label of every residual row: its measured sample (momentum block: ``N``
    samples x the conserved components) or midpoint (dynamics block: ``N - 1`` x its rows)."""
    samples = data.time.shape[0]
    momentum_rows = samples * len(model.base_coordinates) if residual in ("momentum", "both") else 0
    labels = [np.repeat(np.arange(samples), momentum_rows // samples)] if momentum_rows else []
    if residual in ("dynamics", "both"):
        per_midpoint = (size - momentum_rows) // (samples - 1)
        labels.append(samples + np.repeat(np.arange(samples - 1), per_midpoint))
    return np.concatenate(labels)


def _covariance(
    y: np.ndarray,
    r: np.ndarray,
    estimate: np.ndarray,
    names: tuple[str, ...],
    tolerance: float,
    noise_std: Any,
    confidence: float,
    method: str = "white",
    groups: np.ndarray | None = None,
) -> ParameterCovariance:
    """:class:`ParameterCovariance` from the regressor ``y`` ``(R, p)`` and the residual ``r`` at
    the estimate ``(k, 10)``; ``groups`` ``(R,)`` the cluster of each row (``"sandwich"``)."""
    if not 0 < confidence < 1:
        raise ValueError(f"estimate_covariance: confidence must be in (0, 1), got {confidence}")
    check_choice("estimate_covariance: method", method, COVARIANCE_METHODS)
    num, p = y.shape
    if noise_std is not None:
        sigma = np.asarray(noise_std, np.float64)
        if sigma.ndim == 1 and sigma.size not in (1, num) and num % sigma.size == 0:
            sigma = np.tile(sigma, num // sigma.size)  # per channel, repeated over the samples
        if sigma.ndim > 1 or sigma.size not in (1, num):
            raise ValueError(
                f"estimate_covariance: noise_std must be a scalar, one value per residual ({num}) or per "
                f"channel, got shape {sigma.shape}"
            )
        if not np.all(sigma > 0):
            raise ValueError("estimate_covariance: noise_std must be positive")
        y, r = y / sigma.reshape(-1, 1), r / sigma.reshape(-1)
    norms = np.linalg.norm(y, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    _, s, vt = np.linalg.svd(y / scale, full_matrices=num < p)  # thin: no (R, R) matrix
    s_full = np.zeros(p)
    s_full[: s.size] = s
    rank = int(np.sum(s_full > tolerance * max(s_full.max(), np.finfo(np.float64).tiny)))
    dof = num - rank
    variance = float(r @ r / dof) if dof > 0 else float("nan")
    v = vt[:rank].T / s_full[:rank]
    if method == "sandwich":
        assert groups is not None and groups.shape == (num,)  # (built with the residual)
        _, cluster = np.unique(groups, return_inverse=True)
        count = int(cluster.max()) + 1
        if count <= rank:
            raise ValueError(f"estimate_covariance: the sandwich needs more samples ({count}) than parameters ({rank})")
        scores = np.zeros((count, p))
        np.add.at(scores, cluster.reshape(-1), (y / scale) * r[:, None])  # J_g^T r_g, equilibrated
        bread = v @ v.T
        meat = scores.T @ scores * (count / (count - rank))
        restricted = bread @ meat @ bread / np.outer(scale, scale)
    else:
        factor = 1.0 if noise_std is not None else variance
        restricted = factor * (v @ v.T) / np.outer(scale, scale)
    identifiable = np.max(np.abs(vt[rank:]), axis=0, initial=0.0) <= _TOUCH
    full = np.where(identifiable[:, None] & identifiable[None, :], restricted, np.nan)
    full[np.diag_indices(p)] = np.where(identifiable, np.diag(restricted), np.inf)
    return ParameterCovariance(
        parameter_names=names,
        estimate=estimate.reshape(-1, 10),
        covariance=full,
        identifiable_covariance=restricted,
        identifiable=identifiable,
        noise_variance=variance,
        dof=dof,
        rank=rank,
        known_noise=noise_std is not None,
        confidence=confidence,
        method=method,
    )


# ------------------------------------------------------------------------------------------
# Estimation.


def _nominal(model: Model, unknowns: Unknowns) -> InertialParameters:
    """Initial guess: the model's links; a payload equal to its carrier link (at its centroid)."""
    carriers = tuple(unknowns.links) + ((unknowns.payload_link,) if unknowns.payload_link is not None else ())
    return link_parameters(model, carriers)


@dataclasses.dataclass(frozen=True)
class IdentificationResult:
    """Result of :func:`identify`.

    Attributes:
        body_names: static labels of the estimated bodies.
        parameters: estimated :class:`InertialParameters` (about the reference points).
        theta: ``(k, 10)`` log-Cholesky coordinates of the estimate.
        model: the model with the estimates put in.
        loss_history: ``(steps + 1,)`` loss ``1/2 |r|^2`` at the start and after every step.
        identifiability: :class:`Identifiability` at the estimate (static).
        errors: :func:`parameter_errors` against ``truth`` when it was given, else ``None``.
        covariance: :class:`ParameterCovariance` of the estimate (:func:`estimate_covariance`
            from the regressor and the residual at the estimate, ``noise_std`` of
            :func:`identify`): standard deviations and 95 % intervals of the parameters, masses
            and centroids; ``inf`` variance for unidentifiable parameters.
    """

    body_names: tuple[str, ...]
    parameters: InertialParameters
    theta: Array
    model: Model
    loss_history: Array
    identifiability: Identifiability
    errors: dict | None
    covariance: ParameterCovariance | None = None


def parameter_errors(estimate: InertialParameters, truth: InertialParameters) -> dict[str, np.ndarray]:
    """Errors per body of an ``estimate`` against the ``truth`` (the same bodies): ``mass``
    relative, ``com`` centroid error (m), ``com_relative`` (to ``|c_true|``, or to 1 m if that is
    smaller), ``inertia`` relative Frobenius error of the inertia about the body's own centroid.

    Returns:
        ``{name: (k,) errors}`` for the ``k`` bodies.
    """
    m_e, m_t = np.asarray(estimate.mass), np.asarray(truth.mass)
    c_e, c_t = np.asarray(estimate.centroid), np.asarray(truth.centroid)
    i_e, i_t = np.asarray(estimate.centroidal_inertia), np.asarray(truth.centroidal_inertia)
    com = np.linalg.norm(c_e - c_t, axis=-1)
    return {
        "mass": np.abs(m_e - m_t) / m_t,
        "com": com,
        "com_relative": com / np.maximum(np.linalg.norm(c_t, axis=-1), 1e-12),
        "inertia": np.linalg.norm(i_e - i_t, axis=(-2, -1)) / np.linalg.norm(i_t, axis=(-2, -1)),
    }


def identify(
    model: Model,
    data: Dataset,
    unknowns: Unknowns,
    *,
    residual: str = "momentum",
    initial: InertialParameters | None = None,
    optimizer: Any = None,
    max_iterations: int = 50,
    regularization: float = 0.0,
    truth: InertialParameters | None = None,
    tolerance: float = 1e-8,
    momentum_weights: Any = None,
    dynamics_weights: Any = None,
    noise_std: Any = None,
    covariance_method: str = "white",
    num_steps: int | None = None,
) -> IdentificationResult:
    """Estimate inertial parameters from measured data.

    Arguments:
        model: nominal model (known bodies exact; unknown links give the initial guess and the
            reference points).
        data: :class:`Dataset`.
        unknowns: :class:`Unknowns` (links and/or a payload).
        residual: ``"momentum"`` (no torques needed), ``"dynamics"`` or ``"both"``.
        initial: initial guess (default: the linear least-squares solution, projected onto
            physically consistent bodies; the model's links / a payload equal to its carrier
            set the reference point of that linear solve).
        optimizer: ``None`` for Levenberg-Marquardt (Gauss-Newton with adaptive damping on the
            log-Cholesky coordinates), or an ``optax`` optimiser (e.g. ``optax.adam(1e-2)``,
            ``optax.lbfgs()``) on the loss ``1/2 |r|^2``.
        max_iterations: most optimiser steps (Levenberg-Marquardt stops early when the step
            is negligible; an ``optax`` optimiser takes this many).
        regularization: weight ``rho`` of ``rho/2 |theta - theta_0|^2`` added to the loss (pulls
            unobservable directions towards the initial guess; 0 = none).
        truth: true parameters (same bodies) to report errors against.
        tolerance: relative singular-value threshold of the identifiability report (and the
            covariance's rank), strictly between 0 and 1.
        momentum_weights, dynamics_weights: see :func:`residuals`.
        noise_std: known standard deviation of the residual noise (:func:`estimate_covariance`)
            for ``result.covariance``; ``None`` (default) estimates it from the residual. The
            covariance describes the data alone (the regularisation term is left out of it).
        covariance_method: ``"white"`` or ``"sandwich"`` (:func:`estimate_covariance`; the
            sandwich for noise on the measured states, :func:`add_noise`).
        num_steps: the earlier name of ``max_iterations`` (``DeprecationWarning``).

    Returns:
        :class:`IdentificationResult`.
    """
    _check_problem(model, data, unknowns, residual)
    check_choice("identify: covariance_method", covariance_method, COVARIANCE_METHODS)
    max_iterations = renamed_keyword("identify", "num_steps", num_steps, "max_iterations", max_iterations, 50)
    num_steps = check_count("identify: max_iterations", max_iterations, 0)
    float_array("identify: regularization", regularization, shape=(), sign="non-negative")
    tolerance = check_fraction("identify: tolerance", tolerance)
    _check_optimizer("identify", optimizer)
    k = unknowns.num_bodies
    # The residuals are affine in the parameter vectors pi (momentum and inverse dynamics are linear
    # in each body's mass, first moment and inertia about a fixed point): r(pi) = r(pi_0) +
    # Y (pi - pi_0) exactly, with the regressor Y evaluated once (one forward-mode pass over the
    # data); every iteration below then costs O(R p) instead of a pass over the dynamics.
    kwargs = _checked_weights(
        "identify", model, dict(residual=residual, momentum_weights=momentum_weights, dynamics_weights=dynamics_weights)
    )
    nominal = _nominal(model, unknowns)
    y = _checked_regressor("identify", model, data, unknowns, nominal, kwargs)
    offset = residuals(model, data, unknowns, nominal, **kwargs)
    if initial is None:
        initial = _least_squares_start(np.asarray(y, np.float64), np.asarray(offset, np.float64), nominal)
    if initial.mass.shape != (k,):
        raise ValueError(
            f"identify: initial has {initial.mass.shape[0] if initial.mass.ndim else 0} bodies, expected {k} ({unknowns.labels(model)})"
        )
    if truth is not None and truth.mass.shape != (k,):
        raise ValueError(f"identify: truth has {truth.mass.shape} masses, expected ({k},)")
    theta0 = to_log_cholesky(initial).ravel()
    dtype = theta0.dtype
    problem = _Problem(
        regressor=y,
        offset=offset,
        nominal=nominal.vector().ravel(),
        theta0=theta0,
        rho=jnp.asarray(regularization, dtype),
    )
    theta = theta0
    history: Any
    if optimizer is None:
        theta, history = _levenberg_marquardt(problem, theta, num_steps)
    else:
        history = [float(_loss(problem, theta))]
        loss = lambda th: _loss(problem, th)  # noqa: E731
        with jax.numpy_dtype_promotion("standard"):
            state = optimizer.init(theta)
        update = jax.jit(lambda g, s, th, v: optimizer.update(g, s, th, value=v, grad=g, value_fn=loss))
        for _ in range(num_steps):
            value, grad = _loss_and_grad(problem, theta)
            # optax mixes int32 step counts with Python floats (fails under strict promotion).
            with jax.numpy_dtype_promotion("standard"):
                updates, state = update(grad, state, theta, value)
            theta = theta + updates
            history.append(float(_loss(problem, theta)))
    theta = theta.reshape(k, 10)
    params = from_log_cholesky(theta)
    report = _identifiability(
        np.asarray(y, np.float64), unknowns.parameter_names(model), tolerance
    )  # Y is the same at every pi
    errors = parameter_errors(params, truth) if truth is not None else None
    # The residual at the estimate from the affine model (exact), without the regularisation rows.
    vector = np.asarray(params.vector(), np.float64)
    r = np.asarray(offset, np.float64) + np.asarray(y, np.float64) @ (
        vector.ravel() - np.asarray(problem.nominal, np.float64)
    )
    groups = _sample_groups(model, data, residual, r.size)
    covariance = _covariance(
        np.asarray(y, np.float64),
        r,
        vector,
        report.parameter_names,
        tolerance,
        noise_std,
        0.95,
        covariance_method,
        groups,
    )
    return IdentificationResult(
        body_names=unknowns.labels(model),
        parameters=params,
        theta=theta,
        model=_model_with_any_estimates(model, unknowns, params),
        loss_history=jnp.asarray(history, dtype),
        identifiability=report,
        errors=errors,
        covariance=covariance,
    )


def _least_squares_start(y: np.ndarray, r: np.ndarray, nominal: InertialParameters) -> InertialParameters:
    """Unconstrained linear least-squares estimate from the regressor ``y`` and the residual
    ``r`` at ``nominal`` (the residual is affine in the parameters), projected onto physically
    consistent bodies by clipping the pseudo-inertia's eigenvalues: to a thousandth of the
    nominal body's smallest, and at least ``64 eps`` of the body's largest in the parameters'
    precision, so the body stays consistent once rounded to it (in float32 a floor below
    ``eps`` of the largest eigenvalue is lost in the rounding, and the start was refused)."""
    delta = equilibrated_lstsq(y, -r, rcond=1e-10)
    vector = np.asarray(nominal.vector(), np.float64) + delta.reshape(-1, 10)
    # In NumPy float64 whatever JAX's precision (the body algebra keeps NumPy in NumPy); the
    # inertia entries as InertialParameters.from_vector reads them.
    _, _, inertia = editing.from_inertial_vector(np.concatenate([np.zeros_like(vector[:, :4]), vector[:, 4:]], axis=1))
    pseudo = InertialParameters(mass=vector[:, 0], first_moment=vector[:, 1:4], inertia=inertia).pseudo_inertia()
    nominal_pseudo = np.asarray(nominal.pseudo_inertia(), np.float64)
    dtype = nominal.mass.dtype
    resolution = 64 * float(jnp.finfo(dtype).eps)
    fixed = []
    for j, j0 in zip(pseudo, nominal_pseudo):
        eig, vec = np.linalg.eigh(j)
        floor = max(1e-3 * np.linalg.eigvalsh(j0).min(), resolution * eig.max())
        fixed.append((vec * np.maximum(eig, floor)) @ vec.T)
    return InertialParameters.from_pseudo_inertia(jnp.asarray(np.stack(fixed), dtype))


class _Problem(eqx.Module):
    """Everything the loss depends on, as one pytree (so compiled code is reused across calls
    with data of the same shapes): the affine residual ``offset + regressor (pi - nominal)``
    and the regularisation."""

    regressor: Array  # (R, 10 k)
    offset: Array  # (R,) residuals at the nominal parameters
    nominal: Array  # (10 k,) nominal parameter vectors, stacked
    theta0: Array  # (10 k,) log-Cholesky coordinates of the initial guess
    rho: Array  # () regularisation weight

    def full_residual(self, theta: Array) -> Array:
        vector = from_log_cholesky(theta.reshape(-1, 10)).vector().ravel()
        r = self.offset + matmul(self.regressor, vector - self.nominal)
        return jnp.concatenate([r, jnp.sqrt(self.rho) * (theta - self.theta0)])


@eqx.filter_jit
def _loss(problem: _Problem, theta: Array) -> Array:
    return 0.5 * jnp.sum(problem.full_residual(theta) ** 2)


@eqx.filter_jit
def _loss_and_grad(problem: _Problem, theta: Array) -> tuple[Array, Array]:
    return jax.value_and_grad(lambda th: 0.5 * jnp.sum(problem.full_residual(th) ** 2))(theta)


@eqx.filter_jit
def _marquardt_iterations(problem: _Problem, theta: Array, num_steps: int) -> LeastSquaresResult:
    # Marquardt's rule on the log-Cholesky coordinates: start at mu = 1e-3 (relative to the
    # diag(J^T J) scaling, a step close to Gauss-Newton's), normal equations (far more residuals
    # than unknowns); stop when a step is below 1e-12 of |theta| (it no longer changes the
    # estimate in float64).
    return levenberg_marquardt(
        problem.full_residual,
        theta,
        max_iterations=num_steps,
        damping=1e-3,
        adaptive=True,
        scaling="marquardt",
        form="normal",
        step_tolerance=1e-12,
    )


def _levenberg_marquardt(problem: _Problem, theta: Array, num_steps: int) -> tuple[Array, Array]:
    """Levenberg-Marquardt (:func:`sdjax.solvers.levenberg_marquardt`) with Marquardt's diagonal
    scaling and adaptive damping; returns the estimate and the loss at the start and after each
    accepted step."""
    result = _marquardt_iterations(problem, theta, num_steps)
    return result.x, result.cost_history[: int(result.iterations) + 1]


def __getattr__(name: str) -> Any:
    """``pseudo_inertia(params)`` and ``from_pseudo_inertia(J)``, the earlier module functions of
    :meth:`InertialParameters.pseudo_inertia` and :meth:`InertialParameters.from_pseudo_inertia`
    (their names were also :mod:`sdjax.editing`'s, with other arguments), with a
    ``DeprecationWarning``."""
    if name in ("pseudo_inertia", "from_pseudo_inertia"):
        import warnings

        warnings.warn(f"sdjax.identification.{name} is now InertialParameters.{name}", DeprecationWarning, stacklevel=2)
        if name == "pseudo_inertia":
            return lambda params: params.pseudo_inertia()
        return InertialParameters.from_pseudo_inertia
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
