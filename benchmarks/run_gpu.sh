#!/usr/bin/env bash
# The benchmarks of a GPU lease in one command, most wanted first, each under its own time limit,
# results copied to $OUT (the device tool's return folder) as each finishes. Peers come as wheels
# in .whl/ (MuJoCo, MJX: the machine has no package index); sdjax runs from the checkout.
#   bash benchmarks/run_gpu.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/sdjax-gpu}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/gpu.txt"
step() {  # step SECONDS RESULT-NAME ARGS...: run one benchmark, keep its log and result
    local limit=$1 name=$2
    shift 2
    echo "== $name ($(date +%T), limit $limit s)"
    timeout -k 5 "$limit" python3 "$@" >"$OUT/$name.log" 2>&1
    pkill -f benchmarks/bench_ || true # a worker process left behind by the time limit
    grep -v "Failed to import" "$OUT/$name.log" | tail -n 12
    cp "benchmarks/results/$name.json" "$OUT/" 2>/dev/null || echo "$name: no result"
}
step 120 dynamics_gpu benchmarks/bench_dynamics.py --models free_flying_arm_7dof,random_tree_30 \
    --algorithms forward_dynamics,inverse_dynamics --batches 1024,16384,131072,1048576
step 190 rollout_gpu benchmarks/bench_rollout.py --dtypes float32 --mjx-steps 100
step 150 probe_solve_gpu benchmarks/probe_solve.py --models free_flying_arm_7dof --batches 16384,1048576 --dtypes float32,float64 \
    --solve-sizes 16,20
step 110 dynamics_gpu_float64 benchmarks/bench_dynamics.py --dtypes float64 --models free_flying_arm_7dof,random_tree_30 \
    --algorithms forward_dynamics,inverse_dynamics --batches 1024,16384,131072,1048576 --output dynamics_gpu_float64
step 140 gradient_gpu benchmarks/bench_gradient.py --batches 1024
step 130 rollout_gpu_float64 benchmarks/bench_rollout.py --dtypes float64 --mjx-steps 100 --output rollout_gpu_float64
