"""What ``compile=True`` buys: PPO and DQN updates eager against torch.compile'd, in one run.

PPO: pg_updates.py's CartPole zoo configuration (a [32, 8] batch, 20 epochs of
one minibatch of 256, 64x64 tanh MLPs), timed per iteration of
``PPO.optimize_agent``. DQN: dqn_updates.py's CartPole configuration (batch 64,
MLP [128, 128], double DQN, 3-step returns, uniform replay of 50k), timed per
update through ``DQN.optimize_agent`` (replay sampling included).

For each, the same construction is built twice, with ``compile=False`` and
``compile=True``. The one-time compile cost is the first compiled call minus an
eager one (torch.compile compiles on first use). It is measured cold: this
script gives inductor an empty cache directory (removed at the end), so no
compiled code of an earlier run is reused (``--warm_cache`` keeps the usual
cache, as later runs of a training script would use it). Rounds then alternate between eager and compiled,
medians are reported.

    python benchmarks/compile_speedup.py [--rounds 5] [--iterations 5] [--updates 384]
                                         [--threads 1] [--warm_cache] [--only ppo|dqn]
"""
import argparse
import os
import shutil
import tempfile
import time

import torch
from _timing import median_rates, warn_if_cpus_busy
from dqn_updates import make_framework as make_dqn
from pg_updates import make_framework as make_ppo
from pg_updates import make_samples


def timed(fn):
    """``(fn(), seconds it took)``."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def ppo_case(rounds: int, iterations: int) -> tuple[dict, float]:
    """Iterations per second eager and compiled, and the compile time in seconds."""
    _, eager = make_ppo()
    agent, compiled = make_ppo(compile=True)
    samples = make_samples(agent)
    _, first_eager = timed(lambda: eager.optimize_agent(1, samples))
    _, first_compiled = timed(lambda: compiled.optimize_agent(1, samples))

    def run(algo):
        return lambda: [algo.optimize_agent(1, samples) for _ in range(iterations)]

    rates = median_rates(dict(eager=run(eager), compiled=run(compiled)), rounds, iterations)
    return rates, first_compiled - first_eager


def dqn_case(rounds: int, updates: int) -> tuple[dict, float]:
    """Updates per second eager and compiled, and the compile time in seconds."""
    # Building fills the replay and makes the first `updates` updates: compiled, the
    # first of them compiles the loss.
    (_, eager), built_eager = timed(lambda: make_dqn(updates, prioritized=False))
    (_, compiled), built_compiled = timed(
        lambda: make_dqn(updates, prioritized=False, compile=True))
    rates = median_rates(dict(eager=lambda: eager.optimize_agent(1),
                              compiled=lambda: compiled.optimize_agent(1)), rounds, updates)
    return rates, built_compiled - built_eager


def main(rounds: int, iterations: int, updates: int, threads: int, warm_cache: bool,
         only: tuple[str, ...] = ("ppo", "dqn")) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if warm_cache:
        report(rounds, iterations, updates, threads, "with inductor's cache", only)
        return
    cache = tempfile.mkdtemp(prefix="rlframe_inductor_")  # Compile from scratch, as a
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache          # first run on a machine does.
    try:
        report(rounds, iterations, updates, threads, "cold (empty inductor cache)", only)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def report(rounds: int, iterations: int, updates: int, threads: int, compile_kind: str,
           only: tuple[str, ...]) -> None:
    """Time both cases and print the table."""
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as error:  # No usable backend: say so instead of timing nothing.
        print(f"torch.compile cannot run here ({type(error).__name__}: {error}); "
              "the algorithms' compile=True would raise a RuntimeError saying so.")
        return
    print(f"torch.compile of the losses (compile=True) against eager, {threads} torch "
          f"thread(s), torch {torch.__version__}, median of {rounds} rounds, compile "
          f"{compile_kind}")
    if "ppo" in only:
        report_ppo(*ppo_case(rounds, iterations), iterations)
    if "dqn" in only:
        report_dqn(*dqn_case(rounds, updates), updates)


def report_ppo(ppo_rates: dict, ppo_compile: float, iterations: int) -> None:
    """PPO's lines of the table."""
    print(f"  PPO CartPole zoo ({iterations} iterations of 20 updates a round), one-time "
          f"compile {ppo_compile:.1f} s")
    for clock, med in ppo_rates.items():
        print(f"    {clock:4s} eager {1e3 / med['eager']:7.2f} ms/itr   compiled "
              f"{1e3 / med['compiled']:7.2f} ms/itr   speedup "
              f"{med['compiled'] / med['eager']:.2f}")


def report_dqn(dqn_rates: dict, dqn_compile: float, updates: int) -> None:
    """DQN's lines of the table."""
    print(f"  DQN CartPole ({updates} updates a round, replay sampling included), one-time "
          f"compile {dqn_compile:.1f} s")
    for clock, med in dqn_rates.items():
        print(f"    {clock:4s} eager {1e6 / med['eager']:7.1f} us/update   compiled "
              f"{1e6 / med['compiled']:7.1f} us/update   speedup "
              f"{med['compiled'] / med['eager']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5, help="PPO iterations per round")
    parser.add_argument("--updates", type=int, default=384, help="DQN updates per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--warm_cache", action="store_true",
                        help="let inductor reuse compiled code cached on disk by earlier runs")
    parser.add_argument("--only", nargs="+", choices=("ppo", "dqn"), default=["ppo", "dqn"],
                        help="the cases to time")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    main(args.rounds, args.iterations, args.updates, args.threads, args.warm_cache,
         tuple(args.only))
