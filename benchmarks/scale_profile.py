"""Where the time of a scale-comparison run goes: one run of ``vs_sb3_scale.py`` under
cProfile, its timed window only, the profile's own time grouped into the parts of a
training loop.

    python benchmarks/scale_profile.py --case atari_ppo [--framework rlframe]
        [--steps N] [--top 15] [--save out.prof]

The run is the one ``vs_sb3_scale.py`` times (``_scale_atari.run`` or
``_scale_mujoco.run``), in this process; the profiler is on from the moment its clock
opens the window to the moment it closes it, so the warm-up (learning starts, first
iterations) is left out. Only this process is profiled: for set-ups with worker
processes (``rlframe_autotuned``, ``rlframe_async``) the workers' time is not in it.
cProfile adds a cost to every Python call, so the Python-heavy parts read larger than
they are without it, and the window's figure printed is the one under the profiler. Each function's own time (``tottime``) goes to the first part
whose pattern its file or name matches, in the order of ``PARTS`` (the network's
forward math: torch's built-in calls named in ``MATH_WORDS``).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _timing import warn_if_cpus_busy  # noqa: E402 - found through HERE.

# (part, substrings of "file:function" that put a function's own time there).
PARTS = (
    # ALE's calls are not profiled apart from their caller: AtariEnv.step's own time is
    # the emulator's (its own Python is a few lines per step).
    ("emulator (ALE, EnvPool, MuJoCo)", ("ale_py", "envpool", "mujoco", "atari_env.py:step")),
    ("backward passes", ("run_backward",)),
    ("optimizer steps", ("torch/optim/", "_fused_adam", "_foreach_")),
    ("network forward math", ()),  # Built-in torch calls named in MATH_WORDS.
    ("env wrappers, frame processing", ("rlframe/envs/", "gymnasium/", "cv2", "atari_wrappers")),
    ("replay buffer", ("rlframe/replays/", "buffers.py")),
    ("sampler and collectors", ("rlframe/samplers/",)),
    ("algorithm (losses, returns)", ("rlframe/algos/",)),
    ("agent and model (Python)", ("rlframe/agents/", "rlframe/models/", "torch/nn/")),
    ("runner, logging, diagnostics", ("rlframe/runners/", "rlframe/utils/")),
    ("Stable-Baselines3 (Python)", ("stable_baselines3/",)),
    ("ceiling loop (Python)", ("_scale_atari.py", "_scale_mujoco.py")),
    ("numpy", ("numpy",)),
    ("other torch", ("torch",)),
)
OTHER = "other"
MATH = "network forward math"
MATH_WORDS = ("conv2d", "linear", "addmm", "matmul", "relu", "tanh", "max_pool", "softmax")


def part_of(key: tuple[str, int, str]) -> str:
    """The part a profile entry ``(file, line, name)`` belongs to."""
    text = f"{key[0]}:{key[2]}".replace("\\", "/")
    for part, patterns in PARTS:
        if part == MATH:
            if key[0] == "~" and "torch" in key[2] and any(w in key[2] for w in MATH_WORDS):
                return part
        elif any(p in text for p in patterns):
            return part
    return OTHER


def profiled_run(case: str, framework: str, steps: int, seed: int,
                 profiler: cProfile.Profile) -> dict:
    """``run(framework, case, steps, seed)`` of the case's module, profiled in its window.

    The window's clocks (``_timing.Window.open``/``close``, which both modules' clocks
    use, and ``AsyncWindowClock``) are wrapped so that the profiler runs while they do.
    """
    import _scale_atari
    import _scale_mujoco
    import _timing
    module = _scale_atari if case in _scale_atari.CASES else _scale_mujoco

    def wrap(cls, opener: str, closer: str) -> None:
        open_fn, close_fn = getattr(cls, opener), getattr(cls, closer)

        def opened(self, *args, **kwargs):
            result = open_fn(self, *args, **kwargs)
            profiler.enable()
            return result

        def closed(self, *args, **kwargs):
            profiler.disable()
            return close_fn(self, *args, **kwargs)

        setattr(cls, opener, opened)
        setattr(cls, closer, closed)

    wrap(_timing.Window, "open", "close")
    original = _scale_atari.AsyncWindowClock.on_iteration_end

    def async_clock(self, *args, **kwargs):  # Opens at its first reading past the warm-up.
        was_open = self.opened is not None
        original(self, *args, **kwargs)
        if not was_open and self.opened is not None:
            profiler.enable()

    _scale_atari.AsyncWindowClock.on_iteration_end = async_clock
    try:
        return module.run(framework, case, steps, seed)
    finally:
        profiler.disable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True,
                        choices=("atari_ppo", "atari_dqn", "mujoco_sac", "mujoco_ppo"))
    parser.add_argument("--framework", default="rlframe",
                        help="a framework the case runs (see vs_sb3_scale.py)")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps in the window (default: a fifth of vs_sb3_scale's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=12, help="functions listed by own time")
    parser.add_argument("--save", metavar="PATH", help="also write the raw profile here")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    os.environ.setdefault("RLFRAME_PROGRESS", "0")
    from vs_sb3_scale import DEFAULT_STEPS, figure, unit
    steps = args.steps or max(1, DEFAULT_STEPS[args.case] // 5)
    profiler = cProfile.Profile()
    result = profiled_run(args.case, args.framework, steps, args.seed, profiler)
    stats = pstats.Stats(profiler)
    if args.save:
        stats.dump_stats(args.save)
    totals: dict[str, float] = {}
    for key, (_, _, tottime, _, _) in stats.stats.items():
        totals[part_of(key)] = totals.get(part_of(key), 0.) + tottime
    profiled = sum(totals.values())
    print(f"{args.framework} {args.case}: {figure(args.case, result):,.1f} {unit(args.case)} "
          f"under the profiler ({result['steps']} steps in {result['seconds']:.1f} s; "
          f"{profiled:.1f} s of own time profiled in this process)")
    print(f"{'part':<34} {'seconds':>8} {'share':>6}")
    for part, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{part:<34} {seconds:>8.2f} {seconds / profiled:>6.1%}")
    print(f"\nTop {args.top} functions by own time:")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
