"""``rlframe autotune ALGO ENV_ID``: measure the sampler set-ups here, keep the fastest."""
from __future__ import annotations

import argparse
import json
import os

from rlframe.cli import CommandError
from rlframe.cli.choices import ALGO_NAMES, AUTOTUNE_BACKENDS, SAMPLER_NAMES

DESCRIPTION = """\
Measure, for a few seconds each, the ways this machine can run ALGO on ENV_ID with
rlframe's standard stack (those of `rlframe train`): the sampler (serial, cpu, gpu,
alternating) and its worker count, the env backend (plain, gymnasium's vector env,
EnvPool where installed), batch_B for off-policy algorithms, and the torch threads of
the training process. Each set-up trains (sampling and updates) in a process of its
own; all get a short measurement, the best quarter a longer one. The table of env
steps/s is printed, and the fastest set-up is written as a config that
`rlframe train ALGO ENV_ID --config FILE` takes.
"""

EPILOG = """\
examples:
  rlframe autotune ppo pong
  rlframe train ppo pong --config autotune_ppo_pong.json
  rlframe autotune sac HalfCheetah-v5 --samplers serial cpu --seconds 5 15
  rlframe autotune dqn CartPole-v1 --batch-B 8 16 32 -o dqn_fast.json
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``autotune`` subcommand.

    Args:
        subparsers: the ``rlframe`` parser's subparsers.

    Returns:
        The ``autotune`` parser.
    """
    parser = subparsers.add_parser(
        "autotune", help="measure sampler set-ups on this machine and write the fastest",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("algo", metavar="ALGO", help="algorithm: " + ", ".join(ALGO_NAMES))
    add("env_id", metavar="ENV_ID", help="gymnasium id or Atari game")
    add("-o", "--output", metavar="FILE",
        help="where to write the chosen config (default: autotune_<ALGO>_<ENV_ID>.json)")
    add("--seconds", metavar="S", type=float, nargs="+", default=[1., 5.],
        help="measuring time per set-up in each round, at least one iteration (default: 1 5)")
    add("--samplers", metavar="NAME", nargs="+", default=list(SAMPLER_NAMES),
        help=f"samplers to try (default: {' '.join(SAMPLER_NAMES)})")
    add("--backends", metavar="NAME", nargs="+",
        help=f"env backends to try, of {', '.join(AUTOTUNE_BACKENDS)} (default: those that "
             "can run the env)")
    add("--batch-B", dest="batch_B", metavar="B", type=int, nargs="+",
        help="batch_B values to try (default: the preset's; off-policy: also twice it)")
    add("--torch-threads", dest="torch_threads", metavar="K", type=int, nargs="+",
        help="torch threads of the training process to try (default: 1 and all cores)")
    add("--batch-T", dest="batch_T", metavar="T", type=int,
        help="time steps per env per iteration (default: the preset's)")
    add("--config", metavar="JSON", help="JSON object or file of keyword sections, as for "
        "`rlframe train --config`, kept in every set-up")
    add("--cuda-idx", metavar="I", type=int, help="GPU for the model and updates")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Measure, print the table, write the chosen config; returns 0.

    Raises:
        CommandError: a bad name, value or file, or no set-up could run.
    """
    for name in args.samplers:
        if name not in SAMPLER_NAMES:
            raise CommandError(f"--samplers: unknown sampler {name!r}; samplers: "
                               f"{', '.join(SAMPLER_NAMES)}.")
    for name in args.backends or ():
        if name not in AUTOTUNE_BACKENDS:
            raise CommandError(f"--backends: unknown env backend {name!r}; backends: "
                               f"{', '.join(AUTOTUNE_BACKENDS)}.")
    for option, values in (("--seconds", args.seconds), ("--batch-B", args.batch_B),
                           ("--torch-threads", args.torch_threads)):
        if values is not None and any(v <= 0 for v in values):
            raise CommandError(f"{option} takes positive values, got {values}.")
    output = args.output or f"autotune_{args.algo}_{args.env_id.replace('/', '-')}.json"
    if os.path.isdir(output):
        raise CommandError(f"--output {output!r} is a directory; name a file.")
    from rlframe.cli.train import load_config_arg
    from rlframe.presets.autotune import autotune
    from rlframe.utils.system import warn_if_cpus_busy
    warn_if_cpus_busy("rlframe autotune")
    config = {}
    for key in ("batch_T", "cuda_idx"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    try:
        if args.config:
            config["kwargs"] = load_config_arg(args.config)
        result = autotune(args.algo, args.env_id, config, seconds=args.seconds,
                          samplers=args.samplers, backends=args.backends,
                          batch_Bs=args.batch_B, torch_threads=args.torch_threads,
                          progress=lambda line: print(line, flush=True))
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        raise CommandError(" ".join(str(error).split())) from None
    print()
    print(result.table())
    with open(output, "w", encoding="utf-8") as f:
        json.dump(result.config, f, indent=2)
        f.write("\n")
    print(f"\nChosen: {result.best.label}. Config written to {output}; train with\n"
          f"  rlframe train {args.algo} {args.env_id} --config {output}", flush=True)
    return 0
