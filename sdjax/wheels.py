"""Wheels on terrain: rim contact and a regularised slip (tyre) traction model.

Seed 001 (Fig 7d, after Yoshida, Shiwa and Oda, AIAA 98-4362) simulates an articulated off-road
vehicle "with the contact model for tire mechanics"; this module is that model for sdjax,
written as pure JAX functions of the state so that ``jax.grad`` flows through driving,
climbing and slipping.

Wheels. A wheel is a revolute joint whose child link is a rigid disk of radius ``r``
(:class:`Wheels`: joint numbers, radii, widths). Its centre is the joint position and its axis
``a`` the joint axis (so ``qd > 0`` turns it about ``a``); the link's centroid should lie on the
axis (a balanced wheel). The terrain is any of :mod:`sdjax.contact`'s (:class:`~sdjax.contact.Plane`,
:func:`~sdjax.contact.inclined_plane`, :class:`~sdjax.contact.HeightField`).

Geometry (thin disk: contact in the wheel's mid-plane, where Pacejka places the contact point).
The terrain, queried at the wheel centre ``c``, gives the signed distance ``s_c`` of ``c``
above its tangent plane and the outward normal ``n``. The rim point lowest along ``n`` is
``p = c - r d`` with ``d = (n - (n . a) a) / |n - (n . a) a|``; its penetration is
``delta = r |n - (n . a) a| - s_c`` (exact on planes and on height fields that sample one). The
contact frame is ``e_x = a x n / |a x n|`` (rolling direction: ``qd > 0`` rolls the wheel
along ``+e_x``), ``e_y = n x e_x`` (lateral), ``n``.

Normal force: the penalty law of :mod:`sdjax.contact`
(:func:`~sdjax.contact.penalty_normal_force`, with the stiffness, damping and smoothing of a
:class:`~sdjax.contact.ContactParameters`), on ``delta`` and ``d delta/dt = -n . v_p``
(``v_p`` the velocity of the wheel's material point at ``p``).

Traction: a regularised slip model with Pacejka's Magic Formula as the force-slip curve
(H. B. Pacejka, *Tire and Vehicle Dynamics*, 3rd ed., Butterworth-Heinemann, 2012, ch. 4;
the isotropic combined-slip form of his ch. 3 brush-model theory). With ``v_x = e_x . v_c`` the
forward speed of the centre, ``V_r = e_x . (w x (c - p))`` the rolling speed (``r omega`` for an
upright wheel) and ``v_s`` the slip velocity of the material contact point
(``v_s,x = v_x - V_r``, ``v_s,y = e_y . v_p``), the slip vector is

    sigma = -(v_s,x, v_s,y) / V,   V = sqrt(max(V_r^2, v_x^2) + eps^2),

so ``sigma_x = (r omega - v_x) / max(|r omega|, |v_x|)`` is the longitudinal slip ratio (Wong's
driving slip ``1 - v / (r omega)`` when driving, the skid ``1 - r omega / v`` when braking; in
``[-1, 1]`` while wheel and centre move the same way) and ``sigma_y ~ -tan(alpha)`` for a slip
angle ``alpha``. The force in the ground plane is

    F_t = mu f_n MF(|sigma|) sigma / |sigma|,   MF(x) = sin(C atan(B x - E (B x - atan(B x)))),

the Magic Formula with peak ``D = mu f_n`` (``mu`` = ``ContactParameters.friction``; ``B``,
``C``, ``E`` of :class:`MagicFormula`), applied at ``p`` with the normal force: the wheel link
receives ``f_n n + F_t`` there (through :func:`sdjax.point_loads`). ``MF`` is odd, so
``MF(x) / x`` is a smooth even function and the force is infinitely differentiable in the state,
including at zero slip and (thanks to ``eps = ContactParameters.slip_velocity``) at standstill.

Why this model: the Magic Formula is the standard empirical tyre law, its parameters are
tabulated for many tyres and fitted from traction tests on soils, and with ``E = 0`` it inverts
in closed form, so the steady states it predicts can be checked exactly: on a slope ``alpha``
with every wheel driven at one speed, traction balances ``M g sin(alpha)`` when
``MF(s) = tan(alpha) / mu`` (:meth:`MagicFormula.slip`; the normal loads sum to
``M g cos(alpha)`` whatever their distribution), and no steady climb exists beyond
``atan(mu max MF)`` (:func:`climbable_slope`).

Rolling resistance (optional, ``rolling_resistance=`` ``c_rr``): a deforming tyre or soil carries
the normal pressure mostly on the leading half of the patch, so the resultant normal force acts a
distance ``e = c_rr r`` ahead of ``p`` and makes a couple that opposes rolling (J. Y. Wong, *Theory
of Ground Vehicles*, 4th ed., Wiley, 2008, sec. 1.2: the coefficient of rolling resistance
``c_rr = e / r``, about 0.01-0.02 for tyres on hard ground, 0.05-0.3 for wheels on loose soil). Here
the normal force is moved to ``p + d e_x`` with ``d = c_rr r V_r / sqrt(V_r^2 + eps^2)`` (the
sign of the rolling speed, smoothed like the slip below ``eps``): the wheel receives the couple
``d e_x x f_n n``, of moment ``d f_n |a x n|`` against its rotation (the rest of the couple,
``d f_n (n . a)`` for a tilted wheel, goes to its parent through the bearing). The ground force
itself is unchanged, so a steady climb still needs the slip above; the motors supply
``c_rr r f_n |a x n|`` more torque per wheel (``c_rr r f_n`` upright), and an unpowered vehicle rolling on flat ground decelerates at
``c_rr g M / (M + sum I_w / r^2)``. Not modelled: tyre relaxation (transient slip),
sinkage and bulldozing of loose soil (Bekker / Wong-Reece terramechanics, Wong, *Theory of
Ground Vehicles*, 4th ed., 2008, ch. 2-4), the width of the tread (contact on the mid-plane).

Stiffness and steps. Below the speed ``V`` the law is viscous with rate ``mu f_n B C / V`` (N s/m)
on the rim point, whose effective mass along ``e_x`` is about ``I_w / r^2`` (wheel inertia over
radius squared) in series with the vehicle: explicit RK4 needs roughly
``dt < 2.8 V I_w / (r^2 mu f_n B C)``, smallest at standstill (``V = eps``). Choose ``eps`` well
below the driving speeds of interest (it also sets the creep of a held wheel) but not smaller
than the step allows.

Use: ``env = wheel_environment(model, wheels, terrain, parameters)`` is ``(t, state) -> Controls``
for ``sdjax.rollout(..., environment=env)``; a :class:`WheelDrive` in it adds motor torques
``gain (speed - qd)`` on the wheel joints (a DC motor at constant voltage: back-EMF makes its
torque fall linearly with speed). :func:`wheel_diagnostics` gives per-wheel slip, slip angle and
forces. Units SI; vectors in the inertial frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from sdjax._checks import check_type, float_array, is_traced
from sdjax.contact import ContactParameters, Terrain, _check_terrain, penalty_normal_force
from sdjax.dynamics import Controls, make_controls, point_loads
from sdjax.kinematics import forward_kinematics, kinematic_pass, point_velocity
from sdjax.model import Model
from sdjax.state import State, check_state, make_state


class Wheels(eqx.Module):
    """Which joints are wheels, and their size.

    Attributes:
        joints: ``(m,)`` static joint numbers (1..n; the wheel is the joint's child link, body
            ``joints[k]``), each a revolute joint.
        radii: ``(m,)`` wheel radii ``r > 0``, m.
        widths: ``(m,)`` tread widths ``> 0``, m (geometry for drawing and inertia; the contact is
            on the mid-plane).
    """

    joints: tuple[int, ...] = eqx.field(static=True)
    radii: Array
    widths: Array

    def __init__(self, joints: Sequence[int], radii: Any, widths: Any = 0.1):
        """``radii`` and ``widths`` are scalars (all wheels alike) or one value per wheel."""
        joints_arr = np.asarray(joints)
        if joints_arr.ndim != 1 or joints_arr.size == 0 or not np.issubdtype(joints_arr.dtype, np.integer):
            raise ValueError(f"Wheels.joints: expected a non-empty flat sequence of joint numbers, got {joints!r}")
        if np.any(joints_arr < 1) or len(set(joints_arr.tolist())) != joints_arr.size:
            raise ValueError(
                f"Wheels.joints: joint numbers must be distinct and >= 1 (1..n), got {joints_arr.tolist()}"
            )
        self.joints = tuple(int(j) for j in joints_arr)
        m = len(self.joints)
        for name, value in (("radii", radii), ("widths", widths)):
            setattr(
                self,
                name,
                float_array(
                    f"Wheels.{name}", value, shape=(m,), scalar="broadcast", sign="positive", hint=f"{m} wheels"
                ),
            )

    @property
    def num_wheels(self) -> int:
        return len(self.joints)

    def check(self, model: Model) -> None:
        """Raise ``ValueError`` if a wheel joint does not exist in ``model`` or is not revolute."""
        bad = [j for j in self.joints if not 1 <= j <= model.num_joints]
        if bad:
            raise ValueError(
                f"Wheels.joints: joint number out of range {bad} for model {model.name!r} (1..{model.num_joints})"
            )
        prismatic = [j for j in self.joints if not bool(np.asarray(model.is_revolute)[j - 1])]
        if prismatic:
            raise ValueError(
                f"Wheels.joints: wheel joints must be revolute, joints {prismatic} of model {model.name!r} are prismatic"
            )


class MagicFormula(eqx.Module):
    """Pacejka's Magic Formula ``MF(x) = sin(C atan(B x - E (B x - atan(B x))))`` normalised to
    a peak of 1 (the force is ``mu f_n MF``; Pacejka 2012, ch. 4).

    The slope at zero slip is ``B C`` (slip stiffness over ``mu f_n``); for ``C > 1`` the curve
    peaks at 1 where ``B x - E (B x - atan(B x)) = tan(pi / (2 C))`` and falls towards
    ``sin(C pi / 2)`` at large slip (sliding); for ``C <= 1`` it rises monotonically. ``E < 1``.
    All three are array leaves (``jax.grad`` reaches them).

    Attributes:
        stiffness_factor: ``B > 0``.
        shape_factor: ``C > 0`` (about 1.65 for longitudinal tyre force, Pacejka's typical value).
        curvature_factor: ``E < 1`` (0: the closed-form inverse applies exactly).
    """

    stiffness_factor: Array
    shape_factor: Array
    curvature_factor: Array

    def __init__(self, stiffness_factor: Any = 10.0, shape_factor: Any = 1.65, curvature_factor: Any = 0.0):
        self.stiffness_factor = float_array("MagicFormula.stiffness_factor", stiffness_factor, sign="positive")
        dtype = self.stiffness_factor.dtype
        self.shape_factor = float_array("MagicFormula.shape_factor", shape_factor, dtype=dtype, sign="positive")
        self.curvature_factor = float_array("MagicFormula.curvature_factor", curvature_factor, dtype=dtype)
        if not is_traced(self.curvature_factor) and not float(np.max(np.asarray(self.curvature_factor))) < 1:
            raise ValueError(
                f"MagicFormula.curvature_factor: must be below 1, got {np.asarray(self.curvature_factor).tolist()}"
            )

    def __call__(self, slip: Any) -> Array:
        """``MF(x)`` (dimensionless, odd in ``x``) at slip ``x`` (any shape)."""
        x = jnp.asarray(slip)
        b, c, e = (v.astype(x.dtype) for v in (self.stiffness_factor, self.shape_factor, self.curvature_factor))
        bx = b * x
        return jnp.sin(c * jnp.arctan(bx - e * (bx - jnp.arctan(bx))))

    def over_slip(self, slip_squared: Array) -> Array:
        """``MF(x) / x`` at ``x = sqrt(slip_squared)``: smooth (even in ``x``), ``B C`` at 0."""
        x2 = jnp.asarray(slip_squared)
        tiny = jnp.finfo(x2.dtype).tiny ** 0.5
        small = x2 < tiny
        x = jnp.sqrt(jnp.where(small, 1.0, x2))
        at_zero = (self.stiffness_factor * self.shape_factor).astype(x2.dtype)
        return jnp.where(small, at_zero, self(x) / x)

    def peak(self) -> Array:
        """``max_x MF(x)`` over ``x >= 0``: 1 for ``C >= 1``, ``sin(C pi / 2)`` below."""
        c = self.shape_factor
        return jnp.where(c >= 1, jnp.ones_like(c), jnp.sin(c * jnp.pi / 2))

    def slip(self, value: Any) -> Array:
        """The slip ``x >= 0`` on the rising branch with ``MF(x) = value`` (``0 <= value <= peak``).

        ``B x - E (B x - atan(B x)) = tan(asin(value) / C)``, solved for ``u = B x`` in closed form
        for ``E = 0`` and by Newton's method otherwise (monotone convergence: the left side is
        concave in ``u`` for ``0 <= E < 1``, convex for ``E < 0``). ``nan`` beyond the peak.
        """
        y = jnp.asarray(value)
        b, c, e = (v.astype(y.dtype) for v in (self.stiffness_factor, self.shape_factor, self.curvature_factor))
        target = jnp.tan(jnp.arcsin(y) / c)
        target = jnp.where(jnp.arcsin(y) / c < jnp.pi / 2, target, jnp.nan)

        def newton(_, u):
            value = (1 - e) * u + e * jnp.arctan(u) - target
            return u - value / ((1 - e) + e / (1 + u * u))

        return lax.fori_loop(0, 50, newton, target) / b


def climbable_slope(friction: Any, formula: MagicFormula | None = None) -> Array:
    """Steepest slope (rad) a vehicle with every wheel driven can climb at a steady speed:
    ``atan(mu max MF)`` (traction ``<= mu max MF sum f_n = mu max MF M g cos(alpha)`` must
    balance ``M g sin(alpha)``; no rolling resistance). ``friction`` is ``mu``."""
    formula = MagicFormula() if formula is None else formula
    return jnp.arctan(jnp.asarray(friction) * formula.peak())


def steady_slope_slip(angle: Any, friction: Any, formula: MagicFormula | None = None) -> Array:
    """Steady longitudinal slip ratio of a vehicle climbing a slope ``angle`` (rad) at constant
    speed with every wheel at the same slip: ``MF(s) = tan(angle) / mu`` on the rising branch
    (independent of mass, gravity and load distribution; ``nan`` above :func:`climbable_slope`)."""
    formula = MagicFormula() if formula is None else formula
    return formula.slip(jnp.tan(jnp.asarray(angle)) / jnp.asarray(friction))


class WheelDrive(eqx.Module):
    """Wheel motors with a speed loop: torque ``gain (speed - qd)`` on each wheel joint.

    A DC motor fed a constant voltage behaves so (its back-EMF cuts the torque linearly with
    speed: ``gain = k_t k_e / R``, ``speed`` the no-load speed). The torque is evaluated at every
    integrator stage, as a fast analog loop is. ``speed`` and ``gain`` are scalars or one value
    per wheel.

    Attributes:
        speed: commanded wheel rate(s), rad/s.
        gain: N m s/rad (``> 0``).
    """

    speed: Array
    gain: Array

    def __init__(self, speed: Any, gain: Any):
        self.speed = float_array("WheelDrive.speed", speed)
        self.gain = float_array("WheelDrive.gain", gain, dtype=self.speed.dtype, sign="positive")


class WheelDiagnostics(eqx.Module):
    """Per-wheel quantities at one state (``m`` wheels; add leading axes with ``jax.vmap``).

    Attributes:
        penetration: ``(m,)`` ``delta``, m (positive when touching).
        normal_force: ``(m,)`` ``f_n >= 0``, N.
        traction: ``(m,)`` longitudinal force ``F_t . e_x`` (positive forward), N.
        lateral_force: ``(m,)`` ``F_t . e_y``, N.
        force: ``(m, 3)`` total force on the wheel ``f_n n + F_t``, inertial frame, N.
        slip_ratio: ``(m,)`` longitudinal slip ``sigma_x = (r omega - v_x) / V`` (see the module
            docstring; positive when driving).
        lateral_slip: ``(m,)`` ``sigma_y = -v_s,y / V``.
        slip_angle: ``(m,)`` ``atan(v_y / sqrt(v_x^2 + eps^2))``, rad, with ``v_y = e_y . v_c``
            (the centre's drift towards the wheel axis ``a``).
        rolling_speed: ``(m,)`` ``V_r`` (``r omega`` for an upright wheel), m/s.
        forward_speed: ``(m,)`` ``v_x = e_x . v_c``, m/s.
        point: ``(m, 3)`` contact point ``p``, inertial, m.
        normal: ``(m, 3)`` terrain normal ``n``.
        forward: ``(m, 3)`` rolling direction ``e_x``.
        lateral: ``(m, 3)`` ``e_y = n x e_x``.
        rolling_resistance_moment: ``(m,)`` moment of the rolling-resistance couple against the
            wheel's rotation, ``d f_n |a x n|`` (module docstring; 0 without
            ``rolling_resistance``), N m.
        couple: ``(m, 3)`` that couple on the wheel, ``d e_x x f_n n``, inertial frame, N m.
    """

    penetration: Array
    normal_force: Array
    traction: Array
    lateral_force: Array
    force: Array
    slip_ratio: Array
    lateral_slip: Array
    slip_angle: Array
    rolling_speed: Array
    forward_speed: Array
    point: Array
    normal: Array
    forward: Array
    lateral: Array
    rolling_resistance_moment: Array
    couple: Array


def _unit(v: Array) -> tuple[Array, Array]:
    """``v / |v|`` and ``|v|`` along the last axis, guarded at zero (a wheel lying flat)."""
    size = jnp.sqrt(jnp.sum(v * v, axis=-1) + jnp.finfo(v.dtype).eps)
    return v / size[..., None], size


def _wheel_state(
    model: Model,
    state: State,
    wheels: Wheels,
    terrain: Terrain,
    parameters: ContactParameters,
    formula: MagicFormula,
    rolling_resistance: Array | None,
) -> WheelDiagnostics:
    dtype = state.q.dtype
    stiffness, damping, friction, eps, smoothing = parameters.per_contact(wheels.num_wheels, dtype)
    motion = kinematic_pass(model, state)
    frames, twists = motion.frames, motion.twists
    index = np.asarray(wheels.joints) - 1
    centre = frames.joint_position[index]  # from r0
    axis = frames.joint_axis[index]
    radius = wheels.radii.astype(dtype)
    distance, normal = terrain.query(centre + state.base_position)
    down, tilt = _unit(normal - jnp.sum(normal * axis, axis=-1, keepdims=True) * axis)  # |n - (n.a) a| = |a x n|
    point = centre - radius[:, None] * down
    penetration = radius * tilt - distance
    twist = twists[np.asarray(wheels.joints)]
    velocity = point_velocity(twist, point)  # material point of the rim at p
    centre_velocity = point_velocity(twist, centre)
    normal_force = penalty_normal_force(
        penetration, -jnp.sum(velocity * normal, axis=-1), stiffness, damping, smoothing
    )
    forward = jnp.cross(axis, normal) / tilt[:, None]
    lateral = jnp.cross(normal, forward)
    forward_speed = jnp.sum(centre_velocity * forward, axis=-1)
    slip_x = jnp.sum(velocity * forward, axis=-1)
    slip_y = jnp.sum(velocity * lateral, axis=-1)
    rolling_speed = forward_speed - slip_x
    speed = jnp.sqrt(jnp.maximum(rolling_speed**2, forward_speed**2) + eps**2)
    sigma_x, sigma_y = -slip_x / speed, -slip_y / speed
    scale = friction * normal_force * formula.over_slip(sigma_x**2 + sigma_y**2)
    traction, lateral_force = scale * sigma_x, scale * sigma_y
    force = normal_force[:, None] * normal + traction[:, None] * forward + lateral_force[:, None] * lateral
    lateral_speed = jnp.sum(centre_velocity * lateral, axis=-1)
    if rolling_resistance is None:
        offset = jnp.zeros_like(normal_force)
    else:  # the normal force's resultant moved ahead of p by d (module docstring)
        offset = rolling_resistance.astype(dtype) * radius * rolling_speed / jnp.sqrt(rolling_speed**2 + eps**2)
    couple = (offset * normal_force)[:, None] * jnp.cross(forward, normal)
    return WheelDiagnostics(
        penetration=penetration,
        normal_force=normal_force,
        traction=traction,
        lateral_force=lateral_force,
        force=force,
        slip_ratio=sigma_x,
        lateral_slip=sigma_y,
        slip_angle=jnp.arctan(lateral_speed / jnp.sqrt(forward_speed**2 + eps**2)),
        rolling_speed=rolling_speed,
        rolling_resistance_moment=offset * normal_force * tilt,
        couple=couple,
        forward_speed=forward_speed,
        point=point + state.base_position,
        normal=normal,
        forward=forward,
        lateral=lateral,
    )


def _rolling_resistance(wheels: Wheels, value: Any, dtype: Any) -> Array | None:
    """``(m,)`` rolling-resistance coefficients ``c_rr >= 0`` (a scalar for every wheel), or None."""
    if value is None:
        return None
    return float_array(
        "rolling_resistance",
        value,
        shape=(wheels.num_wheels,),
        dtype=dtype,
        scalar="broadcast",
        sign="non-negative",
        hint=f"{wheels.num_wheels} wheels",
    )


def _check(model: Model, wheels: Wheels, terrain: Any, parameters: ContactParameters, formula: Any) -> MagicFormula:
    wheels.check(model)
    _check_terrain(terrain)
    parameters.per_contact(wheels.num_wheels, parameters.stiffness.dtype)
    if formula is None:
        return MagicFormula()
    return check_type("formula", formula, MagicFormula, "a sdjax.wheels.MagicFormula")


@eqx.filter_jit
def wheel_diagnostics(
    model: Model,
    state: State,
    wheels: Wheels,
    terrain: Terrain,
    parameters: ContactParameters,
    formula: MagicFormula | None = None,
    rolling_resistance: Any = None,
) -> WheelDiagnostics:
    """Slip, slip angle, normal and traction forces of every wheel at one state.

    Arguments:
        model: the system.
        state: its state (``jax.vmap`` over a trajectory's states for time series).
        wheels: :class:`Wheels`.
        terrain: :class:`~sdjax.contact.Plane` or :class:`~sdjax.contact.HeightField`.
        parameters: :class:`~sdjax.contact.ContactParameters`: normal law (stiffness, damping,
            smoothing), ``friction`` = peak coefficient ``mu``, ``slip_velocity`` = ``eps`` (m/s).
        formula: :class:`MagicFormula` (default ``MagicFormula()``).
        rolling_resistance: coefficient ``c_rr >= 0`` (scalar or one per wheel; module
            docstring) or ``None`` (none).

    Returns:
        :class:`WheelDiagnostics`.
    """
    check_state(model, state)
    formula = _check(model, wheels, terrain, parameters, formula)
    resistance = _rolling_resistance(wheels, rolling_resistance, state.q.dtype)
    return _wheel_state(model, state, wheels, terrain, parameters, formula, resistance)


class WheelEnvironment(eqx.Module):
    """Wheel-terrain loads (and optional drive torques) as an environment function
    ``(t, state) -> Controls`` for :func:`sdjax.rollout` (a pytree: every parameter is a leaf)."""

    model: Model
    wheels: Wheels
    terrain: Terrain
    parameters: ContactParameters
    formula: MagicFormula
    drive: WheelDrive | None
    rolling_resistance: Array | None = None

    def __call__(self, t: Array, state: State) -> Controls:
        wheels = _wheel_state(
            self.model, state, self.wheels, self.terrain, self.parameters, self.formula, self.rolling_resistance
        )
        couples = None if self.rolling_resistance is None else wheels.couple
        loads = point_loads(self.model, state, self.wheels.joints, wheels.point, wheels.force, couples)
        if self.drive is None:
            return loads
        index = np.asarray(self.wheels.joints) - 1
        dtype = state.q.dtype
        torque = self.drive.gain.astype(dtype) * (self.drive.speed.astype(dtype) - state.qd[index])
        tau = jnp.zeros_like(state.q).at[index].add(torque)
        return jax.tree.map(jnp.add, loads, make_controls(self.model, tau=tau, dtype=dtype))


def wheel_environment(
    model: Model,
    wheels: Wheels,
    terrain: Terrain,
    parameters: ContactParameters,
    formula: MagicFormula | None = None,
    drive: WheelDrive | None = None,
    rolling_resistance: Any = None,
) -> WheelEnvironment:
    """Wheels on the terrain as ``environment=`` for :func:`sdjax.rollout`.

    Each wheel link receives ``f_n n + F_t`` at its contact point (module docstring), through
    :func:`sdjax.point_loads`; with ``drive`` the wheel joints also receive the motor torques
    ``gain (speed - qd)``. Add other environment loads with ``jax.tree.map(jnp.add, ...)``.

    Arguments:
        model: the system (wheel joints checked: they exist and are revolute).
        wheels: :class:`Wheels`.
        terrain: :class:`~sdjax.contact.Plane` (:func:`~sdjax.contact.inclined_plane`) or
            :class:`~sdjax.contact.HeightField`.
        parameters: :class:`~sdjax.contact.ContactParameters`, scalars or one value per wheel:
            normal law, ``friction`` = peak traction coefficient ``mu``, ``slip_velocity`` =
            ``eps`` (m/s), the floor of the slip denominator.
        formula: :class:`MagicFormula` (default ``MagicFormula()``: ``B = 10``, ``C = 1.65``, ``E = 0``).
        drive: optional :class:`WheelDrive`.
        rolling_resistance: coefficient ``c_rr >= 0`` (scalar or one per wheel): the wheels
            also receive the rolling-resistance couple (module docstring); ``None`` (default):
            none.

    Returns:
        :class:`WheelEnvironment`, callable as ``env(t, state) -> Controls``.
    """
    formula = _check(model, wheels, terrain, parameters, formula)
    if drive is not None and not isinstance(drive, WheelDrive):
        raise ValueError(f"drive: expected a sdjax.wheels.WheelDrive, got {type(drive).__name__}")
    if drive is not None:
        for name in ("speed", "gain"):
            value = getattr(drive, name)
            if value.ndim > 1 or (value.ndim == 1 and value.shape != (wheels.num_wheels,)):
                raise ValueError(
                    f"WheelDrive.{name}: expected a scalar or shape ({wheels.num_wheels},) for {wheels.num_wheels} wheels, got {value.shape}"
                )
    resistance = _rolling_resistance(wheels, rolling_resistance, parameters.stiffness.dtype)
    return WheelEnvironment(model, wheels, terrain, parameters, formula, drive, resistance)


def turn_commands(
    model: Model, wheels: Wheels, steering: Sequence[int], curvature: Any, speed: Any
) -> tuple[Array, Array]:
    """Steering angles and wheel rates that turn a vehicle about one point (the Ackermann
    condition: every wheel's axis passes through the turning centre, so no wheel slips).

    The geometry is the model's reference pose (``q = 0``, chassis frame: ``x`` forward, ``z``
    up, the ground its ``xy`` plane) with every wheel axis along ``y`` and each steering axis
    along ``z`` through its wheel's hub. The turning centre is ``P = (x_c, 1 / curvature)``:
    ``x_c`` the common ``x`` of the unsteered wheels' hubs (0 when every wheel steers). A wheel
    with hub ``(x_k, y_k)`` steers to ``delta_k = atan(kappa (x_k - x_c) / (1 - kappa y_k))``
    (positive: to the left, about ``+z``) and turns at ``omega_k = v (1 - kappa y_k) /
    (r_k cos(delta_k))``, its hub's speed over its radius when the point ``(x_c, 0)`` moves
    forward at ``v`` and the chassis yaws at ``v kappa``.

    Arguments:
        model: the vehicle (concrete: its geometry is read here, also under ``jit``).
        wheels: its :class:`Wheels`.
        steering: ``(m,)`` static steering joint of each wheel (0: not steered), e.g.
            :attr:`sdjax.models.RockerBogie.steering`.
        curvature: ``kappa = 1 / radius`` of the turn, 1/m (positive: to the left; 0: straight);
            below ``1 / max |y_k|`` (the centre outside the track).
        speed: ``v``, forward speed of ``(x_c, 0)``, m/s.

    Returns:
        ``(angles, rates)``: ``(m,)`` steering angles (rad; 0 for unsteered wheels) and ``(m,)``
        wheel rates (rad/s), differentiable in ``curvature`` and ``speed``.

    Raises:
        ValueError: ``steering`` of the wrong length or naming a joint that is not a revolute
            joint about ``z`` through the hub; unsteered wheels on different axles; a wheel axis
            not along ``y``.
    """
    wheels.check(model)
    steer = tuple(int(j) for j in steering)
    if len(steer) != wheels.num_wheels:
        raise ValueError(
            f"turn_commands: steering: expected {wheels.num_wheels} joint numbers (0: not steered), got {steer}"
        )
    with jax.ensure_compile_time_eval():  # the geometry is the model's, concrete even under jit
        kin = forward_kinematics(model, make_state(model))
        positions, axes = np.asarray(kin.joint_position, np.float64), np.asarray(kin.joint_axis, np.float64)
    # Geometry compared to the round-off of the model's dtype over its size.
    tol = 100 * float(np.finfo(model.dtype).eps) * max(1.0, float(np.abs(positions).max()))
    index = np.asarray(wheels.joints) - 1
    hubs = positions[index]
    if np.abs(np.abs(axes[index, 1]) - 1).max() > tol:
        raise ValueError("turn_commands: every wheel axis must lie along the chassis y axis at q = 0")
    for k, joint in enumerate(steer):
        if joint == 0:
            continue
        if not 1 <= joint <= model.num_joints or not bool(np.asarray(model.is_revolute)[joint - 1]):
            raise ValueError(f"turn_commands: steering[{k}] = {joint} is not a revolute joint of model {model.name!r}")
        if abs(abs(axes[joint - 1, 2]) - 1) > tol or np.abs(positions[joint - 1, :2] - hubs[k, :2]).max() > tol:
            raise ValueError(
                f"turn_commands: steering[{k}] = joint {joint} must turn about the vertical through wheel "
                f"joint {wheels.joints[k]}'s hub"
            )
    fixed = [k for k, joint in enumerate(steer) if joint == 0]
    if fixed and np.ptp(hubs[fixed, 0]) > tol:
        raise ValueError(
            f"turn_commands: the unsteered wheels must share one axle (one x), got x = {hubs[fixed, 0].tolist()}"
        )
    centre_x = float(hubs[fixed[0], 0]) if fixed else 0.0
    dtype = model.dtype
    kappa = float_array("turn_commands: curvature", curvature, shape=(), dtype=dtype)
    v = float_array("turn_commands: speed", speed, shape=(), dtype=dtype)
    if not is_traced(kappa) and not float(np.abs(kappa)) * float(np.abs(hubs[:, 1]).max()) < 1:
        raise ValueError(
            f"turn_commands: curvature {float(kappa)} puts the turning centre inside the track "
            f"(|curvature| must be below {1 / float(np.abs(hubs[:, 1]).max())} 1/m)"
        )
    # Steering joints turn about +z or -z: the angle about the joint's own axis.
    sense = np.array([np.sign(axes[j - 1, 2]) if j else 0.0 for j in steer])
    lateral = 1 - kappa * jnp.asarray(hubs[:, 1], dtype)
    delta = jnp.arctan(kappa * jnp.asarray(hubs[:, 0] - centre_x, dtype) / lateral)
    # A wheel axis along -y rolls backwards for qd > 0.
    roll = jnp.asarray(np.sign(axes[index, 1]), dtype)
    rates = roll * v * lateral / (wheels.radii.astype(dtype) * jnp.cos(delta))
    return jnp.asarray(sense, dtype) * delta, rates


__all__ = [
    "MagicFormula",
    "WheelDiagnostics",
    "WheelDrive",
    "WheelEnvironment",
    "Wheels",
    "climbable_slope",
    "steady_slope_slip",
    "turn_commands",
    "wheel_diagnostics",
    "wheel_environment",
]
