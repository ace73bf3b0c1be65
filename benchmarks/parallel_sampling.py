"""Parallel sampler throughput against SerialSampler, measured in one run.

SerialSampler, CpuSampler and GpuSampler each collect the same number of
[T, B] batches of HalfCheetah-v5 with a MujocoFfAgent (the same batch_B for
all); the parallel samplers run with 1 and with 2 worker processes. Printed:
env steps per second and the ratio to serial. On a 2-core machine 2.0 is the
ceiling for 2 workers.

    python benchmarks/parallel_sampling.py [--env_id HalfCheetah-v5] [--batch_B 8]
"""
import argparse
import time

import torch

from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed


def steps_per_second(SamplerCls: type, n_workers: int, args: argparse.Namespace) -> float:
    set_seed(0)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=dict(id=args.env_id),
                         batch_T=args.batch_T, batch_B=args.batch_B,
                         max_decorrelation_steps=0)
    affinity = dict(workers_cpus=list(range(n_workers)))
    sampler.initialize(MujocoFfAgent(), affinity=affinity, seed=0, bootstrap_value=True)
    try:
        sampler.obtain_samples(0)  # warm-up
        start = time.perf_counter()
        for itr in range(1, args.n_itr + 1):
            sampler.obtain_samples(itr)
        elapsed = time.perf_counter() - start
    finally:
        sampler.shutdown()
    return args.n_itr * sampler.batch_size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_id", default="HalfCheetah-v5")
    parser.add_argument("--batch_T", type=int, default=256)
    parser.add_argument("--batch_B", type=int, default=8)
    parser.add_argument("--n_itr", type=int, default=10, help="batches per measurement")
    args = parser.parse_args()
    torch.set_num_threads(1)  # The master's own forward passes: one thread, like workers.
    logger.disable()
    print(f"{args.env_id}, MujocoFfAgent, batch_T={args.batch_T}, batch_B={args.batch_B}, "
          f"{args.n_itr} batches each")
    serial = steps_per_second(SerialSampler, 1, args)
    print(f"{'sampler':>12} {'workers':>8} {'steps/s':>10} {'vs serial':>10}")
    print(f"{'Serial':>12} {'-':>8} {serial:>10,.0f} {1.0:>10.2f}")
    for SamplerCls in (CpuSampler, GpuSampler):
        for n_workers in (1, 2):
            sps = steps_per_second(SamplerCls, n_workers, args)
            name = SamplerCls.__name__.replace("Sampler", "")
            print(f"{name:>12} {n_workers:>8} {sps:>10,.0f} {sps / serial:>10.2f}")


if __name__ == "__main__":
    main()
