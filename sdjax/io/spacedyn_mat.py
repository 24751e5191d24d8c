"""SpaceDyn link parameters saved by MATLAB: the ``LP`` struct in a ``.mat`` file.

A SpaceDyn user's robot lives in MATLAB as the struct ``LP`` (seed 000 chapter 2; the fields and
layouts of :mod:`sdjax.io.spacedyn_arrays`). ``save('robot.mat', 'LP')`` stores it as a struct
variable, ``save('robot.mat', '-struct', 'LP')`` as one variable per field; both read here with
SciPy's MATLAB reader (SciPy comes with JAX). ``J_type`` may be a char row (``'RRP'``) or a cell
array of chars (``{'R', 'R', 'P'}``). Level 5 files (MATLAB's default ``-v7`` and older) are
read; ``-v7.3`` files are HDF5 and are refused with the command that re-saves them.
Before SciPy parses a level-5 file, every element's declared sizes are checked against the file
and its dimensions (SciPy's reader trusts them and can crash the interpreter on a damaged file);
compressed elements may expand to at most :data:`MAX_EXPANDED_BYTES`.

Inertia tensors are accepted as SpaceDyn accepts them (one warning names the bodies whose
tensors break the triangle inequality), as for the other SpaceDyn readers.
"""

from __future__ import annotations

import math
import os
import zlib
from typing import Any

import numpy as np

from sdjax.io.inputs import names_the_file
from sdjax.io.spacedyn_arrays import model_from_lp
from sdjax.model import Model

__all__ = ["lp_from_mat", "model_from_mat", "save_mat"]

#: Largest ``.mat`` file read (refused before reading).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Most bytes the compressed elements of one file may expand to (checked while inflating).
MAX_EXPANDED_BYTES = 256 * 1024 * 1024


def _is_struct(value: Any) -> bool:
    from scipy.io.matlab import mat_struct

    if isinstance(value, mat_struct):
        return True
    return (
        isinstance(value, np.ndarray)
        and value.dtype == object
        and value.size == 1
        and isinstance(value.flat[0], mat_struct)
    )


def _struct_fields(value: Any) -> dict[str, Any]:
    struct = value.flat[0] if isinstance(value, np.ndarray) else value
    return {name: getattr(struct, name) for name in struct._fieldnames}


def _plain(field: str, value: Any) -> Any:
    """A field as :func:`model_from_lp` takes it: numbers as arrays, chars as a string, a cell
    array of chars as a list of strings. Anything else (a struct, a sparse matrix, a cell of
    numbers, complex numbers) is refused by field: NumPy would keep a struct as an object,
    and drop an imaginary part silently."""
    if isinstance(value, str):
        return value
    if _is_struct(value) or not isinstance(value, np.ndarray):  # (SciPy's structs, sparse matrices)
        raise ValueError(f"SpaceDyn LP.{field}: a MATLAB {_matlab_kind(value)}; expected numbers or chars")
    if value.dtype.kind == "U":
        return "".join(str(item) for item in value.ravel())
    if value.dtype == object:  # (a cell array: of chars for J_type)
        texts = [_cell_text(item) for item in value.ravel()]
        if all(text is not None for text in texts):
            return texts
        kinds = sorted({_matlab_kind(item) for item, text in zip(value.ravel(), texts) if text is None})
        raise ValueError(f"SpaceDyn LP.{field}: a cell array holding {', '.join(kinds)}; expected numbers or chars")
    if value.dtype.kind == "c":
        raise ValueError(f"SpaceDyn LP.{field}: complex numbers; expected real numbers")
    return value


def _cell_text(item: Any) -> str | None:
    """The chars a cell holds as a string; None when it holds something else."""
    if isinstance(item, str):
        return item
    if isinstance(item, np.ndarray) and item.dtype.kind == "U":
        return "".join(str(c) for c in item.ravel())
    return None


def _matlab_kind(value: Any) -> str:
    """What a value SciPy read is, in MATLAB's words (for messages)."""
    if _is_struct(value):
        return "struct"
    if hasattr(value, "tocoo"):
        return "sparse matrix"
    if isinstance(value, np.ndarray):
        return "char array" if value.dtype.kind == "U" else f"{value.dtype} array"
    return type(value).__name__


# ---- MAT-file level 5 structure check (before SciPy parses the file) ------------------------
# SciPy's reader trusts the sizes a file declares and can crash the interpreter (segmentation
# fault) on a damaged file (found by tests/test_fuzz_readers.py). Every element is walked here
# first, per MathWorks' "MAT-File Format" (level 5): 128-byte header; data elements of an 8-byte
# tag (type, byte count; or the 4-byte "small element" form) padded to 8 bytes; miCOMPRESSED
# wraps one zlib-compressed element; miMATRIX holds array flags, dimensions, a name and the
# class's parts. Only what SpaceDyn's LP needs is accepted (numeric, logical, char, struct and
# cell arrays); sizes must agree with the dimensions and fit inside their parent.

_MAT_NUMBER_BYTES = {
    1: 1,
    2: 1,
    3: 2,
    4: 2,
    5: 4,
    6: 4,
    7: 4,
    9: 8,
    12: 8,
    13: 8,
    16: 1,
    17: 2,
    18: 4,
}  # miINT8..miUTF32
_MI_INT8, _MI_INT32, _MI_UINT32, _MI_MATRIX, _MI_COMPRESSED = 1, 5, 6, 14, 15
_MI_UTF8_16 = (16, 17)
_MX_CELL, _MX_STRUCT, _MX_OBJECT, _MX_CHAR, _MX_SPARSE = 1, 2, 3, 4, 5
_MX_NUMERIC = range(6, 16)  # double, single, int8 .. uint64
_MAX_NESTING = 32


class _MatReader:
    """Walks the elements of a level-5 MAT file; raises ``ValueError(reason)`` on the first
    inconsistency (the caller adds the file name)."""

    def __init__(self, endian: str, limit: int):
        self.endian = endian
        self.budget = limit  # bytes that decompression may still produce

    def tag(self, data: bytes, at: int, end: int) -> tuple[int, int, int, int]:
        """``(type, nbytes, data start, next element)`` of the element at ``at``."""
        if at + 8 > end:
            raise ValueError(f"byte {at}: element tag runs past its end ({end})")
        word, count = np.frombuffer(data, self.endian + "u4", 2, at)
        if word >> 16:  # small data element: type and size in one word, data in the next 4 bytes
            kind, nbytes = int(word & 0xFFFF), int(word >> 16)
            if nbytes > 4:
                raise ValueError(f"byte {at}: small element of {nbytes} bytes (at most 4)")
            return kind, nbytes, at + 4, at + 8
        kind, nbytes = int(word), int(count)
        stop = at + 8 + nbytes
        padded = stop if kind == _MI_COMPRESSED else stop + (-nbytes) % 8
        if stop > end:
            raise ValueError(f"byte {at}: element of {nbytes} bytes runs past its end ({end})")
        return kind, nbytes, at + 8, min(padded, end)

    def element(self, data: bytes, at: int, end: int, depth: int) -> int:
        """Check the top-level element at ``at``; the position of the next one."""
        kind, nbytes, start, after = self.tag(data, at, end)
        if kind == _MI_COMPRESSED:
            inner = self.inflate(data[start : start + nbytes], at)
            self.element(inner, 0, len(inner), depth)
        elif kind == _MI_MATRIX:
            self.matrix(data, start, start + nbytes, depth)
        else:
            raise ValueError(f"byte {at}: top-level element of type {kind} (expected a matrix)")
        return after

    def inflate(self, compressed: bytes, at: int) -> bytes:
        decompressor = zlib.decompressobj()
        try:
            inner = decompressor.decompress(compressed, self.budget + 1)
        except zlib.error as err:
            raise ValueError(f"byte {at}: damaged compressed element ({err})") from None
        if len(inner) > self.budget:
            raise ValueError(f"byte {at}: compressed element expands beyond the size limit")
        self.budget -= len(inner)
        return inner

    def part(
        self, data: bytes, at: int, end: int, what: str, kinds: tuple[int, ...] | None = None
    ) -> tuple[int, bytes, int]:
        kind, nbytes, start, after = self.tag(data, at, end)
        if kind not in _MAT_NUMBER_BYTES or (kinds is not None and kind not in kinds):
            raise ValueError(f"byte {at}: {what} of element type {kind}")
        if nbytes % _MAT_NUMBER_BYTES[kind]:
            raise ValueError(f"byte {at}: {what} of {nbytes} bytes is not a whole number of values")
        return kind, data[start : start + nbytes], after

    def matrix(self, data: bytes, at: int, end: int, depth: int) -> None:
        """Check one miMATRIX body spanning ``data[at:end]``."""
        if depth > _MAX_NESTING:
            raise ValueError(f"byte {at}: arrays nested deeper than {_MAX_NESTING}")
        if at == end:  # an empty matrix (MATLAB writes [] struct fields this way)
            return
        _, flags, at = self.part(data, at, end, "array flags", (_MI_UINT32,))
        if len(flags) != 8:
            raise ValueError(f"byte {at}: array flags of {len(flags)} bytes (expected 8)")
        flag_word = int(np.frombuffer(flags, self.endian + "u4", 1)[0])
        mx_class, is_complex = flag_word & 0xFF, bool(flag_word & 0x800)
        kind, dims_bytes, at = self.part(data, at, end, "dimensions", (_MI_INT32,))
        dims = np.frombuffer(dims_bytes, self.endian + "i4")
        if dims.size < 2 or np.any(dims < 0):
            raise ValueError(f"byte {at}: dimensions {dims.tolist()}")
        count = math.prod(int(d) for d in dims)
        _, _, at = self.part(data, at, end, "array name", (_MI_INT8,))
        if mx_class in _MX_NUMERIC or mx_class == _MX_CHAR:
            for _ in range(2 if is_complex else 1):
                kind, values, at = self.part(data, at, end, "array data")
                variable_width = mx_class == _MX_CHAR and kind in _MI_UTF8_16  # multi-byte characters
                if len(values) != count * _MAT_NUMBER_BYTES[kind] and not variable_width:
                    raise ValueError(
                        f"byte {at}: {len(values)} data bytes for a {'x'.join(map(str, dims.tolist()))} array"
                    )
        elif mx_class == _MX_SPARSE:  # row indices, column starts, values (and imaginary parts)
            for what in ("row indices", "column starts", "values") + (("imaginary values",) if is_complex else ()):
                _, _, at = self.part(data, at, end, f"sparse {what}")
        elif mx_class in (_MX_STRUCT, _MX_OBJECT):
            if mx_class == _MX_OBJECT:
                _, _, at = self.part(data, at, end, "class name", (_MI_INT8,))
            _, length, at = self.part(data, at, end, "field-name length", (_MI_INT32,))
            width = int(np.frombuffer(length, self.endian + "i4", 1)[0]) if len(length) == 4 else 0
            _, names, at = self.part(data, at, end, "field names", (_MI_INT8,))
            if width <= 0 or len(names) % width:
                raise ValueError(f"byte {at}: field names of {len(names)} bytes in width {width}")
            count *= len(names) // width
        elif mx_class != _MX_CELL:
            raise ValueError(
                f"byte {at}: array class {mx_class}, which this reader does not take (numbers, chars, structs, cells, sparse)"
            )
        if mx_class in (_MX_STRUCT, _MX_OBJECT, _MX_CELL):
            for _ in range(count):
                kind, nbytes, start, at = self.tag(data, at, end)
                if kind != _MI_MATRIX:
                    raise ValueError(f"byte {start - 8}: struct or cell member of element type {kind}")
                self.matrix(data, start, start + nbytes, depth + 1)


def _check_mat5(path: str, limit: int) -> None:
    """Refuse (``ValueError`` naming ``path``) a level-5 MAT file whose element structure is
    inconsistent, before SciPy reads it (see :class:`_MatReader`). Level-4 and HDF5 files are
    left to SciPy's own checks."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 128 or data[124:128] not in (b"\x00\x01IM", b"\x01\x00MI"):
        return  # not level 5 (level 4, -v7.3 HDF5, not a MAT file): SciPy's own checks report it
    reader = _MatReader("<" if data[126:128] == b"IM" else ">", limit)
    try:
        at = 128
        while at < len(data):
            at = reader.element(data, at, len(data), 0)
    except ValueError as err:
        raise ValueError(f"{path}: not a readable MATLAB .mat file ({err})") from None


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
    _check_mat5(path, MAX_EXPANDED_BYTES)
    import scipy.io

    try:
        contents = scipy.io.loadmat(path, squeeze_me=False, struct_as_record=False)
    except NotImplementedError:
        raise ValueError(
            f"{path}: a MATLAB -v7.3 (HDF5) file; re-save it with save('{os.path.basename(path)}', 'LP', '-v7')"
        ) from None
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
            raise ValueError(
                f"{path}: no SpaceDyn link parameters (a struct with a BB field, or a BB variable); the file holds {sorted(variables)}"
            )
    return {name: _plain(name, value) for name, value in fields.items()}


@names_the_file
def model_from_mat(path: str | os.PathLike, *, variable: str | None = None, dtype: Any = None, **kwargs: Any) -> Model:
    """The model of SpaceDyn link parameters in a ``.mat`` file (:func:`lp_from_mat`, then
    :func:`sdjax.io.spacedyn_arrays.model_from_lp`; ``kwargs`` such as ``gravity=`` go there).
    The model is named after the file unless ``name=`` is given."""
    lp = lp_from_mat(path, variable)
    kwargs.setdefault("name", os.path.splitext(os.path.basename(os.fspath(path)))[0])
    return model_from_lp(lp, dtype=dtype, **kwargs)


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
