#!/usr/bin/env bash
# The CUDA paths on a GPU machine, in under 8 minutes: training frames/s of PPO and DQN
# on Pong through the GpuSampler, AsyncRl with the optimizer on the GPU and SyncRl with
# one NCCL rank (benchmarks/gpu_check.py), then CUDA tests: every algorithm's update on the
# GPU and SyncRl on NCCL (tests/test_cuda.py).
# Run it from the repository root, in a Python environment where torch sees the GPU and
# rlframe is installed (pip install -e ".[test]"). Figures go to ${OUT:-.}/gpu_check.json.
#
#     bash benchmarks/gpu_check.sh [GPU index, default 0]
set -uo pipefail
cd "$(dirname "$0")/.."
gpu="${1:-0}"
out="${OUT:-.}"
nvidia-smi -L || true
python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'GPUs', torch.cuda.device_count())"
status=0
timeout 270 python benchmarks/gpu_check.py --cuda_idx "$gpu" --steps 50000 \
    --json "$out/gpu_check.json" || status=$?
CUDA_VISIBLE_DEVICES="$gpu" timeout 180 python -m pytest tests/test_cuda.py -q \
    -k "every_algorithm or sync_rl_on_nccl" -p no:cacheprovider || status=$?
exit "$status"
