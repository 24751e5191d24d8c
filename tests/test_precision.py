"""Every matrix product in sdjax's programs asks for full float32 precision.

JAX's default lets an accelerator multiply float32 matrices with rounded operands (TF32's
10-bit mantissas on NVIDIA GPUs, bfloat16 passes on TPUs). On an H200 that made the inertia
matrix of a 7-joint arm 7e-5 off (relative) at batch 131,072 in float32, indefinite for 1 in 16
states, whose accelerations came out NaN (benchmarks/README.md). The CPU ignores the setting, so
no value here can show the difference: the property is checked on the programs themselves, by
walking their jaxprs (sub-programs, derivative rules and batching rules included) for
``dot_general`` equations and asserting each asks for ``sdjax.algebra.PRECISION``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import sdjax
from sdjax import constraints as C
from sdjax import contact as sc
from sdjax import identification as ident
from sdjax import massless_arm as ma
from sdjax.models import free_flying_arm_7dof, random_model
from sdjax.models.srms import GRAPPLE_Q, srms_system


def _sub_jaxprs(value):
    if isinstance(value, jax.extend.core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jax.extend.core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _sub_jaxprs(item)


def _products(jaxpr) -> list[tuple[object, str]]:
    """``(precision, where)`` of every ``dot_general`` in ``jaxpr`` and the programs inside it."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            frames = eqn.source_info.traceback.frames if eqn.source_info.traceback else []
            ours = [f"{f.file_name.rsplit('/', 2)[-1]}:{f.line_num}" for f in frames if "/sdjax/" in f.file_name]
            found.append((eqn.params["precision"], ours[0] if ours else "?"))
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                found.extend(_products(sub))
    return found


def _float32(tree):
    return jax.tree.map(lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def _batch(tree, size=3):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (size, *x.shape)), tree)


def _programs():
    """``(core, features)``: the core's programs (``name -> (function, arguments)``), batched and
    differentiated, in float32 on a 7-joint arm and a branched tree with prismatic joints, and
    the feature layer's (``name -> builder``, :func:`_feature_programs`)."""
    arm = free_flying_arm_7dof().astype(jnp.float32)
    tree = random_model(5, 9, prismatic_probability=0.4).astype(jnp.float32)
    assert "P" in tree.joint_type and len(set(tree.parent)) < tree.num_joints  # prismatic, branched
    programs = {}
    for label, model in (("arm", arm), ("tree", tree)):
        n = model.num_joints
        state = _float32(sdjax.make_state(model, q=0.3 * jnp.ones(n), qd=0.2 * jnp.ones(n)))
        tau = 0.1 * jnp.ones(n, jnp.float32)

        def rollout_loss(tau, model=model, state=state):
            trajectory = sdjax.rollout(model, state, 0.01, 3, lambda t, s: tau)
            return jnp.sum(trajectory.states.q[-1] ** 2)

        programs |= {
            f"{label}: vmap forward_dynamics": (
                jax.vmap(lambda s, t, m=model: sdjax.forward_dynamics(m, s, t)),
                (_batch(state), _batch(tau)),
            ),
            f"{label}: vmap inverse_dynamics": (
                jax.vmap(lambda s, t, m=model: sdjax.inverse_dynamics(m, s, jnp.zeros(6, t.dtype), t)),
                (_batch(state), _batch(tau)),
            ),
            f"{label}: vmap inertia_matrix": (
                jax.vmap(lambda s, m=model: sdjax.inertia_matrix(m, s)),
                (_batch(state),),
            ),
            f"{label}: jacfwd forward_dynamics": (
                jax.jacfwd(lambda t, m=model, s=state: sdjax.forward_dynamics(m, s, t)[1]),
                (tau,),
            ),
            f"{label}: grad of a rollout": (jax.grad(rollout_loss), (tau,)),
            f"{label}: generalized Jacobian": (
                lambda s, m=model: sdjax.generalized_jacobian(m, s, m.num_joints),
                (state,),
            ),
            f"{label}: momentum and energy": (
                lambda s, m=model: (
                    sdjax.linear_momentum(m, s),
                    sdjax.angular_momentum(m, s),
                    sdjax.kinetic_energy(m, s),
                    sdjax.potential_energy(m, s),
                ),
                (state,),
            ),
            f"{label}: computed torque": (
                lambda s, t, m=model: sdjax.control.computed_torque(m, s, t),
                (state, tau),
            ),
        }
    arm_state = _float32(sdjax.make_state(arm, q=0.3 * jnp.ones(7), qd=0.2 * jnp.ones(7)))
    tip_lock = (C.point_constraint(arm.end_point_names[0]),)
    programs["arm: constrained forward dynamics"] = (
        lambda s, t: C.constrained_forward_dynamics(arm, s, t, tip_lock),
        (arm_state, 0.1 * jnp.ones(7, jnp.float32)),
    )
    return programs, _feature_programs(arm, arm_state)


def _feature_programs(arm, state):
    """The feature layer's own programs on the float32 arm, as ``name -> builder`` (a builder
    returns ``(function, arguments)``; their set-up runs rollouts and compiles, so it is done
    by the test that uses it, not when the module is collected on every worker): planning's
    loss gradient, the identification regressor, a rollout in contact, the massless arm's
    two-body rates, the reduced dynamics and manipulability of the generalized Jacobian."""
    tau = 0.1 * jnp.ones(7, jnp.float32)

    def planning():
        problem = sdjax.PlanningProblem(arm, state, jnp.asarray([0.5, 0.3, 0.2]), duration=0.2, num_steps=4)
        coefficients = sdjax.initial_coefficients(problem, state.q + 0.1, 1)[0]
        return jax.grad(lambda c: sdjax.plan_loss(problem, c)), (coefficients,)

    def identification():
        record = sdjax.rollout(arm, state, jnp.float32(0.01), 4, lambda t, s: tau)
        data = ident.Dataset(record.time, record.states, jnp.broadcast_to(tau, (4, 7)))
        nominal = ident.link_parameters(arm, (6,))
        return (
            lambda d: ident.regressor(arm, d, ident.Unknowns(links=(6,)), nominal, residual="both"),
            (data,),
        )

    def contact():
        environment = sc.contact_environment(
            arm,
            sc.ContactSpheres([0], [[0.0, 0.0, 0.0]], 0.1),
            sc.Plane(),
            sc.ContactParameters(2.0e4, 40.0, friction=0.4),
        )
        return lambda s: sdjax.rollout(arm, s, jnp.float32(0.01), 3, environment=environment).states, (state,)

    def massless_arm():
        srms = srms_system(dtype=jnp.float32)
        return (
            lambda s, t: ma.two_body_state_derivative(srms, s, t),
            (
                ma.make_massless_state(srms, q=GRAPPLE_Q, qd=0.01 * np.ones(6)),
                jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32),
            ),
        )

    def reduced():
        return (
            lambda s: (
                sdjax.gjm.reduced_forward_dynamics(arm, s, tau),
                sdjax.gjm.manipulability(sdjax.generalized_jacobian(arm, s, 7)),
            ),
            (state,),
        )

    return {
        "planning: gradient of the plan loss": planning,
        "identification: regressor": identification,
        "contact: rollout on a plane": contact,
        "massless arm: two-body rates": massless_arm,
        "gjm: reduced dynamics and manipulability": reduced,
    }


CORE_PROGRAMS, FEATURE_PROGRAMS = _programs()


@functools.cache
def _program(name):
    """``(function, arguments)`` of the program ``name`` (a feature program built once per process)."""
    return CORE_PROGRAMS[name] if name in CORE_PROGRAMS else FEATURE_PROGRAMS[name]()


@pytest.mark.parametrize("name", sorted(CORE_PROGRAMS | FEATURE_PROGRAMS))
def test_every_product_is_full_precision(name):
    function, arguments = _program(name)
    products = _products(jax.make_jaxpr(function)(*arguments).jaxpr)
    full = lax.Precision.HIGHEST
    reduced = sorted({where for precision, where in products if precision != (full, full)})
    assert not reduced, f"{name}: products at JAX's default precision at {reduced}"


def test_the_walk_sees_products_and_their_precision():
    # The check above cannot pass vacuously: the walk finds products inside a vmapped scan and
    # tells a default-precision one from a full-precision one.
    def program(x):
        def body(carry, _):
            return jnp.matmul(carry, carry) + jnp.matmul(carry, carry, precision=lax.Precision.HIGHEST), None

        return lax.scan(body, x, None, length=2)[0]

    products = _products(jax.make_jaxpr(jax.vmap(program))(np.ones((2, 3, 3), np.float32)).jaxpr)
    full = lax.Precision.HIGHEST
    assert sorted(precision == (full, full) for precision, _ in products) == [False, True]
    # and every program above has products to check
    for name in CORE_PROGRAMS | FEATURE_PROGRAMS:
        function, arguments = _program(name)
        assert _products(jax.make_jaxpr(function)(*arguments).jaxpr), name
