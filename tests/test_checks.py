"""The argument-checking module (sdjax._checks): types, shapes, signs, choices; one message style."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax

from sdjax._checks import (
    ROTATION_TOL,
    check_callable,
    check_choice,
    check_count,
    check_fraction,
    check_index,
    check_name,
    check_pair,
    check_scalar,
    check_type,
    check_vector,
    float_array,
    is_traced,
    renamed_keyword,
    rotation_matrix,
)
from sdjax.rotation import rpy_to_matrix


def test_float_array_converts_and_keeps_floating_dtypes():
    assert float_array("x", 3).dtype == jnp.float64  # integers become the default float (x64 in the tests)
    assert float_array("x", np.float32(1.5)).dtype == jnp.float32  # a floating dtype is kept
    assert float_array("x", [1, 2], dtype=jnp.float32).dtype == jnp.float32
    np.testing.assert_array_equal(float_array("x", 2.0, shape=(3,), scalar="broadcast"), [2.0, 2.0, 2.0])
    assert float_array("x", 2.0, shape=(3,), scalar="keep").shape == ()
    assert float_array("x", np.ones(5), shape=(None,)).shape == (5,)


@pytest.mark.parametrize(
    "value, kwargs, error, message",
    [
        ("fast", {}, TypeError, r"^gain: expected numbers, got str 'fast'$"),
        (None, {}, TypeError, r"^gain: expected numbers, got NoneType None"),
        (1 + 2j, {}, TypeError, r"^gain: expected real numbers, got dtype complex128"),
        (np.ones(2), {"shape": (3,)}, ValueError, r"^gain: expected shape \(3,\), got shape \(2,\)$"),
        (1.0, {"shape": (3,)}, ValueError, r"^gain: expected shape \(3,\), got shape \(\)$"),
        (
            np.ones(2),
            {"shape": (3,), "scalar": "keep", "hint": "one per joint"},
            ValueError,
            r"^gain: expected a scalar or shape \(3,\) \(one per joint\), got shape \(2,\)$",
        ),
        (np.ones((2, 2)), {"shape": ()}, ValueError, r"^gain: expected a scalar, got shape \(2, 2\)$"),
        ([1.0, np.nan], {}, ValueError, r"^gain: must be finite, got \[1.0, nan\]$"),
        ([1.0, np.inf], {}, ValueError, r"^gain: must be finite, got \[1.0, inf\]$"),
        ([1.0, 0.0], {"sign": "positive"}, ValueError, r"^gain: must be positive and finite, got \[1.0, 0.0\]$"),
        ([-1.0], {"sign": "non-negative"}, ValueError, r"^gain: must be non-negative and finite, got \[-1.0\]$"),
        (
            [np.nan],
            {"sign": "positive", "allow_inf": True},
            ValueError,
            r"^gain: must be positive \(or inf\), got \[nan\]$",
        ),
        ([-np.inf], {"sign": "positive", "allow_inf": True}, ValueError, r"^gain: must be positive \(or inf\)"),
    ],
)
def test_float_array_refusals(value, kwargs, error, message):
    with pytest.raises(error, match=message):
        float_array("gain", value, **kwargs)


def test_values_are_checked_only_when_concrete():
    np.testing.assert_array_equal(
        float_array("x", [np.inf, 1.0], sign="positive", allow_inf=True), [np.inf, 1.0]
    )  # a limit that is off

    @jax.jit
    def traced(x):
        assert is_traced(x)
        return float_array("x", x, shape=(2,), sign="positive")  # a NaN cannot be seen under jit

    assert np.isnan(traced(jnp.array([np.nan, 1.0]))[0])
    with pytest.raises(ValueError, match=r"x: expected shape \(2,\), got shape \(3,\)"):  # shapes still are
        traced(jnp.ones(3))


def test_check_count():
    """Counts (steps, iterations, samples): Python or NumPy integers at or above the minimum,
    returned as Python ints; other types are a TypeError, smaller values a ValueError."""
    assert check_count("n", 3, 1) == 3 and type(check_count("n", np.int64(0), 0)) is int
    for value, error, message in [
        (2.5, TypeError, r"^n: expected an integer, got float 2.5$"),
        (3.0, TypeError, r"^n: expected an integer, got float 3.0$"),  # a count is an integer, not a whole float
        (True, TypeError, r"^n: expected an integer, got bool True$"),
        (np.bool_(True), TypeError, r"^n: expected an integer, got bool np.True_$"),
        ("3", TypeError, r"^n: expected an integer, got str '3'$"),
        (0, ValueError, r"^n: must be an integer >= 1, got 0$"),
        (np.int32(-2), ValueError, r"^n: must be an integer >= 1, got -2$"),
    ]:
        with pytest.raises(error, match=message):
            check_count("n", value, 1)


def test_check_index():
    """Static indices into a model: integers in the inclusive range, returned as Python ints;
    other types are a TypeError, values outside the range a ValueError saying what they mean."""
    assert check_index("link", np.int64(7), 1, 7) == 7 and type(check_index("link", 0, 0, 3)) is int
    for value, error, message in [
        (2.0, TypeError, r"^link: expected a static integer index 1\.\.7, got float 2\.0$"),
        (True, TypeError, r"^link: expected a static integer index 1\.\.7, got bool True$"),
        (jnp.int32(2), TypeError, r"^link: expected a static integer index 1\.\.7, got ArrayImpl"),
        (0, ValueError, r"^link: index 0 out of range; expected 1\.\.7 \(the links\)$"),
        (8, ValueError, r"^link: index 8 out of range; expected 1\.\.7 \(the links\)$"),
    ]:
        with pytest.raises(error, match=message):
            check_index("link", value, 1, 7, "the links")


def test_type_checks_raise_type_errors_and_value_checks_value_errors():
    """The helpers for objects, functions, pairs, names, fractions and host-side numbers: a
    wrong type is a TypeError, a wrong value of the right type a ValueError, each naming the
    argument and saying what was expected."""
    assert check_type("f: model", 3, int, "an int") == 3
    assert check_pair("f: limits", (1, 2), "(lower, upper) pair") == (1, 2)
    assert check_name("f: name", "arm") == "arm"
    assert check_fraction("f: p", np.float32(0.25)) == 0.25 and type(check_fraction("f: p", 0.5)) is float
    assert check_scalar("f: dt", np.array(0.5), sign="positive") == 0.5
    assert check_scalar("f: x", -1, sign=None) == -1.0 and check_scalar("f: x", 0.0, sign="non-negative") == 0.0
    for call, error, message in [
        (lambda: check_type("f: model", "arm", int, "an int"), TypeError, r"^f: model: expected an int, got str$"),
        (lambda: check_callable("f: law", 3.0, "(t, state) -> tau"), TypeError, r"^f: law: expected a function \(t, state\) -> tau, got float$"),
        (lambda: check_pair("f: limits", np.ones(2), "pair"), TypeError, r"^f: limits: expected a pair, got ndarray$"),
        (lambda: check_pair("f: limits", (1, 2, 3), "pair"), ValueError, r"^f: limits: expected a pair, got 3 items$"),
        (lambda: check_name("f: name", 3), TypeError, r"^f: name: expected a string, got int 3$"),
        (lambda: check_name("f: name", ""), ValueError, r"^f: name: must be a non-empty string without '/', got ''$"),
        (lambda: check_name("f: name", "a/b"), ValueError, r"without '/', got 'a/b'$"),
        (lambda: check_fraction("f: p", True), TypeError, r"^f: p: expected a number strictly between 0 and 1, got bool True$"),
        (lambda: check_fraction("f: p", "0.5"), TypeError, r"^f: p: expected a number strictly between 0 and 1, got str"),
        (lambda: check_fraction("f: p", 1.0), ValueError, r"^f: p: must lie strictly between 0 and 1, got 1.0$"),
        (lambda: check_scalar("f: dt", "1"), TypeError, r"^f: dt: expected a number, got str '1'$"),
        (lambda: check_scalar("f: dt", [1.0]), TypeError, r"^f: dt: expected a number, got list"),
        (lambda: check_scalar("f: dt", False), TypeError, r"^f: dt: expected a number, got bool"),
        (lambda: check_scalar("f: dt", float("inf")), ValueError, r"^f: dt: must be finite, got inf$"),
        (lambda: check_scalar("f: dt", float("nan"), finite=False), ValueError, r"^f: dt: must be finite, got nan$"),
        (lambda: check_scalar("f: dt", 0.0, sign="positive"), ValueError, r"^f: dt: must be positive, got 0.0$"),
        (lambda: check_scalar("f: dt", -1, sign="non-negative"), ValueError, r"^f: dt: must be non-negative, got -1$"),
    ]:  # fmt: skip
        with pytest.raises(error, match=message):
            call()
    assert check_scalar("f: limit", float("inf"), finite=False) == float("inf")  # (a limit that is off)
    with pytest.raises(TypeError, match=r"^f: dt: expected a concrete number \(it is used outside jit\)"):
        jax.jit(lambda x: check_scalar("f: dt", x))(1.0)


def test_renamed_keyword_warns_and_refuses_both_spellings():
    """A keyword's earlier name still works, with a DeprecationWarning naming both; giving both
    is an error; not giving the old one leaves the new one's value."""
    assert renamed_keyword("f", "iterations", None, "max_iterations", 7, 5) == 7
    with pytest.warns(DeprecationWarning, match=r"^f: iterations= is now spelled max_iterations=$"):
        assert renamed_keyword("f", "iterations", 3, "max_iterations", 5, 5) == 3
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match=r"^f: give max_iterations= or the deprecated iterations=, not both$"),
    ):
        renamed_keyword("f", "iterations", 3, "max_iterations", 4, 5)


def test_check_choice_and_vector():
    assert check_choice("mode", "fixed", ("floating", "fixed")) == "fixed"
    with pytest.raises(
        ValueError, match=r"^Model.base: unknown base mode 'hover'; choose one of \['floating', 'fixed'\]$"
    ):
        check_choice("Model.base", "hover", ("floating", "fixed"), "base mode")
    with pytest.raises(ValueError, match=r"choose one of \['a', 'b'\]"):  # sets are listed sorted
        check_choice("x", "c", {"b", "a"})
    with pytest.raises(TypeError, match=r"^x: expected one of \['a'\], got a list$"):
        check_choice("x", ["a"], {"a"})
    np.testing.assert_array_equal(check_vector("tau", None, (2,), jnp.float64), [0.0, 0.0])
    with pytest.raises(ValueError, match=r"tau: expected shape \(2,\), got \(3,\) \(batch inputs with jax.vmap\)"):
        check_vector("tau", np.ones(3), (2,), jnp.float64)
    with pytest.raises(ValueError, match=r"float_array: scalar: unknown value 'always'"):
        float_array("x", 1.0, scalar="always")


def test_rotation_matrix_tolerance_follows_the_precision():
    exact = np.asarray(rpy_to_matrix(jnp.array([0.3, -1.2, 2.0])))
    # float64: a rotation off by 1e-8 is refused, one off by 1e-10 accepted
    with pytest.raises(ValueError, match=r"^R: expected a proper rotation matrix, got .*: R\^T R differs"):
        rotation_matrix("R", exact * (1 + 1e-8))
    np.testing.assert_array_equal(rotation_matrix("R", exact * (1 + 1e-10)), exact * (1 + 1e-10))
    # The same rotation rounded to float32 is ~6e-8 off, beyond the float64 bound: accepted for a
    # float32 result and for a float32 input (the coarser precision decides), as a float32
    # model's rotation (append_model, srms_system(dtype=float32)) must be.
    rounded = exact.astype(np.float32)
    assert np.max(np.abs(rounded.astype(np.float64).T @ rounded - np.eye(3))) > ROTATION_TOL
    assert rotation_matrix("R", exact, jnp.float32).dtype == jnp.float32
    assert rotation_matrix("R", rounded, jnp.float64).dtype == jnp.float64
    # ... but float32 does not make anything a rotation
    with pytest.raises(ValueError, match="differs from the identity"):
        rotation_matrix("R", exact * (1 + 1e-4), jnp.float32)
    with pytest.raises(ValueError, match=r"det R = -1 \(a reflection\)"):
        rotation_matrix("R", np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(ValueError, match=r"R: expected shape \(3, 3\), got shape \(3,\)"):
        rotation_matrix("R", np.ones(3))
    # traced: shape checked, value not (nothing concrete to check)
    assert jax.jit(lambda r: rotation_matrix("R", 2.0 * r))(exact).shape == (3, 3)


def _index_doors():
    """``(door, call)`` for every public function that takes a static index into a model: each
    ``call(index)`` passes ``index`` where the function expects one of the 7-joint arm's
    links (1..7)."""
    from sdjax import spacedyn
    from sdjax.models import free_flying_arm_7dof

    arm = free_flying_arm_7dof()
    state = sdjax.make_state(arm)
    return [
        ("point_jacobian: link", lambda k: sdjax.point_jacobian(arm, state, k)),
        ("merge_payload: body", lambda k: sdjax.merge_payload(arm, k, 1.0)),
        ("Unknowns: links[0]", lambda k: sdjax.Unknowns(links=(k,)).check(arm)),
        ("wheel_joints[0]", lambda k: sdjax.reaction_wheel_axes(arm, (k,))),
        ("j_num: end point number", lambda k: spacedyn.j_num(arm, k)),
        ("Model.path_to_link: link", lambda k: arm.path_to_link(k)),
        (
            "append_links: end_point_link[0]",
            lambda k: sdjax.append_links(
                arm,
                [7],
                "R",
                link_mass=[1.0],
                link_inertia=np.eye(3)[None],
                parent_centroid_to_joint=np.zeros((1, 3)),
                centroid_to_joint=np.zeros((1, 3)),
                end_point_link=[k],
                centroid_to_end_point=np.zeros((1, 3)),
            ),
        ),  # fmt: skip
    ]


@pytest.mark.parametrize("door", range(7))
def test_every_door_with_a_static_index_refuses_a_float_and_an_index_out_of_range(door):
    name, call = _index_doors()[door]
    # The message's name without the function (some doors are methods or inner checks).
    label = name.split(": ")[-1]
    with pytest.raises(TypeError, match=rf"{re.escape(label)}: expected a static integer index \d+\.\.\d+, got float"):
        call(1.5)
    with pytest.raises(ValueError, match=rf"{re.escape(label)}: index 99 out of range; expected \d+\.\.\d+"):
        call(99)


def test_make_state_refuses_an_attitude_matrix_that_is_no_rotation_and_an_integer_dtype(sample_model):
    """A scaled, reflected or singular matrix has no quaternion: refused, not turned into a
    non-unit quaternion or the identity; an integer dtype would truncate every value."""
    for name in ("base_rotation", "base_direction_cosines"):
        for matrix, defect in [
            (2 * np.eye(3), r"R\^T R differs from the identity"),
            (-np.eye(3), r"det R = -1 \(a reflection\)"),
            (np.ones((3, 3)), r"R\^T R differs from the identity"),
        ]:
            with pytest.raises(
                ValueError, match=rf"^make_state: {name}: expected a proper rotation matrix, .*{defect}"
            ):
                sdjax.make_state(sample_model, **{name: matrix})
    # A rotation is still taken, either way, and its quaternion is the rotation's.
    rotation = np.asarray(rpy_to_matrix(jnp.asarray([0.3, -0.2, 1.1])))
    for state in (
        sdjax.make_state(sample_model, base_rotation=rotation),
        sdjax.make_state(sample_model, base_direction_cosines=rotation.T),
    ):
        np.testing.assert_allclose(state.base_rotation, rotation, atol=1e-14)
        np.testing.assert_allclose(np.linalg.norm(state.base_quaternion), 1.0, rtol=1e-15)
    # Traced matrices (a Jacobian with respect to the attitude) are not checked.
    jac = jax.jacobian(lambda r: sdjax.make_state(sample_model, base_rotation=r).base_quaternion)(jnp.eye(3))
    assert jac.shape == (4, 3, 3)
    for dtype in (jnp.int32, np.int64, bool):
        with pytest.raises(
            ValueError, match=r"^make_state: dtype: expected a floating dtype \(e.g. jnp.float32\), got"
        ):
            sdjax.make_state(sample_model, dtype=dtype)
    with pytest.raises(TypeError, match=r"^make_state: dtype: expected a floating dtype"):
        sdjax.make_state(sample_model, dtype="metres")
    assert sdjax.make_state(sample_model, dtype=jnp.float32, q=np.ones(6)).q.dtype == jnp.float32


def test_dynamics_entries_refuse_what_is_no_model_or_state(sample_model):
    state = sdjax.make_state(sample_model)
    calls = {
        "forward_dynamics": sdjax.forward_dynamics,
        "inverse_dynamics": sdjax.inverse_dynamics,
        "inertia_matrix": sdjax.inertia_matrix,
        "bias_forces": sdjax.bias_forces,
        "floating_inverse_dynamics": sdjax.floating_inverse_dynamics,
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{name}: model: expected a sdjax.Model, got str(\n|$)"):
            call("x", state)
        with pytest.raises(TypeError, match=rf"^{name}: state: expected a sdjax.State, got NoneType(\n|$)"):
            call(sample_model, None)
    with pytest.raises(TypeError, match=r"^make_state: model: expected a sdjax.Model, got str$"):
        sdjax.make_state("m")
    with pytest.raises(TypeError, match=r"^rk4_step: state: expected a sdjax.State, got tuple(\n|$)"):
        sdjax.rk4_step(sample_model, (state,), 0.01)


def test_controls_built_directly_are_checked_by_every_function_taking_them(sample_model):
    """A Controls of the wrong shapes (tau (1,) broadcast silently; another model's loads
    failed in a raw concatenate) or no Controls at all is refused, naming the function."""
    state = sdjax.make_state(sample_model, q=np.full(6, 0.2), qd=np.full(6, 0.1))
    ne = sample_model.num_end_points
    wrong_tau = sdjax.Controls(
        tau=jnp.ones(1),
        base_force=jnp.zeros(3),
        base_torque=jnp.zeros(3),
        end_point_force=jnp.zeros((ne, 3)),
        end_point_torque=jnp.zeros((ne, 3)),
    )
    other = sdjax.make_controls(sdjax.models.free_flying_arm_7dof(), tau=np.ones(7))
    calls = {
        "generalized_acceleration": lambda c: sdjax.generalized_acceleration(sample_model, state, c),
        "state_derivative": lambda c: sdjax.state_derivative(sample_model, state, c),
        "generalized_loads": lambda c: sdjax.generalized_loads(sample_model, state, c),
        "rk4_step": lambda c: sdjax.rk4_step(sample_model, state, 0.01, c),
        "euler_step": lambda c: sdjax.euler_step(sample_model, state, 0.01, c),
        "implicit_euler_step": lambda c: sdjax.implicit_euler_step(sample_model, state, 0.01, c),
        "newmark_step": lambda c: sdjax.newmark_step(sample_model, state, 0.01, c),
        "simpson_step": lambda c: sdjax.simpson_step(sample_model, state, 0.01, c),
    }
    for name, call in calls.items():
        for controls in (wrong_tau, other):
            with pytest.raises(ValueError, match=rf"^{name}: controls.tau: expected shape \(6,\), got \((1|7),\)"):
                call(controls)
        with pytest.raises(
            TypeError,
            match=rf"^{name}: controls: expected a sdjax.Controls \(sdjax.make_controls\), got an array(\n|$)",
        ):
            call(np.ones(6))
    with pytest.raises(TypeError, match=r"^generalized_acceleration: controls: expected a sdjax.Controls .*NoneType"):
        sdjax.generalized_acceleration(sample_model, state, None)
    # Right shapes (and another precision) go through: the same accelerations as forward_dynamics.
    good = sdjax.make_controls(sample_model, tau=np.full(6, 0.5), dtype=jnp.float32)
    base, qdd = sdjax.forward_dynamics(sample_model, state, np.full(6, 0.5))
    np.testing.assert_allclose(
        sdjax.generalized_acceleration(sample_model, state, good), np.concatenate([base, qdd]), rtol=1e-12
    )
    # Batched controls under vmap are checked per sample and still run.
    batch = jax.vmap(lambda t: sdjax.make_controls(sample_model, tau=t))(jnp.ones((3, 6)))
    assert jax.vmap(lambda c: sdjax.generalized_acceleration(sample_model, state, c))(batch).shape == (3, 12)


def test_point_loads_refuses_a_body_that_is_no_integer_or_out_of_range(sample_model):
    """1.7 was truncated to body 1, "1" and True taken as 1."""
    state = sdjax.make_state(sample_model, q=np.full(6, 0.2))
    points, forces = np.zeros((1, 3)), np.ones((1, 3))
    for body, shown in [
        (1.7, "float 1.7"),
        ("1", "str '1'"),
        (True, "bool True"),
        (np.float64(2.0), r"float64 np.float64\(2.0\)"),
    ]:
        with pytest.raises(
            TypeError, match=rf"^point_loads: bodies\[0\]: expected a static integer index 0..6, got {shown}(\n|$)"
        ):
            sdjax.point_loads(sample_model, state, [body], points, forces)
    for body in (-1, 7):
        with pytest.raises(
            ValueError, match=rf"^point_loads: bodies\[0\]: index {body} out of range; expected 0..6 \(0 = base"
        ):
            sdjax.point_loads(sample_model, state, [body], points, forces)
    with pytest.raises(
        TypeError, match=r"^point_loads: bodies: expected static integer indices 0..6, got a traced value"
    ):
        jax.jit(lambda b: sdjax.point_loads(sample_model, state, b, points, forces).tau)(jnp.asarray([1]))
    # Integers of any kind (and an integer array) are taken.
    expected = sdjax.point_loads(sample_model, state, [1], points, forces).tau
    for bodies in ((1,), np.asarray([1]), jnp.asarray([1]), [np.int32(1)]):
        np.testing.assert_array_equal(sdjax.point_loads(sample_model, state, bodies, points, forces).tau, expected)


def test_inputs_of_the_dynamics_refuse_complex_numbers_and_text(sample_model):
    """Loads and torques (check_vector): an imaginary part was dropped with only JAX's warning,
    and text reached ``jnp.asarray`` (which reads some strings as dtype names); booleans (the
    constraint masks) and integers are numbers."""
    state = sdjax.make_state(sample_model)
    with pytest.raises(TypeError, match=r"forward_dynamics: tau: expected real numbers, got dtype complex128"):
        sdjax.forward_dynamics(sample_model, state, np.ones(6) * (1 + 5j))
    with pytest.raises(TypeError, match=r"forward_dynamics: tau: expected numbers, got str 'd'"):
        sdjax.forward_dynamics(sample_model, state, "d")
    assert check_vector("mask", np.ones(2, bool), (2,), jnp.bool_).dtype == jnp.bool_
    np.testing.assert_array_equal(check_vector("x", [1, 2], (2,), jnp.float64), [1.0, 2.0])
    with pytest.raises(TypeError, match=r"x: expected numbers, got str"):
        float_array("x", "d")
    with pytest.raises(ValueError, match=r"Model\.astype: dtype: expected a floating dtype .*, got int32"):
        sample_model.astype(jnp.int32)
    with pytest.raises(TypeError, match=r"Model\.astype: dtype: expected a floating dtype .*, got 'fast'"):
        sample_model.astype("fast")
