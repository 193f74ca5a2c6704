#!/usr/bin/env bash
# The GPU check for the device tool (under 8 minutes): MJX steps/s against batch size on the GPU next to
# native MuJoCo on the same machine's CPUs, then a short PPO run on quadruped-walk with 4096 MJX envs.
#   here, once:  bash bench/gpu_wheels.sh
#   device tool: run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# Figures land in $OUT (scaling table and JSON, PPO log and summary).
set -uo pipefail
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export POLICYFORGE_JAX_CACHE=/tmp/jax_cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import jax, mujoco; print('jax', jax.__version__, jax.devices(), 'mujoco', mujoco.__version__)" | tee -a "$OUT/gpu.txt"
timeout 270 python3 -m policyforge.bench.mjx_scaling --task quadruped-walk --batches 1024 4096 16384 \
  --native-batches 256 --seconds 4 2>&1 | tee "$OUT/mjx_scaling.txt"
# the learner stays on the CPU (its GPU path is not built yet): observations come to the host through DLPack
timeout 200 python3 -c "import sys; from policyforge.cli import main; sys.exit(main())" train \
  configs/quadruped-walk-ppo.yaml sim.backend=mjx sim.num_envs=4096 runner.total_env_steps=1500000 \
  runner.eval_every_steps=0 runner.video=none runner.torch_threads=16 out_dir=/tmp/runs name=gpu-ppo \
  2>&1 | tee "$OUT/ppo.txt"
cp /tmp/runs/gpu-ppo/summary.json "$OUT/ppo_summary.json" 2>/dev/null
tail -n 1 "$OUT/mjx_scaling.txt"
