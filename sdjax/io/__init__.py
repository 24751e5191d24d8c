"""Model input and output: SpaceDyn arrays, reference-pose descriptions, JSON model files,
URDF, SpaceDyn C++ ``.def`` files, SpaceDyn ``LP`` structs in MATLAB ``.mat`` files, seed 003 DH tables; :func:`load_model` / :func:`save_model`
dispatch on the file suffix."""

from sdjax.io.dh import dh_matrix, euler123_to_matrix, model_from_dh, model_from_dh_file
from sdjax.io.json_model import load_json_model, model_from_dict, model_to_dict, save_json_model
from sdjax.io.loader import load_model, save_model
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.io.spacedyn_arrays import model_from_lp, model_from_spacedyn_arrays, model_to_spacedyn_arrays
from sdjax.io.spacedyn_def import model_from_def, model_to_def, save_def
from sdjax.io.spacedyn_mat import lp_from_mat, model_from_mat, save_mat
from sdjax.io.urdf import (
    UrdfImport,
    import_urdf,
    model_from_urdf,
    model_to_urdf,
    pinocchio_from_state,
    save_urdf,
    state_from_pinocchio,
)

__all__ = [
    "UrdfImport",
    "dh_matrix",
    "euler123_to_matrix",
    "import_urdf",
    "load_json_model",
    "load_model",
    "lp_from_mat",
    "model_from_def",
    "model_from_dh",
    "model_from_dh_file",
    "model_from_dict",
    "model_from_lp",
    "model_from_mat",
    "model_from_reference_pose",
    "model_from_spacedyn_arrays",
    "model_from_urdf",
    "model_to_def",
    "model_to_dict",
    "model_to_spacedyn_arrays",
    "model_to_urdf",
    "pinocchio_from_state",
    "save_def",
    "save_json_model",
    "save_mat",
    "save_model",
    "save_urdf",
    "state_from_pinocchio",
]
