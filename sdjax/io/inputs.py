"""Input handling shared by the model readers: model files read as text, numeric arrays;
one set of checks and messages."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def numeric_array(prefix: str, name: str, value: Any, shape: tuple[int, ...], *, matlab_vectors: bool = False) -> np.ndarray:
    """``value`` as a finite float64 array of ``shape``, or a ``ValueError`` naming ``name``.

    Arguments:
        prefix: where the value comes from, starting the message (e.g. ``"model_from_dh: "``).
        name: the argument or field name.
        value: anything ``np.asarray`` accepts.
        shape: the required shape.
        matlab_vectors: also accept a MATLAB row or column ``(1, k)``/``(k, 1)`` for a
            vector of shape ``(k,)``.
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{prefix}{name} must be real numbers ({err})") from None
    if arr.shape != shape:
        if matlab_vectors and len(shape) == 1 and arr.ndim == 2 and 1 in arr.shape and arr.size == shape[0]:
            arr = arr.reshape(shape)
        else:
            layout = " (MATLAB layout)" if matlab_vectors else ""
            raise ValueError(f"{prefix}{name} expected shape {shape}{layout}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{prefix}{name} has non-finite entries ({arr.tolist()})")
    return arr


def read_text_file(path: str | os.PathLike, kind: str, limit: int) -> str:
    """The text of a model file, refused with a ``ValueError`` naming the file when it is
    missing or larger than ``limit`` bytes (``kind`` names the format in the messages)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such {kind} file")
    size = os.path.getsize(path)
    if size > limit:
        raise ValueError(f"{path}: {size} bytes exceeds the {kind} size limit of {limit}")
    with open(path, encoding="utf-8") as f:
        return f.read()
