"""Argument checks of the Jacobian, task-point, planning-basis and random-model functions:
static indices given as NumPy integers, messages naming the function called, task points given
twice, B-spline basis sizes, random-model settings."""

from __future__ import annotations

import numpy as np
import pytest

import sdjax
from helpers import assert_close
from sdjax.models import random_model, spacedyn_sample


@pytest.fixture(scope="module")
def sample():
    model = spacedyn_sample()
    return model, sdjax.make_state(model, q=np.full(6, 0.2), qd=np.full(6, 0.1))


LINK_FUNCTIONS = [
    sdjax.point_jacobian,
    sdjax.point_jacobian_derivative,
    sdjax.generalized_jacobian,
    sdjax.generalized_velocity_offset,
]


@pytest.mark.parametrize("function", LINK_FUNCTIONS, ids=lambda f: f.__name__)
def test_link_index_may_be_a_numpy_integer(sample, function):
    model, state = sample
    for index in (np.int64(2), np.int32(0)):
        assert_close(function(model, state, index), function(model, state, int(index)), 0.0)


@pytest.mark.parametrize("function", LINK_FUNCTIONS, ids=lambda f: f.__name__)
def test_link_index_messages_name_the_function_called(sample, function):
    model, state = sample
    name = function.__name__
    with pytest.raises(ValueError, match=rf"^{name}: link: index 7 out of range; expected 0\.\.6"):
        function(model, state, 7)
    with pytest.raises(TypeError, match=rf"^{name}: link: expected a static integer index 0\.\.6, got float 2\.0"):
        function(model, state, 2.0)
    with pytest.raises(ValueError, match=rf"^{name}: point: expected shape \(3,\)"):
        function(model, state, 2, np.ones(2))


def test_task_point_indices_may_be_numpy_integers(sample):
    model, state = sample
    for kwargs, plain in (
        (dict(link=np.int64(3)), dict(link=3)),
        (dict(end_point=np.int64(1)), dict(end_point=1)),
        (dict(link=np.int32(2), point=np.ones(3)), dict(link=2, point=np.ones(3))),
    ):
        for given, expected in zip(sdjax.task_pose(model, state, **kwargs), sdjax.task_pose(model, state, **plain)):
            assert_close(given, expected, 0.0)
        for given, expected in zip(
            sdjax.task_jacobian(model, state, **kwargs), sdjax.task_jacobian(model, state, **plain)
        ):
            assert_close(given, expected, 0.0)
    target, _ = sdjax.task_pose(model, state, link=3)
    given = sdjax.inverse_kinematics(model, state, target, link=np.int64(3), max_iterations=3)
    expected = sdjax.inverse_kinematics(model, state, target, link=3, max_iterations=3)
    assert_close(given.q, expected.q, 0.0)


def test_task_point_defaults_to_end_point_zero(sample):
    model, state = sample
    for given, expected in zip(sdjax.task_pose(model, state), sdjax.task_pose(model, state, end_point=0)):
        assert_close(given, expected, 0.0)


@pytest.mark.parametrize("end_point", [0, 1, np.int64(1)])
def test_task_point_given_twice_is_refused(sample, end_point):
    model, state = sample
    target, _ = sdjax.task_pose(model, state)
    with pytest.raises(ValueError, match=r"^task_pose: give end_point or link, not both"):
        sdjax.task_pose(model, state, end_point=end_point, link=3)
    with pytest.raises(ValueError, match=r"^task_jacobian: give end_point or link, not both"):
        sdjax.task_jacobian(model, state, end_point=end_point, link=3)
    with pytest.raises(ValueError, match=r"^inverse_kinematics: give end_point or link, not both"):
        sdjax.inverse_kinematics(model, state, target, end_point=end_point, link=3)
    with pytest.raises(ValueError, match=r"^resolved_motion_rates: give end_point or link, not both"):
        sdjax.resolved_motion_rates(model, state, np.zeros(6), end_point=end_point, link=3)
    with pytest.raises(ValueError, match=r"^ResolvedRateLaw: give end_point or link, not both"):
        sdjax.ResolvedRateLaw(
            model, lambda t: (np.zeros(3), np.zeros(3)), position_gain=1.0, rate_gain=1.0, end_point=end_point, link=3
        )


def test_task_point_messages_name_the_function_called(sample):
    model, state = sample
    target, _ = sdjax.task_pose(model, state)
    with pytest.raises(ValueError, match=r"^inverse_kinematics: link: index 9 out of range; expected 1\.\.6"):
        sdjax.inverse_kinematics(model, state, target, link=9)
    with pytest.raises(TypeError, match=r"^inverse_kinematics: end_point: expected a static integer index"):
        sdjax.inverse_kinematics(model, state, target, end_point=1.0)
    with pytest.raises(ValueError, match=r"^task_pose: end_point: unknown end point 2"):
        sdjax.task_pose(model, state, end_point=np.int64(2))
    with pytest.raises(TypeError, match=r"^task_jacobian: link: expected a static integer index 1\.\.6, got str"):
        sdjax.task_jacobian(model, state, link="3")


def test_random_model_settings_are_checked():
    with pytest.raises(TypeError, match=r"^random_model: num_links: expected an integer, got float 2\.5"):
        random_model(0, 2.5)
    with pytest.raises(ValueError, match=r"^random_model: num_links: must be an integer >= 0, got -1"):
        random_model(0, -1)
    with pytest.raises(TypeError, match=r"^random_model: seed: expected an integer, got float"):
        random_model(0.5, 3)
    with pytest.raises(ValueError, match=r"^random_model: seed: must be an integer >= 0, got -3"):
        random_model(-3, 3)
    for name in ("chain_probability", "prismatic_probability", "end_point_probability"):
        for bad in (2, -0.1, 1.5):
            with pytest.raises(ValueError, match=rf"^random_model: {name}: must be a probability in \[0, 1\]"):
                random_model(0, 3, **{name: bad})
        with pytest.raises(ValueError, match=rf"^random_model: {name}: must be finite, got nan"):
            random_model(0, 3, **{name: np.nan})
        with pytest.raises(TypeError, match=rf"^random_model: {name}: expected a number, got str"):
            random_model(0, 3, **{name: "0.5"})
    for flag in ("gravity", "passive"):
        with pytest.raises(TypeError, match=rf"^random_model: {flag}: expected a bool, got str"):
            random_model(0, 3, **{flag: "yes"})
    # The limits of the ranges and NumPy integers are taken.
    assert random_model(np.int64(1), np.int64(4), chain_probability=1.0).parent == (0, 1, 2, 3)
    assert random_model(0, 0).num_joints == 0
    assert random_model(0, 3, prismatic_probability=0.0).joint_type == ("R", "R", "R")
