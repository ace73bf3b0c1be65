"""``rlframe plot``: learning curves of runs to an image file."""
from __future__ import annotations

import argparse
import os

from rlframe.cli import CommandError

DEFAULT_OUT = "learning_curves.png"

EXAMPLES = """\
Each RUN_DIR is a run directory (holding progress.csv) or a folder holding
run_* directories at any depth (an experiment or a sweep). Runs whose params.json
differ only in run_ID and seeds form one setting, drawn as its mean over runs in
a band from the minimum to the maximum; curves end where the setting's shortest
run ends. KEY and X_KEY are progress.csv columns, in full or by their last
'/' part (CumSteps finds Diagnostics/CumSteps).

examples:
  rlframe plot data/local/20240101/120000/quickstart
  rlframe plot sweep/lr_1e-3 sweep/lr_3e-4 -o lr_sweep.png
  rlframe plot run_0 run_1 --key LengthAverage --x-key "CumTime (s)" -o time.pdf
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``plot`` command to the ``rlframe`` parser's subparsers."""
    parser = subparsers.add_parser(
        "plot", help="plot learning curves of runs to an image file",
        description="Plot learning curves (mean and min-max over runs) of runs' progress.csv.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directory, or a folder holding run_* directories")
    parser.add_argument("-o", "--out", default=DEFAULT_OUT, metavar="FILE",
                        help=f"image to write, format by extension (default: ./{DEFAULT_OUT})")
    parser.add_argument("--key", default="ReturnAverage",
                        help="y column (default: ReturnAverage)")
    parser.add_argument("--x-key", default="CumSteps", help="x column (default: CumSteps)")
    parser.add_argument("--title", default=None, help="figure title (default: KEY vs X_KEY)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Write the plot and print its path; user errors become ``CommandError``."""
    from rlframe.utils.plotting import PlotError, format_unlogged, plot_runs, unlogged_runs

    for run_dir in args.run_dirs:
        if os.path.exists(run_dir) and not os.path.isdir(run_dir):
            raise CommandError(f"{run_dir} is a file, not a run directory (a folder holding "
                               "progress.csv) or a folder holding run_* directories.")
    try:
        path = plot_runs(args.run_dirs, args.out, key=args.key, x_key=args.x_key,
                         title=args.title)
        waiting = unlogged_runs(args.run_dirs, args.key, args.x_key)
    except (PlotError, OSError, ImportError) as e:  # OSError: paths, permissions
        raise CommandError(e) from e
    if waiting:
        print(f"Left out, nothing logged yet: {format_unlogged(waiting)}.")
    print(path)
    return 0
