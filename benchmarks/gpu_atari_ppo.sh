#!/usr/bin/env bash
# PPO on an Atari game toward 10M agent steps on a GPU machine, a fixed wall time per call,
# continued by the next call (on another machine too). The run lives in
# RUNS/ppo_<game>_gpu/run_0 (RUNS: default ${OUT:-.}/gpu_runs). A call that finds a
# snapshot there, or in RESUME_FROM (a copy of an earlier call's run directory), resumes
# the run; otherwise it starts it. After SECONDS the run gets SIGTERM: it writes its final
# snapshot and stops, to go on at the next call. `rlframe report` then writes the curve
# and table to the run's folder (report/).
#
#     bash benchmarks/gpu_atari_ppo.sh [GAME (pong)] [SECONDS (480)] [N_STEPS (1e7)] [ARGS]
#
# ARGS go to `rlframe train` when the run starts (e.g. --log-interval-steps 200000).
# Settings: rlframe's Atari PPO preset (CleanRL's ppo_atari.py: 8 envs x 128 steps, 4
# epochs of 4 minibatches, learning rate and clip annealed over N_STEPS) with the keyword
# arguments of the PPO Breakout entry of benchmarks/suite/atari_3m.json (CleanRL's Nature
# CNN with orthogonal initialisation, 84x84 frames, FIRE after every lost life), with the
# GpuSampler: one worker per env (N_PARALLEL, default 8) and the actions of all envs in
# one forward pass of the model on GPU CUDA_IDX (default 0; set it empty to check the
# script on a CPU). Run it from the repository root, with rlframe installed
# (pip install -e ".[atari]").
set -uo pipefail
cd "$(dirname "$0")/.."
game="${1:-pong}"
seconds="${2:-480}"
n_steps="${3:-10000000}"
shift $(( $# < 3 ? $# : 3 ))
runs="${RUNS:-${OUT:-.}/gpu_runs}"
label="ppo_${game}_gpu"
run="$runs/$label/run_0"
mkdir -p "$runs/$label"
if [ ! -f "$run/params.pkl" ] && [ -n "${RESUME_FROM:-}" ]; then
    if [ ! -f "$RESUME_FROM/params.pkl" ]; then
        echo "RESUME_FROM=$RESUME_FROM holds no snapshot (params.pkl) to continue." >&2
        exit 2
    fi
    rm -rf "$run"
    cp -r "$RESUME_FROM" "$run"
fi
cuda_idx="${CUDA_IDX-0}"
# The suite entry's keyword arguments, so that these runs have the suite's set-up.
config="$(python -c 'import json, sys
runs = json.load(open("benchmarks/suite/atari_3m.json"))["runs"]
print(json.dumps([r for r in runs if r["algo"] == "ppo"][0]["config"]["kwargs"]))')" || exit 2
if [ -f "$run/params.pkl" ]; then
    command=(rlframe resume "$run")
else
    command=(rlframe train ppo "$game" --sampler gpu --n-parallel "${N_PARALLEL:-8}"
             --n-steps "$n_steps" --seed 0 --log-dir "$runs/$label" --run-id 0
             --snapshot-mode last --config "$config" ${cuda_idx:+--cuda-idx "$cuda_idx"} "$@")
fi
nvidia-smi -L 2> /dev/null || true
echo "${command[*]} (for ${seconds} s)"
timeout -s TERM -k 180 "$seconds" "${command[@]}"
status=$?
if [ "$status" -eq 124 ]; then
    echo "Stopped after ${seconds} s with its final snapshot; the next call continues it."
    status=0
fi
rlframe report "$runs/$label" -o "$run/report" || true
exit "$status"
