"""The CUDA paths, run for real: training throughput of each on Pong, in one run.

Four runs of ``--steps`` agent steps each (4 emulator frames per step), each in a
process of its own (spawned on a GPU: CUDA state never crosses from one to the next), printing
training frames/s (wall time of ``runner.train()``, start-up included) and the
device each one trained on:

1. ``ppo_gpu_sampler``: PPO with the Nature-sized ``AtariFfAgent`` through a
   ``GpuSampler`` (workers step envs, this process picks every action in one
   forward pass on the GPU), 16 envs x 128 steps, 4 epochs x 4 minibatches.
2. ``dqn_gpu_sampler``: DQN with ``AtariDqnAgent`` through a ``GpuSampler``,
   32 envs x 2 steps, batch 128, replay of 1e5 frames, learning from 5k steps.
3. ``async_dqn``: ``AsyncRl`` with DQN: an ``AsyncGpuSampler`` fills the replay
   while the optimizer trains on the GPU (``make_affinity(n_gpu=1, async_sample=True)``).
4. ``sync_nccl``: ``SyncRl`` with one rank on the GPU (a NCCL process group), PPO as in 1.

``--cuda_idx -1`` runs everything on the CPU (gloo instead of NCCL) and
``--quick`` shrinks the batches, for a check of the script itself where there is
no GPU.

    python benchmarks/gpu_check.py [--cuda_idx 0] [--steps 50000] [--only ppo_gpu_sampler ...]
    python benchmarks/gpu_check.py --cuda_idx -1 --quick --steps 256
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

import psutil

CASES = ("ppo_gpu_sampler", "dqn_gpu_sampler", "async_dqn", "sync_nccl")


def envs_for(n_workers: int, about: int) -> int:
    """``about`` envs, rounded down to a multiple of ``n_workers`` (at least one each):
    the samplers give every worker the same number."""
    return max(1, about // n_workers) * n_workers


def ppo_parts(game: str, cuda_idx: int | None, n_workers: int, quick: bool) -> tuple:
    from rlframe.agents.pg.atari import AtariFfAgent
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
    from rlframe.samplers.parallel.gpu.sampler import GpuSampler
    sampler = GpuSampler(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo, env_kwargs=dict(game=game),
                         batch_T=16 if quick else 128,
                         batch_B=envs_for(n_workers, 4 if quick else 16),
                         max_decorrelation_steps=0)
    algo = PPO(learning_rate=2.5e-4, ratio_clip=0.1, epochs=4, minibatches=4,
               value_loss_coeff=0.5, entropy_loss_coeff=0.01, clip_grad_norm=0.5)
    agent = AtariFfAgent(model_kwargs=dict(channels=[32, 64, 64], kernel_sizes=[8, 4, 3],
                                           strides=[4, 2, 1], paddings=[0, 0, 0],
                                           fc_sizes=512))
    return sampler, algo, agent, dict(cuda_idx=cuda_idx, workers_cpus=list(range(n_workers)))


def run_case(case: str, game: str, cuda_idx: int | None, steps: int, out_dir: str,
             quick: bool = False) -> dict:
    """Train ``case`` for ``steps`` agent steps; returns its figures."""
    import torch

    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.utils.logging.context import logger_context
    torch.set_num_threads(1)
    n_workers = max(1, min(8, (psutil.cpu_count(logical=False) or 2) - 1))
    if case == "ppo_gpu_sampler":
        sampler, algo, agent, affinity = ppo_parts(game, cuda_idx, n_workers, quick)
        runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=steps,
                             log_interval_steps=steps, affinity=affinity, seed=0)
    elif case == "sync_nccl":
        from rlframe.runners.sync_rl import SyncRl
        sampler, algo, agent, affinity = ppo_parts(game, cuda_idx, n_workers, quick)
        runner = SyncRl(algo=algo, agent=agent, sampler=sampler, n_steps=steps,
                        log_interval_steps=steps, affinity=[affinity], seed=0)
    elif case == "dqn_gpu_sampler":
        from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
        from rlframe.algos.dqn.dqn import DQN
        from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
        from rlframe.samplers.parallel.gpu.sampler import GpuSampler
        sampler = GpuSampler(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo,
                             env_kwargs=dict(game=game), batch_T=2,
                             batch_B=envs_for(n_workers, 4 if quick else 32),
                             max_decorrelation_steps=0)
        algo = DQN(batch_size=32 if quick else 128, min_steps_learn=min(5000, steps // 4),
                   replay_size=int(1e4 if quick else 1e5))
        runner = MinibatchRl(algo=algo, agent=AtariDqnAgent(), sampler=sampler, n_steps=steps,
                             log_interval_steps=steps,
                             affinity=dict(cuda_idx=cuda_idx,
                                           workers_cpus=list(range(n_workers))), seed=0)
    elif case == "async_dqn":
        from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
        from rlframe.algos.dqn.dqn import DQN
        from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
        from rlframe.runners.async_rl import AsyncRl
        from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
        from rlframe.utils.launching.affinity import make_affinity
        sampler = AsyncGpuSampler(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo,
                                  env_kwargs=dict(game=game), batch_T=5,
                                  batch_B=envs_for(n_workers, 4 if quick else 16),
                                  max_decorrelation_steps=0)
        algo = DQN(replay_ratio=8, min_steps_learn=min(5000, steps // 4),
                   replay_size=int(1e4 if quick else 1e5))
        # One core optimizes, n_workers step envs.
        affinity = make_affinity(run_slot=0, n_cpu_core=n_workers + 1,
                                 n_gpu=0 if cuda_idx is None else 1, async_sample=True,
                                 optim_sample_share_gpu=cuda_idx is not None)
        # The sampler waits for the optimizer up to 8 batches ahead: replay_ratio holds.
        runner = AsyncRl(algo=algo, agent=AtariDqnAgent(), sampler=sampler, n_steps=steps,
                         log_interval_steps=steps, affinity=affinity, seed=0,
                         sampler_lead_steps=8 * sampler.batch_spec.size)
    else:
        raise ValueError(f"--only: unknown case {case!r}; the cases are {CASES}.")
    with logger_context(os.path.join(out_dir, case), 0, case, {}, snapshot_mode="none",
                        override_prefix=True):
        start = time.perf_counter()
        runner.train()
        seconds = time.perf_counter() - start
    device = next(runner.agent.model.parameters()).device
    return dict(case=case, device=str(device), seconds=seconds, steps=steps,
                frames_per_s=4 * steps / seconds)


def _child(case: str, game: str, cuda_idx: int | None, steps: int, out_dir: str,
           quick: bool, results: "mp.Queue") -> None:
    try:
        results.put(run_case(case, game, cuda_idx, steps, out_dir, quick))
    except BaseException as error:  # noqa: BLE001 - reported by the parent.
        results.put(dict(case=case, error=f"{type(error).__name__}: {error}"))
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda_idx", type=int, default=0, help="GPU index; -1: the CPU")
    parser.add_argument("--steps", type=int, default=50_000, help="agent steps per case")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    parser.add_argument("--quick", action="store_true",
                        help="a few envs and small batches (a check of the script)")
    args = parser.parse_args()
    cuda_idx = None if args.cuda_idx < 0 else args.cuda_idx
    if cuda_idx is not None:
        import torch
        if not torch.cuda.is_available():
            sys.exit(f"--cuda_idx {cuda_idx}: torch sees no GPU here (torch "
                     f"{torch.__version__}); --cuda_idx -1 runs the cases on the CPU.")
        print(f"GPU {cuda_idx}: {torch.cuda.get_device_name(cuda_idx)}, torch {torch.__version__}")
    # On a GPU each case starts in a new interpreter, with no CUDA state; on the CPU a
    # fork of this one does.
    ctx = mp.get_context("fork" if cuda_idx is None else "spawn")
    figures = []
    with tempfile.TemporaryDirectory(prefix="rlframe_gpu_check_") as out_dir:
        for case in args.only:
            results = ctx.Queue()
            child = ctx.Process(target=_child, args=(case, args.game, cuda_idx, args.steps,
                                                     out_dir, args.quick, results))
            child.start()
            child.join()
            result = results.get(timeout=10) if not results.empty() else dict(
                case=case, error=f"the process exited with code {child.exitcode}")
            figures.append(result)
            if "error" in result:
                print(f"{case:>16}: FAILED: {result['error']}", flush=True)
            else:
                print(f"{case:>16}: {result['frames_per_s']:>9,.0f} frames/s "
                      f"({result['steps']} steps in {result['seconds']:.1f} s, model on "
                      f"{result['device']})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    if any("error" in figure for figure in figures):
        sys.exit(1)


if __name__ == "__main__":
    main()
