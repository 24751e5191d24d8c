"""One entry point for model files: :func:`load_model` and :func:`save_model` choose the
reader or writer from the file suffix.

======== ============================================ ==========================================
suffix   reader                                       writer
======== ============================================ ==========================================
.json    :func:`sdjax.io.json_model.load_json_model`  :func:`sdjax.io.json_model.save_json_model`
.urdf    :func:`sdjax.io.urdf.model_from_urdf`        :func:`sdjax.io.urdf.save_urdf`
.def     :func:`sdjax.io.spacedyn_def.model_from_def` :func:`sdjax.io.spacedyn_def.save_def`
.dh      :func:`sdjax.io.dh.model_from_dh_file`       none (not every model is a DH arm)
.mat     :func:`sdjax.io.spacedyn_mat.model_from_mat`  :func:`sdjax.io.spacedyn_mat.save_mat`
.xml     :func:`sdjax.io.mjcf_import.model_from_mjcf`  none here (:func:`sdjax.io.mjcf.to_mjcf`)
.mjcf    as ``.xml`` (MJCF; needs ``mujoco``)
======== ============================================ ==========================================

Suffixes are matched case-insensitively. Readers take their defaults (a URDF's end points are
its welded and leaf links, its base mode from its root, gravity zero) unless :func:`load_model`
is given reader options: ``base`` (:data:`sdjax.BASE_MODES`), ``inertia_check``, ``gravity``
(every format), ``end_points`` (URDF links; other formats name their end points inside) and
``mimic`` (URDF ``<mimic>`` joints: mimic joints of the model, the default, or refused).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from sdjax.io.dh import model_from_dh_file
from sdjax.io.inputs import naming_file
from sdjax.io.json_model import load_json_model, save_json_model
from sdjax.io.spacedyn_def import model_from_def, save_def
from sdjax.io.spacedyn_mat import model_from_mat, save_mat
from sdjax.io.urdf import model_from_urdf, save_urdf
from sdjax.model import Model, edit_model

__all__ = ["load_model", "save_model"]

_READERS: dict[str, Callable[..., Model]] = {
    ".json": lambda path, dtype: load_json_model(path, dtype=dtype),
    ".urdf": lambda path, dtype, **options: model_from_urdf(path, dtype=dtype, **options),
    ".def": lambda path, dtype: model_from_def(path, dtype=dtype),
    ".dh": lambda path, dtype: model_from_dh_file(path, dtype=dtype),
    ".mat": lambda path, dtype: model_from_mat(path, dtype=dtype),
    ".xml": lambda path, dtype: _model_from_mjcf(path, dtype=dtype),
    ".mjcf": lambda path, dtype: _model_from_mjcf(path, dtype=dtype),
}


def _model_from_mjcf(path: str, dtype: Any) -> Model:
    from sdjax.io.mjcf_import import model_from_mjcf  # needs the optional mujoco package

    return model_from_mjcf(path, dtype=dtype)


_WRITERS: dict[str, Callable[[Model, str], None]] = {
    ".json": save_json_model,
    ".urdf": save_urdf,
    ".def": save_def,
    ".mat": save_mat,
}


def load_model(
    path: str | os.PathLike,
    dtype: Any = None,
    *,
    base: str | None = None,
    inertia_check: str | None = None,
    gravity: Any = None,
    end_points: Sequence[str] | None = None,
    mimic: str | None = None,
) -> Model:
    """Read a model file, choosing the reader from its suffix (table in the module docstring).

    Arguments:
        path: the file.
        dtype: floating dtype of the model arrays (default float64 data as read).
        base: base mode (``"floating"``, ``"planar"``, ``"fixed"``; default: the file's).
        inertia_check: ``"physical"`` or ``"positive_definite"`` (default: the reader's).
        gravity: ``(3,)`` gravity, inertial frame, m/s^2 (default: the file's, zero for URDF).
        end_points: URDF links whose frames become end points, in order (URDF files only).
        mimic: URDF ``<mimic>`` joints: ``"coordinates"`` (default: mimic joints of the model)
            or ``"refuse"`` (URDF files only; the couplings of ``"constraints"`` come from
            :func:`sdjax.io.urdf.import_urdf`).

    Raises:
        ValueError: missing file, unknown suffix, an option the format cannot take, or the
            reader's own message.
    """
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _READERS:
        raise ValueError(f"{path}: unknown model-file suffix {suffix!r}; known: {sorted(_READERS)}")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such model file")
    options = {
        "base": base,
        "inertia_check": inertia_check,
        "gravity": gravity,
        "end_points": end_points,
        "mimic": mimic,
    }
    options = {key: value for key, value in options.items() if value is not None}
    with naming_file(path):  # every refusal names the file, whichever reader or check makes it
        if suffix == ".urdf":
            return _READERS[suffix](path, dtype, **options)
        if "end_points" in options:
            raise ValueError(f"{path}: end_points selects URDF links; a {suffix} file names its end points itself")
        if "mimic" in options:
            raise ValueError(f"{path}: mimic selects how URDF <mimic> joints load; a {suffix} file has none")
        model = _READERS[suffix](path, dtype)
        return edit_model(model, **options) if options else model


def save_model(model: Model, path: str | os.PathLike) -> None:
    """Write a model file, choosing the writer from its suffix (table in the module docstring).

    Raises:
        ValueError: a suffix without a writer, or the writer's own refusal (e.g. joint
            stiffness in URDF or ``.def``).
    """
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _WRITERS:
        raise ValueError(f"{path}: no model writer for suffix {suffix!r}; writers exist for {sorted(_WRITERS)}")
    _WRITERS[suffix](model, path)
