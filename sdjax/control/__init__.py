"""Control and planning building blocks for moving-base manipulators (seed 003 eqs 103-115).

Control laws are pytrees (``equinox.Module``) called as ``law(t, state) -> tau`` (``(n,)``
joint torques/forces), so they plug straight into :func:`sdjax.rollout`; their gains,
references and estimated models are array leaves that ``jit``, ``vmap`` and ``grad`` see.

- :class:`JointPD`: independent joint PD, ``tau = Kp (q_d - q) + Kd (qd_d - qd)``;
  :func:`torque_limited_gains` sizes the gains from motor torque limits (eqs 113-114).
- :class:`ComputedTorque`: computed-torque control with an *estimated* model (eqs 112-115),
  ``tau = H~ u + C~``, ``u = qdd_d + Kd (qd_d - qd) + Kp (q_d - q)``; :func:`computed_torque_terms`
  gives ``H~`` and ``C~`` of a floating base (generalized, momentum-reduced dynamics) or of
  a base held at rest.
- :func:`damped_least_squares` and :func:`resolved_motion_rates`: resolved motion rate
  control with the generalized Jacobian (eqs 110-111), damped near singularities;
  :class:`ResolvedRateLaw` closes the loop on an end-point path through a joint-rate
  servo (:class:`RateServo`).
- :func:`inverse_kinematics`: fixed- or floating-base inverse kinematics with a
  convergence report (:class:`InverseKinematicsResult`) instead of an exception.
- :func:`reaction_null_space_projector`, :func:`reaction_null_space_rates`: joint motions
  that leave the base angular velocity unchanged (reaction null space, Nenchev/Yoshida).

Task points. A task point is an end point (``end_point=k``, index into
``model.end_point_link``; its frame is the end-point frame) or any point fixed on a link
(``link=i``, ``point`` = position relative to the link centroid in the link frame; its
frame is the link frame). Task velocities are ``[linear (m/s); angular (rad/s)]`` of that
point and frame, inertial frame; ``task`` selects ``"pose"`` (6 rows), ``"position"``
(rows 0:3) or ``"orientation"`` (rows 3:6).

Base assumption (:data:`CONTROL_BASES`). ``base="floating"`` (the default) lets the base react to the joints under conserved momentum (eq 109) as far as
the model's base mode (:data:`sdjax.BASE_MODES`) lets it move: the task Jacobian is the
generalized Jacobian ``J*`` (eq 110) plus the momentum offset, written with the free base
coordinates (a planar base reacts in x, y and yaw and conserves ``P_x, P_y, L_z``; a fixed
base does not react, so ``J* = J_m``). ``base="fixed"`` assumes the base held at rest (a
ground robot or a servicer whose base is controlled stiffly): the Jacobian is the joint
block ``J_m``.

Frames are inertial unless stated; units SI.

One module per topic; every name above is importable from ``sdjax.control`` (and the laws
from ``sdjax``):

- :mod:`sdjax.control.references`: joint references;
- :mod:`sdjax.control.joint_pd`: joint PD and torque-limited gains;
- :mod:`sdjax.control.computed_torque_laws`: computed torque and the joint-rate servo;
- :mod:`sdjax.control.task_space`: task points, their pose, Jacobian and error;
- :mod:`sdjax.control.resolved_rates`: resolved motion rate control;
- :mod:`sdjax.control.ik`: inverse kinematics;
- :mod:`sdjax.control.reaction_null_space`: the reaction null space;
- damped least squares itself lives in :mod:`sdjax.solvers`.
"""

# In the order of the topics (the API page renders them in this order).
from sdjax.control.task_space import (
    CONTROL_BASES as CONTROL_BASES,
    TASKS as TASKS,
    task_error as task_error,
    task_jacobian as task_jacobian,
    task_pose as task_pose,
)
from sdjax.control.references import (
    Reference as Reference,
    JointReference as JointReference,
    QuinticJointReference as QuinticJointReference,
)
from sdjax.control.joint_pd import (
    torque_limited_gains as torque_limited_gains,
    JointPD as JointPD,
)
from sdjax.control.computed_torque_laws import (
    computed_torque_terms as computed_torque_terms,
    computed_torque as computed_torque,
    ComputedTorque as ComputedTorque,
    RateServo as RateServo,
)
from sdjax.solvers import (
    DEFAULT_SINGULAR_THRESHOLD as DEFAULT_SINGULAR_THRESHOLD,
    DEFAULT_MAX_DAMPING as DEFAULT_MAX_DAMPING,
    DampedLeastSquares as DampedLeastSquares,
    damped_least_squares as damped_least_squares,
    solve_damped_least_squares as solve_damped_least_squares,
)
from sdjax.control.resolved_rates import (
    ResolvedRates as ResolvedRates,
    resolved_motion_rates as resolved_motion_rates,
    LinePath as LinePath,
    split_task_target as split_task_target,
    ResolvedRateLaw as ResolvedRateLaw,
)
from sdjax.control.ik import (
    InverseKinematicsResult as InverseKinematicsResult,
    inverse_kinematics as inverse_kinematics,
)
from sdjax.control.reaction_null_space import (
    reaction_null_space_projector as reaction_null_space_projector,
    reaction_null_space_rates as reaction_null_space_rates,
)

# Also importable from here, as before the split, but not part of the listed API:
# DEFAULT_MAX_DAMPING, DEFAULT_SINGULAR_THRESHOLD, Reference, solve_damped_least_squares,
# split_task_target and task_error.
__all__ = [
    "CONTROL_BASES",
    "TASKS",
    "ComputedTorque",
    "DampedLeastSquares",
    "InverseKinematicsResult",
    "JointPD",
    "JointReference",
    "LinePath",
    "QuinticJointReference",
    "RateServo",
    "ResolvedRateLaw",
    "ResolvedRates",
    "computed_torque",
    "computed_torque_terms",
    "damped_least_squares",
    "inverse_kinematics",
    "reaction_null_space_projector",
    "reaction_null_space_rates",
    "resolved_motion_rates",
    "task_jacobian",
    "task_pose",
    "torque_limited_gains",
]
