"""``rlframe report``: scores of runs by setting, with confidence intervals."""
from __future__ import annotations

import argparse
import os

from rlframe.cli import CommandError

EXAMPLES = """\
Each RUN_DIR is a run directory (holding progress.csv) or a folder holding run_*
directories at any depth. Runs whose params.json differ only in run_ID and seeds form
one setting; its task is params.json's env_id. For each setting the table gives the
final score (KEY at the last step every run of the setting reached, or with
--final-window STEPS its mean over the values logged in the last STEPS steps up to
there) and the best one (the largest up to there), as the interquartile mean, mean
and median over runs, with 95% stratified bootstrap intervals. With -o DIR it also
writes DIR/report.md, the same per setting in DIR/report.csv, each run's final and
best score, wall time, CPU, commit and the CPUs other processes kept busy at its
start in DIR/runs.csv, and DIR/curves.png (IQM over runs against X_KEY, with its
interval as a band; needs matplotlib). With --suite
SUITE, each setting whose folder is an entry's label (as `rlframe benchmark` writes
them) gets the entry's reference score and its final IQM as a fraction of it; the
fractions of several tasks are pooled (IQM, mean, median with intervals) and drawn as
a performance profile (DIR/profile.png). A reference is a score of one column (its
"key" in the suite, ReturnAverage unless it says otherwise: Atari's are game scores,
GameScoreAverage); without --key the runs are scored by the column the references name
(runs of no entry, another framework's alone, by the column all the suite's name), and
a reference of another column than --key is left out of the comparison, and named.
With --compare SETTING BASELINE (repeatable; labels as the table names the settings),
the two settings of one task are read at the steps both reached: each one's final IQM,
their difference and the probability that a run of SETTING ends above a run of
BASELINE, with intervals, and whether SETTING's IQM is above, within or below
BASELINE's interval (also in DIR/comparisons.csv).
Runs that have logged no KEY yet (a suite still running) are left out, and named
below the table.

examples:
  rlframe report runs/ppo_HalfCheetah-v5
  rlframe report runs/sac runs/td3 -o report/
  rlframe report results/mujoco --suite benchmarks/suite/mujoco_1m.json -o results/mujoco
  rlframe report runs --key "Diagnostics/CumTime (s)" --confidence 0.9
  rlframe report results/mujoco --final-window 100000
  rlframe report runs/sac_Hopper-v5 runs_sb3/sac_Hopper-v5_sb3 \\
      --compare sac_Hopper-v5 sac_Hopper-v5_sb3
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``report`` command to the ``rlframe`` parser's subparsers."""
    parser = subparsers.add_parser(
        "report", help="scores of runs by setting, with confidence intervals",
        description="Final and best scores of runs by setting: interquartile mean, mean "
                    "and median over runs with stratified bootstrap intervals.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directory, or a folder holding run_* directories")
    parser.add_argument("-o", "--out", metavar="DIR", default=None,
                        help="also write report.md, report.csv, runs.csv and curves.png into DIR "
                             "(made if missing)")
    parser.add_argument("--key", default=None,
                        help="score column of progress.csv (default: the column the suite's "
                             "references name, else ReturnAverage)")
    parser.add_argument("--x-key", default="CumSteps",
                        help="budget column (default: CumSteps)")
    parser.add_argument("--suite", metavar="SUITE", default=None,
                        help="suite file whose reference scores the runs are compared with "
                             "(runs in <DIR>/<label>/run_<seed>, as `rlframe benchmark` "
                             "writes them)")
    parser.add_argument("--final-window", type=float, default=0, metavar="STEPS",
                        help="final score: the mean of each run's values logged in the last "
                             "STEPS steps up to the shared end (default: 0, the value at "
                             "the end alone)")
    parser.add_argument("--compare", nargs=2, action="append", default=[],
                        metavar=("SETTING", "BASELINE"),
                        help="compare SETTING with BASELINE (setting labels, as in the "
                             "table) at the steps both reached; repeatable")
    parser.add_argument("--confidence", type=float, default=0.95,
                        help="confidence level of the intervals (default: 0.95)")
    parser.add_argument("--resamples", type=int, default=2000,
                        help="bootstrap resamples (default: 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampling")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the table (and write the files); user errors become ``CommandError``."""
    if not 0 < args.confidence < 1:
        raise CommandError(f"--confidence {args.confidence}: give a level in (0, 1), e.g. 0.95")
    if not args.final_window >= 0:
        raise CommandError(f"--final-window {args.final_window:g}: give a number of steps "
                           ">= 0 (0: the value at the last step every run reached)")
    if args.resamples < 1:
        raise CommandError(f"--resamples {args.resamples}: give a positive number")
    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CommandError(f"-o {args.out} is a file; name a directory for report.md and "
                           "curves.png")
    references = _references(args.suite)
    try:
        from rlframe.utils.plotting import (PlotError, find_run_dirs, format_unlogged,
                                            unlogged_runs)
        from rlframe.utils.report.records import (comparison_rows, run_rows, setting_rows,
                                                  write_csv)
        from rlframe.utils.report.runs import (compare_settings, comparison_table,
                                               experiment_of, iqm_curves,
                                               markdown_table, normalized_scores,
                                               plot_iqm_curves, plot_performance_profile,
                                               setting_reports)
    except ImportError as e:
        raise CommandError(f"{e}; rlframe report needs scipy: pip install rlframe[report]"
                           ) from e
    try:
        folders = {experiment_of(run) for run in find_run_dirs(args.run_dirs)}
        key, references, unmatched = score_key(
            args.key, {label: ref for label, ref in references.items() if label in folders},
            args.suite, suite_references=references)
        reports = setting_reports(args.run_dirs, key, args.x_key, args.confidence,
                                  args.resamples, args.seed, args.final_window)
        table = markdown_table(reports, key, args.confidence, references)
        if unmatched:
            table += (f"\nReferences left out, being scores of another column than {key}: "
                      f"{unmatched}.\n")
        comparisons = compare_settings(reports, args.compare, args.confidence,
                                       args.resamples, args.seed)
        if comparisons:
            table += "\n" + comparison_table(comparisons, args.confidence)
        waiting = unlogged_runs(args.run_dirs, key, args.x_key)
        if waiting:
            table += f"\nLeft out, nothing logged yet: {format_unlogged(waiting)}.\n"
        print(table, end="")
        if args.out is not None:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "report.md"), "w") as f:
                f.write(table)
            written = [os.path.join(args.out, "report.md"),
                       write_csv(setting_rows(reports, references),
                                 os.path.join(args.out, "report.csv")),
                       write_csv(run_rows(reports), os.path.join(args.out, "runs.csv"))]
            if comparisons:
                written.append(write_csv(comparison_rows(comparisons),
                                         os.path.join(args.out, "comparisons.csv")))
            curves = iqm_curves(reports, confidence=args.confidence, seed=args.seed)
            written.append(plot_iqm_curves(curves, os.path.join(args.out, "curves.png"),
                                           key, args.x_key))
            pooled = normalized_scores(reports, references)
            if len(pooled) > 1:
                written.append(plot_performance_profile(
                    pooled, os.path.join(args.out, "profile.png"), args.confidence,
                    args.seed))
            print(f"Wrote {', '.join(written)}")
    except (PlotError, FileNotFoundError, ImportError) as e:
        raise CommandError(e) from e
    return 0


def score_key(key: str | None, references: dict, suite_path: str | None,
              suite_references: dict | None = None) -> tuple[str, dict, str]:
    """The score column and the references comparable with it.

    Args:
        key: ``--key`` (None: not given).
        references: :class:`~rlframe.utils.report.runs.Reference` by entry label, of the
            settings reported.
        suite_path: ``--suite``, named in errors.
        suite_references: every entry's reference (by label), for runs of settings that
            are not the suite's entries (another framework's runs of its tasks, say).

    Returns:
        ``(key, references of that column, the others as "label (its key)", or "")``.
        Without ``key``: the column all references name; where no setting reported is
        an entry of the suite, the column all of the suite's references name;
        ReturnAverage without any (or where the suite's name several).

    Raises:
        CommandError: no ``key`` and references of different columns.
    """
    def column(name: str) -> str:  # "Diagnostics/CumTime (s)" and "CumTime (s)" are one.
        return name.rsplit("/", 1)[-1]

    if key is None:
        keys = sorted({column(ref.key) for ref in references.values()})
        if len(keys) > 1:
            by_key = "; ".join(f"{k}: " + ", ".join(label for label, ref in references.items()
                                                    if column(ref.key) == k) for k in keys)
            raise CommandError(f"--suite {suite_path}: its references are scores of "
                               f"different columns ({by_key}); give --key, and report the "
                               "runs of each column apart")
        if not keys:  # No setting of the suite's: the column the whole suite scores by.
            keys = sorted({column(ref.key) for ref in (suite_references or {}).values()})
        key = keys[0] if len(keys) == 1 else "ReturnAverage"
    same = {label: ref for label, ref in references.items() if column(ref.key) == column(key)}
    unmatched = ", ".join(f"{label} ({ref.key})" for label, ref in references.items()
                          if label not in same)
    return key, same, unmatched


def _references(suite_path: str | None) -> dict:
    """Reference scores of ``suite_path``'s entries by label ({} without a suite)."""
    if suite_path is None:
        return {}
    from rlframe.presets.suite import SuiteError, load_suite
    try:
        suite = load_suite(suite_path, check_experiments=False)
    except SuiteError as error:
        raise CommandError(f"--suite {suite_path}: {error}") from None
    return {entry.label: entry.reference for entry in suite.entries
            if entry.reference is not None}
