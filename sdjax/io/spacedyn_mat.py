"""SpaceDyn link parameters saved by MATLAB: the ``LP`` struct in a ``.mat`` file.

A SpaceDyn user's robot lives in MATLAB as the struct ``LP`` (seed 000 chapter 2; the fields and
layouts of :mod:`sdjax.io.spacedyn_arrays`). ``save('robot.mat', 'LP')`` stores it as a struct
variable, ``save('robot.mat', '-struct', 'LP')`` as one variable per field; both read here with
SciPy's MATLAB reader (SciPy comes with JAX). ``J_type`` may be a char row (``'RRP'``) or a cell
array of chars (``{'R', 'R', 'P'}``). Level 5 files (MATLAB's default ``-v7`` and older) are
read; ``-v7.3`` files are HDF5 and are refused with the command that re-saves them.

Inertia tensors are accepted as SpaceDyn accepts them (one warning names the bodies whose
tensors break the triangle inequality), as for the other SpaceDyn readers.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sdjax.io.spacedyn_arrays import model_from_lp
from sdjax.model import Model

#: Largest ``.mat`` file read (refused before reading).
MAX_FILE_BYTES = 64 * 1024 * 1024


def _is_struct(value: Any) -> bool:
    from scipy.io.matlab import mat_struct

    if isinstance(value, mat_struct):
        return True
    return isinstance(value, np.ndarray) and value.dtype == object and value.size == 1 and isinstance(value.flat[0], mat_struct)


def _struct_fields(value: Any) -> dict[str, Any]:
    struct = value.flat[0] if isinstance(value, np.ndarray) else value
    return {name: getattr(struct, name) for name in struct._fieldnames}


def _plain(field: str, value: Any) -> Any:
    """A field as :func:`model_from_lp` takes it: numbers as arrays, chars as a string, a cell
    array of chars as a list of strings."""
    if isinstance(value, str):
        return value
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return "".join(str(item) for item in array.ravel())
    if array.dtype == object:
        items = [_plain(field, item) for item in array.ravel()]
        if all(isinstance(item, str) for item in items):
            return items
        raise ValueError(f"SpaceDyn LP.{field}: a cell array of {[type(item).__name__ for item in items][:3]}; expected numbers or chars")
    return array


def lp_from_mat(path: str | os.PathLike, variable: str | None = None) -> dict[str, Any]:
    """The ``LP`` fields of a ``.mat`` file (see the module docstring).

    Arguments:
        path: the file.
        variable: the struct variable holding ``LP`` (default: the only struct with a ``BB``
            field, or the file's own variables when they are the fields).

    Raises:
        ValueError: naming the file: missing, too large, not a level 5 MAT-file, no or several
            candidate structs, or an unknown ``variable``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such MATLAB file")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: {size} bytes exceeds the MATLAB file size limit of {MAX_FILE_BYTES}")
    import scipy.io

    try:
        contents = scipy.io.loadmat(path, squeeze_me=False, struct_as_record=False)
    except NotImplementedError:
        raise ValueError(f"{path}: a MATLAB -v7.3 (HDF5) file; re-save it with save('{os.path.basename(path)}', 'LP', '-v7')") from None
    except Exception as err:  # SciPy raises ValueError, TypeError, OSError, ... on corrupt files
        raise ValueError(f"{path}: not a readable MATLAB .mat file ({type(err).__name__}: {err})") from None
    variables = {key: value for key, value in contents.items() if not key.startswith("__")}
    if variable is not None:
        if variable not in variables:
            raise ValueError(f"{path}: no variable {variable!r}; the file holds {sorted(variables)}")
        if not _is_struct(variables[variable]):
            raise ValueError(f"{path}: variable {variable!r} is not a struct")
        fields = _struct_fields(variables[variable])
    else:
        structs = [key for key, value in variables.items() if _is_struct(value) and "BB" in _struct_fields(value)]
        if len(structs) > 1:
            raise ValueError(f"{path}: several link-parameter structs {sorted(structs)}; choose one with variable=")
        if structs:
            fields = _struct_fields(variables[structs[0]])
        elif "BB" in variables:
            fields = variables  # saved with -struct: one variable per field
        else:
            raise ValueError(f"{path}: no SpaceDyn link parameters (a struct with a BB field, or a BB variable); the file holds {sorted(variables)}")
    return {name: _plain(name, value) for name, value in fields.items()}


def model_from_mat(path: str | os.PathLike, *, variable: str | None = None, dtype: Any = None, **kwargs: Any) -> Model:
    """The model of SpaceDyn link parameters in a ``.mat`` file (:func:`lp_from_mat`, then
    :func:`sdjax.io.spacedyn_arrays.model_from_lp`; ``kwargs`` such as ``gravity=`` go there).
    The model is named after the file unless ``name=`` is given."""
    lp = lp_from_mat(path, variable)
    kwargs.setdefault("name", os.path.splitext(os.path.basename(os.fspath(path)))[0])
    try:
        return model_from_lp(lp, dtype=dtype, **kwargs)
    except ValueError as err:
        raise ValueError(f"{os.fspath(path)}: {err}") from None


def save_mat(model: Model, path: str | os.PathLike, *, variable: str = "LP") -> None:
    """Write the model's SpaceDyn link parameters as the struct ``variable`` of a level 5
    ``.mat`` file (``load('robot.mat')`` in MATLAB gives ``LP``); the inverse of
    :func:`model_from_mat`. Refuses what SpaceDyn's arrays cannot hold (see
    :func:`sdjax.io.spacedyn_arrays.model_to_spacedyn_arrays`)."""
    import scipy.io

    from sdjax.io.spacedyn_arrays import model_to_spacedyn_arrays

    lp = model_to_spacedyn_arrays(model)
    # MATLAB's own layouts: vectors as rows (BB, SE, m), J_type a char row.
    scipy.io.savemat(os.fspath(path), {variable: lp}, oned_as="row")
