"""The compiled kernels' entry from XLA: typed custom calls through XLA's FFI.

A kernel of :mod:`sdjax._kernel_equations` runs inside the XLA program that calls it, as a
custom call whose handler is a C function compiled by Numba: it reads the operands' buffers in
place, writes the results into XLA's own output buffers, and splits the batch into chunks that
this thread and XLA's intra-op thread pool claim (:func:`handle`). Through ``jax.pure_callback``
the same call cost ~0.25 ms more per batch (the crossing to Python and back, copies of the
inputs and outputs, a Python thread pool): at batch 1024 a quarter of a 7-joint arm's forward
dynamics and half of its inverse dynamics (benchmarks/README.md, "The compiled batch kernel").

Each kernel's argument signature (which argument is which operand or result, its rank and
element type) gets a generated module (:func:`_entry_module`): a C function ``run(frame,
start, stop)`` that views the buffers as arrays and calls the kernel, and the handler, which
calls :func:`handle` with ``run``'s address. Both are cached on disk by Numba, as the kernels
are, and the handler finds ``run``, the thread-pool task and the C library's ``malloc`` and
``free`` by symbol name when it is loaded. XLA knows the handler under the module's name, which
spells its text, so a compiled program (in JAX's persistent cache too) names the same code in
every process.

The layout of XLA's C structures is that of ``xla/ffi/api/c_api.h`` as shipped with jaxlib
0.10 (FFI API 0.3; the fields read here are those of 0.1); tests/test_batch_kernel.py checks
every kernel through this path against the ``pure_callback`` path, bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import pathlib
import sys
import tempfile
import threading
from typing import Any, NamedTuple

import jax
import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# ------------------------------------------------------------------------------------------
# XLA's FFI structures (c_api.h), as ctypes, for their field offsets.


class _Version(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("major_version", ctypes.c_int),
        ("minor_version", ctypes.c_int),
    ]


class _ExtensionBase(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", ctypes.c_void_p)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", ctypes.c_void_p)]


class _Metadata(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("api_version", _Version),
        ("traits", ctypes.c_uint32),
    ]


class _Buffer(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("dims", ctypes.c_void_p),
    ]


class _Operands(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("size", ctypes.c_int64),
        ("types", ctypes.c_void_p),
        ("buffers", ctypes.c_void_p),
    ]


class _Attrs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("size", ctypes.c_int64),
        ("types", ctypes.c_void_p),
        ("names", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
    ]


class _Scalar(ctypes.Structure):  # XLA_FFI_Scalar (an attribute's value)
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class _CallFrame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("api", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("stage", ctypes.c_int),
        ("args", _Operands),
        ("rets", _Operands),
        ("attrs", _Attrs),
        ("future", ctypes.c_void_p),
    ]


class _ScheduleArgs(ctypes.Structure):  # XLA_FFI_ThreadPool_Schedule_Args
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("task", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
    ]


class _NumThreadsArgs(ctypes.Structure):  # XLA_FFI_ThreadPool_NumThreads_Args
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("num_threads", ctypes.c_void_p),
    ]


class _ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("error", ctypes.c_void_p)]


_API_FUNCTIONS = (  # XLA_FFI_Api's function pointers, in order, after its header
    "Error_Create",
    "Error_GetMessage",
    "Error_Destroy",
    "Handler_Register",
    "Stream_Get",
    "Type_Register",
    "ExecutionContext_Get",
    "State_Set",
    "State_Get",
    "DeviceMemory_Allocate",
    "DeviceMemory_Free",
    "ThreadPool_Schedule",
    "ThreadPool_NumThreads",
)


class _Api(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("api_version", _Version),
        ("internal_api", ctypes.c_void_p),
        *[(name, ctypes.c_void_p) for name in _API_FUNCTIONS],
    ]


_API_MAJOR, _API_MINOR = 0, 1  # (the oldest version whose structures these are)
_EXTENSION_METADATA = 1
_STAGE_EXECUTE = 3

# Offsets (bytes) the handler reads and writes.
_FRAME_EXTENSION = _CallFrame.extension_start.offset
_FRAME_API = _CallFrame.api.offset
_FRAME_CTX = _CallFrame.ctx.offset
_FRAME_STAGE = _CallFrame.stage.offset
_FRAME_ARGS = _CallFrame.args.offset + _Operands.buffers.offset
_FRAME_RETS = _CallFrame.rets.offset + _Operands.buffers.offset
_FRAME_RETS_SIZE = _CallFrame.rets.offset + _Operands.size.offset
_FRAME_ATTRS_SIZE = _CallFrame.attrs.offset + _Attrs.size.offset
_FRAME_ATTRS_TYPES = _CallFrame.attrs.offset + _Attrs.types.offset
_FRAME_ATTRS_VALUES = _CallFrame.attrs.offset + _Attrs.attrs.offset
_SCALAR_VALUE = _Scalar.value.offset
_ATTR_SCALAR = 3  # (XLA_FFI_AttrType_SCALAR)
_EXTENSION_TYPE = _ExtensionBase.type.offset
_EXTENSION_METADATA_POINTER = _MetadataExtension.metadata.offset
_METADATA_VERSION = _Metadata.api_version.offset
_METADATA_TRAITS = _Metadata.traits.offset
_VERSION_SIZE = ctypes.sizeof(_Version)
_BUFFER_DTYPE = _Buffer.dtype.offset
_BUFFER_DATA = _Buffer.data.offset
_BUFFER_RANK = _Buffer.rank.offset
_BUFFER_DIMS = _Buffer.dims.offset
_API_SCHEDULE = getattr(_Api, "ThreadPool_Schedule").offset
_API_ERROR_DESTROY = getattr(_Api, "Error_Destroy").offset
_API_THREADS = getattr(_Api, "ThreadPool_NumThreads").offset
_API_SIZE_NEEDED = _API_THREADS + 8

# The handler's block shared with its thread-pool tasks (int64 words, then the schedule
# arguments and the error-destroy arguments): malloc'ed, freed by whichever of them releases it
# last (a task may start after the handler returned; it then finds no chunk left).
(_BLOCK_FRAME, _BLOCK_ENTRY, _BLOCK_NEXT, _BLOCK_DONE, _BLOCK_REFERENCES, _BLOCK_CHUNKS, _BLOCK_COUNT) = (
    8 * k for k in range(7)
)
_BLOCK_SCHEDULE = 56
_SCHEDULE_SIZE = ctypes.sizeof(_ScheduleArgs)
_THREADS_SIZE = ctypes.sizeof(_NumThreadsArgs)
_BLOCK_DESTROY = _BLOCK_SCHEDULE + _SCHEDULE_SIZE
_DESTROY_SIZE = ctypes.sizeof(_ErrorDestroyArgs)
_BLOCK_SIZE = _BLOCK_DESTROY + _DESTROY_SIZE


# ------------------------------------------------------------------------------------------
# Memory access for the handler (Numba intrinsics: LLVM loads, stores, atomics, calls).

_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_VOID_POINTER = ir.IntType(8).as_pointer()


@intrinsic
def _load(typingctx, address):
    """The int64 at ``address``."""

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], _I64.as_pointer()))

    return types.int64(types.int64), codegen


@intrinsic
def _load_int32(typingctx, address):
    """The int32 at ``address``, as an int64."""

    def codegen(context, builder, signature, args):
        return builder.sext(builder.load(builder.inttoptr(args[0], _I32.as_pointer())), _I64)

    return types.int64(types.int64), codegen


@intrinsic
def _store(typingctx, address, value):
    """Stores the int64 ``value`` at ``address``."""

    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], _I64.as_pointer()))
        return context.get_dummy_value()

    return types.void(types.int64, types.int64), codegen


@intrinsic
def _store_int32(typingctx, address, value):
    """Stores ``value`` as an int32 at ``address``."""

    def codegen(context, builder, signature, args):
        builder.store(builder.trunc(args[1], _I32), builder.inttoptr(args[0], _I32.as_pointer()))
        return context.get_dummy_value()

    return types.void(types.int64, types.int64), codegen


@intrinsic
def _fetch_add(typingctx, address, value):
    """Atomically adds ``value`` to the int64 at ``address``; returns the value before."""

    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", builder.inttoptr(args[0], _I64.as_pointer()), args[1], "seq_cst")

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _load_atomic(typingctx, address):
    """The int64 at ``address``, read atomically."""

    def codegen(context, builder, signature, args):
        return builder.load_atomic(builder.inttoptr(args[0], _I64.as_pointer()), "seq_cst", 8)

    return types.int64(types.int64), codegen


@intrinsic
def _call(typingctx, function, argument):
    """Calls the C function ``void* function(void* argument)`` at address ``function``."""

    def codegen(context, builder, signature, args):
        function_type = ir.FunctionType(_VOID_POINTER, [_VOID_POINTER])
        callee = builder.inttoptr(args[0], function_type.as_pointer())
        result = builder.call(callee, [builder.inttoptr(args[1], _VOID_POINTER)])
        return builder.ptrtoint(result, _I64)

    return types.int64(types.int64, types.int64), codegen


@intrinsic
def _call_entry(typingctx, function, frame, start, stop):
    """Calls the C function ``void function(int64 frame, int64 start, int64 stop)`` (an entry)."""

    def codegen(context, builder, signature, args):
        function_type = ir.FunctionType(ir.VoidType(), [_I64, _I64, _I64])
        builder.call(builder.inttoptr(args[0], function_type.as_pointer()), list(args[1:]))
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _call_advise(typingctx, function, address, size, advice):
    """Calls the C function ``int function(void* address, size_t size, int advice)`` (``madvise``)."""

    def codegen(context, builder, signature, args):
        function_type = ir.FunctionType(_I32, [_VOID_POINTER, _I64, _I32])
        callee = builder.inttoptr(args[0], function_type.as_pointer())
        result = builder.call(callee, [builder.inttoptr(args[1], _VOID_POINTER), args[2], builder.trunc(args[3], _I32)])
        return builder.sext(result, _I64)

    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _address(typingctx, pointer):
    """A ``void*`` as an int64."""

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], _I64)

    return types.int64(types.voidptr), codegen


@intrinsic
def _null(typingctx):
    """The null ``void*`` (the handler's success)."""

    def codegen(context, builder, signature, args):
        return ir.Constant(_VOID_POINTER, None)

    return types.voidptr(), codegen


def _pointer_intrinsic(element: Any) -> Any:
    @intrinsic
    def pointer(typingctx, address):
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(element)))

        return types.CPointer(element)(types.int64), codegen

    return pointer


_ELEMENTS = {
    "float64": types.float64,
    "float32": types.float32,
    "int64": types.int64,
    "int32": types.int32,
    "bool": types.boolean,
}
_POINTERS = {name: _pointer_intrinsic(element) for name, element in _ELEMENTS.items()}


# ------------------------------------------------------------------------------------------
# Handlers.


class Argument(NamedTuple):
    """Where one argument of a kernel comes from: ``source`` ``"operand"`` or ``"result"``
    (XLA's operand or result buffer at ``position``), its element type (a key of
    :data:`_ELEMENTS`) and its rank (0: a scalar passed by value). An ``int32`` operand is
    handed to the kernel as ``int64`` (a copy: the kernels' integer arrays are ``int64``, which
    JAX cannot hold without 64-bit mode)."""

    source: str
    position: int
    element: str
    rank: int


def available() -> bool:
    """Whether this jaxlib's FFI has the structures and thread pool the handlers use."""
    return hasattr(jax, "ffi") and hasattr(jax.ffi, "register_ffi_target") and hasattr(jax.ffi, "ffi_call")


def _symbol_address(name: str) -> Any:
    """An intrinsic ``() -> int64``: the address of the C function named ``name``, resolved by
    the JIT linker when the code is loaded (a C library function, or one given to it with
    ``llvmlite.binding.add_symbol``), so that code holding it can be cached on disk."""

    @intrinsic
    def address(typingctx):
        def codegen(context, builder, signature, args):
            function_type = ir.FunctionType(ir.VoidType(), [])
            function = builder.module.globals.get(name) or ir.Function(builder.module, function_type, name)
            return builder.ptrtoint(function, _I64)

        return types.int64(), codegen

    return address


_malloc = _symbol_address("malloc")
_free = _symbol_address("free")
#: Result buffers of at least this many bytes are backed by transparent huge pages where the
#: system allows it (Linux's ``madvise(MADV_HUGEPAGE)``, asked before the kernel writes them;
#: NumPy asks the same for its arrays from 4 MiB). XLA allocates a large result afresh at every
#: call, and the first write to each 4 KiB page then faults: 8192 inertia matrices of a 36-DOF
#: tree (85 MB) took 20,737 faults per call, half of the call's time (benchmarks/README.md).
HUGE_PAGE_MIN_BYTES = 4 << 20
_HUGE_PAGE = 2 << 20  # bytes (x86-64, and arm64 with 4 KiB pages)
_MADV_HUGEPAGE = 14  # (Linux)
# XLA_FFI_DataType (c_api.h) of the kernels' element types (the keys of _ELEMENTS), and their sizes.
_DATA_TYPE_NAMES = {1: "bool", 4: "int32", 5: "int64", 11: "float32", 12: "float64"}
_DATA_TYPES = tuple(_DATA_TYPE_NAMES)
_ELEMENT_SIZES = tuple(np.dtype(name).itemsize for name in _DATA_TYPE_NAMES.values())


@numba.njit(nogil=True, cache=True)
def _element_size(dtype):  # pragma: no cover - compiled by Numba
    """Bytes per element of an XLA_FFI_DataType (0 for a type the kernels do not use)."""
    for k in range(len(_DATA_TYPES)):
        if _DATA_TYPES[k] == dtype:
            return _ELEMENT_SIZES[k]
    return 0


if sys.platform.startswith("linux"):
    _madvise = _symbol_address("madvise")

    @numba.njit(nogil=True, cache=True)
    def _advise_huge_pages(frame):  # pragma: no cover - compiled by Numba
        """Asks for transparent huge pages under every result buffer of the call frame at
        address ``frame`` that holds at least :data:`HUGE_PAGE_MIN_BYTES` (the whole 2 MiB
        pages inside it; a hint: its failure is ignored, and the results are the same either
        way)."""
        buffers = _load(frame + _FRAME_RETS)
        for k in range(_load(frame + _FRAME_RETS_SIZE)):
            buffer = _load(buffers + 8 * k)
            size = _element_size(_load_int32(buffer + _BUFFER_DTYPE))
            dims = _load(buffer + _BUFFER_DIMS)
            for d in range(_load(buffer + _BUFFER_RANK)):
                size *= _load(dims + 8 * d)
            if size >= HUGE_PAGE_MIN_BYTES:
                data = _load(buffer + _BUFFER_DATA)
                first = (data + _HUGE_PAGE - 1) // _HUGE_PAGE * _HUGE_PAGE
                last = (data + size) // _HUGE_PAGE * _HUGE_PAGE
                if last > first:
                    _call_advise(_madvise(), first, last - first, _MADV_HUGEPAGE)

else:  # (no such advice, and no madvise symbol to resolve, elsewhere)

    @numba.njit(nogil=True, cache=True)
    def _advise_huge_pages(frame):  # pragma: no cover - compiled by Numba
        """Nothing off Linux (:data:`HUGE_PAGE_MIN_BYTES`)."""


_TASK_SYMBOL = "sdjax_kernel_ffi_task"
_task_address = _symbol_address(_TASK_SYMBOL)


@numba.njit(nogil=True, cache=True)
def _work(block):  # pragma: no cover - compiled by Numba
    """Runs the block's entry on chunks of the batch until none is left to claim."""
    frame, entry = _load(block + _BLOCK_FRAME), _load(block + _BLOCK_ENTRY)
    count, chunks = _load(block + _BLOCK_COUNT), _load(block + _BLOCK_CHUNKS)
    while True:
        chunk = _fetch_add(block + _BLOCK_NEXT, 1)
        if chunk >= chunks:
            return
        _call_entry(entry, frame, count * chunk // chunks, count * (chunk + 1) // chunks)
        _fetch_add(block + _BLOCK_DONE, 1)


@numba.njit(nogil=True, cache=True)
def _release(block):  # pragma: no cover - compiled by Numba
    """Drops one reference to the block; the last frees it."""
    if _fetch_add(block + _BLOCK_REFERENCES, -1) == 1:
        _call(_free(), block)


@numba.cfunc(types.void(types.voidptr), cache=True)
def _task(data):  # pragma: no cover - compiled by Numba
    """The thread-pool task ``void task(void* block)``: claims chunks, then releases the block."""
    block = _address(data)
    _work(block)
    _release(block)


llvm.add_symbol(_TASK_SYMBOL, _task.address)


@numba.njit(nogil=True, cache=True)
def _destroy(api, block, error):  # pragma: no cover - compiled by Numba
    """Destroys an error XLA's API returned (its arguments written into the block)."""
    destroy = block + _BLOCK_DESTROY
    for offset, value in ((0, _DESTROY_SIZE), (8, 0), (16, error)):
        _store(destroy + offset, value)
    _call(_load(api + _API_ERROR_DESTROY), destroy)


@numba.njit(nogil=True, cache=True)
def handle(frame, entry):  # pragma: no cover - compiled by Numba
    """The body of every XLA FFI handler: runs the entry at address ``entry`` (``void
    run(frame, start, stop)``) over the batch ``0 <= b < B`` of XLA's call frame at address
    ``frame``. This thread and tasks on XLA's intra-op thread pool (one per pool thread but
    this one) claim chunks of at least ``smallest`` samples (the call's one attribute, a scalar;
    four chunks per thread at most) until none is left; where the pool takes no task, this
    thread runs every chunk. Large results are first put on huge pages
    (:func:`_advise_huge_pages`). Returns the null error (success)."""
    extension = _load(frame + _FRAME_EXTENSION)
    if extension != 0 and _load_int32(extension + _EXTENSION_TYPE) == _EXTENSION_METADATA:
        # XLA asks which FFI version the handler speaks (and its traits: none).
        metadata = _load(extension + _EXTENSION_METADATA_POINTER)
        version = metadata + _METADATA_VERSION
        _store(version, _VERSION_SIZE)
        _store(version + 8, 0)
        _store_int32(version + 16, _API_MAJOR)
        _store_int32(version + 20, _API_MINOR)
        _store_int32(metadata + _METADATA_TRAITS, 0)
        return _null()
    if _load_int32(frame + _FRAME_STAGE) != _STAGE_EXECUTE:
        return _null()
    _advise_huge_pages(frame)
    count = _load(_load(_load(_load(frame + _FRAME_RETS)) + _BUFFER_DIMS))
    smallest = 1
    if _load(frame + _FRAME_ATTRS_SIZE) == 1 and _load_int32(_load(frame + _FRAME_ATTRS_TYPES)) == _ATTR_SCALAR:
        smallest = max(1, _load(_load(_load(_load(frame + _FRAME_ATTRS_VALUES)) + _SCALAR_VALUE)))
    api = _load(frame + _FRAME_API)
    threads = 1
    block = _call(_malloc(), _BLOCK_SIZE) if _load(api) >= _API_SIZE_NEEDED else 0
    if block != 0:  # (XLA's pool size; the block's first words are scratch until filled)
        arguments = block + _BLOCK_SCHEDULE
        for offset, value in ((0, _THREADS_SIZE), (8, 0), (16, _load(frame + _FRAME_CTX)), (24, block)):
            _store(arguments + offset, value)
        error = _call(_load(api + _API_THREADS), arguments)
        if error == 0:
            threads = max(1, _load(block))
        else:
            _destroy(api, block, error)
    chunks = min(count // smallest, 4 * threads)
    if chunks <= 1 or threads <= 1:
        if block != 0:
            _call(_free(), block)
        _call_entry(entry, frame, 0, count)
        return _null()
    tasks = min(threads, chunks) - 1
    for offset, value in (
        (_BLOCK_FRAME, frame),
        (_BLOCK_ENTRY, entry),
        (_BLOCK_NEXT, 0),
        (_BLOCK_DONE, 0),
        (_BLOCK_REFERENCES, 1 + tasks),
        (_BLOCK_CHUNKS, chunks),
        (_BLOCK_COUNT, count),
    ):
        _store(block + offset, value)
    arguments = block + _BLOCK_SCHEDULE
    for _ in range(tasks):
        for offset, value in (
            (0, _SCHEDULE_SIZE),
            (8, 0),
            (16, _load(frame + _FRAME_CTX)),
            (24, _task_address()),
            (32, block),
        ):
            _store(arguments + offset, value)
        error = _call(_load(api + _API_SCHEDULE), arguments)
        if error != 0:  # (the pool took no task: this thread runs its chunks)
            _destroy(api, block, error)
            _fetch_add(block + _BLOCK_REFERENCES, -1)
    _work(block)
    while _load_atomic(block + _BLOCK_DONE) < chunks:  # (the tasks' last chunks)
        pass
    _release(block)
    return _null()


_lock = threading.Lock()
_registered: dict[str, Any] = {}  # target name -> its module (kept alive: XLA holds its handler's address)


def target(kernel_name: str, arguments: tuple[Argument, ...]) -> str:
    """The name of the XLA FFI target that runs the kernel ``kernel_name`` of
    :mod:`sdjax._kernel_equations` as ``kernel(*arguments, start, stop)`` over the batch ``0 <=
    b < B`` (``B``: the leading dimension of result 0) in chunks (:func:`handle`: call it with
    the attribute ``smallest=np.int64(...)``); compiled (or loaded from Numba's cache) and
    registered on first use in a process."""
    module = _entry_module(kernel_name, arguments)
    name = module.__name__
    with _lock:
        if name not in _registered:
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(module.handler.address), platform="cpu")
            _registered[name] = module
    return name


def _entry_module(kernel_name: str, arguments: tuple[Argument, ...]) -> Any:
    """The generated module of one target: ``run(frame, start, stop)``, a C function that calls
    the kernel on its arguments' buffers in XLA's call frame at address ``frame``, and
    ``handler``, the FFI handler (:func:`handle` with ``run``'s address).

    Written from ``arguments`` into :func:`_entries_directory` under a name that spells its
    text, and cached on disk by Numba like the kernels: the kernel is compiled into ``run``
    (~3 s), which a new process loads instead (~0.3 s). The text holds a digest of the source
    compiled into it, so code compiled from older kernels is never loaded."""
    symbol = (
        "sdjax_entry_" + hashlib.sha256(repr((kernel_name, arguments, _kernels_digest())).encode()).hexdigest()[:24]
    )
    lines = [
        f"# Generated by sdjax._kernel_ffi: the kernel {kernel_name} from XLA (source {_kernels_digest()}).",
        "import numba",
        "import numpy as np",
        "from llvmlite import binding",
        "from sdjax import _kernel_equations, _kernel_ffi",
        "from sdjax._kernel_ffi import _BUFFER_DATA, _BUFFER_DIMS, _FRAME_ARGS, _FRAME_RETS, _POINTERS, _load",
        *[f"_POINTER_{name} = _POINTERS[{name!r}]" for name in _ELEMENTS],
        f"_run_address = _kernel_ffi._symbol_address({symbol!r})",
        "",
        "",
        '@numba.cfunc("void(int64, int64, int64)", cache=True)',
        "def run(frame, start, stop):",
        "    operands = _load(frame + _FRAME_ARGS)",
        "    results = _load(frame + _FRAME_RETS)",
    ]
    names = []
    for k, argument in enumerate(arguments):
        table = "operands" if argument.source == "operand" else "results"
        lines.append(f"    buffer{k} = _load({table} + {8 * argument.position})")
        lines.append(f"    data{k} = _load(buffer{k} + _BUFFER_DATA)")
        if argument.rank == 0:
            value = f"_POINTER_{argument.element}(data{k})[0]"
            lines.append(f"    a{k} = " + (f"np.int64({value})" if argument.element == "int32" else value))
        else:
            lines.append(f"    dims{k} = _load(buffer{k} + _BUFFER_DIMS)")
            shape = ", ".join(f"_load(dims{k} + {8 * d})" for d in range(argument.rank))
            view = f"numba.carray(_POINTER_{argument.element}(data{k}), ({shape},))"
            lines.append(f"    a{k} = " + (f"{view}.astype(np.int64)" if argument.element == "int32" else view))
        names.append(f"a{k}")
    lines += [
        f"    _kernel_equations.{kernel_name}({', '.join(names)}, start, stop)",
        "",
        "",
        f"binding.add_symbol({symbol!r}, run.address)",
        "",
        "",
        '@numba.cfunc("voidptr(voidptr)", cache=True)',
        "def handler(frame):",
        "    return _kernel_ffi.handle(_kernel_ffi._address(frame), _run_address())",
    ]
    text = "\n".join(lines) + "\n"
    module_name = f"sdjax_{kernel_name}_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    with _lock:
        module = sys.modules.get(module_name)
        if module is not None:
            return module
        path = _entries_directory() / f"{module_name}.py"
        if not path.exists():  # (written whole, then renamed: processes may race here)
            temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            temporary.write_text(text)
            os.replace(temporary, path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        # (registered first: Numba's cached code finds its module by name)
        module = sys.modules[module_name] = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return module


#: Environment variable naming the directory of the generated kernel entries (default:
#: ``$XDG_CACHE_HOME/sdjax`` or ``~/.cache/sdjax``; a fresh temporary directory where that is
#: not writable).
ENTRIES_ENV = "SDJAX_KERNEL_ENTRIES"


@functools.cache
def _entries_directory() -> pathlib.Path:
    try:
        default = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "sdjax"
        directory = pathlib.Path(os.environ.get(ENTRIES_ENV) or default) / "kernel_entries"
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except (OSError, RuntimeError):  # (not writable; no home directory)
        directory = pathlib.Path(tempfile.mkdtemp(prefix="sdjax-kernel-entries-"))
    return directory


@functools.cache
def _kernels_digest() -> str:
    """A digest of the source compiled into the entries (the kernels and this module)."""
    from sdjax import _kernel_equations

    digest = hashlib.sha256()
    for module in (_kernel_equations, sys.modules[__name__]):
        digest.update(pathlib.Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:24]


__all__: list[str] = []
