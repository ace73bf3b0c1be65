"""rlframe against Stable-Baselines3 where real experiments spend their time: Atari and
MuJoCo training throughput, beside a bare-loop ceiling, on the same machine.

Needs stable-baselines3 and OpenCV (``pip install stable-baselines3
opencv-python-headless``; neither is a dependency of rlframe) and, for the MuJoCo
cases, gymnasium's MuJoCo envs (``pip install "gymnasium[mujoco]"``); without SB3 the
script says so and exits with status 2.

    python benchmarks/vs_sb3_scale.py [--only atari_ppo atari_dqn mujoco_sac mujoco_ppo]
        [--frameworks NAME ...] [--rounds 3] [--steps N] [--run_dir DIR] [--json out.json]
    python benchmarks/vs_sb3_scale.py --quick --rounds 1     # a check of the script

Cases (what each framework runs, hyperparameters, and where the mapping between the
frameworks is not exact, are in the docstrings of ``_scale_atari.py`` and
``_scale_mujoco.py``):

* ``atari_ppo``: PPO on Pong, 8 envs x 128 steps, 4 epochs x 4 minibatches, the Nature
  CNN on 4 stacked 84x84 frames. Figure: training env frames/s (4 frames per agent
  step), sampling and updates together, over >= 50k agent steps after a warm-up
  iteration. rlframe runs twice: in one process (``SerialSampler``, as SB3's
  ``DummyVecEnv``) and with the set-up ``rlframe autotune ppo pong`` chose on this
  machine.
* ``atari_dqn``: DQN on Pong, rl-zoo's settings with a 1e5 replay; frames/s over
  >= 50k agent steps after learning starts.
* ``mujoco_sac``, ``mujoco_ppo``: SAC and PPO on HalfCheetah-v5 with rl-zoo's
  settings; seconds per 10k env steps after learning starts (SAC) or a warm-up
  iteration (PPO).

SB3 runs twice: with one torch thread, as every run here unless its set-up says
otherwise (``sb3``), and with two (``sb3_2threads``), torch's own default on a 2-core
machine, which SB3 does not change: SB3 as users run it here. rlframe's set-ups that use
both cores (``rlframe_autotuned``, ``rlframe_async``, ``rlframe_2threads``) are meant
to be read against the latter; the report gives every rlframe row's ratio to both.

Every case also runs a **ceiling**: the same envs and the same network in a bare loop
written for the benchmark (no framework), so the report says how far from the limit
each framework is. SAC's also runs with two threads (``ceiling_2threads``), the
ceiling its ``_2threads`` rows are read against.

Each run is a fresh process (``torch.set_num_threads(1)`` unless a set-up says
otherwise); rounds alternate the frameworks (round r starts with the framework after
round r-1's first), so machine load affects all alike; medians over rounds are
reported with their range. Each run's result is saved in ``--run_dir`` as it ends, and
a second invocation with the same ``--run_dir`` runs only what is missing (long runs
survive an interrupted session). Targets: frames/s rlframe/SB3 >= 2.0 (Atari); seconds
per 10k steps rlframe/SB3 <= 0.7 (MuJoCo); where rlframe is under 0.8 of the ceiling,
the gap is what its sampler, agent and algorithm cost beyond the bare loop.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import run_reaped, warn_if_cpus_busy

# The parent imports only the standard library (and the case modules, which import
# nothing heavy at module level): each child's peak RSS is its own.
HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = {"atari_ppo": "_scale_atari", "atari_dqn": "_scale_atari",
           "mujoco_sac": "_scale_mujoco", "mujoco_ppo": "_scale_mujoco"}
CASES = tuple(MODULES)
DEFAULT_STEPS = {"atari_ppo": 51_200, "atari_dqn": 50_000, "mujoco_sac": 10_000,
                 "mujoco_ppo": 10_240}
QUICK_STEPS = {"atari_ppo": 1_024, "atari_dqn": 400, "mujoco_sac": 300, "mujoco_ppo": 512}
ATARI = ("atari_ppo", "atari_dqn")
SB3_RUNS = ("sb3", "sb3_2threads")  # The SB3 runs ratios are taken against.
TARGET = {"atari": 2.0, "mujoco": 0.7}  # rlframe/SB3: frames/s at least, s/10k at most.
CEILING_FRACTION = 0.8
INSTALL_MESSAGE = (
    "benchmarks/vs_sb3_scale.py compares rlframe with Stable-Baselines3, which could not "
    "be imported{detail}.\nIt is not a dependency of rlframe; install it (and OpenCV, "
    "which its Atari wrappers use) in this environment to run the comparison:\n\n"
    "    pip install stable-baselines3 opencv-python-headless\n")


def case_module(case: str):
    """The module that runs ``case`` (``_scale_atari`` or ``_scale_mujoco``)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return importlib.import_module(MODULES[case])


def figure(case: str, result: dict) -> float:
    """Frames/s (Atari, 4 frames per agent step) or seconds per 10k env steps."""
    if case in ATARI:
        return 4 * result["steps"] / result["seconds"]
    return 1e4 * result["seconds"] / result["steps"]


def unit(case: str) -> str:
    return "frames/s" if case in ATARI else "s/10k steps"


# ------------------------------------------------------------------------- child

def worker_main(spec: dict) -> None:
    """Run one (framework, case) and write its result (JSON) to ``spec["result_path"]``."""
    result = case_module(spec["case"]).run(spec["framework"], spec["case"], spec["steps"],
                                           spec["seed"])
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)


# ------------------------------------------------------------------------ parent

def in_subprocess(spec: dict, log_path: str) -> dict:
    """Run one worker in a fresh process in a temporary working directory.

    Returns:
        The worker's result with ``peak_rss_mib`` (read from the kernel at reaping) and
        ``wall_s`` (the whole process, start-up included) added.
    """
    with tempfile.TemporaryDirectory(prefix="vs_sb3_scale_") as tmp:
        spec = dict(spec, result_path=os.path.join(tmp, "result.json"))
        env = dict(os.environ, RLFRAME_PROGRESS="0", RLFRAME_DATA_DIR=os.path.join(tmp, "data"))
        start = time.perf_counter()
        code, peak_mib = run_reaped([sys.executable, os.path.abspath(__file__), "--worker",
                                     json.dumps(spec)], tmp, env, log_path)
        if code != 0:
            with open(log_path) as log:
                tail = log.read()[-4000:]
            raise SystemExit(f"{spec['framework']} {spec['case']} failed (exit code {code}); "
                             f"its log: {log_path}\n{tail}")
        with open(spec["result_path"]) as f:
            result = json.load(f)
    result["peak_rss_mib"] = peak_mib
    result["wall_s"] = time.perf_counter() - start
    return result


def sb3_problem() -> str | None:
    """Why SB3 cannot run here (read in a child: the parent stays small), or None."""
    proc = subprocess.run([sys.executable, "-c", "import stable_baselines3, cv2"],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {proc.returncode}"


def versions() -> dict:
    code = ("import json, platform, torch, gymnasium, rlframe, stable_baselines3; "
            "print(json.dumps(dict(rlframe=rlframe.__version__, sb3=stable_baselines3."
            "__version__, torch=torch.__version__, gymnasium=gymnasium.__version__, "
            "python=platform.python_version(), cpus=__import__('os').cpu_count())))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else dict(error=proc.stderr[-500:])


def all_frameworks() -> list[str]:
    """Every framework name any case runs, in first-seen order."""
    names: list[str] = []
    for case in CASES:
        names += [n for n in case_module(case).FRAMEWORKS[case] if n not in names]
    return names


def schedule(cases: list[str], rounds: int,
             frameworks: list[str] | None = None) -> list[tuple[int, str, str]]:
    """``(round, case, framework)`` in run order: round-major, and each round of a case
    starts one framework later than the round before. ``frameworks``, if given, keeps
    only those names."""
    order = []
    for r in range(rounds):
        for case in cases:
            names = [n for n in case_module(case).FRAMEWORKS[case]
                     if frameworks is None or n in frameworks]
            if not names:
                continue
            shift = r % len(names)
            order += [(r, case, name) for name in names[shift:] + names[:shift]]
    return order


def run_all(args: argparse.Namespace, cases: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Every run of the schedule, those already in ``args.run_dir`` read back."""
    os.makedirs(args.run_dir, exist_ok=True)
    results: dict[str, dict[str, list[dict]]] = {case: {} for case in cases}
    for r, case, framework in schedule(cases, args.rounds, args.frameworks):
        steps = args.steps or (QUICK_STEPS if args.quick else DEFAULT_STEPS)[case]
        path = os.path.join(args.run_dir, f"{case}_{framework}_s{steps}_r{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
            how = "(saved)"
        else:
            spec = dict(case=case, framework=framework, steps=steps, seed=args.seed + r)
            result = in_subprocess(spec, path[:-5] + ".log")
            with open(path + ".tmp", "w") as f:
                json.dump(result, f)
            os.replace(path + ".tmp", path)
            how = f"({result['wall_s']:.0f} s with start-up)"
        results[case].setdefault(framework, []).append(result)
        print(f"round {r} {case:>10} {framework:>17}: {figure(case, result):>9,.1f} "
              f"{unit(case)}, {result['steps']} steps in {result['seconds']:.1f} s, "
              f"peak RSS {result['peak_rss_mib']:,.0f} MiB {how}", flush=True)
    return results


def summary(case: str, runs: dict[str, list[dict]]) -> dict:
    """Median figure (with range) per framework and the ratios the targets name."""
    table = {}
    for name, results in runs.items():
        values = [figure(case, r) for r in results]
        table[name] = dict(median=statistics.median(values), low=min(values),
                           high=max(values), runs=len(values),
                           peak_rss_mib=statistics.median(r["peak_rss_mib"] for r in results),
                           setup=results[0].get("setup", ""))
    atari = case in ATARI
    faster = (lambda a, b: a / b) if atari else (lambda a, b: b / a)  # > 1: a is faster.
    for name, row in table.items():
        for sb3 in SB3_RUNS:
            if sb3 in table and not name.startswith("sb3"):
                row[f"vs_{sb3}"] = row["median"] / table[sb3]["median"]
        # Set-ups on both cores against the two-thread ceiling where it ran.
        ceiling = ("ceiling_2threads" if name.endswith("_2threads")
                   and "ceiling_2threads" in table else "ceiling")
        if ceiling in table and not name.startswith("ceiling"):
            row["of_ceiling"] = faster(row["median"], table[ceiling]["median"])
    return table


def print_table(case: str, table: dict) -> None:
    kind = "atari" if case in ATARI else "mujoco"
    target = TARGET[kind]
    print(f"\n{case}: median {unit(case)} (range); over SB3's with 1 and with 2 torch "
          f"threads (rlframe's target {'>=' if kind == 'atari' else '<='} {target}); "
          "fraction of the ceiling's speed")
    for name, row in table.items():
        ratios = ""
        for sb3 in SB3_RUNS:
            ratio = row.get(f"vs_{sb3}")
            met = ""
            if ratio is not None and name.startswith("rlframe"):
                ok = ratio >= target if kind == "atari" else ratio <= target
                met = " (met)" if ok else " (not met)"
            ratios += f"{'' if ratio is None else f'{ratio:.2f}':>5}{met:<10}"
        ceiling = f"{row['of_ceiling']:.2f}" if "of_ceiling" in row else ""
        print(f"  {name:>17} {row['median']:>9,.1f} ({row['low']:,.1f}-{row['high']:,.1f}) "
              f"{ratios} {ceiling:>5}  RSS {row['peak_rss_mib']:,.0f} MiB  "
              f"n={row['runs']}  {row['setup']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--frameworks", nargs="+", metavar="NAME", default=None,
                        help="run only these (default: every framework of each case)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None,
                        help=f"steps timed per run (default {DEFAULT_STEPS})")
    parser.add_argument("--seed", type=int, default=0, help="round r uses seed + r")
    parser.add_argument("--quick", action="store_true",
                        help=f"a check of the script: {QUICK_STEPS} steps per run")
    parser.add_argument("--run_dir", default=None,
                        help="where each run's result is saved (default: a new temporary "
                             "directory); runs already saved there are not run again")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(json.loads(args.worker))
        return
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1")
    if args.frameworks is not None:
        known = all_frameworks()
        unknown = [n for n in args.frameworks if n not in known]
        if unknown:
            parser.error(f"--frameworks {' '.join(unknown)}: unknown; choose from "
                         f"{', '.join(known)}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps {args.steps}: give a positive number of steps")
    problem = sb3_problem()
    if problem is not None:
        print(INSTALL_MESSAGE.format(detail=f" ({problem})"), file=sys.stderr)
        sys.exit(2)
    cases = [case for case in CASES if case in args.only]
    info = versions()
    print(f"versions: {info}", flush=True)
    with tempfile.TemporaryDirectory(prefix="vs_sb3_scale_runs_") as default_dir:
        args.run_dir = args.run_dir or default_dir
        results = run_all(args, cases)
    tables = {case: summary(case, runs) for case, runs in results.items()}
    for case, table in tables.items():
        print_table(case, table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(versions=info, rounds=args.rounds, tables=tables,
                           runs=results), f, indent=1)


if __name__ == "__main__":
    main()
