"""Shared test helpers: random states and models, closeness checks, and the release of compiled programs."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import sdjax
from sdjax.models import random_model
from sdjax.rotation import rpy_to_matrix


#: Memory mappings of a test process past which its compiled programs are dropped.
MAX_MAPPINGS = 30_000


def release_compiled_code() -> None:
    """Drop JAX's compilation caches once this process holds more than :data:`MAX_MAPPINGS`
    memory mappings.

    Every compiled XLA executable keeps memory mappings alive; a long session that compiles
    thousands of programs (this suite) would otherwise reach the kernel's per-process map limit
    (vm.max_map_count, 65530 by default) and crash. Where the count cannot be read (no
    ``/proc``: not Linux), the caches are dropped every time.
    """
    try:
        with open("/proc/self/maps") as maps:
            count = sum(1 for _ in maps)
    except OSError:
        count = MAX_MAPPINGS + 1
    if count > MAX_MAPPINGS:
        jax.clear_caches()


def random_state(model: sdjax.Model, seed: int, scale: float = 1.0) -> sdjax.State:
    """A random state: random base pose and twist (its components the base mode fixes zero),
    joint positions and rates."""
    rng = np.random.default_rng(seed)
    n = model.num_joints
    twist = scale * rng.normal(size=6)
    free = np.zeros(6)
    free[list(model.base_coordinates)] = 1.0
    return sdjax.make_state(
        model,
        base_position=rng.normal(size=3),
        base_rotation=np.asarray(rpy_to_matrix(rng.uniform(-np.pi, np.pi, size=3))),
        base_linear_velocity=twist[:3] * free[:3],
        base_angular_velocity=twist[3:] * free[3:],
        q=rng.uniform(-np.pi, np.pi, size=n),
        qd=scale * rng.normal(size=n),
    )


def with_frames(model: sdjax.Model, seed: int = 0) -> sdjax.Model:
    """The model with four more end points (named frames), listed out of body order: two on
    the body of its first end point (link 1 if none), one on the base and one on the last
    link; random offsets and orientations. Exercises several frames per body and base frames
    in every algorithm that takes end points."""
    rng = np.random.default_rng(seed)
    first = model.end_point_link[0] if model.num_end_points else 1
    extra = (first, 0, model.num_joints, first)
    k = len(extra)
    return with_end_points(
        model,
        model.end_point_link + extra,
        np.concatenate([np.asarray(model.centroid_to_end_point), rng.normal(scale=0.4, size=(k, 3))]),
        np.concatenate([np.asarray(model.end_point_rpy), rng.uniform(-np.pi, np.pi, size=(k, 3))]),
        model.end_point_names + tuple(f"frame{j}" for j in range(k)),
        name=model.name + "_frames",
    )


def spacedyn_end_points_only(model: sdjax.Model) -> sdjax.Model:
    """The model with only the first end point of each link, in link order (none on the base):
    the end points SpaceDyn's layouts can hold."""
    first: dict[int, int] = {}
    for e, link in enumerate(model.end_point_link):
        if link > 0:
            first.setdefault(link, e)
    keep = [first[link] for link in sorted(first)]
    return with_end_points(
        model,
        tuple(model.end_point_link[e] for e in keep),
        np.asarray(model.centroid_to_end_point)[keep].reshape(-1, 3),
        np.asarray(model.end_point_rpy)[keep].reshape(-1, 3),
        tuple(model.end_point_names[e] for e in keep),
    )


def with_end_points(
    model: sdjax.Model, links, centroid_to_end_point, end_point_rpy, names, *, name: str | None = None
) -> sdjax.Model:
    """The model with these end points instead of its own (every other field unchanged)."""
    return sdjax.Model(
        parent=model.parent,
        joint_type=model.joint_type,
        base_mass=model.base_mass,
        base_inertia=model.base_inertia,
        link_mass=model.link_mass,
        link_inertia=model.link_inertia,
        parent_centroid_to_joint=model.parent_centroid_to_joint,
        centroid_to_joint=model.centroid_to_joint,
        joint_rpy=model.joint_rpy,
        end_point_link=tuple(links),
        centroid_to_end_point=centroid_to_end_point,
        end_point_rpy=end_point_rpy,
        end_point_names=tuple(names),
        joint_stiffness=model.joint_stiffness,
        joint_damping=model.joint_damping,
        gravity=model.gravity,
        link_names=model.link_names,
        name=model.name if name is None else name,
        dtype=model.dtype,
    )


def tree_with_topology(
    seed: int, parent: tuple[int, ...], joint_type: tuple[str, ...], *, gravity: bool = True, name: str, **end_points
) -> sdjax.Model:
    """A random model (link data from :func:`random_model`) re-arranged on the topology
    ``parent``/``joint_type``; ``end_points`` are Model's end-point fields (none by default)."""
    base = random_model(seed, len(parent), gravity=gravity)
    return sdjax.Model(
        parent=parent,
        joint_type=joint_type,
        base_mass=base.base_mass,
        base_inertia=base.base_inertia,
        link_mass=base.link_mass,
        link_inertia=base.link_inertia,
        parent_centroid_to_joint=base.parent_centroid_to_joint,
        centroid_to_joint=base.centroid_to_joint,
        joint_rpy=base.joint_rpy,
        gravity=base.gravity,
        name=name,
        **end_points,
    )


def three_arm_tree(seed: int = 0, gravity: bool = True) -> sdjax.Model:
    """A 14-DOF system with three arms on one base (SPACEMAPLE Table 1 style): arms of
    5, 5 and 4 joints, one prismatic joint in the second arm, an end point on each arm."""
    parent = (0, 1, 2, 3, 4, 0, 6, 7, 8, 9, 0, 11, 12, 13)
    joint_type = tuple("P" if i == 8 else "R" for i in range(1, 15))
    rng = np.random.default_rng(seed + 1000)
    return tree_with_topology(
        seed,
        parent,
        joint_type,
        gravity=gravity,
        name=f"three_arm_{seed}",
        end_point_link=(5, 10, 14),
        centroid_to_end_point=rng.normal(scale=0.3, size=(3, 3)),
        end_point_rpy=rng.uniform(-np.pi, np.pi, size=(3, 3)),
    )


def central_difference(f, x, k: int, h: float) -> float:
    """Central difference of the scalar function ``f`` at ``x`` along coordinate ``k`` with step
    ``h``: truncation O(h^2), round-off O(eps |f| / h)."""
    step = np.zeros(np.shape(x))
    step[k] = h
    return (f(x + step) - f(x - step)) / (2 * h)


def assert_close(actual, expected, rtol: float, what: str = "") -> None:
    """``max|actual - expected| <= rtol * max(1, max|expected|)`` (a scale-aware tolerance)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3e} > {rtol:.1e} * scale {scale:.3e}"


#: The array (parameter) fields of a Model, in declaration order: what two equal models share.
MODEL_ARRAY_FIELDS = tuple(f.name for f in dataclasses.fields(sdjax.Model) if not f.metadata.get("static", False))
