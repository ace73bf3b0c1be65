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
import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

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


class CommandParser(argparse.ArgumentParser):
    """A command's parser, whose usage errors hint at what the arguments meant
    (:func:`option_hints`): ``--algo ppo`` where ALGO is positional, ``--n_steps`` for
    ``--n-steps``."""

    argv: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        hints = option_hints(self.argv, self)
        super().error(message + (f" ({'; '.join(hints)})" if hints else ""))


def build_parser() -> argparse.ArgumentParser:
    """The ``rlframe`` parser with one subparser (a :class:`CommandParser`) per module in
    ``COMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="rlframe", description="rlframe: modular deep reinforcement learning.",
        epilog="examples:\n  rlframe plot data/local/20240101/120000/quickstart\n"
               "  rlframe plot --help",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=CommandParser)
    for name in COMMANDS:
        command = importlib.import_module(f"rlframe.cli.{name}").add_parser(subparsers)
        command.set_defaults(command_parser=command)  # Reports its unrecognized arguments.
    return parser


def option_hints(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """A hint for each option in ``argv`` that ``parser`` does not take: one naming a
    positional argument (``--algo``, ``--env``: other command lines spell them as options)
    is told to be given without it; one close to the parser's own (``--n_steps``) gets it.
    """
    hints = []
    options = [s for action in parser._actions for s in action.option_strings
               if s.startswith("--")]
    positionals = [action for action in parser._actions if not action.option_strings]
    for token in argv:
        name = token.split("=", 1)[0]
        if not name.startswith("--") or name == "--" or any(option.startswith(name)
                                                            for option in options):
            continue  # Not an option, or one of the parser's own (abbreviations too).
        key = name.lstrip("-").replace("-", "_").lower()
        positional = [action for action in positionals
                      if key == action.dest or action.dest.startswith(key + "_")]
        if positional:
            metavar = positional[0].metavar or positional[0].dest.upper()
            hints.append(f"{metavar} is positional: give it without {name}")
            continue
        close = [option for option in options if option.replace("_", "-") ==
                 name.replace("_", "-")] or difflib.get_close_matches(name, options, n=1,
                                                                     cutoff=0.75)
        if close:
            hints.append(f"did you mean {close[0]} for {name}?")
    return hints


def main(argv: list[str] | None = None) -> int:
    """Run the ``rlframe`` command line; returns the exit status.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv``.
    """
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # Told by the command's parser, with its usage and hints.
            getattr(args, "command_parser", parser).error(
                "unrecognized arguments: " + " ".join(extras))
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
