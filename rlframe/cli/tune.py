"""``rlframe tune ALGO ENV_ID``: hyperparameter search on Optuna (see :mod:`rlframe.tune`)."""
from __future__ import annotations

import argparse
import importlib
import os

from rlframe.cli import CommandError
from rlframe.cli.choices import ALGO_NAMES, TRACKERS

EXAMPLES = """\
Each trial draws its settings from the search space (a default per algorithm, or
--space FILE: {"algo.learning_rate": {"low": 1e-5, "high": 1e-2, "log": true},
"batch_T": {"choices": [64, 128]}}), trains --seeds runs of --n-steps, and scores
the IQM (or mean) of their final evaluation returns. The pruner stops trials whose
evaluations fall behind. Trials live in OUT/trial_<n>/run_<seed>; the study in
OUT/study.db unless --storage names another Optuna storage.

Run the same command again after a kill: finished trials are kept and running ones
resume from their snapshots. The same --storage and --study-name on several
machines (each its own -o) share one study. At the end: OUT/best_config.json (for
rlframe train --config), OUT/trials.md, history.png and importance.png.

examples:
  rlframe tune ppo CartPole-v1 --trials 12 --n-steps 50000 --slots 2
  rlframe tune sac Pendulum-v1 --space space.json --seeds 3 --objective iqm
  rlframe tune dqn CartPole-v1 --storage postgresql://host/db --study-name dqn-cp
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``tune`` command to the ``rlframe`` parser's subparsers."""
    parser = subparsers.add_parser(
        "tune", help="search hyperparameters on Optuna, resumable after a kill",
        description="Search an algorithm's hyperparameters on an env with Optuna: trials "
                    "in parallel over the run slots, pruned on their evaluations, resumed "
                    "from their snapshots when the command runs again.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("algo", metavar="ALGO", choices=ALGO_NAMES, help="algorithm: " + ", ".join(ALGO_NAMES))
    add("env_id", metavar="ENV_ID", help="gymnasium id or Atari game")
    add("-o", "--out", metavar="OUT", help="tuning directory (default: tune/<algo>_<env>)")
    add("--trials", type=int, default=20, metavar="N",
        help="trials this directory runs (default: 20)")
    add("--n-steps", type=float, metavar="N", help="env steps per run (default: the preset's)")
    add("--seeds", type=int, default=1, metavar="K", help="runs per trial (default: 1)")
    add("--objective", choices=("iqm", "mean"), default="iqm",
        help="of the seeds' final evaluation returns (default: iqm)")
    add("--space", metavar="FILE", help="search space, JSON or YAML (default: per algorithm)")
    add("--storage", metavar="URL", help="Optuna storage (default: sqlite:///OUT/study.db)")
    add("--study-name", metavar="NAME", help="study name (default: <algo>_<env>)")
    add("--pruner", choices=("median", "halving", "none"), default="median",
        help="default: median")
    add("--sampler", choices=("tpe", "random"), default="tpe", help="default: tpe")
    add("--slots", "--n-jobs", type=int, default=1, metavar="K",
        help="trials at once, each pinned to cores // K cores (default: 1)")
    add("--config", metavar="JSON", help="settings every trial shares (as rlframe train's)")
    add("--track", metavar="NAME", action="append", choices=TRACKERS,
        help="send every run to an experiment tracker, grouped by study")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Check the set-up, run the trials, print the summary."""
    try:
        importlib.import_module("optuna")
    except ImportError:
        raise CommandError("rlframe tune needs Optuna: pip install rlframe[tune]") from None
    from rlframe.cli.train import load_config_arg
    from rlframe.tune import TuneError, tune
    from rlframe.utils.logging.tracking import check_outputs
    n_steps = None
    if args.n_steps is not None:
        if not args.n_steps.is_integer() or args.n_steps < 1:
            raise CommandError(f"--n-steps must be a positive whole number, got {args.n_steps}")
        n_steps = int(args.n_steps)
    try:
        check_outputs(args.track)
        config = load_config_arg(args.config) if args.config else None
    except (ImportError, ValueError) as error:
        raise CommandError(" ".join(str(error).split())) from None
    out = args.out or os.path.join("tune", f"{args.algo}_{args.env_id.replace('/', '-')}")
    try:
        tune(args.algo, args.env_id, out, trials=args.trials, n_steps=n_steps,
             seeds=args.seeds, objective=args.objective, space=args.space,
             storage=args.storage, study_name=args.study_name, pruner=args.pruner,
             sampler=args.sampler, slots=args.slots, config=config, track=args.track)
    except TuneError as error:
        raise CommandError(" ".join(str(error).split())) from None
    return 0
