"""Learning curves from run directories: read ``progress.csv``, group runs, plot.

A run directory is what ``logger_context`` writes, ``<experiment>/run_<run_ID>/``
(or ``run_<run_ID>-1``, ...) with ``params.json`` and ``progress.csv``. Runs whose
``params.json`` agree except for ``run_ID`` and seeds, in experiment folders of the
same name, form one *setting*; a plot shows each setting's mean curve over its
runs with a min-max band. Plotting needs matplotlib (``pip install rlframe[plots]``)
and draws with the non-interactive Agg canvas, never through pyplot.

    from rlframe.utils.plotting import plot_runs
    plot_runs(["data/local/20240101/120000/quickstart"], "curves.png")
"""
from __future__ import annotations

import csv
import dataclasses
import difflib
import json
import math
import os
import re
from typing import Any, Iterable

import numpy as np

_RUN_DIR_NAME = re.compile(r"run_\d+(-\d+)?$")
# Config keys that tell runs of one setting apart (compared by their last dotted part).
_RUN_KEYS = ("run_id", "seed")
_X_LABELS = {
    "CumSteps": "Environment steps",
    "CumTime (s)": "Wall-clock time (s)",
    "Iteration": "Iteration",
    "CumUpdates": "Gradient updates",
    "CumCompletedTrajs": "Completed episodes",
}


class PlotError(ValueError):
    """Run data that cannot be plotted as asked: the message says what and where."""


@dataclasses.dataclass
class SettingCurve:
    """One setting's learning curve on the x range that all its runs cover.

    Attributes:
        label: readable name of the setting (experiment folder and differing params).
        run_dirs: the setting's runs.
        x: [N] increasing x values (the union of the runs' logged x values).
        mean: [N] mean over runs of the y values, interpolated at ``x``.
        low: [N] minimum over runs.
        high: [N] maximum over runs.
    """
    label: str
    run_dirs: list[str]
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def load_progress(run_dir: str) -> dict[str, np.ndarray]:
    """Columns of ``<run_dir>/progress.csv`` as float arrays, in the file's order.

    Cells that are empty or not numbers (e.g. a repeated header line) become NaN.

    Args:
        run_dir: a run directory, or the path of a ``progress.csv`` itself.
    """
    path = run_dir if run_dir.endswith(".csv") else os.path.join(run_dir, "progress.csv")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no progress.csv in {run_dir}: not a run directory, or the "
                                "run stopped before its first log point")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or not rows[0]:
        raise PlotError(f"{path} is empty")
    header, body = rows[0], rows[1:]
    table = np.full((len(body), len(header)), np.nan)
    for i, row in enumerate(body):
        for j, cell in enumerate(row[:len(header)]):
            table[i, j] = _to_float(cell)
    return {name: table[:, j] for j, name in enumerate(header)}


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def resolve_key(columns: Iterable[str], key: str, where: str = "progress.csv") -> str:
    """The column that ``key`` names: itself, or the one column ending in ``/<key>``.

    So ``CumSteps`` finds ``Diagnostics/CumSteps``. An unknown key raises a
    ``PlotError`` listing close names and all columns.

    Args:
        columns: the column names of a progress.csv.
        key: a full column name or its last ``/`` part.
        where: the file named in the error message.
    """
    columns = list(columns)
    if key in columns:
        return key
    ends = [c for c in columns if c.rsplit("/", 1)[-1] == key]
    if len(ends) == 1:
        return ends[0]
    if len(ends) > 1:
        raise PlotError(f"key {key!r} is ambiguous in {where}: give one of {ends}")
    short = {c.rsplit("/", 1)[-1]: c for c in columns}
    close = difflib.get_close_matches(key, list(short) + columns, n=6, cutoff=0.6)
    close = list(dict.fromkeys(short.get(c, c) for c in close))[:3]
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise PlotError(f"unknown key {key!r} in {where}.{hint} "
                    f"Available columns: {', '.join(columns)}")


def find_run_dirs(paths: Iterable[str]) -> list[str]:
    """Run directories named by ``paths``, in order, each once.

    A path holding a ``progress.csv`` is a run; any other directory (an
    experiment or sweep folder) stands for the ``run_*`` directories below it.

    Args:
        paths: run directories and folders that contain runs.
    """
    found: list[str] = []
    for path in paths:
        for run_dir in _runs_under(path):
            if run_dir not in found:
                found.append(run_dir)
    return found


def _runs_under(path: str) -> list[str]:
    path = os.path.normpath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such directory: {path}")
    if os.path.isfile(os.path.join(path, "progress.csv")) or _RUN_DIR_NAME.match(
            os.path.basename(path)):
        return [path]
    runs = []
    for parent, dirnames, _ in os.walk(path):
        dirnames.sort()
        runs += [os.path.join(parent, d) for d in dirnames if _RUN_DIR_NAME.match(d)]
        dirnames[:] = [d for d in dirnames if not _RUN_DIR_NAME.match(d)]
    if not runs:
        raise FileNotFoundError(f"{path} holds no progress.csv and no run_* directories")
    return runs


def group_runs(run_dirs: Iterable[str]) -> dict[str, list[str]]:
    """Runs grouped into settings, keyed by a readable label, in first-seen order.

    Runs belong to one setting when their experiment folders (the run directory's
    parent) have the same name and their ``params.json`` agree on every key except
    ``run_ID`` and seeds (keys named ``seed`` or ending in ``seed``, at any depth).
    The label is the folder name plus the params that differ between settings,
    e.g. ``sweep (algo.learning_rate=0.001)``.

    Args:
        run_dirs: run directories (each with ``params.json``; a missing one counts as {}).
    """
    groups: dict[tuple[str, str], list[str]] = {}
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for run_dir in run_dirs:
        flat = _setting_params(run_dir)
        experiment = os.path.basename(os.path.dirname(os.path.normpath(run_dir)))
        key = (experiment, json.dumps(flat, sort_keys=True))
        groups.setdefault(key, []).append(run_dir)
        params[key] = flat
    differing = _differing_keys(list(params.values()))
    labeled: dict[str, list[str]] = {}
    for key, runs in groups.items():
        label = _label(key[0], params[key], differing)
        if label in labeled:  # Values that print alike, e.g. 1 and "1".
            label = f"{label} #{len(labeled) + 1}"
        labeled[label] = runs
    return labeled


def _setting_params(run_dir: str) -> dict[str, Any]:
    path = os.path.join(run_dir, "params.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise PlotError(f"{path} is not valid JSON: {e}") from e
    return {k: v for k, v in _flatten(config).items()
            if not k.rsplit(".", 1)[-1].lower().endswith(_RUN_KEYS)}


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _differing_keys(settings: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for flat in settings for k in flat})
    missing = object()
    return [k for k in keys
            if len({json.dumps(s.get(k, missing), default=repr) for s in settings}) > 1]


def _label(experiment: str, flat: dict[str, Any], differing: list[str]) -> str:
    parts = [f"{k}={flat[k]}" for k in differing if k in flat]
    return f"{experiment} ({', '.join(parts)})" if parts else experiment


def unlogged_runs(paths: Iterable[str], key: str = "ReturnAverage",
                  x_key: str = "CumSteps") -> list[tuple[str, str]]:
    """The runs under ``paths`` that have logged no ``key`` yet (a run just started, or
    resumed and not yet at its next log point), which :func:`learning_curves` and
    ``rlframe report`` leave out, each with why: ``(run_dir, reason)``.

    Raises:
        PlotError: a progress.csv with rows but no ``key`` or ``x_key`` column.
    """
    return split_logged(find_run_dirs(paths), key, x_key)[1]


def format_unlogged(unlogged: list[tuple[str, str]]) -> str:
    """``unlogged_runs``'s list as one line: ``run_0 (no progress.csv yet); run_1 (...)``."""
    return "; ".join(f"{run} ({why})" for run, why in unlogged)


def split_logged(run_dirs: list[str], key: str, x_key: str
                 ) -> tuple[dict[str, dict[str, np.ndarray]], list[tuple[str, str]]]:
    """``run_dirs`` parted into those with at least one row of ``x_key`` and ``key``
    (their progress.csv columns, each file read once) and the others with why."""
    logged, unlogged = {}, []
    for run in run_dirs:
        path = os.path.join(run, "progress.csv")
        if not os.path.isfile(path):
            unlogged.append((run, "no progress.csv yet"))
            continue
        try:
            columns = load_progress(run)
        except PlotError:  # Created, its header not yet written.
            unlogged.append((run, "progress.csv is empty"))
            continue
        x, y = (columns[resolve_key(columns, k, path)] for k in (x_key, key))
        if not (np.isfinite(x) & np.isfinite(y)).any():
            unlogged.append((run, f"no {key.rsplit('/', 1)[-1]} logged yet"))
            continue
        logged[run] = columns
    return logged, unlogged


def logged_runs(run_dirs: list[str], key: str, x_key: str) -> dict[str, dict[str, np.ndarray]]:
    """The logged part of :func:`split_logged`; a ``PlotError`` naming each run and why
    when none has logged ``key``."""
    logged, unlogged = split_logged(run_dirs, key, x_key)
    if not logged:
        raise PlotError("no run has logged a value yet: " + format_unlogged(unlogged))
    return logged


def learning_curves(run_dirs: Iterable[str], key: str = "ReturnAverage",
                    x_key: str = "CumSteps") -> list[SettingCurve]:
    """Each setting's mean and min-max of ``key`` against ``x_key``.

    Rows where either value is NaN (e.g. returns before the first finished
    episode) are skipped, and so are runs with no row left (:func:`unlogged_runs`).
    Runs are linearly interpolated onto the union of their logged x values, cut to
    the x range that every run of the setting covers, so a setting's curve ends
    where its shortest run ends.

    Args:
        run_dirs: run directories or folders holding runs (see ``find_run_dirs``).
        key: y column, a full name or its last ``/`` part (``ReturnAverage``).
        x_key: x column, likewise (``CumSteps`` finds ``Diagnostics/CumSteps``).
    """
    groups = group_runs(logged_runs(find_run_dirs(run_dirs), key, x_key))
    return [_setting_curve(label, runs, key, x_key) for label, runs in groups.items()]


def _setting_curve(label: str, runs: list[str], key: str, x_key: str) -> SettingCurve:
    xy = [run_xy(run, key, x_key) for run in runs]
    start, end = max(x[0] for x, _ in xy), min(x[-1] for x, _ in xy)
    if start > end:
        raise PlotError(f"the runs of {label!r} share no range of {x_key}: "
                        + ", ".join(f"{run}: {x[0]:g}..{x[-1]:g}" for run, (x, _) in zip(runs, xy)))
    grid = np.unique(np.concatenate([x for x, _ in xy]))
    grid = grid[(grid >= start) & (grid <= end)]
    ys = np.stack([np.interp(grid, x, y) for x, y in xy])
    return SettingCurve(label=label, run_dirs=list(runs), x=grid, mean=ys.mean(axis=0),
                        low=ys.min(axis=0), high=ys.max(axis=0))


def run_xy(run_dir: str, key: str, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """A run's (x, y) rows without NaNs, sorted by x."""
    return columns_xy(load_progress(run_dir), key, x_key,
                      os.path.join(run_dir, "progress.csv"))


def columns_xy(columns: dict[str, np.ndarray], key: str, x_key: str,
               where: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`run_xy` of columns already loaded (:func:`load_progress`) from ``where``."""
    x = columns[resolve_key(columns, x_key, where)]
    y = columns[resolve_key(columns, key, where)]
    keep = np.isfinite(x) & np.isfinite(y)
    if not keep.any():
        raise PlotError(f"{where} has no row where both {x_key!r} and {key!r} are numbers")
    order = np.argsort(x[keep], kind="stable")
    return x[keep][order], y[keep][order]


def format_count(value: float, _pos: int | None = None) -> str:
    """Short tick label for a count: 950, 20k, 1.5M, 2B.

    Args:
        value: the number.
        _pos: tick position (unused; matplotlib's ``FuncFormatter`` passes it).
    """
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.4g}"


def plot_runs(run_dirs: Iterable[str], out_file: str, key: str = "ReturnAverage",
              x_key: str = "CumSteps", title: str | None = None) -> str:
    """Plot each setting's learning curve to ``out_file``; returns its absolute path.

    Each setting is a line (mean over its runs) in a band (min to max over runs);
    see ``learning_curves`` for grouping, NaN rows and runs of different lengths.
    The file format follows the extension (``.png``, ``.pdf``, ``.svg``, ...).

    Args:
        run_dirs: run directories or folders holding runs.
        out_file: image file to write; its directory must exist.
        key: y column (full name or last ``/`` part).
        x_key: x column.
        title: figure title; default ``"<key> vs <x_key>"``.
    """
    curves = learning_curves(run_dirs, key=key, x_key=x_key)
    out_file = os.path.abspath(out_file)
    if not os.path.isdir(os.path.dirname(out_file)):
        raise FileNotFoundError(f"the directory of {out_file} does not exist")
    figure = _figure(curves, key, x_key, title)
    check_format(figure, out_file)
    figure.savefig(out_file, dpi=150, bbox_inches="tight")
    return out_file


def _figure(curves: list[SettingCurve], key: str, x_key: str, title: str | None) -> Any:
    Figure, FigureCanvasAgg, FuncFormatter = matplotlib_classes()
    figure = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    handles, labels = [], []
    for curve in curves:
        line, = ax.plot(curve.x, curve.mean, lw=1.8, marker="o" if len(curve.x) == 1 else None)
        band = ax.fill_between(curve.x, curve.low, curve.high, color=line.get_color(),
                               alpha=0.2, lw=0)
        n = len(curve.run_dirs)
        handles.append((band, line))  # The legend draws the line over its band.
        labels.append(f"{curve.label}, {n} run{'s' if n > 1 else ''}")
    short_x = x_key.rsplit("/", 1)[-1]
    ax.set_xlabel(_X_LABELS.get(short_x, short_x))
    ax.set_ylabel(key.rsplit("/", 1)[-1])
    ax.xaxis.set_major_formatter(FuncFormatter(format_count))
    ax.grid(alpha=0.3)
    ax.set_title(title or f"{key.rsplit('/', 1)[-1]} vs {_X_LABELS.get(short_x, short_x).lower()}")
    ax.legend(handles, labels, title="line: mean over runs; band: min-max", loc="upper left",
              bbox_to_anchor=(1.02, 1.0), borderaxespad=0., fontsize="small",
              title_fontsize="small", frameon=False)
    return figure


def check_format(figure: Any, out_file: str) -> None:
    """A ``PlotError`` unless ``figure``'s canvas writes ``out_file``'s extension."""
    extension = os.path.splitext(out_file)[1].lstrip(".").lower()
    supported = figure.canvas.get_supported_filetypes()
    if extension not in supported:
        raise PlotError(f"cannot write {out_file!r}: the extension must be one of "
                        f"{', '.join('.' + e for e in sorted(supported))}")


def matplotlib_classes() -> tuple[Any, Any, Any]:
    """matplotlib's Figure, Agg canvas and FuncFormatter, imported on first use."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install rlframe[plots]") from e
    return Figure, FigureCanvasAgg, FuncFormatter
