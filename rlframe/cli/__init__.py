"""The ``rlframe`` command: ``rlframe <command> [options]`` (also ``python -m rlframe``).

Each command is a module of this package with two functions:

- ``add_parser(subparsers) -> argparse.ArgumentParser`` adds its parser (with an
  epilog of examples) and sets ``run`` as the parser's default;
- ``run(args) -> int`` does the work and returns the exit status.

Commands raise ``CommandError`` for a user error; ``main`` prints its message on one
line and exits with status 2. Modules are imported to build the parser, so heavy
imports (torch, matplotlib) belong inside ``run``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# The commands, in the order ``rlframe --help`` lists them: one module name each.
COMMANDS = (
    "train",
    "evaluate",
    "resume",
    "plot",
    "report",
    "benchmark",
    "autotune",
    "tune",
)

USER_ERROR_STATUS = 2


class CommandError(Exception):
    """A user error (bad path, unknown column, ...): printed as one line, status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The ``rlframe`` parser with one subparser per module in ``COMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="rlframe", description="rlframe: modular deep reinforcement learning.",
        epilog="examples:\n  rlframe plot data/local/20240101/120000/quickstart\n"
               "  rlframe plot --help",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rlframe.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``rlframe`` command line; returns the exit status.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv``.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse has already printed.
        return e.code if isinstance(e.code, int) else USER_ERROR_STATUS
    if args.command is None:
        parser.print_help(sys.stderr)
        return USER_ERROR_STATUS
    try:
        return args.run(args)
    except CommandError as e:
        print(f"rlframe {args.command}: error: {e}", file=sys.stderr)
        return USER_ERROR_STATUS
