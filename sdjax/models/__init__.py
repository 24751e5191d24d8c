"""Ready-made models: the SpaceDyn v1.2 sample, a 7-joint free-flying arm, random trees, seed 003's
planar four-link and spatial six-link systems, an ETS-VII-like robot."""

from sdjax.models.builtin import free_flying_arm_7dof, spacedyn_sample
from sdjax.models.random import random_model
from sdjax.models.seed003 import ets7_like, planar_four_link, spatial_six_link

__all__ = [
    "ets7_like",
    "free_flying_arm_7dof",
    "planar_four_link",
    "random_model",
    "spacedyn_sample",
    "spatial_six_link",
    "BUILTIN_MODELS",
]

#: Built-in models by name (used by the command line).
BUILTIN_MODELS = {
    "spacedyn_sample": spacedyn_sample,
    "free_flying_arm_7dof": free_flying_arm_7dof,
}
