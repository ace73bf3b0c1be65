"""SyncRl scaling: env steps/s and updates/s of 1 rank against 2 ranks, in one run.

A compute-heavy setting: PPO on HalfCheetah-v5 (256x256 Gaussian MLP, 10 epochs of
8 minibatches of 256 steps per iteration, SerialSampler with 2048 steps per rank
and iteration). Weak scaling: each rank samples and trains on its own batch, so 2
ranks do twice the env steps per iteration. Each case runs in its own process
tree; cases alternate over rounds and the medians are reported:

* 1 rank, 1 torch thread, pinned to core 0 (the baseline);
* 1 rank, 2 torch threads (one process using the whole 2-core machine);
* 2 ranks, 1 thread each, pinned to cores 0 and 1 (make_sync_affinity).

Target: 2 ranks >= 1.7x the baseline's env steps/s on a 2-core machine.
Needs the mujoco extra.

    python benchmarks/sync_scaling.py [--itrs 6] [--rounds 2] [--cuda_idx 0]
        [--env_id HalfCheetah-v5] [--batch_T 2048] [--minibatches 8]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _timing import warn_if_cpus_busy

CASES = {
    "1 rank x 1 thread": dict(n_rank=1, threads=1),
    "1 rank x 2 threads": dict(n_rank=1, threads=2),
    "2 ranks x 1 thread": dict(n_rank=2, threads=1),
}


def train(n_rank: int, threads: int, itrs: int, log_dir: str, cuda_idx: int | None,
          env_id: str, batch_T: int, minibatches: int) -> None:
    """One measured run (in a child process): SyncRl over ``n_rank`` ranks."""
    from rlframe.agents.pg.mujoco import MujocoFfAgent
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.gym import make as gym_make
    from rlframe.runners.sync_rl import SyncRl
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.launching.affinity import make_sync_affinity
    from rlframe.utils.logging.context import logger_context

    if cuda_idx is not None:
        affinity = [dict(cuda_idx=cuda_idx + r, master_torch_threads=threads)
                    for r in range(n_rank)]
    elif n_rank == 1 and threads > 1:
        affinity = [dict(master_cpus=(0, 1), master_torch_threads=threads)]
    else:
        affinity = make_sync_affinity(n_rank=n_rank, n_cpu_core=n_rank * threads,
                                      cpu_per_rank=threads, hyperthread_offset=0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id),
                            batch_T=batch_T, batch_B=1, max_decorrelation_steps=0)
    algo = PPO(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, minibatches=minibatches, epochs=10,
               ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
               clip_grad_norm=0.5, normalize_advantage=True)
    agent = MujocoFfAgent(model_kwargs=dict(hidden_sizes=[256, 256],
                                            normalize_observation=True))
    runner = SyncRl(algo=algo, agent=agent, sampler=sampler,
                    n_steps=itrs * batch_T * n_rank, log_interval_steps=batch_T * n_rank,
                    affinity=affinity, seed=0)
    with logger_context(log_dir, 0, "sync_scaling", {}, override_prefix=True):
        runner.train()


def measure(case: dict, **spec: object) -> tuple[float, float]:
    """Median env steps/s and updates/s of a run, its first two iterations dropped."""
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = os.path.join(tmp, "run")
        args = [sys.executable, os.path.abspath(__file__), "--child",
                json.dumps(dict(case, log_dir=log_dir, **spec))]
        env = dict(os.environ, OMP_NUM_THREADS=str(case["threads"]))
        result = subprocess.run(args, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise RuntimeError(f"{case} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        with open(os.path.join(log_dir, "run_0", "progress.csv")) as f:
            rows = list(csv.DictReader(f))
    rows = rows[min(2, len(rows) - 1):]
    steps = statistics.median(float(r["Diagnostics/StepsPerSecond"]) for r in rows)
    updates = statistics.median(float(r["Diagnostics/UpdatesPerSecond"]) for r in rows)
    return steps, updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--itrs", type=int, default=6, help="iterations per run")
    parser.add_argument("--env_id", default="HalfCheetah-v5")
    parser.add_argument("--batch_T", type=int, default=2048, help="steps per rank and iteration")
    parser.add_argument("--minibatches", type=int, default=8, help="PPO minibatches per epoch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cuda_idx", type=int, default=None,
                        help="first GPU (ranks use cuda_idx, cuda_idx+1, ...; nccl)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        train(**spec)
        return
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    cases = dict(CASES)
    if args.cuda_idx is not None:
        import torch
        n_gpu = torch.cuda.device_count() - args.cuda_idx
        cases = {f"{n} rank(s), GPU, nccl": dict(n_rank=n, threads=1)
                 for n in (1, 2) if n <= n_gpu}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            results[name].append(measure(case, itrs=args.itrs, cuda_idx=args.cuda_idx,
                                         env_id=args.env_id, batch_T=args.batch_T,
                                         minibatches=args.minibatches))
    base = statistics.median(s for s, _ in next(iter(results.values())))
    print(f"PPO {args.env_id}, {args.batch_T} steps per rank and iteration in "
          f"{args.minibatches} minibatches, {args.rounds} round(s):")
    print(f"{'case':<24}{'env steps/s':>14}{'updates/s':>12}{'steps ratio':>14}")
    for name, runs in results.items():
        steps = statistics.median(s for s, _ in runs)
        updates = statistics.median(u for _, u in runs)
        print(f"{name:<24}{steps:>14.0f}{updates:>12.1f}{steps / base:>13.2f}x")
    print("(updates/s: rank 0's gradient steps; with 2 ranks each covers twice the samples)")


if __name__ == "__main__":
    main()
