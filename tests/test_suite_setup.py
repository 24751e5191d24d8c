"""The test suite's own set-up (``tests/conftest.py``): the memory allocator of its xdist workers."""

import os
import pathlib
import subprocess
import sys

import conftest
import pytest

_CHILD = "import os, pathlib; print(os.environ.get('LD_PRELOAD', '-')); print('jemalloc' in pathlib.Path('/proc/self/maps').read_text())"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc/self/maps are Linux's")
def test_workers_run_with_jemalloc_and_what_they_start_does_not():
    """Under ``-n`` with jemalloc installed (and ``SDJAX_TEST_MALLOC`` unset), this worker has it
    loaded; a process the worker starts (a CLI subprocess, Chromium) gets the system's allocator."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("checks an xdist worker (python -m pytest -n ...)")
    if os.environ.get(conftest._MALLOC_ENV, "jemalloc") != "jemalloc" or conftest._jemalloc() is None:
        pytest.skip("jemalloc not installed or not asked for")
    if "jemalloc" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("jemalloc was preloaded before the run")
    # (the mapped file's name: find_library may give a bare soname, the maps list the real path)
    assert "libjemalloc" in pathlib.Path("/proc/self/maps").read_text(), "the worker runs without jemalloc"
    child = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True)
    assert child.stdout.split()[-1] == "False", child.stdout
