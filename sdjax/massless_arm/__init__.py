"""Orbiter-arm-payload dynamics with a massless six-joint arm (seed 004, NASA JSC-12632).

- :mod:`~sdjax.massless_arm.dynamics`: the two-body equations (eqs 2-3 .. 2-14), state,
  interaction loads, joint rates, RK4 rollout, energy and momentum, and the full multibody
  model used to validate the approximation.
- :mod:`~sdjax.massless_arm.servo`: resolved-rate commands and torque-limited rate servos.
- :mod:`~sdjax.massless_arm.flexibility`: beam, arm and joint flexibility matrices, passive
  and active flexibility modes (section 3, appendix B).
- :mod:`~sdjax.massless_arm.statics`: static loads on the arm members (section 4, eq A-20).
"""

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
    kinetic_energy as kinetic_energy,
    make_loads as make_loads,
    make_massless_state as make_massless_state,
    momentum as momentum,
    multibody_payload_pose as multibody_payload_pose,
    multibody_state as multibody_state,
    payload_pose as payload_pose,
    relative_velocity as relative_velocity,
    rk4_step as rk4_step,
    simulate as simulate,
    smallest_singular_value as smallest_singular_value,
    state_derivative as state_derivative,
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
    passive_joint_torques as passive_joint_torques,
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
