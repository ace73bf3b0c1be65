"""SerialSampler throughput against a bare gymnasium loop, measured in one run.

For each batch_B, the sampler (CategoricalPgAgent with its default MLP on
CartPole-v1, one torch thread) and a bare loop stepping the same number of
gymnasium envs with random actions each take the same number of env steps.
The ratio sampler/bare is the share of raw env speed the framework keeps; the
rest is the cost of a batched policy forward pass and writing the [T, B] buffer.

    python benchmarks/sampler_throughput.py [--steps 40000] [--batch_B 1 8 16 64]
"""
import argparse
import time

import gymnasium as gym
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed


def bare_gymnasium(env_id: str, n_envs: int, n_steps: int) -> float:
    """Env steps per second of n_envs gymnasium envs stepped in turn, random actions."""
    envs = [gym.make(env_id) for _ in range(n_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.action_space.seed(i)
    n_rounds = max(n_steps // n_envs, 1)
    start = time.perf_counter()
    for _ in range(n_rounds):
        for env in envs:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return n_rounds * n_envs / elapsed


def serial_sampler(env_id: str, n_envs: int, n_steps: int, batch_T: int) -> float:
    """Env steps per second of SerialSampler with a CategoricalPgAgent."""
    set_seed(0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=batch_T,
                            batch_B=n_envs, max_decorrelation_steps=0)
    sampler.initialize(CategoricalPgAgent(), seed=0, bootstrap_value=True)
    n_itr = max(n_steps // sampler.batch_size, 1)
    sampler.obtain_samples(0)  # warm-up
    start = time.perf_counter()
    for itr in range(n_itr):
        sampler.obtain_samples(itr)
    elapsed = time.perf_counter() - start
    sampler.shutdown()
    return n_itr * sampler.batch_size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_id", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=40000, help="env steps per measurement")
    parser.add_argument("--batch_B", type=int, nargs="+", default=[1, 8, 16, 64])
    parser.add_argument("--batch_T", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logger.disable()
    print(f"{args.env_id}, {args.steps} env steps each, batch_T={args.batch_T}, "
          f"torch threads={torch.get_num_threads()}")
    print(f"{'batch_B':>8} {'bare gym (steps/s)':>20} {'SerialSampler (steps/s)':>24} "
          f"{'ratio':>7}")
    for B in args.batch_B:
        bare = bare_gymnasium(args.env_id, B, args.steps)
        sampled = serial_sampler(args.env_id, B, args.steps, args.batch_T)
        print(f"{B:>8} {bare:>20,.0f} {sampled:>24,.0f} {sampled / bare:>7.2f}")


if __name__ == "__main__":
    main()
