"""``rlframe train ALGO ENV_ID``: build a standard experiment and train it.

The stack (sampler, agent, algorithm, runner) and its defaults come
from :mod:`rlframe.presets`; the run directory's ``params.json`` holds the full
config, from which :func:`rlframe.presets.build_experiment` rebuilds the stack.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any

from rlframe.cli import CommandError
from rlframe.cli.choices import (ALGO_NAMES, SAMPLER_NAMES, SECTIONS, SNAPSHOT_MODES,
                                 TRACKERS)

DESCRIPTION = """\
Train ALGO on ENV_ID with rlframe's standard stack: a sampler, the algorithm's
agent for that env, and MinibatchRlEval, which evaluates the agent at every log
point. Defaults suit the kind of env: classic control, MuJoCo or Atari.

ALGO: {algos}.
ENV_ID: a gymnasium id (CartPole-v1, Pendulum-v1, Hopper-v5), or an Atari game by
its name (pong, space_invaders) or ALE id (ALE/Pong-v5, PongNoFrameskip-v4); Atari
games always run with rlpyt's preprocessing (AtariEnv), whatever the id's version.

--config takes a JSON object (or a JSON file) with sections {sections},
each holding keyword arguments of that component, e.g.
  '{{"algo": {{"learning_rate": 3e-4}}, "agent": {{"model_kwargs": {{"hidden_sizes": [32]}}}}}}'
They replace the defaults key by key; keywords ending in Cls or nonlinearity take an
import path ("torch.optim.RMSprop", "torch.nn.ReLU"). The run directory's params.json
holds the full config.
--config also takes a full config (with "env_id" and "kwargs", as params.json and
`rlframe autotune` write it): its settings (sampler, n_parallel, batch_B, ...) are
the defaults, and the options given here override them. A sampler section with
"eval_n_envs": 0 trains without evaluation (MinibatchRl, which logs the training
episodes instead).
"""

EPILOG = """\
examples:
  rlframe train ppo CartPole-v1
  rlframe train dqn CartPole-v1 --n-steps 2e4 --config '{"algo": {"min_steps_learn": 500}}'
  rlframe train sac Hopper-v5 --log-dir runs/sac --run-id 1 --seed 3
  rlframe train a2c pong --sampler cpu --n-parallel 4 --cuda-idx 0
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``train`` subcommand.

    Args:
        subparsers: the ``rlframe`` parser's subparsers.

    Returns:
        The ``train`` parser.
    """
    parser = subparsers.add_parser(
        "train", help="train an algorithm on an env with the standard stack",
        description=DESCRIPTION.format(algos=", ".join(ALGO_NAMES), sections=", ".join(SECTIONS)),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("algo", metavar="ALGO", help="algorithm: " + ", ".join(ALGO_NAMES))
    add("env_id", metavar="ENV_ID", help="gymnasium id or Atari game")
    add("--n-steps", metavar="N", type=_whole_number,
        help="env steps to train for (e.g. 1e6; default: per algorithm and env)")
    add("--sampler", metavar="NAME",
        help=f"{' | '.join(SAMPLER_NAMES)} (default: serial, or the --config file's)")
    add("--n-parallel", metavar="K", type=int,
        help="parallel samplers: worker processes, one core each (default: the most cores "
             "that divide --batch-B); serial: cores to pin the run to (default: no pinning)")
    add("--batch-T", dest="batch_T", metavar="T", type=int,
        help="time steps per env per iteration")
    add("--batch-B", dest="batch_B", metavar="B", type=int, help="parallel envs")
    add("--seed", metavar="S", type=int, help="random seed (default: drawn and recorded)")
    add("--log-dir", metavar="DIR", help="write the run to DIR/run_<ID> (default: "
        "<data root>/local/<date>/<time>/<algo>_<env>/run_<ID>)")
    add("--run-id", dest="run_ID", metavar="ID", type=int,
        help="run number (default: 0, or the next free suffix if run_0 exists)")
    add("--config", metavar="JSON",
        help="JSON object or JSON file of keyword arguments per section (see above)")
    add("--cuda-idx", metavar="I", type=int, help="GPU for the model and updates "
        "(default: CPU)")
    add("--torch-threads", dest="torch_threads", metavar="K", type=int,
        help="torch threads of the training process (default: torch's choice)")
    add("--log-interval-steps", metavar="N", type=_whole_number,
        help="env steps between evaluations and log rows")
    add("--stop-at-return", metavar="R", type=float,
        help="end the run at the first evaluation whose average return reaches R (with "
             "its snapshot; the run counts as finished)")
    add("--snapshot-mode", default="last", choices=SNAPSHOT_MODES,
        help="which parameter snapshots to keep (default: last)")
    add("--track", metavar="NAME", action="append", choices=TRACKERS,
        help="also send the config, progress rows and run files to an experiment tracker: "
             f"{' | '.join(TRACKERS)} (repeat for both; needs pip install rlframe[NAME]; "
             "MLflow: MLFLOW_TRACKING_URI or ./mlflow.db; W&B: offline unless logged in)")
    add("--track-group", metavar="NAME",
        help="the tracker's MLflow experiment / W&B group (default: <algo>_<env>)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build the experiment ``args`` describe, train it, and return the exit code 0.

    Raises:
        CommandError: a user error (bad name, key or file), with a message for the
            command line.
    """
    if args.log_dir and os.path.exists(args.log_dir) and not os.path.isdir(args.log_dir):
        raise CommandError(f"--log-dir {args.log_dir!r} is a file, not a directory; name a "
                           "new or existing directory for the run.")
    if args.cuda_idx is not None:
        import torch
        if not torch.cuda.is_available():
            raise CommandError(f"--cuda-idx {args.cuda_idx} asks for a GPU, but torch "
                               f"{torch.__version__} finds none; leave out --cuda-idx to train "
                               "on the CPU.")
    from rlframe.presets import build_experiment  # torch: imported once a run starts.
    from rlframe.utils.logging.context import logger_context
    from rlframe.utils.logging.tracking import check_outputs
    try:
        runner, config = build_experiment(config_from_args(args))
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise CommandError(" ".join(str(error).split())) from None  # On one line.
    name = f"{config['algo']}_{config['env_id'].replace('/', '-')}"
    log_dir = args.log_dir or name
    config.update(log_dir=log_dir, name=name, snapshot_mode=args.snapshot_mode)
    try:
        check_outputs(args.track)  # Before the run directory is made.
    except ImportError as error:
        raise CommandError(f"--track: {error}") from None
    context = logger_context(log_dir, 0 if args.run_ID is None else args.run_ID, name, config,
                             snapshot_mode=args.snapshot_mode, override_prefix=bool(args.log_dir),
                             if_exists="suffix" if args.run_ID is None else "error",
                             outputs=args.track, tracking_group=args.track_group)
    with contextlib.ExitStack() as stack:
        try:
            run_dir = stack.enter_context(context)
        except FileExistsError:
            raise CommandError(f"--run-id {args.run_ID}: {log_dir}/run_{args.run_ID} already "
                             "holds a run; choose another --run-id or --log-dir, or leave out "
                             "--run-id to take the next free run_<ID>-<n>.") from None
        runner.train()
    print(f"Finished. Run directory: {run_dir}", flush=True)
    return 0


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The config dict of ``build_experiment`` from the parsed command line."""
    config: dict[str, Any] = dict(algo=args.algo, env_id=args.env_id)
    if args.config:
        loaded = load_config_arg(args.config)
        if is_full_config(loaded):
            config = _defaults_from(loaded, args)
        else:
            config["kwargs"] = loaded
    if args.sampler is not None:
        config["sampler"] = args.sampler
    for key in ("n_steps", "n_parallel", "torch_threads", "batch_T", "batch_B", "seed",
                "cuda_idx", "log_interval_steps", "stop_at_return"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    return config


def is_full_config(value: dict[str, Any]) -> bool:
    """Whether a ``--config`` object is a whole config (``params.json``, autotune's
    choice) rather than keyword sections: it names the env or holds ``kwargs``."""
    return "env_id" in value or "kwargs" in value


def _defaults_from(loaded: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A full config from ``--config`` as the defaults of this run, for ALGO and ENV_ID."""
    for key, given in (("algo", args.algo), ("env_id", args.env_id)):
        if key in loaded and loaded[key] != given:
            raise ValueError(f"--config holds a config for {key}={loaded[key]!r}, but the "
                             f"command line asks for {given!r}; give the same {key.upper()} "
                             "or leave it out of the config file.")
    from rlframe.presets.build import LAUNCH_KEYS
    dropped = ("seed", *LAUNCH_KEYS)  # This run's own.
    return {**{k: v for k, v in loaded.items() if k not in dropped},
            "algo": args.algo, "env_id": args.env_id}


def load_config_arg(text: str) -> dict[str, Any]:
    """``--config``'s value: a JSON object, or the path of a file holding one.

    Raises:
        FileNotFoundError: neither a JSON object nor an existing file.
        ValueError: invalid JSON, or not an object.
    """
    source = "--config"
    if not text.lstrip().startswith("{"):
        if not os.path.isfile(text):
            raise FileNotFoundError(f"--config {text!r} is neither a JSON object nor a file.")
        source = f"--config file {text!r}"
        with open(text, encoding="utf-8") as f:
            text = f.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source} is not valid JSON: {error}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"{source} must be a JSON object of sections ({', '.join(SECTIONS)}), "
                         f"got {type(value).__name__}.")
    return value


def _whole_number(text: str) -> int:
    """argparse type for step counts: ``"1e6"`` and ``"4096"`` alike."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(value)
