"""MuJoCo MJX's batched rollout, timed the way its users run it: ``jit(vmap(lax.scan(mjx.step)))``
over ``steps`` steps, compiled apart, throughput per step (used by ``bench_rollout.py``).

It imports neither sdjax nor anything of sdjax's, so it also runs as a script in another Python
environment (``bench_rollout.py --mjx-python PATH``): each MJX release follows the JAX of its
time, and under the JAX sdjax pins (0.10.2) MJX 3.17 on MuJoCo 4.0 ran one step of the 7-joint
arm in 64 ms unbatched and 3 s at a batch of 16 (``benchmarks/README.md``, *Rollouts vs MuJoCo
and MJX*), so its fair figure comes from an environment of its own.

    python mjx_worker.py FOLDER STEPS DTYPE

``FOLDER`` holds ``model.xml`` (MJCF) and ``coordinates.npz`` (``qpos (B, nq)``, ``qvel (B,
nv)``); the script writes ``FOLDER/final_qpos.npy`` and prints one line ``RESULT {json}`` with the
compile time, seconds per step and the versions it ran with.
"""

from __future__ import annotations

import json
import pathlib
import sys

import common


def mjx_rollout(xml: str, qpos, qvel, steps: int, dtype_name: str) -> dict:
    """Compile and time MJX's rollout of the MJCF model ``xml`` from each row of ``qpos``,
    ``qvel`` (the process's JAX precision must already be ``dtype_name``'s)."""
    import jax
    import jax.numpy as jnp
    import mujoco
    import numpy as np
    from mujoco import mjx

    dtype = jnp.dtype(dtype_name)

    def cast(tree):
        return jax.tree.map(
            lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x, tree
        )

    mx = cast(mjx.put_model(mujoco.MjModel.from_xml_string(xml)))
    data0 = cast(mjx.make_data(mx))
    data = jax.vmap(lambda p, v: data0.replace(qpos=p, qvel=v))(jnp.asarray(qpos, dtype), jnp.asarray(qvel, dtype))

    def scan_steps(m, d):
        return jax.lax.scan(lambda d, _: (mjx.step(m, d), None), d, None, length=steps)[0].qpos

    # The model is an argument, not a closed-over constant (XLA would fold it into the program).
    fn = jax.jit(jax.vmap(scan_steps, in_axes=(None, 0)))
    compile_s, compiled = common.compile_seconds(fn, mx, data)
    timing = common.time_call(lambda: compiled(mx, data), repeats=2, min_seconds=0.0)
    return {
        "compile_seconds": compile_s,
        "seconds_per_step": timing["min"] / steps,
        "final_qpos": np.asarray(compiled(mx, data)),
        "jax": jax.__version__,
        "mujoco": mujoco.__version__,
    }


def main(argv: list[str]) -> None:
    folder, steps, dtype_name = pathlib.Path(argv[0]), int(argv[1]), argv[2]
    common.configure(float64=dtype_name == "float64")
    import numpy as np

    coordinates = np.load(folder / "coordinates.npz")
    result = mjx_rollout(
        (folder / "model.xml").read_text(), coordinates["qpos"], coordinates["qvel"], steps, dtype_name
    )
    np.save(folder / "final_qpos.npy", result.pop("final_qpos"))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
