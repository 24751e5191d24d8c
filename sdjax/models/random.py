"""Random models: trees with branches, prismatic joints and end points, for tests and benchmarks."""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.model import Model
from sdjax._checks import check_count, check_scalar, check_type

__all__ = ["random_model"]


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """Uniformly distributed rotation matrix (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else q * np.array([-1.0, 1.0, 1.0])


def random_inertia(rng: np.random.Generator, mass: float, size: float) -> np.ndarray:
    """A physically valid inertia tensor: the principal moments come from positive second
    moments ``(sx, sy, sz)`` of a mass distribution (so the triangle inequality holds), in a
    random orientation."""
    second = mass * size**2 * rng.uniform(0.05, 1.0, size=3)
    moments = np.array([second[1] + second[2], second[0] + second[2], second[0] + second[1]])
    rot = random_rotation(rng)
    return rot @ np.diag(moments) @ rot.T


def random_model(
    seed: int,
    num_links: int,
    *,
    chain_probability: float = 0.7,
    prismatic_probability: float = 0.25,
    end_point_probability: float = 0.5,
    gravity: bool = False,
    passive: bool = False,
    dtype: Any = None,
) -> Model:
    """A random moving-base tree.

    Arguments:
        seed: seed of NumPy's generator (same seed, same model).
        num_links: number of links ``n`` (0 gives a base alone).
        chain_probability: chance that link ``i`` hangs on link ``i - 1`` (else on a uniformly
            chosen lower body, which makes branches).
        prismatic_probability: chance that a joint is prismatic.
        end_point_probability: chance that a link carries an end point (leaves always do).
        gravity: add a random gravity vector (else zero).
        passive: add random joint stiffness and damping (else zero).
        dtype: floating dtype of the arrays.

    Raises:
        TypeError: ``seed`` or ``num_links`` not an integer, a probability not a number,
            ``gravity`` or ``passive`` not a bool.
        ValueError: ``seed`` or ``num_links`` negative, a probability outside ``[0, 1]``.
    """
    seed = check_count("random_model: seed", seed, 0)
    n = check_count("random_model: num_links", num_links, 0)
    for name, value in (
        ("chain_probability", chain_probability),
        ("prismatic_probability", prismatic_probability),
        ("end_point_probability", end_point_probability),
    ):
        if not 0.0 <= check_scalar(f"random_model: {name}", value) <= 1.0:
            raise ValueError(f"random_model: {name}: must be a probability in [0, 1], got {value!r}")
    check_type("random_model: gravity", gravity, (bool, np.bool_), "a bool")
    check_type("random_model: passive", passive, (bool, np.bool_), "a bool")
    rng = np.random.default_rng(seed)
    parent = []
    for i in range(1, n + 1):
        parent.append(i - 1 if (i == 1 or rng.uniform() < chain_probability) else int(rng.integers(0, i)))
    has_child = set(parent)
    joint_type = tuple("P" if rng.uniform() < prismatic_probability else "R" for _ in range(n))
    end_links = tuple(i for i in range(1, n + 1) if i not in has_child or rng.uniform() < end_point_probability)
    masses = rng.uniform(1.0, 10.0, size=n)
    base_mass = rng.uniform(50.0, 200.0)
    return Model(
        parent=tuple(parent),
        joint_type=joint_type,
        base_mass=base_mass,
        base_inertia=random_inertia(rng, base_mass, 1.0),
        link_mass=masses,
        link_inertia=np.array([random_inertia(rng, m, 0.4) for m in masses]).reshape(n, 3, 3),
        parent_centroid_to_joint=rng.normal(scale=0.5, size=(n, 3)),
        centroid_to_joint=rng.normal(scale=0.3, size=(n, 3)),
        joint_rpy=rng.uniform(-np.pi, np.pi, size=(n, 3)),
        end_point_link=end_links,
        centroid_to_end_point=rng.normal(scale=0.3, size=(len(end_links), 3)),
        end_point_rpy=rng.uniform(-np.pi, np.pi, size=(len(end_links), 3)),
        joint_stiffness=rng.uniform(0.0, 20.0, size=n) if passive else None,
        joint_damping=rng.uniform(0.0, 5.0, size=n) if passive else None,
        gravity=rng.normal(scale=5.0, size=3) if gravity else None,
        name=f"random_{n}_seed{seed}",
        dtype=dtype,
    )
