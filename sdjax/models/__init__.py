"""Ready-made models: the SpaceDyn v1.2 sample, a 7-joint free-flying arm, random trees."""

from sdjax.models.builtin import free_flying_arm_7dof, spacedyn_sample
from sdjax.models.random import random_model

__all__ = ["free_flying_arm_7dof", "random_model", "spacedyn_sample", "BUILTIN_MODELS"]

#: Built-in models by name (used by the command line).
BUILTIN_MODELS = {
    "spacedyn_sample": spacedyn_sample,
    "free_flying_arm_7dof": free_flying_arm_7dof,
}
