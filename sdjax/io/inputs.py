"""Input handling shared by the model readers: model files read as text, numeric arrays, every
refusal naming the file; one set of checks and messages."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

from sdjax.model import MAX_MAGNITUDE

__all__ = [
    "names_the_file",
    "naming_file",
    "naming_the_file",
    "numeric_array",
    "parse_json",
    "read_text_file",
    "real_numbers",
    "text_number",
]

#: Digits of the longest integer JSON text may hold (float64 ends near 1.8e308).
_MAX_JSON_INTEGER_DIGITS = 309


def parse_json(text: str, *, constants: bool = True) -> Any:
    """JSON ``text`` decoded, or a ``ValueError`` with the reason, worded to follow "is" (for the
    caller to put behind the file's or entry's name): not valid JSON, nested too deeply for Python's parser, a key given twice
    in one object (Python's decoder keeps the last silently), an integer beyond float64's range,
    or, with ``constants=False``, ``NaN``/``Infinity``."""

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise ValueError(f"JSON with key {key!r} given twice in one object")
            obj[key] = value
        return obj

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > _MAX_JSON_INTEGER_DIGITS:
            raise ValueError(f"JSON with an integer of {len(digits.lstrip('-'))} digits, beyond float64's range")
        return int(digits)

    def no_constant(name: str) -> None:
        raise ValueError(f"JSON with the non-finite number {name}")

    try:
        return json.loads(
            text, object_pairs_hook=unique_keys, parse_int=integer, parse_constant=None if constants else no_constant
        )
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def text_number(token: str) -> float:
    """A number written in a text model file, or a ``ValueError`` (the caller names the place).

    Python's ``float`` also reads forms no model file means: ``"1_0"`` as 10 (digit grouping),
    so underscores are refused; ``"nan"``, ``"inf"`` and full-width digits are left to the
    caller's finiteness check and the file's encoding."""
    if "_" in token:
        raise ValueError(f"{token!r} is not a number")
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"{token!r} is not a number") from None


def real_numbers(value: Any) -> np.ndarray:
    """``value`` (numbers, nested lists of numbers, an array) as a float64 array, or a
    ``ValueError`` saying why not, for the caller to put behind the field's name.

    Refused where ``np.asarray(value, dtype=float)`` would read something else: text (NumPy
    reads ``"5"`` as 5.0), complex numbers (it drops the imaginary part), other objects, and
    integers beyond float64's range (JSON's and MATLAB's integers are unbounded: an
    ``OverflowError`` inside NumPy otherwise). Booleans are numbers here (MATLAB's logicals);
    a reader that must refuse them checks first.
    """
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as err:  # (ragged nesting)
        raise ValueError(f"not an array of numbers ({err})") from None
    if raw.dtype.kind == "O":  # (Python integers beyond 64 bits, or anything else)
        items = raw.ravel().tolist()
        if not all(isinstance(x, (int, float)) for x in items):
            kinds = sorted({type(x).__name__ for x in items if not isinstance(x, (int, float))})
            raise ValueError(f"expected numbers, got {', '.join(kinds)}")
        try:
            return np.array([float(x) for x in items], dtype=np.float64).reshape(raw.shape)
        except OverflowError:
            raise ValueError("an integer beyond float64's range") from None
    if raw.dtype.kind not in "biuf":
        what = {"U": "text", "S": "bytes", "c": "complex numbers"}.get(raw.dtype.kind, f"dtype {raw.dtype}")
        raise ValueError(f"expected real numbers, got {what}")
    return raw.astype(np.float64)


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
        arr = real_numbers(value)
    except ValueError as err:
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


def naming_the_file(path: str, error: ValueError | TypeError) -> ValueError | TypeError:
    """``error`` if its message names ``path``, else a ``ValueError`` or ``TypeError`` (as
    ``error`` is one) with ``path`` in front (not ``type(error)``: ``UnicodeDecodeError`` and
    ``JSONDecodeError`` take other arguments)."""
    if path in str(error):
        return error
    return (TypeError if isinstance(error, TypeError) else ValueError)(f"{path}: {error}")


@contextlib.contextmanager
def naming_file(path: str) -> Iterator[None]:
    """Re-raise a ``ValueError`` or ``TypeError`` of the block with ``path`` in front of its
    message, unless the message names it already: every refusal of a model file says which file."""
    try:
        yield
    except (ValueError, TypeError) as err:
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
