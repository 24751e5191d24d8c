"""Model input and output: SpaceDyn arrays, reference-pose descriptions, JSON model files,
seed 003 DH tables."""

from sdjax.io.dh import dh_matrix, euler123_to_matrix, model_from_dh
from sdjax.io.json_model import load_json_model, model_from_dict, model_to_dict, save_json_model
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.io.spacedyn_arrays import model_from_lp, model_from_spacedyn_arrays, model_to_spacedyn_arrays

__all__ = [
    "dh_matrix",
    "euler123_to_matrix",
    "load_json_model",
    "model_from_dh",
    "model_from_dict",
    "model_from_lp",
    "model_from_reference_pose",
    "model_from_spacedyn_arrays",
    "model_to_dict",
    "model_to_spacedyn_arrays",
    "save_json_model",
]
