"""Checked reading of sdjax's ``.npz`` result files (run files, Monte-Carlo results).

``numpy.load`` decompresses an entry before anyone can look at its shape, so a small, hostile
or damaged archive can make a reader allocate gigabytes, and its errors (``BadZipFile``,
``KeyError``, ``ValueError`` from a header) do not name the file. :class:`NpzArchive` reads each
entry's ``.npy`` header first (shape and dtype, a few hundred bytes), checks them against what
the caller expects and :data:`MAX_ENTRY_BYTES`, and only then reads the data. Every problem is a
``ValueError`` that names the file and the entry. Object arrays are refused (no pickles).
"""

from __future__ import annotations


import math
import os
import zipfile
from typing import Any

import numpy as np

from sdjax.io.inputs import naming_the_file, parse_json

__all__ = ["MAX_ENTRY_BYTES", "MAX_TEXT_CHARS", "NpzArchive"]

#: Largest entry read (bytes of the decompressed array), checked from its header first.
MAX_ENTRY_BYTES = 4 * 1024**3
#: Largest text entry (the JSON ``meta``), characters.
MAX_TEXT_CHARS = 64 * 1024**2


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class NpzArchive:
    """An ``.npz`` archive opened for checked reading; use as a context manager.

    Arguments:
        path: the file.
        what: what the file should be (``"sdjax run file"``), for the messages.
    """

    def __init__(self, path: str | os.PathLike, what: str):
        self.name, self.what = os.fspath(path), what
        if not os.path.isfile(self.name):
            raise ValueError(f"{self.name}: no such file (expected a {what})")
        try:
            self._zip = zipfile.ZipFile(self.name)
            members = self._zip.namelist()
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            NotImplementedError,
        ) as err:  # NotImplementedError: unknown zip versions, methods
            raise ValueError(f"{self.name}: not a {what} (.npz archive): {err}") from None
        self.entries = {m[: -len(".npy")]: m for m in members if m.endswith(".npy")}

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        """Close the archive; a ``ValueError`` or ``TypeError`` raised while reading it (by the
        caller's checks too, e.g. of a model stored inside) gets the file's name in front when it
        lacks it."""
        self._zip.close()
        if isinstance(error, (ValueError, TypeError)) and (named := naming_the_file(self.name, error)) is not error:
            raise named from None

    def __contains__(self, entry: str) -> bool:
        return entry in self.entries

    def header(self, entry: str) -> tuple[tuple[int, ...], np.dtype]:
        """``(shape, dtype)`` of an entry, from its ``.npy`` header only."""
        if entry not in self.entries:
            raise ValueError(f"{self.name}: no entry {entry!r}; not a complete {self.what}")
        try:
            with self._zip.open(self.entries[entry]) as f:
                version = np.lib.format.read_magic(f)
                if version not in _HEADER_READERS:
                    raise ValueError(f".npy format version {version} (sdjax writes 1.0)")
                shape, _, dtype = _HEADER_READERS[version](f)  # the header only, no data
        except Exception as err:  # damaged zip member or .npy header: numpy raises several types
            raise ValueError(
                f"{self.name}: entry {entry!r} is not a readable array ({type(err).__name__}: {err})"
            ) from None
        return tuple(int(s) for s in shape), np.dtype(dtype)

    def array(
        self, entry: str, shape: tuple[int | None, ...] | None = None, kinds: str = "biuf", leading: int | None = None
    ) -> np.ndarray:
        """The entry's array, after checking its header: numeric kind in ``kinds``, ``shape``
        (``None`` entries match any size) or the ``leading`` axis length, and
        :data:`MAX_ENTRY_BYTES`."""
        found, dtype = self.header(entry)
        if leading is not None and (not found or found[0] != leading):
            raise ValueError(f"{self.name}: entry {entry!r} has shape {found}, expected a leading axis of {leading}")
        if dtype.hasobject or dtype.kind not in kinds:
            raise ValueError(f"{self.name}: entry {entry!r} has dtype {dtype}, expected numbers")
        if shape is not None and (
            len(found) != len(shape) or any(s is not None and s != f for s, f in zip(shape, found))
        ):
            expected = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{self.name}: entry {entry!r} has shape {found}, expected {expected}")
        size = math.prod(found) * dtype.itemsize
        if size > MAX_ENTRY_BYTES:
            raise ValueError(
                f"{self.name}: entry {entry!r} would take {size / 1024**3:.1f} GiB (limit {MAX_ENTRY_BYTES / 1024**3:.0f} GiB)"
            )
        try:
            with self._zip.open(self.entries[entry]) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except Exception as err:  # truncated or corrupt data
            raise ValueError(f"{self.name}: entry {entry!r} could not be read ({type(err).__name__}: {err})") from None

    def meta(self, file_format: str) -> dict:
        """sdjax's ``meta`` entry (JSON object), checked to carry ``"format": file_format``."""
        if "meta" not in self:
            raise ValueError(f"{self.name}: no 'meta' entry; not a {self.what}")
        meta = self.json("meta")
        if not isinstance(meta, dict) or meta.get("format") != file_format:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise ValueError(f"{self.name}: unsupported format {found!r}; expected {file_format!r}")
        return meta

    def json(self, entry: str) -> Any:
        """A 0-d text entry holding JSON (sdjax's ``meta``), decoded."""
        found, dtype = self.header(entry)
        if dtype.kind != "U" or found != ():
            raise ValueError(
                f"{self.name}: entry {entry!r} is not a text entry (dtype {dtype}, shape {found}); not a {self.what}"
            )
        if dtype.itemsize // 4 > MAX_TEXT_CHARS:
            raise ValueError(
                f"{self.name}: entry {entry!r} holds {dtype.itemsize // 4} characters (limit {MAX_TEXT_CHARS})"
            )
        text = str(self.array(entry, (), kinds="U"))
        try:
            return parse_json(text)
        except ValueError as err:
            raise ValueError(f"{self.name}: entry {entry!r} is {err}") from None
