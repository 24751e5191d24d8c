"""sdjax._compile: solver programs compiled with their XLA options at top level, plain inside
a caller's transformation, and XLA's defaults where the options are unknown."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdjax import _compile


def _poly(x, scale):
    return scale * jnp.sum(jnp.sin(x) * x**2)


def _reference(x, scale):  # NumPy oracle of _poly and its gradient
    x = np.asarray(x)
    return scale * np.sum(np.sin(x) * x**2), scale * (np.cos(x) * x**2 + 2 * x * np.sin(x))


def test_solver_jit_same_values_at_top_level_and_inside_transformations():
    f = _compile.solver_jit(_poly)
    x = jnp.linspace(-1.0, 2.0, 5)
    value, grad = _reference(x, 3.0)
    # float64 round-off of a 5-term sum and its derivative (other compilations, other fusion)
    np.testing.assert_allclose(f(x, 3.0), value, rtol=1e-12)
    np.testing.assert_allclose(jax.grad(f)(x, 3.0), grad, rtol=1e-12)  # traced arguments: nested path
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x, 3.0), grad, rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(f, (None, 0))(x, jnp.arange(3.0)), np.arange(3.0) * value / 3.0, rtol=1e-12)
    # Concrete arguments inside a caller's jit (a closure): the options cannot apply there.
    np.testing.assert_allclose(jax.jit(lambda s: f(x, 2.0) * s)(1.5), value, rtol=1e-12)  # 2 * 1.5 = 3


def test_solver_program_options_accepted_by_this_jaxlib():
    options = _compile.solver_program_options()
    assert options == _compile.SOLVER_PROGRAM_OPTIONS


def test_unknown_options_fall_back_to_xla_defaults(monkeypatch):
    monkeypatch.setattr(_compile, "SOLVER_PROGRAM_OPTIONS", {"xla_no_such_option_anywhere": True})
    _compile.solver_program_options.cache_clear()
    try:
        assert _compile.solver_program_options() is None
        f = _compile.solver_jit(_poly)
        np.testing.assert_allclose(f(jnp.ones(3), 1.0), _reference(np.ones(3), 1.0)[0], rtol=1e-12)
    finally:
        _compile.solver_program_options.cache_clear()


def test_other_errors_are_not_hidden():
    f = _compile.solver_jit(lambda x: jnp.ones(3) + x)
    with pytest.raises(TypeError):
        f(jnp.ones(4))
