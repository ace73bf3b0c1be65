"""SerialSampler throughput against a bare gymnasium loop and its ceiling, in one run.

For each batch_B, three loops take the same number of env steps on CartPole-v1
(one torch thread), in alternating rounds (medians reported):

* bare: the gymnasium envs stepped in turn with random actions;
* ceiling: the same envs stepped in turn, plus one forward pass per step of the
  same policy network (CategoricalPgAgent's default 64x64 tanh policy and
  value MLPs) on the B observations and a categorical sample: the least any
  sampler acting with that policy must do;
* SerialSampler with a CategoricalPgAgent, filling [T, B] batches.

sampler/ceiling is the share the framework keeps of what the policy allows
(target: >= 0.8 at batch_B=8).

    python benchmarks/sampler_throughput.py [--steps 20480] [--batch_B 1 8 16 64] [--rounds 3]
"""
import argparse
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from _timing import median_rates, warn_if_cpus_busy

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.models.pg.mlp_models import CategoricalPgMlpModel
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed


def bare_gymnasium(env_id: str, n_envs: int, n_steps: int) -> Callable[[], None]:
    """A function stepping n_envs gymnasium envs in turn (random actions), n_steps in all."""
    envs = [gym.make(env_id) for _ in range(n_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.action_space.seed(i)

    def run() -> None:
        for _ in range(n_steps // n_envs):
            for env in envs:
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    env.reset()
    return run


def ceiling(env_id: str, n_envs: int, n_steps: int) -> Callable[[], None]:
    """Bare stepping plus one policy forward pass and categorical sample per step."""
    envs = [gym.make(env_id) for _ in range(n_envs)]
    observation = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    observation = observation.astype(np.float32)
    spaces = gym_make(env_id).spaces
    model = CategoricalPgMlpModel(spaces.observation.shape, spaces.action.n)

    @torch.inference_mode()  # As the collectors act: the cheapest no-grad mode.
    def run() -> None:
        for _ in range(n_steps // n_envs):
            pi, _value = model(torch.from_numpy(observation), None, None)
            action = torch.multinomial(pi, 1).squeeze(-1).numpy()
            for b, env in enumerate(envs):
                o, _, terminated, truncated, _ = env.step(action[b])
                if terminated or truncated:
                    o, _ = env.reset()
                observation[b] = o
    return run


def serial_sampler(env_id: str, n_envs: int, n_steps: int, batch_T: int) -> Callable[[], None]:
    """SerialSampler with a CategoricalPgAgent collecting n_steps (whole batches)."""
    set_seed(0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=batch_T,
                            batch_B=n_envs, max_decorrelation_steps=0)
    sampler.initialize(CategoricalPgAgent(), seed=0, bootstrap_value=True)

    def run() -> None:
        for itr in range(n_steps // sampler.batch_size):
            sampler.obtain_samples(itr)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_id", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=20480, help="env steps per measurement")
    parser.add_argument("--batch_B", type=int, nargs="+", default=[1, 8, 16, 64])
    parser.add_argument("--batch_T", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="rates per second of wall time, or of this process's CPU time")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    torch.set_num_threads(1)
    logger.disable()
    print(f"{args.env_id}, {args.steps} env steps per measurement, batch_T={args.batch_T}, "
          f"torch threads={torch.get_num_threads()}, medians of {args.rounds} rounds")
    print(f"{'batch_B':>8} {'bare gym':>10} {'ceiling':>10} {'SerialSampler':>14} "
          f"{'/bare':>6} {'/ceiling':>9}   (steps per second of {args.clock} time)")
    for B in args.batch_B:
        steps = args.steps - args.steps % (B * args.batch_T) or B * args.batch_T
        rates = median_rates({
            "bare": bare_gymnasium(args.env_id, B, steps),
            "ceiling": ceiling(args.env_id, B, steps),
            "sampler": serial_sampler(args.env_id, B, steps, args.batch_T),
        }, args.rounds, steps)[args.clock]
        print(f"{B:>8} {rates['bare']:>10,.0f} {rates['ceiling']:>10,.0f} "
              f"{rates['sampler']:>14,.0f} {rates['sampler'] / rates['bare']:>6.2f} "
              f"{rates['sampler'] / rates['ceiling']:>9.2f}")


if __name__ == "__main__":
    main()
