"""sdjax: differentiable dynamics of space and mobile robots (moving-base trees) in JAX.

Every numerical function is pure, ``jit``-compilable, ``vmap``-able and differentiable in
the model parameters and the state. Importing sdjax never changes JAX's configuration;
enable float64 with ``jax.config.update("jax_enable_x64", True)`` for double precision.
"""

from sdjax.dynamics import (
    Controls,
    bias_forces,
    forward_dynamics,
    generalized_acceleration,
    inertia_matrix,
    inertia_matrix_blocks,
    inverse_dynamics,
    make_controls,
    passive_joint_torques,
)
from sdjax.gjm import end_point_generalized_jacobians, generalized_inertia_matrix, generalized_jacobian
from sdjax.integrate import Trajectory, euler_step, rk4_step, rollout, state_derivative
from sdjax.io import (
    load_json_model,
    model_from_dict,
    model_from_lp,
    model_from_reference_pose,
    model_from_spacedyn_arrays,
    model_to_dict,
    model_to_spacedyn_arrays,
    save_json_model,
)
from sdjax.jacobians import (
    end_point_jacobian_derivatives,
    end_point_jacobians,
    link_jacobian_derivatives,
    link_jacobians,
    point_jacobian,
    point_jacobian_derivative,
)
from sdjax.kinematics import (
    Kinematics,
    center_of_mass,
    forward_kinematics,
    link_accelerations,
    link_velocities,
)
from sdjax.model import Model, stack_models
from sdjax.momentum import (
    angular_momentum,
    center_of_mass_velocity,
    kinetic_energy,
    linear_momentum,
    potential_energy,
)
from sdjax.rotation import (
    matrix_to_quat,
    matrix_to_rpy,
    quat_conjugate,
    quat_multiply,
    quat_normalize,
    quat_to_matrix,
    rpy_to_matrix,
)
from sdjax.state import State, make_state, normalize_state

__version__ = "0.1.0"

__all__ = [
    "Controls",
    "Kinematics",
    "Model",
    "State",
    "Trajectory",
    "angular_momentum",
    "bias_forces",
    "center_of_mass",
    "center_of_mass_velocity",
    "end_point_generalized_jacobians",
    "end_point_jacobian_derivatives",
    "end_point_jacobians",
    "euler_step",
    "forward_dynamics",
    "forward_kinematics",
    "generalized_acceleration",
    "generalized_inertia_matrix",
    "generalized_jacobian",
    "inertia_matrix",
    "inertia_matrix_blocks",
    "inverse_dynamics",
    "kinetic_energy",
    "linear_momentum",
    "link_accelerations",
    "link_jacobian_derivatives",
    "link_jacobians",
    "link_velocities",
    "load_json_model",
    "make_controls",
    "make_state",
    "matrix_to_quat",
    "matrix_to_rpy",
    "model_from_dict",
    "model_from_lp",
    "model_from_reference_pose",
    "model_from_spacedyn_arrays",
    "model_to_dict",
    "model_to_spacedyn_arrays",
    "normalize_state",
    "passive_joint_torques",
    "point_jacobian",
    "point_jacobian_derivative",
    "potential_energy",
    "quat_conjugate",
    "quat_multiply",
    "quat_normalize",
    "quat_to_matrix",
    "rk4_step",
    "rollout",
    "rpy_to_matrix",
    "save_json_model",
    "stack_models",
    "state_derivative",
]
