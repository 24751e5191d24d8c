"""Orbiter-arm-payload dynamics with a massless six-joint arm (seed 004, NASA JSC-12632).

- :mod:`~sdjax.massless_arm.dynamics`: the two-body equations (eqs 2-3 .. 2-14), state,
  interaction loads, joint rates, RK4 rollout, energy and momentum, and the full multibody
  model used to validate the approximation.
- :mod:`~sdjax.massless_arm.servo`: resolved-rate commands and torque-limited rate servos.
- :mod:`~sdjax.massless_arm.flexibility`: beam, arm and joint flexibility matrices, passive
  and active flexibility modes (section 3, appendix B).
- :mod:`~sdjax.massless_arm.statics`: static loads on the arm members (section 4, eq A-20).

The functions of the two-body model are named for it (:func:`simulate_two_body`,
:func:`two_body_rk4_step`, :func:`two_body_state_derivative`, :func:`two_body_kinetic_energy`;
the flexibility torques :func:`passive_flexibility_torques`): ``sdjax.simulate``,
``sdjax.rk4_step``, ``sdjax.state_derivative``, ``sdjax.kinetic_energy`` and
``sdjax.passive_joint_torques`` are those of a :class:`~sdjax.Model`. The old names here
(``simulate``, ...) still import, with a ``DeprecationWarning``, until the next release.
"""

import warnings
from typing import Any

from sdjax.massless_arm.dynamics import (
    MAX_DAMPING as MAX_DAMPING,
    SINGULAR_THRESHOLD as SINGULAR_THRESHOLD,
    ArmKinematics as ArmKinematics,
    ExternalLoads as ExternalLoads,
    InteractionLoads as InteractionLoads,
    MasslessArmState as MasslessArmState,
    MasslessArmSystem as MasslessArmSystem,
    MasslessArmTrajectory as MasslessArmTrajectory,
    arm_kinematics as arm_kinematics,
    check_configuration as check_configuration,
    closure_error as closure_error,
    end_effector_wrench as end_effector_wrench,
    full_multibody_model as full_multibody_model,
    interaction_loads as interaction_loads,
    joint_rates as joint_rates,
    joint_space_inertia as joint_space_inertia,
    make_loads as make_loads,
    make_massless_state as make_massless_state,
    momentum as momentum,
    multibody_payload_pose as multibody_payload_pose,
    multibody_state as multibody_state,
    payload_pose as payload_pose,
    relative_velocity as relative_velocity,
    simulate_two_body as simulate_two_body,
    smallest_singular_value as smallest_singular_value,
    two_body_kinetic_energy as two_body_kinetic_energy,
    two_body_rk4_step as two_body_rk4_step,
    two_body_state_derivative as two_body_state_derivative,
)
from sdjax.massless_arm.flexibility import (
    BEAM_TERMS as BEAM_TERMS,
    ArmFlexibility as ArmFlexibility,
    PassiveFlexibility as PassiveFlexibility,
    arm_flexibility_matrix as arm_flexibility_matrix,
    beam_flexibility as beam_flexibility,
    cantilever_terms as cantilever_terms,
    chain_flexibility as chain_flexibility,
    joint_flexibility_matrix as joint_flexibility_matrix,
    motor_flexibility_terms as motor_flexibility_terms,
    passive_flexibility_torques as passive_flexibility_torques,
    shift_matrix as shift_matrix,
)
from sdjax.massless_arm.servo import (
    ArmController as ArmController,
    JointHoldCommand as JointHoldCommand,
    JointRateServo as JointRateServo,
    MultibodyLaw as MultibodyLaw,
    ResolvedRateCommand as ResolvedRateCommand,
)
from sdjax.massless_arm.statics import (
    SEED_STATIONS as SEED_STATIONS,
    MemberLoads as MemberLoads,
    member_loads as member_loads,
    seed_joint_loads as seed_joint_loads,
)

__all__ = [
    "BEAM_TERMS",
    "MAX_DAMPING",
    "SEED_STATIONS",
    "SINGULAR_THRESHOLD",
    "ArmController",
    "ArmFlexibility",
    "ArmKinematics",
    "ExternalLoads",
    "InteractionLoads",
    "JointHoldCommand",
    "JointRateServo",
    "MasslessArmState",
    "MasslessArmSystem",
    "MasslessArmTrajectory",
    "MemberLoads",
    "MultibodyLaw",
    "PassiveFlexibility",
    "ResolvedRateCommand",
    "arm_flexibility_matrix",
    "arm_kinematics",
    "beam_flexibility",
    "cantilever_terms",
    "chain_flexibility",
    "check_configuration",
    "closure_error",
    "end_effector_wrench",
    "full_multibody_model",
    "interaction_loads",
    "joint_flexibility_matrix",
    "joint_rates",
    "joint_space_inertia",
    "make_loads",
    "make_massless_state",
    "member_loads",
    "momentum",
    "motor_flexibility_terms",
    "multibody_payload_pose",
    "multibody_state",
    "passive_flexibility_torques",
    "payload_pose",
    "relative_velocity",
    "seed_joint_loads",
    "shift_matrix",
    "simulate_two_body",
    "smallest_singular_value",
    "two_body_kinetic_energy",
    "two_body_rk4_step",
    "two_body_state_derivative",
]

# Old name -> new name: the first release's names that collided with sdjax's own functions of
# another meaning (sdjax.simulate, ...). Importable, with a DeprecationWarning, for one release.
_RENAMED = {
    "kinetic_energy": "two_body_kinetic_energy",
    "passive_joint_torques": "passive_flexibility_torques",
    "rk4_step": "two_body_rk4_step",
    "simulate": "simulate_two_body",
    "state_derivative": "two_body_state_derivative",
}


def __getattr__(name: str) -> Any:
    """The renamed functions under their old names, with a ``DeprecationWarning``."""
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(
            f"sdjax.massless_arm.{name} is renamed sdjax.massless_arm.{new} (sdjax.{name} is a different "
            "function); the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
