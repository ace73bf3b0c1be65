"""A report as CSV files: one row per setting (``report.csv``) and one per run
(``runs.csv``, with its wall time and, for ``rlframe benchmark`` runs, the machine and
commit it ran on), for spreadsheets and for publishing next to the plots."""
from __future__ import annotations

import csv
import json
import os

import numpy as np

from rlframe.utils.report.runs import Reference, SettingComparison, SettingReport
from rlframe.utils.report.stats import STATISTICS
from rlframe.utils.system import SYSTEM_FILE


def setting_rows(reports: list[SettingReport],
                 references: dict[str, Reference] | None = None) -> list[dict]:
    """One dict per setting: its label, task, runs, steps and final window (the steps
    its final values average over; 0: the value at ``steps``); ``final_`` and ``best_``
    IQM, mean and median with their interval bounds (``_low``, ``_high``); and the
    reference (score, steps, source and the column it compares with) with the final IQM as
    a fraction of it (empty without one)."""
    rows = []
    for r in reports:
        row = dict(setting=r.label, task=r.task, runs=len(r.run_dirs), steps=int(r.steps),
                   final_window=int(r.final_window))
        for part, estimates in (("final", r.final), ("best", r.best)):
            for name in STATISTICS:
                e = estimates[name]
                row.update({f"{part}_{name}": e.point, f"{part}_{name}_low": e.low,
                            f"{part}_{name}_high": e.high})
        ref = (references or {}).get(r.experiment)
        row.update(reference=ref.score if ref else "", reference_steps=ref.steps if ref else "",
                   reference_source=ref.source if ref else "",
                   reference_key=ref.key if ref else "",
                   final_iqm_fraction=r.final["iqm"].point / ref.score if ref else "")
        rows.append(row)
    return rows


def run_rows(reports: list[SettingReport]) -> list[dict]:
    """One dict per run: setting, task, run directory, seed, the last step it reached,
    its final and best values (at its setting's shared end), its wall time in seconds
    (the last ``CumTime (s)``, as :func:`~rlframe.utils.report.runs.setting_reports` read
    it), and the CPU, core count and commit of each start
    (from ``system.json``; several joined by ``"; "`` for a run resumed elsewhere)."""
    rows = []
    for r in reports:
        nans = (float("nan"),) * len(r.run_dirs)
        for run_dir, (x, _), final, best, wall_s in zip(r.run_dirs, r.xy, r.finals,
                                                        r.bests or nans, r.wall_s or nans):
            rows.append(dict(setting=r.label, task=r.task, run_dir=run_dir,
                             seed=_seed(run_dir), steps=int(x[-1]), final=final, best=best,
                             wall_s=wall_s, **_system(run_dir)))
    return rows


def comparison_rows(comparisons: list[SettingComparison]) -> list[dict]:
    """One dict per compared pair: the two labels, task and steps; each one's final IQM
    with its interval bounds; the IQM difference and the probability of improvement
    with theirs; and the verdict (the setting's IQM against the baseline's interval)."""
    rows = []
    for c in comparisons:
        row = dict(setting=c.label, baseline=c.baseline, task=c.task, steps=int(c.steps),
                   runs=len(c.finals), baseline_runs=len(c.baseline_finals))
        for name, e in (("final_iqm", c.final), ("baseline_final_iqm", c.baseline_final),
                        ("iqm_difference", c.comparison.difference),
                        ("probability_of_improvement", c.comparison.probability)):
            row.update({name: e.point, f"{name}_low": e.low, f"{name}_high": e.high})
        row["verdict"] = c.verdict
        rows.append(row)
    return rows


def write_csv(rows: list[dict], path: str) -> str:
    """Write ``rows`` (dicts with the same keys) to ``path``; returns the path. Floats
    keep 6 significant digits; NaN is written as an empty cell."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
    return path


def _cell(value):
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.6g}"
    return value


def _seed(run_dir: str) -> int | str:
    path = os.path.join(run_dir, "params.json")
    try:
        with open(path) as f:
            seed = json.load(f).get("seed")
    except (OSError, ValueError, AttributeError):
        return ""
    return seed if isinstance(seed, int) else ""


def _system(run_dir: str) -> dict:
    """``cpu``, ``cores``, ``commit`` and ``shared_cpus`` (the CPUs other processes kept
    busy at a start, as ``"1:97%"``) from ``system.json`` (empty without one)."""
    path = os.path.join(run_dir, SYSTEM_FILE)
    try:
        with open(path) as f:
            records = json.load(f)
    except (OSError, ValueError):
        return dict(cpu="", cores="", commit="", shared_cpus="")
    records = records if isinstance(records, list) else [records]

    def joined(key):
        values = [str(r.get(key)) for r in records if isinstance(r, dict)]
        return "; ".join(dict.fromkeys(values))

    cores = [len(r["usable_cpus"]) if r.get("usable_cpus") else r.get("logical_cpus")
             for r in records if isinstance(r, dict)]
    shared = [" ".join(f"{cpu}:{load:.0f}%" for cpu, load in r["busy_cpus"].items())
              for r in records if isinstance(r, dict) and r.get("busy_cpus")]
    return dict(cpu=joined("cpu"), cores="; ".join(dict.fromkeys(str(c) for c in cores)),
                commit=joined("commit"), shared_cpus="; ".join(dict.fromkeys(shared)))
