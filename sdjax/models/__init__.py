"""Ready-made models: the SpaceDyn v1.2 sample, a 7-joint free-flying arm, random trees, seed 003's
planar four-link and spatial six-link systems, an ETS-VII-like robot, a Shuttle-RMS-like
orbiter-arm-payload system (seed 004), a small-body lander, a legged rover, a wheeled rover, a tumbling
capture target, a satellite with flexible solar paddles and a rocker-bogie rover with steering."""

from sdjax.models.builtin import free_flying_arm_7dof, free_flying_arm_initial_q, rigid_body, spacedyn_sample
from sdjax.models.flexible_satellite import flexible_satellite, paddle_beam
from sdjax.models.lander import lander, point_mass_probe
from sdjax.models.random import random_model
from sdjax.models.rocker_bogie import RockerBogie, rocker_bogie_rover
from sdjax.models.rover import rover
from sdjax.models.seed003 import ets7_like, planar_four_link, spatial_six_link
from sdjax.models.srms import srms_arm, srms_flexibility, srms_system
from sdjax.models.target import TARGET_HANDLE_OFFSET, tumbling_target
from sdjax.models.wheeled_rover import wheeled_rover

__all__ = [
    "BUILTIN_MODELS",
    "RockerBogie",
    "TARGET_HANDLE_OFFSET",
    "ets7_like",
    "flexible_satellite",
    "free_flying_arm_7dof",
    "free_flying_arm_initial_q",
    "lander",
    "paddle_beam",
    "planar_four_link",
    "point_mass_probe",
    "random_model",
    "rigid_body",
    "rocker_bogie_rover",
    "rover",
    "spacedyn_sample",
    "spatial_six_link",
    "srms_arm",
    "srms_flexibility",
    "srms_system",
    "tumbling_target",
    "wheeled_rover",
]

#: Built-in models by name (used by the command line).
BUILTIN_MODELS = {
    "spacedyn_sample": spacedyn_sample,
    "free_flying_arm_7dof": free_flying_arm_7dof,
}
