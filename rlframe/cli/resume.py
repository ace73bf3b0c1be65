"""``rlframe resume``: continue a run started by ``rlframe train`` from its snapshot."""
from __future__ import annotations

import argparse
import contextlib
import json
import os

from rlframe.cli import CommandError

EXAMPLES = """\
RUN_DIR is a run directory written by `rlframe train` (it holds params.json and a
snapshot, params.pkl or itr_<N>.pkl). The stack is rebuilt from params.json and
training continues from the newest snapshot: weights, optimizer, counters and
schedules, random generators, and, with the serial sampler, the envs mid-episode.
progress.csv and debug.log are appended to, and the run ends at its n_steps.
Runs made by a script resume by running the script again with
logger_context(..., resume=True).

examples:
  rlframe train dqn CartPole-v1 --log-dir runs/dqn --run-id 0   # ... stopped
  rlframe resume runs/dqn/run_0
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``resume`` command to the ``rlframe`` parser's subparsers."""
    parser = subparsers.add_parser(
        "resume", help="continue a run started by `rlframe train` from its snapshot",
        description="Continue a run started by `rlframe train` from its newest snapshot.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Rebuild the run's stack from its params.json and train on from its snapshot, in
    RUN_DIR itself whatever its name (a renamed ``run_<ID>`` too)."""
    from rlframe.presets import build_experiment
    from rlframe.utils.checkpoint import SnapshotError, find_snapshot
    from rlframe.utils.logging.context import logger_context_at

    run_dir = os.path.abspath(args.run_dir)
    config = read_train_config(run_dir)
    try:
        snapshot = find_snapshot(run_dir)
    except SnapshotError as error:
        raise CommandError(str(error)) from None
    if snapshot is None:
        raise CommandError(f"{run_dir} holds no snapshot (params.pkl or itr_<N>.pkl) to resume "
                           f"from: it stopped before its first log point, or ran with "
                           f"--snapshot-mode none. Files: {sorted(os.listdir(run_dir))}.")
    try:
        runner, _ = build_experiment(config)
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise CommandError(f"{run_dir}/params.json: {error}") from None
    base = os.path.basename(run_dir)
    run_ID = config.get("run_ID")  # A renamed directory keeps the run's own run_ID.
    if not isinstance(run_ID, (int, str)) or isinstance(run_ID, bool):
        run_ID = base[len("run_"):] if base.startswith("run_") else base
        run_ID = int(run_ID) if run_ID.isdigit() else run_ID
    snapshot_mode = config.get("snapshot_mode", "last")
    name = config.get("name", base)
    if not isinstance(snapshot_mode, str) or not isinstance(name, str):
        key, value = ("snapshot_mode", snapshot_mode) if not isinstance(snapshot_mode, str) \
            else ("name", name)
        raise CommandError(f"{run_dir}/params.json: {key} must be a string, got {value!r}.")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(logger_context_at(
                run_dir, run_ID, name, config, snapshot_mode=snapshot_mode, resume=True))
        except (ValueError, FileExistsError) as error:  # Another setting, no snapshot.
            raise CommandError(str(error)) from None
        try:
            runner.train()
        except SnapshotError as error:  # Unreadable, or does not fit the rebuilt agent.
            raise CommandError(str(error)) from None
    print(f"Finished. Run directory: {run_dir}", flush=True)
    return 0


def read_train_config(run_dir: str) -> dict:
    """The config `rlframe train` recorded in ``run_dir/params.json``.

    Raises:
        CommandError: ``run_dir`` is not a directory, or its params.json is missing, not
            JSON, not an object, or lacks ``algo`` and ``env_id``.
    """
    if not os.path.isdir(run_dir):
        raise CommandError(f"{run_dir} is not a directory.")
    path = os.path.join(run_dir, "params.json")
    if not os.path.exists(path):
        raise CommandError(f"{run_dir} holds no params.json: not a run directory "
                           f"(files: {sorted(os.listdir(run_dir))}).")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommandError(f"{path} is not readable JSON ({error}); it should hold the "
                           "run's settings as `rlframe train` wrote them.") from None
    if not isinstance(config, dict):
        raise CommandError(f"{path} holds a JSON {_json_type(config)}, not an object of the "
                           "run's settings as `rlframe train` writes them.")
    if "algo" not in config or "env_id" not in config:
        raise CommandError(f"{run_dir} was not made by `rlframe train` (its params.json has no "
                           "algo and env_id): resume it by running its script again with "
                           "logger_context(..., resume=True).")
    return config


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean",
             int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
