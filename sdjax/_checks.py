"""Argument checks shared by the whole library: one module, one message style.

Every public function checks its arguments here before any arithmetic, so a wrong argument is
refused with a message that names it (``"ComputedTorque: kp"``), says what was expected and what
was given: ``"{name}: expected shape (7,), got shape (6,)"``, ``"{name}: must be positive and
finite, got [...]"``, ``"{name}: unknown base mode 'x'; choose one of [...]"``. Wrong *types* (a string where numbers go, a
number where a choice string goes) raise ``TypeError``; wrong *values* (a shape, a sign, a NaN,
an unknown choice) raise ``ValueError``.

Values are checked only when they are concrete: inside ``jit``/``vmap``/``grad`` the arguments
are tracers, shapes are still checked and values cannot be (:func:`is_traced`).

Model files have their own door, :mod:`sdjax.io.inputs` (NumPy arrays, messages naming the file
and line); model fields are checked by :func:`sdjax.model.validate`.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

#: The signs :func:`float_array` can require.
SIGNS = ("positive", "non-negative")
#: What :func:`float_array` does with a scalar where an array shape is required.
SCALARS = ("refuse", "keep", "broadcast")


def is_traced(*values: Any) -> bool:
    """Whether any leaf of ``values`` is a JAX tracer (inside ``jit``/``vmap``/``grad``).

    Input checks that need concrete numbers (signs, finiteness) run only when this is false;
    under tracing, shapes are still checked and values cannot be.
    """
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(values))


def check_choice(name: str, value: Any, choices: Collection[Any], what: str = "value") -> Any:
    """``value`` if it is one of ``choices``; else a ``ValueError`` naming ``name``, saying what
    the value is (``what``: ``"base mode"``, ``"integrator"``) and listing the choices
    (``TypeError`` when ``value`` cannot even be compared: a list, a dict)."""
    try:
        known = value in choices
    except TypeError:  # unhashable value tested against a set or dict
        raise TypeError(f"{name}: expected one of {_listed(choices)}, got a {type(value).__name__}") from None
    if not known:
        raise ValueError(f"{name}: unknown {what} {value!r}; choose one of {_listed(choices)}")
    return value


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer, Python's or NumPy's, and not a ``bool``."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_count(name: str, value: Any, minimum: int) -> int:
    """``value`` as a Python ``int`` if it is an integer (Python or NumPy; not a ``bool``: ``True``
    is no count) of at least ``minimum``: a number of steps, iterations, samples, segments.
    ``TypeError`` naming ``name`` for anything else (a float, even a whole one: a count is given
    as an integer), ``ValueError`` below ``minimum``."""
    if not is_integer(value):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value}")
    return int(value)


def check_index(name: str, value: Any, low: int, high: int, meaning: str = "") -> int:
    """``value`` as a Python ``int`` if it is an integer (Python or NumPy; not a ``bool``) in
    ``low..high`` (inclusive): a static index into a model (a body, a joint, an end point), which
    selects the program's structure and so cannot be traced. ``TypeError`` naming ``name`` for
    anything else, ``ValueError`` outside the range; ``meaning`` says what the numbers are in
    that message (``"0 = base, 1..n = links"``)."""
    if not is_integer(value):
        raise TypeError(f"{name}: expected a static integer index {low}..{high}, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ValueError(
            f"{name}: index {value} out of range; expected {low}..{high}" + (f" ({meaning})" if meaning else "")
        )
    return int(value)


def check_type(name: str, value: Any, types: type | tuple[type, ...], expected: str) -> Any:
    """``value`` if it is an instance of ``types``; else a ``TypeError`` naming ``name``, saying
    what was ``expected`` (``"a sdjax.Model"``) and what was given."""
    if not isinstance(value, types):
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    return value


def check_callable(name: str, value: Any, signature: str) -> Any:
    """``value`` if it is callable; else a ``TypeError`` naming ``name`` and the expected
    ``signature`` (``"(t, state) -> (n,) array"``)."""
    if not callable(value):
        raise TypeError(f"{name}: expected a function {signature}, got {type(value).__name__}")
    return value


def check_pair(name: str, value: Any, what: str) -> tuple[Any, Any]:
    """``value`` as a pair ``(a, b)`` (a tuple or list of two: ``what`` names them,
    ``"(lower, upper) pair of (n,) arrays"``): ``TypeError`` for anything else, ``ValueError``
    for a tuple or list of another length."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{name}: expected a {what}, got {type(value).__name__}")
    if len(value) != 2:
        raise ValueError(f"{name}: expected a {what}, got {len(value)} items")
    return value[0], value[1]


def check_name(name: str, value: Any) -> str:
    """``value`` if it is a non-empty string without ``'/'`` (a name that becomes a key or a
    path component in saved results): ``TypeError`` for a non-string, ``ValueError`` for an
    empty one or one with ``'/'``."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a string, got {type(value).__name__} {value!r}")
    if not value or "/" in value:
        raise ValueError(f"{name}: must be a non-empty string without '/', got {value!r}")
    return value


def check_scalar(name: str, value: Any, *, sign: str | None = None, finite: bool = True) -> float:
    """``value`` as a Python ``float``: a concrete real number (Python or NumPy scalar, or a 0-d
    array) for a setting used on the host (a duration that fixes a step count, a frame rate).
    ``TypeError`` naming ``name`` for anything else (a string, a ``bool``, an array, a traced
    value), ``ValueError`` for a non-finite value (with ``finite``) or one of the wrong
    ``sign`` (:data:`SIGNS`)."""
    check_choice("check_scalar: sign", sign, (None, *SIGNS))
    if is_traced(value):
        raise TypeError(f"{name}: expected a concrete number (it is used outside jit), got a traced value")
    if isinstance(value, (bool, np.bool_, str, bytes)) or np.ndim(value) != 0:
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}") from None
    if (finite and not np.isfinite(number)) or np.isnan(number):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    if (sign == "positive" and not number > 0) or (sign == "non-negative" and not number >= 0):
        raise ValueError(f"{name}: must be {sign}, got {value!r}")
    return number


def renamed_keyword(owner: str, old: str, old_value: Any, new: str, new_value: Any, new_default: Any) -> Any:
    """The value of keyword ``new``, where a caller may still give it under its earlier name
    ``old`` (``old_value``, ``None`` when not given): then a ``DeprecationWarning``, and a
    ``ValueError`` if ``new`` was given too (a value other than ``new_default``)."""
    if old_value is None:
        return new_value
    warnings.warn(f"{owner}: {old}= is now spelled {new}=", DeprecationWarning, stacklevel=3)
    if new_value != new_default:
        raise ValueError(f"{owner}: give {new}= or the deprecated {old}=, not both")
    return old_value


def check_fraction(name: str, value: Any) -> float:
    """``value`` as a Python ``float`` strictly between 0 and 1 (a confidence, a probability, a
    relative tolerance): ``TypeError`` for anything but a real number (not a ``bool``),
    ``ValueError`` outside ``(0, 1)``."""
    if isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and not is_traced(value):
        value = value.item()  # (a 0-d array, as check_scalar takes it)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number strictly between 0 and 1, got {type(value).__name__} {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name}: must lie strictly between 0 and 1, got {value!r}")
    return float(value)


def check_float_dtype(name: str, dtype: Any) -> np.dtype:
    """``dtype`` as a NumPy dtype, a floating one (a model or state of integers would truncate
    every mass and length): ``TypeError`` for what is no dtype, ``ValueError`` for another kind."""
    try:
        found = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name}: expected a floating dtype (e.g. jnp.float32), got {dtype!r}") from None
    if not jnp.issubdtype(found, jnp.floating):
        raise ValueError(f"{name}: expected a floating dtype (e.g. jnp.float32), got {found.name}")
    return found


def _listed(choices: Collection[Any]) -> list[Any]:
    """The choices in a stable order for messages (sorted when they are sets)."""
    return sorted(choices) if isinstance(choices, (set, frozenset)) else list(choices)


def _shape_text(shape: tuple[int | None, ...] | None, scalar_ok: bool) -> str:
    if shape is None:
        return "an array"
    text = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    if shape == ():
        return "a scalar"
    return f"a scalar or shape {text}" if scalar_ok else f"shape {text}"


def _shape_matches(found: tuple[int, ...], shape: tuple[int | None, ...]) -> bool:
    return len(found) == len(shape) and all(s is None or s == f for s, f in zip(shape, found))


def float_array(
    name: str,
    value: Any,
    *,
    shape: tuple[int | None, ...] | None = None,
    dtype: Any = None,
    scalar: str = "refuse",
    sign: str | None = None,
    finite: bool = True,
    allow_inf: bool = False,
    hint: str = "",
) -> Array:
    """``value`` as a floating JAX array, checked.

    Arguments:
        name: the argument as the user knows it (``"Thrusters.max_force"``), starting messages.
        value: numbers (anything ``jnp.asarray`` takes).
        shape: the required shape; ``None`` entries match any size (``(None,)``: any vector);
            ``None`` checks no shape.
        dtype: the floating dtype of the result (default: the value's own floating dtype, or
            JAX's default float for integers and booleans).
        scalar: where ``shape`` is not ``()``: ``"refuse"`` a scalar, ``"keep"`` it (0-d,
            broadcasting left to the arithmetic), or ``"broadcast"`` it to ``shape``.
        sign: ``"positive"`` or ``"non-negative"``, required of every concrete entry.
        finite: concrete entries must be finite (no NaN, no inf).
        allow_inf: with ``finite``, ``+inf`` is accepted (a limit that is off); NaN never is.
        hint: appended to a shape message (e.g. ``"one per joint"``).

    Raises:
        TypeError: ``value`` is not numbers (a string, ``None``, an object).
        ValueError: wrong shape, a non-finite entry, an entry of the wrong sign.
    """
    check_choice("float_array: sign", sign, (None, *SIGNS))
    check_choice("float_array: scalar", scalar, SCALARS)
    scalar_ok = scalar != "refuse"
    if isinstance(value, (str, bytes)):  # (jnp.asarray reads some strings as dtype names: "d")
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__} {value!r}")
    try:
        arr = jnp.asarray(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__} {value!r}") from None
    if not (jnp.issubdtype(arr.dtype, jnp.number) or jnp.issubdtype(arr.dtype, jnp.bool_)) or jnp.issubdtype(
        arr.dtype, jnp.complexfloating
    ):
        raise TypeError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if dtype is not None:
        arr = arr.astype(dtype)
    elif not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    if shape is not None and not (_shape_matches(arr.shape, shape) or (scalar_ok and arr.ndim == 0)):
        note = f" ({hint})" if hint else ""
        raise ValueError(f"{name}: expected {_shape_text(shape, scalar_ok)}{note}, got shape {arr.shape}")
    if scalar == "broadcast" and arr.ndim == 0 and shape is not None and shape != ():
        if None in shape:
            raise ValueError(f"float_array: scalar='broadcast' needs a full shape, got {shape}")
        arr = jnp.broadcast_to(arr, tuple(int(s) for s in shape if s is not None))
    if not is_traced(arr) and (finite or sign is not None):
        values = np.asarray(arr, np.float64)
        bad = np.isnan(values)
        if finite:
            bad |= np.isneginf(values) | (np.isposinf(values) & (not allow_inf))
        if sign == "positive":
            bad |= values <= 0
        elif sign == "non-negative":
            bad |= values < 0
        if np.any(bad):
            rule = " and ".join(filter(None, [sign, "finite" if finite and not allow_inf else ""])) + (
                " (or inf)" if allow_inf else ""
            )
            raise ValueError(f"{name}: must be {rule or 'real numbers'}, got {values.tolist()}")
    return arr


#: Largest ``|R^T R - E|`` entry of a float64 rotation matrix given by the caller. A rotation
#: of a lower precision gets ``64 eps`` of that precision when larger (float32: 7.6e-6; one
#: rounding of an exact rotation to float32 is already 6e-8 off).
ROTATION_TOL = 1e-9


def rotation_defect(matrix: np.ndarray, tolerance: float) -> str:
    """Why ``matrix`` (3, 3) is not a proper rotation (``R^T R = E`` within ``tolerance`` entry by
    entry, ``det R = +1``), or ``""`` when it is one."""
    error = float(np.max(np.abs(matrix.T @ matrix - np.eye(3))))
    if not error <= tolerance:
        return f"R^T R differs from the identity by {error:.1e} (more than {tolerance:.1e})"
    if not np.linalg.det(matrix) > 0:
        return "det R = -1 (a reflection)"
    return ""


def rotation_matrix(name: str, value: Any, dtype: Any = None) -> Array:
    """``value`` as a ``(3, 3)`` rotation matrix of ``dtype`` (default: its own floating
    dtype), checked to be a proper rotation when concrete: ``R^T R = E`` within
    :data:`ROTATION_TOL`, or ``64 eps`` of the coarser of the given and the result's precision.

    Raises:
        TypeError: not numbers.
        ValueError: not ``(3, 3)``, not finite, or not a proper rotation.
    """
    given = float_array(name, value, shape=(3, 3))
    matrix = given if dtype is None else given.astype(dtype)
    if not is_traced(matrix):
        eps = max(float(jnp.finfo(given.dtype).eps), float(jnp.finfo(matrix.dtype).eps))
        defect = rotation_defect(np.asarray(matrix, np.float64), max(ROTATION_TOL, 64 * eps))
        if defect:
            raise ValueError(f"{name}: expected a proper rotation matrix, got {np.asarray(matrix).tolist()}: {defect}")
    return matrix


def check_vector(name: str, value: Any, shape: tuple[int, ...], dtype: Any) -> Array:
    """An input acting on a state (a load, a torque, a rate): converted to the state's ``dtype``
    and checked for ``shape``; ``None`` gives zeros. Values are not checked (NaN propagates, as
    in any arithmetic: these are the hot-path inputs of the dynamics)."""
    if value is None:
        return jnp.zeros(shape, dtype)
    try:
        if isinstance(value, (str, bytes)):  # (jnp.asarray reads some strings as dtype names: "d")
            raise TypeError
        arr = jnp.asarray(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__} {value!r}") from None
    real = jnp.issubdtype(arr.dtype, jnp.integer) or jnp.issubdtype(arr.dtype, jnp.floating) or arr.dtype == bool
    if not real:  # (a cast would drop an imaginary part; booleans are masks' values)
        raise TypeError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    arr = arr.astype(dtype)
    if arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape} (batch inputs with jax.vmap)")
    return arr


__all__ = [
    "ROTATION_TOL",
    "SCALARS",
    "SIGNS",
    "check_callable",
    "check_choice",
    "check_count",
    "check_float_dtype",
    "check_fraction",
    "check_index",
    "check_name",
    "check_pair",
    "check_scalar",
    "check_type",
    "check_vector",
    "is_integer",
    "float_array",
    "is_traced",
    "renamed_keyword",
    "rotation_defect",
    "rotation_matrix",
]
