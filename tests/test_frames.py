"""End points as named frames: any number per body, the base included, in any order.

Kinematics, Jacobians, loads and the generalized Jacobian of such frames are checked against
Pinocchio frames (test_pinocchio.py), MuJoCo sites (test_mujoco.py), autodiff identities
(test_identities.py) and the generalized-Jacobian identities (test_gjm.py) on models built by
``helpers.with_frames``. This file checks what is specific to frames: that one frame's result
does not depend on which other frames the model carries, the file formats, and the SpaceDyn
layouts that cannot hold them.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import spacedyn
from sdjax.io.spacedyn_def import model_to_def
from helpers import assert_close, random_state, spacedyn_end_points_only, with_end_points, with_frames
from sdjax.models import random_model, spacedyn_sample


def _inverse(*args, **kwargs) -> np.ndarray:
    """Inverse dynamics as one ``(6 + n,)`` generalized force ``[F0, N0, tau]``."""
    return np.concatenate([np.asarray(x) for x in sdjax.inverse_dynamics(*args, **kwargs)])


@pytest.fixture(scope="module")
def framed():
    return with_frames(random_model(3, 5, gravity=True), seed=4)


def test_each_frame_alone_gives_the_same_results(framed):
    """Every per-frame result of a model with many frames equals that of the model carrying
    only this frame (what a frame computes depends on its own body and offset only), and the
    loads applied at several frames of one body add up as one wrench on that body."""
    state = random_state(framed, 1)
    rng = np.random.default_rng(2)
    ne = framed.num_end_points
    force, torque = rng.normal(size=(ne, 3)), rng.normal(size=(ne, 3))
    kin = sdjax.forward_kinematics(framed, state)
    jac = sdjax.end_point_jacobians(framed, state)
    jac_dot = sdjax.end_point_jacobian_derivatives(framed, state)
    gjac = sdjax.end_point_generalized_jacobians(framed, state)
    tau_all = _inverse(
        framed, state, jnp.zeros(6), jnp.zeros(framed.num_joints), end_point_force=force, end_point_torque=torque
    )
    tau_sum = 0.0
    for e in range(ne):
        alone = with_end_points(
            framed,
            framed.end_point_link[e : e + 1],
            framed.centroid_to_end_point[e : e + 1],
            framed.end_point_rpy[e : e + 1],
            ("f",),
        )
        k = sdjax.forward_kinematics(alone, state)
        # Same operations on the same numbers: equal to round-off of a re-fused program.
        assert_close(kin.end_point_position[e], k.end_point_position[0], 1e-13, f"position of frame {e}")
        assert_close(kin.end_point_rotation[e], k.end_point_rotation[0], 1e-13, f"rotation of frame {e}")
        assert_close(jac[e], sdjax.end_point_jacobians(alone, state)[0], 1e-13, f"Jacobian of frame {e}")
        assert_close(
            jac_dot[e], sdjax.end_point_jacobian_derivatives(alone, state)[0], 1e-13, f"Jacobian rate of frame {e}"
        )
        # Through a solve with H_b (condition ~1e2 here): 10x the round-off headroom.
        assert_close(
            gjac[e], sdjax.end_point_generalized_jacobians(alone, state)[0], 1e-12, f"generalized Jacobian of frame {e}"
        )
        zero = jnp.zeros(framed.num_joints)
        tau_e = _inverse(
            alone, state, jnp.zeros(6), zero, end_point_force=force[e : e + 1], end_point_torque=torque[e : e + 1]
        )
        free = _inverse(alone, state, jnp.zeros(6), zero)
        tau_sum = tau_sum + (tau_e - free)
    # Linear in the loads: the motion-only part plus the sum of each frame's contribution
    # (sums of ~10 O(1-10) terms per entry, each from its own program: ~1e-14, 1e-12 with headroom).
    free = _inverse(framed, state, jnp.zeros(6), jnp.zeros(framed.num_joints))
    assert_close(tau_all, free + tau_sum, 1e-12, "loads at several frames superpose")
    # Virtual work: the generalized force of frame loads is J^T [f; n] (eq 3.16's Jacobian).
    wrench = np.concatenate([force, torque], axis=1)
    assert_close(tau_all - free, -np.einsum("eij,ei->j", np.asarray(jac), wrench), 1e-12, "J^T F")


def test_names_lookup_and_validation(framed):
    assert framed.end_point_names[-4:] == ("frame0", "frame1", "frame2", "frame3")
    assert framed.end_point_index("frame1") == framed.num_end_points - 3
    assert framed.end_point_link[framed.end_point_index("frame1")] == 0  # on the base
    assert framed.path_to_link(0) == () and framed.end_point_paths[framed.end_point_index("frame1")] == ()
    with pytest.raises(KeyError, match=r"has no end point 'tool'; its end points are \['end_point1'"):
        framed.end_point_index("tool")
    assert spacedyn_sample().end_point_names == ("end_point1", "end_point2")  # defaults
    assert not framed.spacedyn_end_points and spacedyn_sample().spacedyn_end_points


def test_json_round_trip_and_version_1(tmp_path, framed):
    path = tmp_path / "framed.json"
    sdjax.save_json_model(framed, path)
    back = sdjax.load_json_model(path)
    assert (back.end_point_link, back.end_point_names) == (framed.end_point_link, framed.end_point_names)
    np.testing.assert_array_equal(back.centroid_to_end_point, framed.centroid_to_end_point)  # shortest round-trip repr
    np.testing.assert_array_equal(back.end_point_rpy, framed.end_point_rpy)
    # A version-1 file (one "end_point" per link) still reads, with default names.
    sample = spacedyn_sample()
    data = sdjax.model_to_dict(sample)
    for end in data.pop("end_points"):
        data["links"][end["body"] - 1]["end_point"] = {
            "centroid_to_end_point": end["centroid_to_end_point"],
            "rpy": end["rpy"],
        }
    data["version"] = 1
    for link in data["links"]:
        link.setdefault("end_point", None)
    path.write_text(json.dumps(data))
    old = sdjax.load_json_model(path)
    assert old.end_point_link == sample.end_point_link and old.end_point_names == ("end_point1", "end_point2")
    np.testing.assert_array_equal(old.centroid_to_end_point, sample.centroid_to_end_point)
    data["end_points"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="model.end_points: version 1 files give end points per link"):
        sdjax.load_json_model(path)


def test_spacedyn_layouts_refuse_frames_they_cannot_hold(framed, tmp_path):
    message = r"SpaceDyn's layout holds at most one end point per link, none on the base, in link order; model 'random_5_seed3_frames'"
    with pytest.raises(ValueError, match="model_to_spacedyn_arrays: " + message):
        sdjax.model_to_spacedyn_arrays(framed)
    with pytest.raises(ValueError, match="model_to_def: " + message):
        model_to_def(framed)
    with pytest.raises(ValueError, match="SE: " + message):
        framed.end_link_flags
    sv = spacedyn.init_SV(framed)
    with pytest.raises(ValueError, match=r"joints \(an end point named by its link\): " + message):
        spacedyn.f_kin_e(framed, sv, [1])
    with pytest.raises(ValueError, match=r"SV.Fe/SV.Te: " + message):
        spacedyn.f_dyn(framed, sv)
    # Functions that number end points (SpaceDyn's num_e) take any frame.
    e = framed.end_point_index("frame1")
    np.testing.assert_array_equal(spacedyn.j_num(framed, e + 1), [])
    # The SpaceDyn-shaped part of the same model converts.
    plain = spacedyn_end_points_only(framed)
    assert plain.spacedyn_end_points and sdjax.model_to_spacedyn_arrays(plain)["SE"].sum() == plain.num_end_points


def test_cli_info_lists_every_frame(capsys, tmp_path, framed):
    from sdjax.cli import main

    path = tmp_path / "framed.json"
    sdjax.save_json_model(framed, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    base_line = next(line for line in out.splitlines() if line.startswith("  base  ("))
    assert base_line.endswith("[end point: frame1]")  # the frame on the base
    on_first = framed.end_point_link[0]
    names = [framed.end_point_names[e] for e, link in enumerate(framed.end_point_link) if link == on_first]
    assert f"[end points: {', '.join(names)}]" in out
    assert "frame1: on the base, joints from the base: none" in out
