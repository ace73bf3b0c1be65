"""AtariEnv throughput: against a bare ale-py loop, and parallel against serial sampling.

1. Env steps/s of ``AtariEnv`` (frame skip 4, 4-frame stacks of 104x80, and of
   DeepMind's 84x84 with ``frame_shape=(84, 84)``) against a bare ale-py loop
   doing the same emulation and screen grabs: the same ROM, ``frame_skip``
   ``act`` calls per step and two grayscale screen grabs (before the last frame
   and after it), with no frame processing at all. All take the same random
   actions and restart at game over. Rounds alternate; medians are printed.
   Target: AtariEnv >= 0.9x the bare loop.
2. Sampler throughput on the game: SerialSampler against CpuSampler with 2
   worker processes, both collecting ``[batch_T, batch_B]`` batches with an
   AtariFfAgent (one torch thread in every process). Target: >= 1.8x on a
   2-core machine.

    python benchmarks/atari_env_throughput.py [--game pong] [--steps 4000] [--rounds 3]
        [--batch_T 5] [--batch_B 16] [--n_itr 40]
"""
import argparse
import statistics
import time

import numpy as np
import torch

from _timing import sampler_rate, warn_if_cpus_busy
from rlframe.agents.pg.atari import AtariFfAgent
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo, rom_path
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger


def atari_env_steps(game: str, steps: int, actions: np.ndarray,
                    frame_shape: tuple[int, int] = (104, 80)) -> float:
    """Seconds for ``steps`` AtariEnv steps."""
    env = AtariEnv(game=game, frame_shape=frame_shape)
    env.seed(0)
    env.reset()
    start = time.perf_counter()
    for i in range(steps):
        if env.step(actions[i % len(actions)] % env.action_space.n).env_info.traj_done:
            env.reset()
    return time.perf_counter() - start


def bare_ale_steps(game: str, steps: int, actions: np.ndarray, frame_skip: int = 4) -> float:
    """Seconds for ``steps`` steps of a bare ale-py loop: frame_skip acts, two grabs."""
    import ale_py
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.)
    ale.loadROM(rom_path(game))
    action_set = ale.getMinimalActionSet()
    screens = np.zeros((2, 210, 160), dtype=np.uint8)
    ale.reset_game()
    start = time.perf_counter()
    for i in range(steps):
        a = action_set[actions[i % len(actions)] % len(action_set)]
        for _ in range(frame_skip - 1):
            ale.act(a)
        ale.getScreenGrayscale(screens[0])
        ale.act(a)
        ale.getScreenGrayscale(screens[1])
        if ale.game_over():
            ale.reset_game()
    return time.perf_counter() - start


def sampler_steps_per_second(SamplerCls: type, args: argparse.Namespace) -> float:
    """Env steps/s of ``SamplerCls`` over ``args.n_itr`` batches after one warm-up batch."""
    sampler = SamplerCls(EnvCls=AtariEnv, env_kwargs=dict(game=args.game),
                         TrajInfoCls=AtariTrajInfo, batch_T=args.batch_T,
                         batch_B=args.batch_B, max_decorrelation_steps=0)
    return sampler_rate(sampler, AtariFfAgent(), dict(workers_cpus=[0, 1]), args.n_itr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--steps", type=int, default=4000, help="env steps per env timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch_T", type=int, default=5)
    parser.add_argument("--batch_B", type=int, default=16)
    parser.add_argument("--n_itr", type=int, default=40, help="batches per sampler timing")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    torch.set_num_threads(1)
    logger.disable()

    actions = np.random.default_rng(0).integers(0, 18, size=10_000)
    times: dict[str, list[float]] = {"bare ale-py loop": [], "AtariEnv": [],
                                     "AtariEnv 84x84": []}
    for _ in range(args.rounds):
        times["bare ale-py loop"].append(bare_ale_steps(args.game, args.steps, actions))
        times["AtariEnv"].append(atari_env_steps(args.game, args.steps, actions))
        times["AtariEnv 84x84"].append(atari_env_steps(args.game, args.steps, actions,
                                                       frame_shape=(84, 84)))
    rates = {name: args.steps / statistics.median(t) for name, t in times.items()}
    base = rates["bare ale-py loop"]
    print(f"{args.game}: frame skip 4, {args.steps} steps x {args.rounds} rounds (medians)")
    print(f"{'':>18} {'steps/s':>10} {'ratio':>7}")
    for name, rate in rates.items():
        print(f"{name:>18} {rate:>10,.0f} {rate / base:>7.2f}")

    print(f"\n{args.game}: AtariFfAgent, batch_T={args.batch_T}, batch_B={args.batch_B}, "
          f"{args.n_itr} batches each")
    serial = [sampler_steps_per_second(SerialSampler, args)]
    cpu = [sampler_steps_per_second(CpuSampler, args)]
    for _ in range(args.rounds - 1):
        serial.append(sampler_steps_per_second(SerialSampler, args))
        cpu.append(sampler_steps_per_second(CpuSampler, args))
    serial_rate, cpu_rate = statistics.median(serial), statistics.median(cpu)
    print(f"{'sampler':>18} {'steps/s':>10} {'ratio':>7}")
    print(f"{'Serial':>18} {serial_rate:>10,.0f} {1.0:>7.2f}")
    print(f"{'Cpu, 2 workers':>18} {cpu_rate:>10,.0f} {cpu_rate / serial_rate:>7.2f}")


if __name__ == "__main__":
    main()
