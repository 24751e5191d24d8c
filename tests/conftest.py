"""Test configuration: float64, strict dtype promotion, shared fixtures.

The library never changes JAX's configuration; the test suite does, so that oracles can
be compared to round-off (float32 behaviour is tested explicitly in test_float32.py).
"""

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture(scope="session")
def sample_model():
    from sdjax.models import spacedyn_sample

    return spacedyn_sample()


@pytest.fixture(scope="session")
def arm7_model():
    from sdjax.models import free_flying_arm_7dof

    return free_flying_arm_7dof()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compilation caches after each test module.

    Every compiled XLA executable keeps memory mappings alive; a long session that compiles
    thousands of programs (this suite) would otherwise reach the kernel's per-process map
    limit (vm.max_map_count, 65530 by default) and crash.
    """
    yield
    jax.clear_caches()
