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

Then, for CpuSampler with 2 workers, where an iteration's time goes: its wall
time against the CPU time each worker spent in it (stepping its envs and its
agent) and the master's; the wall time no worker spent computing is the
sampler's own cost per iteration (waking the workers, waiting for the slower
one, collecting trajectory infos).

Rounds alternate between the set-ups; medians are printed.

    python benchmarks/parallel_sampling.py [--env_id HalfCheetah-v5] [--batch_B 8 64]
        [--batch_T 256] [--n_itr 10] [--rounds 3]
"""
import argparse
import multiprocessing as mp
import os
import statistics
import time

import psutil
import torch

from _timing import sampler_rate, warn_if_cpus_busy
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


def cpu_sampler_split(batch_B: int, args: argparse.Namespace) -> dict[str, float]:
    """Per iteration of a 2-worker CpuSampler: wall ms, each worker's CPU ms, the master's
    CPU ms (means over ``args.n_itr`` batches after a warm-up batch)."""
    from rlframe.utils.seed import set_seed
    set_seed(0)
    sampler = CpuSampler(EnvCls=gym_make, env_kwargs=dict(id=args.env_id),
                         batch_T=args.batch_T, batch_B=batch_B, max_decorrelation_steps=0)
    sampler.initialize(MujocoFfAgent(), affinity=dict(workers_cpus=[0, 1]), seed=0,
                       bootstrap_value=True)
    master = psutil.Process()

    def cpu_s(process: psutil.Process) -> float:
        times = process.cpu_times()
        return times.user + times.system

    try:
        sampler.obtain_samples(0)
        workers = [psutil.Process(p.pid) for p in sampler.workers]
        before = [cpu_s(p) for p in [master] + workers]
        start = time.perf_counter()
        for itr in range(1, args.n_itr + 1):
            sampler.obtain_samples(itr)
        wall = time.perf_counter() - start
        after = [cpu_s(p) for p in [master] + workers]
    finally:
        sampler.shutdown()
    ms = [1e3 * (b - a) / args.n_itr for a, b in zip(before, after)]
    return dict(wall=1e3 * wall / args.n_itr, master=ms[0], worker0=ms[1], worker1=ms[2])


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
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    torch.set_num_threads(1)  # The master's own forward passes: one thread, like workers.
    logger.disable()
    print(f"{args.env_id}, MujocoFfAgent, batch_T={args.batch_T}, {args.n_itr} batches each, "
          f"median of {args.rounds} alternating rounds")
    setups = [("Serial", SerialSampler, 1)] + [
        (SamplerCls.__name__.replace("Sampler", ""), SamplerCls, n)
        for SamplerCls in (CpuSampler, GpuSampler) for n in (1, 2)]
    for batch_B in args.batch_B:
        rates: dict[str, list[float]] = {}
        splits: list[dict[str, float]] = []
        for _ in range(args.rounds):
            for name, SamplerCls, n_workers in setups:
                rates.setdefault(f"{name} {n_workers}", []).append(
                    steps_per_second(SamplerCls, n_workers, batch_B, args))
            rates.setdefault("ceiling", []).append(
                independent_steps_per_second(2, batch_B, args))
            splits.append(cpu_sampler_split(batch_B, args))
        median = {key: statistics.median(values) for key, values in rates.items()}
        serial = median["Serial 1"]
        print(f"\nbatch_B={batch_B}")
        print(f"{'sampler':>24} {'workers':>8} {'steps/s':>10} {'vs serial':>10}")
        for name, _, n_workers in setups:
            sps = median[f"{name} {n_workers}"]
            shown = "-" if name == "Serial" else n_workers
            print(f"{name:>24} {shown:>8} {sps:>10,.0f} {sps / serial:>10.2f}")
        sps = median["ceiling"]
        print(f"{'ceiling: 2 x Serial':>24} {2:>8} {sps:>10,.0f} {sps / serial:>10.2f}")
        split = {key: statistics.median(s[key] for s in splits) for key in splits[0]}
        # CPU times count in clock ticks (10 ms): over few batches the difference can
        # come out below 0, which means "within a tick".
        busiest = max(split["worker0"], split["worker1"])
        idle = max(0., split["wall"] - busiest)
        print(f"  Cpu, 2 workers, per iteration: {split['wall']:.1f} ms wall; CPU: workers "
              f"{split['worker0']:.1f} and {split['worker1']:.1f} ms, master "
              f"{split['master']:.1f} ms; wall not spent computing by the busier worker "
              f"{idle:.1f} ms ({idle / split['wall']:.0%})")


if __name__ == "__main__":
    main()
