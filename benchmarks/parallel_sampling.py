"""Parallel sampler throughput against SerialSampler, measured in one run.

SerialSampler, CpuSampler and GpuSampler each collect the same number of
[T, B] batches of HalfCheetah-v5 with a MujocoFfAgent (the same batch_B for
all); the parallel samplers run with 1 and with 2 worker processes. Printed:
env steps per second and the ratio to serial, for each batch_B given.

Also printed, as the ceiling that no parallel sampler can beat: ``n``
independent SerialSamplers in ``n`` separate processes (each pinned to one CPU,
each with batch_B / n envs, no communication at all), run at the same time.
A worker that holds B / n envs still pays one agent forward pass per time
step, so with few envs per worker this fixed cost bounds the speed-up below
n (Amdahl): the ceiling shows how much of the gap is that, and how much is
the sampler's own synchronization.

    python benchmarks/parallel_sampling.py [--env_id HalfCheetah-v5] [--batch_B 8 64]
"""
import argparse
import multiprocessing as mp
import os

import torch

from _timing import sampler_rate
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger


def steps_per_second(SamplerCls: type, n_workers: int, batch_B: int,
                     args: argparse.Namespace) -> float:
    """Env steps/s of ``SamplerCls`` over ``args.n_itr`` batches after one warm-up batch."""
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=dict(id=args.env_id),
                         batch_T=args.batch_T, batch_B=batch_B,
                         max_decorrelation_steps=0)
    return sampler_rate(sampler, MujocoFfAgent(), dict(workers_cpus=list(range(n_workers))),
                        args.n_itr, bootstrap_value=True)


def _independent(cpu: int, batch_B: int, args: argparse.Namespace, barrier, results) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    logger.disable()
    barrier.wait()
    results.put(steps_per_second(SerialSampler, 1, batch_B, args))


def independent_steps_per_second(n: int, batch_B: int, args: argparse.Namespace) -> float:
    """Summed steps/s of ``n`` concurrent SerialSamplers with ``batch_B // n`` envs each."""
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_independent, args=(cpu, batch_B // n, args, barrier, results))
             for cpu in range(n)]
    for p in procs:
        p.start()
    try:
        total = sum(results.get(timeout=600) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_id", default="HalfCheetah-v5")
    parser.add_argument("--batch_T", type=int, default=256)
    parser.add_argument("--batch_B", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--n_itr", type=int, default=10, help="batches per measurement")
    args = parser.parse_args()
    torch.set_num_threads(1)  # The master's own forward passes: one thread, like workers.
    logger.disable()
    print(f"{args.env_id}, MujocoFfAgent, batch_T={args.batch_T}, {args.n_itr} batches each")
    for batch_B in args.batch_B:
        serial = steps_per_second(SerialSampler, 1, batch_B, args)
        print(f"\nbatch_B={batch_B}")
        print(f"{'sampler':>24} {'workers':>8} {'steps/s':>10} {'vs serial':>10}")
        print(f"{'Serial':>24} {'-':>8} {serial:>10,.0f} {1.0:>10.2f}")
        for SamplerCls in (CpuSampler, GpuSampler):
            for n_workers in (1, 2):
                sps = steps_per_second(SamplerCls, n_workers, batch_B, args)
                name = SamplerCls.__name__.replace("Sampler", "")
                print(f"{name:>24} {n_workers:>8} {sps:>10,.0f} {sps / serial:>10.2f}")
        sps = independent_steps_per_second(2, batch_B, args)
        print(f"{'ceiling: 2 x Serial':>24} {2:>8} {sps:>10,.0f} {sps / serial:>10.2f}")


if __name__ == "__main__":
    main()
