"""Scores of run directories, by setting: final and best returns with confidence
intervals, a Markdown table, and interquartile-mean learning curves.

Runs are found and grouped into settings as ``rlframe plot`` groups them
(:func:`rlframe.utils.plotting.group_runs`: the same experiment folder name and the
same ``params.json`` but for ``run_ID`` and seeds); a setting whose folder holds no
other setting is named by the folder alone. A setting's task is its
``params.json`` ``env_id`` (what ``rlframe train`` records). Each run contributes its
``key`` column (``ReturnAverage``: the evaluation's return where the runner evaluates,
the training episodes' otherwise) against ``x_key`` (``CumSteps``):

* *final*: its value at the last ``x_key`` every run of the setting reached
  (interpolated between log points), so that all runs count at the same budget; with a
  ``final_window`` W, the mean of its values logged in the last W steps up to there
  (a few evaluations of a few episodes each say more than the last one alone);
* *best*: its largest value up to there.

Across a setting's runs each is summarized by mean, median and interquartile mean,
with stratified bootstrap intervals (:mod:`rlframe.utils.report.stats`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable

import numpy as np

from rlframe.utils.plotting import (PlotError, columns_xy, find_run_dirs, format_count,
                                    group_runs, logged_runs)
from rlframe.utils.report.stats import (STATISTICS, Comparison, Estimate, compare,
                                        interval_estimate)

UNKNOWN_TASK = "(no env_id)"


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published score: ``score`` at ``steps`` env steps, from ``source``, comparable with
    the runs' progress.csv column ``key`` (Atari papers report the game score, which
    rlframe logs as ``GameScoreAverage`` beside the clipped ``ReturnAverage``)."""

    score: float
    steps: int
    source: str
    key: str = "ReturnAverage"


@dataclasses.dataclass(frozen=True)
class SettingReport:
    """One setting's scores.

    Attributes:
        label: the setting's name (experiment folder and the params that differ).
        task: its ``env_id``.
        run_dirs: its runs.
        steps: the last ``x_key`` value every run reached (where *final* is read).
        final: statistic name -> :class:`Estimate` of the runs' final values.
        best: statistic name -> :class:`Estimate` of the runs' best values.
        finals: [runs] each run's final value.
        final_window: the steps before ``steps`` whose values *final* averages (0: the
            value at ``steps`` alone).
        experiment: the name of the runs' experiment folder (a suite entry's label).
        xy: per run, its ``(x_key, key)`` rows as read (NaN rows left out), which
            :func:`iqm_curves` draws from.
        bests: [runs] each run's best value.
        wall_s: [runs] each run's last ``CumTime (s)`` (NaN where it has none).
    """
    label: str
    task: str
    run_dirs: tuple[str, ...]
    steps: float
    final: dict[str, Estimate]
    best: dict[str, Estimate]
    finals: tuple[float, ...]
    final_window: float = 0.
    experiment: str = ""
    xy: tuple[tuple[np.ndarray, np.ndarray], ...] = dataclasses.field(default=(),
                                                                      compare=False)
    bests: tuple[float, ...] = ()
    wall_s: tuple[float, ...] = ()


def task_of(run_dir: str) -> str:
    """The ``env_id`` in ``run_dir``'s ``params.json`` (``UNKNOWN_TASK`` without one)."""
    path = os.path.join(run_dir, "params.json")
    if not os.path.isfile(path):
        return UNKNOWN_TASK
    with open(path) as f:
        try:
            params = json.load(f)
        except json.JSONDecodeError as e:
            raise PlotError(f"{path} is not valid JSON: {e}") from e
    env_id = params.get("env_id") if isinstance(params, dict) else None
    return str(env_id) if env_id else UNKNOWN_TASK


def experiment_of(run_dir: str) -> str:
    """The name of a run's experiment folder (its parent directory)."""
    return os.path.basename(os.path.dirname(os.path.normpath(run_dir)))


def setting_reports(paths: Iterable[str], key: str = "ReturnAverage", x_key: str = "CumSteps",
                    confidence: float = 0.95, n_resamples: int = 2000,
                    seed: int | None = 0, final_window: float = 0.) -> list[SettingReport]:
    """Each setting's final and best ``key`` over its runs, in first-seen order.

    Runs that have logged no ``key`` yet are left out
    (:func:`~rlframe.utils.plotting.unlogged_runs` lists them), so that a suite can be
    reported on while it runs.

    Args:
        paths: run directories and folders holding them.
        key: the score column (full name or last ``/`` part).
        x_key: the budget column.
        confidence, n_resamples, seed: of the bootstrap intervals.
        final_window: *final* is the mean of each run's values logged after
            ``end - final_window`` up to ``end`` (the last ``x_key`` every run of the
            setting reached); 0 takes the value at ``end``.

    Raises:
        ValueError: a negative ``final_window``.
        PlotError: runs that share no range of ``x_key``, a run with no value in the
            window, or no run that has logged a value.
    """
    if not final_window >= 0:
        raise ValueError(f"final_window={final_window!r}: give a number of steps >= 0 "
                         "(0: the value at the last step every run reached).")
    logged = logged_runs(find_run_dirs(paths), key, x_key)
    reports = []
    groups = group_runs(logged)
    folders = [experiment_of(runs[0]) for runs in groups.values()]
    for (label, runs), folder in zip(groups.items(), folders):
        if folders.count(folder) == 1:  # The folder names the setting: a short label.
            label = folder
        columns = [logged[run] for run in runs]
        wheres = [os.path.join(run, "progress.csv") for run in runs]
        xy = [columns_xy(c, key, x_key, where) for c, where in zip(columns, wheres)]
        wall_s = tuple(_wall_time(c, x_key, where) for c, where in zip(columns, wheres))
        end = min(x[-1] for x, _ in xy)
        finals, bests = [], []
        for run, (x, y) in zip(runs, xy):
            if x[0] > end:
                raise PlotError(f"the runs of {label!r} share no range of {x_key}: {run} "
                                f"starts at {x[0]:g}, after another run ends at {end:g}")
            finals.append(_final(x, y, end, final_window, run, x_key))
            bests.append(float(y[x <= end].max()))
        tasks = {task_of(run) for run in runs}
        task = tasks.pop() if len(tasks) == 1 else " + ".join(sorted(tasks))
        final = {name: interval_estimate({task: finals}, name, confidence, n_resamples, seed)
                 for name in STATISTICS}
        best = {name: interval_estimate({task: bests}, name, confidence, n_resamples, seed)
                for name in STATISTICS}
        reports.append(SettingReport(label, task, tuple(runs), float(end), final, best,
                                     tuple(finals), float(final_window), folder, tuple(xy),
                                     tuple(bests), wall_s))
    return reports


def _final(x: np.ndarray, y: np.ndarray, end: float, window: float, run: str,
           x_key: str) -> float:
    """A run's value at ``end`` (interpolated), or its mean over ``(end - window, end]``."""
    if window == 0:
        return float(np.interp(end, x, y))
    inside = (x > end - window) & (x <= end)
    if not inside.any():
        raise PlotError(f"{run} logged no value in the final window ({end - window:g}, "
                        f"{end:g}] of {x_key}: give a longer final window")
    return float(y[inside].mean())


def _wall_time(columns: dict[str, np.ndarray], x_key: str, where: str) -> float:
    """The run's ``CumTime (s)`` at its last ``x_key`` row (NaN without the column)."""
    try:
        return float(columns_xy(columns, "CumTime (s)", x_key, where)[1][-1])
    except PlotError:
        return float("nan")


def _cell(estimate: Estimate) -> str:
    if np.isnan(estimate.low):
        return f"{estimate.point:.4g}"
    return f"{estimate.point:.4g} [{estimate.low:.4g}, {estimate.high:.4g}]"


def markdown_table(reports: list[SettingReport], key: str = "ReturnAverage",
                   confidence: float = 0.95,
                   references: dict[str, Reference] | None = None) -> str:
    """The reports as a Markdown table: one row per setting, IQM, mean and median of
    the final values and the IQM of the best, each with its interval in brackets; with
    ``references`` (experiment folder -> :class:`Reference`), the reference and the
    final IQM as a fraction of it, and the fractions pooled over tasks below."""
    ci = f"{confidence:.0%} CI"
    references = references or {}
    header = (f"| setting | task | runs | steps | final IQM [{ci}] | final mean [{ci}] "
              f"| final median | best IQM [{ci}] |")
    columns = 8
    if references:
        header += " reference | final IQM / reference |"
        columns += 2
    lines = [header, "|" + "---|" * columns]
    for r in reports:
        line = (f"| {r.label} | {r.task} | {len(r.run_dirs)} | {format_count(r.steps)} "
                f"| {_cell(r.final['iqm'])} | {_cell(r.final['mean'])} "
                f"| {r.final['median'].point:.4g} | {_cell(r.best['iqm'])} |")
        if references:
            ref = references.get(r.experiment)
            line += (" - | - |" if ref is None else
                     f" {ref.score:.4g} at {format_count(ref.steps)} ({ref.source}) "
                     f"| {r.final['iqm'].point / ref.score:.2f} |")
        lines.append(line)
    name = key.rsplit('/', 1)[-1]
    windows = {r.final_window for r in reports}
    if windows == {0.}:
        final = f"{name} at the last step every run of the setting reached (final)"
    elif len(windows) == 1:
        final = (f"the mean of {name} over the last {format_count(windows.pop())} steps up "
                 "to the last step every run of the setting reached (final)")
    else:
        final = f"the mean of {name} over each setting's final window (final)"
    notes = [f"Scores: {final} and its largest value up to there (best); IQM: the mean of "
             f"the middle half of the runs; intervals: stratified bootstrap, {ci}."]
    if any(np.isnan(r.final["iqm"].low) for r in reports):
        notes.append("A setting without an interval has a single run.")
    short = [r.label for r in reports if r.experiment in references
             and r.steps < references[r.experiment].steps]
    if short:
        notes.append(f"Trained for fewer steps than their reference: {', '.join(short)}.")
    text = "\n".join(lines) + "\n\n" + " ".join(notes) + "\n"
    pooled = normalized_scores(reports, references)
    if len(pooled) > 1:
        parts = [f"{name} {_cell(interval_estimate(pooled, name, confidence))}"
                 for name in ("iqm", "mean", "median")]
        tasks = {r.task for r in reports if r.label in pooled}
        over = (f"{len(pooled)} tasks" if len(tasks) == len(pooled) else
                f"{len(pooled)} settings of {len(tasks)} task{'s' if len(tasks) > 1 else ''}")
        text += (f"\nFinal scores as fractions of their references, pooled over {over} "
                 f"(each setting's runs resampled on their own): {'; '.join(parts)}.\n")
    elif len({r.task for r in reports}) > 1:
        text += "\nScores of different tasks are not pooled: they are comparable only as "
        if references:
            unscored = [r.label for r in reports if r.label not in pooled]
            text += (f"fractions of reference scores, which {', '.join(unscored)} "
                     f"{'has' if len(unscored) == 1 else 'have'} none (no entry of the suite).\n")
        else:
            text += ("fractions of reference scores (give the suite with references: "
                     "`rlframe report ... --suite SUITE`).\n")
    return text


@dataclasses.dataclass(frozen=True)
class SettingComparison:
    """A setting against a baseline setting of the same task, at the steps both reached.

    Attributes:
        label, baseline: the two settings' labels.
        task: their task.
        steps: where both are read: the smaller of the two settings' shared ends
            (each run's final value there, over the settings' final window).
        finals, baseline_finals: [runs] each run's final value there.
        final, baseline_final: the final IQM of each, with its interval.
        comparison: IQM difference (setting - baseline) and the probability that a run
            of the setting ends above a run of the baseline, with intervals.
    """
    label: str
    baseline: str
    task: str
    steps: float
    finals: tuple[float, ...]
    baseline_finals: tuple[float, ...]
    final: Estimate
    baseline_final: Estimate
    comparison: Comparison

    @property
    def verdict(self) -> str:
        """Where the setting's final IQM lies against the baseline's interval:
        ``"above"``, ``"within"``, ``"below"``, or ``"no interval"`` (a baseline of one
        run)."""
        low, high = self.baseline_final.low, self.baseline_final.high
        if np.isnan(low):
            return "no interval"
        if self.final.point > high:
            return "above"
        if self.final.point < low:
            return "below"
        return "within"


def compare_settings(reports: list[SettingReport], pairs: Iterable[tuple[str, str]],
                     confidence: float = 0.95, n_resamples: int = 2000,
                     seed: int | None = 0) -> list[SettingComparison]:
    """Each ``(label, baseline)`` pair of settings compared at the steps both reached.

    Args:
        reports: from :func:`setting_reports` (their runs' rows are read again at the
            shared budget, with the reports' final window).
        pairs: ``(setting label, baseline label)``, labels as the reports name them.
        confidence, n_resamples, seed: of the bootstrap intervals.

    Raises:
        PlotError: a label no report has (the labels there are listed), a setting
            paired with itself, settings of different tasks, or a run with no value in
            the final window at the shared budget.
    """
    by_label = {r.label: r for r in reports}
    comparisons = []
    for label, baseline in pairs:
        for name in (label, baseline):
            if name not in by_label:
                raise PlotError(f"no setting is named {name!r} among the runs; their "
                                f"settings: {', '.join(repr(k) for k in by_label)}")
        if label == baseline:
            raise PlotError(f"setting {label!r} is compared with itself: name another "
                            "setting as its baseline")
        setting, base = by_label[label], by_label[baseline]
        if setting.task != base.task:
            raise PlotError(f"setting {label!r} ({setting.task}) and its baseline "
                            f"{baseline!r} ({base.task}) are of different tasks: compare "
                            "settings of one task")
        end = min(setting.steps, base.steps)
        finals = [tuple(_final(x, y, end, r.final_window, run, "steps")
                        for run, (x, y) in zip(r.run_dirs, r.xy)) for r in (setting, base)]
        estimates = [interval_estimate({r.task: f}, "iqm", confidence, n_resamples, seed)
                     for r, f in zip((setting, base), finals)]
        comparisons.append(SettingComparison(
            label, baseline, setting.task, float(end), finals[0], finals[1], estimates[0],
            estimates[1], compare(finals[0], finals[1], "iqm", confidence, n_resamples,
                                  seed)))
    return comparisons


def comparison_table(comparisons: list[SettingComparison], confidence: float = 0.95) -> str:
    """The comparisons as a Markdown table with a note on how to read it."""
    ci = f"{confidence:.0%} CI"
    lines = [f"| setting | baseline | task | steps | final IQM [{ci}] | baseline's final IQM "
             f"[{ci}] | IQM difference [{ci}] | P(setting > baseline) [{ci}] | setting's "
             "IQM against the baseline's CI |", "|" + "---|" * 9]
    for c in comparisons:
        lines.append(f"| {c.label} | {c.baseline} | {c.task} | {format_count(c.steps)} "
                     f"| {_cell(c.final)} | {_cell(c.baseline_final)} "
                     f"| {_cell(c.comparison.difference)} | {_cell(c.comparison.probability)} "
                     f"| {c.verdict} |")
    return ("\n".join(lines) + "\n\nEach pair is read at the steps both settings reached. "
            "P(setting > baseline): the chance that a run of the setting ends above a run of "
            "the baseline (ties count half; 0.5: neither more often). Intervals: each "
            "setting's runs resampled on their own.\n")


def normalized_scores(reports: list[SettingReport],
                      references: dict[str, Reference] | None) -> dict[str, list[float]]:
    """Each referenced setting's final values divided by its reference score, keyed by
    the setting's label."""
    return {r.label: [v / references[r.experiment].score for v in r.finals]
            for r in reports if references and r.experiment in references}


def iqm_curves(reports: list[SettingReport], points: int = 50, confidence: float = 0.95,
               n_resamples: int = 1000, seed: int | None = 0) -> list[dict[str, Any]]:
    """Each setting's IQM over runs against the reports' ``x_key``, with its interval, on
    up to ``points`` of its values up to the setting's shared end (from the rows
    :func:`setting_reports` read).

    Returns:
        One dict per setting: ``label``, ``task``, ``runs`` and arrays ``x``, ``iqm``,
        ``low``, ``high`` (NaN bounds for a single run).
    """
    curves = []
    for report in reports:
        xy = report.xy
        start = max(x[0] for x, _ in xy)
        grid = np.unique(np.concatenate([x for x, _ in xy]))
        grid = grid[(grid >= start) & (grid <= report.steps)]
        if len(grid) > points:
            grid = grid[np.linspace(0, len(grid) - 1, points).round().astype(int)]
        ys = np.stack([np.interp(grid, x, y) for x, y in xy])  # [runs, points]
        estimates = [interval_estimate({report.task: ys[:, i]}, "iqm", confidence,
                                       n_resamples, seed) for i in range(len(grid))]
        curves.append(dict(label=report.label, task=report.task, runs=len(report.run_dirs),
                           x=grid, iqm=np.array([e.point for e in estimates]),
                           low=np.array([e.low for e in estimates]),
                           high=np.array([e.high for e in estimates])))
    return curves


def plot_iqm_curves(curves: list[dict[str, Any]], out_file: str, key: str = "ReturnAverage",
                    x_key: str = "CumSteps") -> str:
    """Draw :func:`iqm_curves` to ``out_file`` (one panel per task, each setting a line
    with its interval as a band); returns the file's absolute path."""
    from rlframe.utils.plotting import check_format, matplotlib_classes
    Figure, FigureCanvasAgg, FuncFormatter = matplotlib_classes()
    tasks = list(dict.fromkeys(curve["task"] for curve in curves))
    figure = Figure(figsize=(6 * len(tasks) + 3, 4.5))
    FigureCanvasAgg(figure)
    for i, task in enumerate(tasks):
        ax = figure.add_subplot(1, len(tasks), i + 1)
        for curve in (c for c in curves if c["task"] == task):
            line, = ax.plot(curve["x"], curve["iqm"], lw=1.8,
                            label=f"{curve['label']}, {curve['runs']} run"
                                  f"{'s' if curve['runs'] > 1 else ''}")
            if not np.isnan(curve["low"]).all():
                ax.fill_between(curve["x"], curve["low"], curve["high"],
                                color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(task)
        ax.set_xlabel(x_key.rsplit("/", 1)[-1])
        ax.set_ylabel(f"{key.rsplit('/', 1)[-1]}, IQM over runs")
        ax.xaxis.set_major_formatter(FuncFormatter(format_count))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", frameon=False)
    out_file = os.path.abspath(out_file)
    check_format(figure, out_file)
    figure.savefig(out_file, dpi=150, bbox_inches="tight")
    return out_file


def plot_performance_profile(pooled: dict[str, list[float]], out_file: str,
                             confidence: float = 0.95, seed: int | None = 0) -> str:
    """The fraction of runs (of all tasks) whose final score is above each fraction of
    its reference, with its interval as a band; returns the file's absolute path."""
    from rlframe.utils.plotting import check_format, matplotlib_classes
    from rlframe.utils.report.stats import performance_profile
    Figure, FigureCanvasAgg, _ = matplotlib_classes()
    top = max(1.2, max(max(v) for v in pooled.values()) * 1.05)
    taus = np.linspace(0., top, 61)
    fraction, low, high = performance_profile(pooled, taus, confidence, seed=seed)
    figure = Figure(figsize=(6, 4))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    line, = ax.plot(taus, fraction, lw=1.8)
    if not np.isnan(low).all():
        ax.fill_between(taus, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.axvline(1., color="gray", lw=0.8, ls="--")
    ax.set_xlabel("final score / reference score (tau)")
    ax.set_ylabel("fraction of runs above tau")
    ax.set_title(f"Performance profile over {len(pooled)} tasks")
    ax.grid(alpha=0.3)
    out_file = os.path.abspath(out_file)
    check_format(figure, out_file)
    figure.savefig(out_file, dpi=150, bbox_inches="tight")
    return out_file
