"""Input handling shared by the model readers: model files read as text, numeric arrays;
one set of checks and messages."""

from __future__ import annotations

import math
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
        matlab_vectors: also accept MATLAB's shapes of the same data: singleton axes added or
            dropped (a row ``(1, k)`` or column ``(k, 1)`` for a vector ``(k,)``; a bare number,
            as MATLAB's ``jsonencode`` writes a 1x1 array, for ``(1,)``; ``(3,)`` for ``(3, 1)``).
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{prefix}{name} must be real numbers ({err})") from None
    if arr.shape != shape:
        squeeze = lambda dims: [d for d in dims if d != 1]  # noqa: E731
        if matlab_vectors and arr.size == math.prod(shape) and squeeze(arr.shape) == squeeze(shape):
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
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a UTF-8 text {kind} file (byte {err.start}: {err.reason})") from None
