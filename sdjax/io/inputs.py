"""Input handling shared by the model readers: model files read as text, numeric arrays, every
refusal naming the file; one set of checks and messages."""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

from sdjax.model import MAX_MAGNITUDE

__all__ = ["names_the_file", "naming_file", "naming_the_file", "numeric_array", "read_text_file"]


def numeric_array(
    prefix: str, name: str, value: Any, shape: tuple[int, ...], *, matlab_vectors: bool = False
) -> np.ndarray:
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
    if not np.all(np.abs(arr) <= MAX_MAGNITUDE):
        raise ValueError(f"{prefix}{name} has entries beyond {MAX_MAGNITUDE:g} in size ({arr.tolist()})")
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
        with open(path, encoding="utf-8-sig") as f:  # (a leading byte-order mark, as editors write, skipped)
            return f.read()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a UTF-8 text {kind} file (byte {err.start}: {err.reason})") from None


def is_file_source(source: Any) -> bool:
    """Whether a reader's ``source`` is a file path (not the model text itself: text holds a
    newline or starts with ``<`` or ``{``)."""
    if isinstance(source, os.PathLike):
        return True
    return isinstance(source, str) and "\n" not in source and not source.lstrip().startswith(("<", "{"))


def naming_the_file(path: str, error: ValueError) -> ValueError:
    """``error`` if its message names ``path``, else a ValueError with ``path`` in front."""
    return error if path in str(error) else ValueError(f"{path}: {error}")


@contextlib.contextmanager
def naming_file(path: str) -> Iterator[None]:
    """Re-raise a ``ValueError`` of the block with ``path`` in front of its message, unless the
    message names it already: every refusal of a model file says which file."""
    try:
        yield
    except ValueError as err:
        named = naming_the_file(path, err)
        if named is err:
            raise
        raise named from None


_Reader = TypeVar("_Reader", bound=Callable[..., Any])


def names_the_file(reader: _Reader) -> _Reader:
    """Decorate a reader whose first argument is a file path or the model text: when it is a
    path, the reader's refusals name the file (:func:`naming_file`)."""

    @functools.wraps(reader)
    def read(source: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_file_source(source):
            return reader(source, *args, **kwargs)
        with naming_file(os.fspath(source)):
            return reader(source, *args, **kwargs)

    return cast(_Reader, read)
