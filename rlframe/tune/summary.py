"""What ``rlframe tune`` leaves when its trials are done: the best trial's config (for
``rlframe train --config``), a table of the top trials, Optuna's history and importance
plots, and the command that opens the study in optuna-dashboard."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import warnings
from typing import TYPE_CHECKING, Any

from rlframe.tune.space import apply, parse_space

if TYPE_CHECKING:
    import optuna

    from rlframe.tune.settings import TuneSettings

BEST_CONFIG_FILE = "best_config.json"
TRIALS_FILE = "trials.md"


def trial_config(settings: TuneSettings, params: dict[str, Any]) -> dict[str, Any]:
    """The full ``build_experiment`` config of a trial with Optuna's ``params``."""
    dists = parse_space(settings.space)
    values = {key: dists[key].decode(value) for key, value in params.items() if key in dists}
    return apply(dict(settings.config, algo=settings.algo, env_id=settings.env_id,
                      n_steps=settings.n_steps), values)


def trials_table(study: optuna.Study, top: int = 10) -> str:
    """Markdown table of the study's ``top`` complete trials by value, then the counts."""
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    complete = sorted((t for t in trials if t.state == TrialState.COMPLETE),
                      key=lambda t: t.value, reverse=True)
    keys = sorted({k for t in complete[:top] for k in t.params})
    names = [k[len("kwargs."):] if k.startswith("kwargs.") else k for k in keys]
    lines = ["| trial | value | " + " | ".join(names) + " |",
             "|---" * (len(keys) + 2) + "|"]
    for t in complete[:top]:
        lines.append(f"| {t.number} | {t.value:.4g} | "
                     + " | ".join(_cell(t.params.get(k)) for k in keys) + " |")
    counts = {state.name.lower(): sum(t.state == state for t in trials)
              for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                            TrialState.RUNNING)}
    lines.append("")
    lines.append("Trials: " + ", ".join(f"{n} {name}" for name, n in counts.items()) + ".")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_plots(study: optuna.Study, out_dir: str) -> list[str]:
    """Optuna's optimization history and parameter importances as PNGs (with matplotlib;
    importances need two complete trials). Returns the files written."""
    if importlib.util.find_spec("matplotlib") is None:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as views
    from optuna.trial import TrialState
    written = []
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    plots = [("history.png", views.plot_optimization_history)]
    if len(complete) >= 2 and len({k for t in complete for k in t.params}) >= 1:
        plots.append(("importance.png", views.plot_param_importances))
    for name, plot in plots:
        path = os.path.join(out_dir, name)
        try:
            with warnings.catch_warnings():  # Optuna's "experimental" warnings.
                warnings.simplefilter("ignore")
                axes = plot(study)
            axes.figure.savefig(path, dpi=100, bbox_inches="tight")
            plt.close(axes.figure)
            written.append(path)
        except (ValueError, RuntimeError) as error:  # e.g. importances of constant values.
            print(f"{name} not drawn: {error}", flush=True)
    return written


def summarize(study: optuna.Study, settings: TuneSettings, out_dir: str,
              wall_s: float) -> dict[str, Any]:
    """Write ``best_config.json``, ``trials.md`` (and ``trials.csv``) and the plots into
    ``out_dir``, and print the table, the best value and the dashboard command."""
    from optuna.trial import TrialState
    table = trials_table(study)
    with open(os.path.join(out_dir, TRIALS_FILE), "w") as f:
        f.write(f"# {settings.study_name}: {settings.algo} on {settings.env_id}\n\n"
                f"{table}\n")
    with open(os.path.join(out_dir, "trials.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["number", "state", "value", "params"])
        for t in study.get_trials(deepcopy=False):
            writer.writerow([t.number, t.state.name, t.value, json.dumps(t.params)])
    summary: dict[str, Any] = dict(table=table, plots=write_plots(study, out_dir))
    print(table, flush=True)
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        best = study.best_trial
        config = trial_config(settings, best.params)
        path = os.path.join(out_dir, BEST_CONFIG_FILE)
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
        summary.update(best_value=best.value, best_number=best.number, best_config=path)
        print(f"Best: trial {best.number}, value {best.value:.4g}. Its config: {path} "
              f"(rlframe train {settings.algo} {settings.env_id} --config {path}).", flush=True)
    else:
        print("No trial completed, so there is no best config.", flush=True)
    print(f"{wall_s / 60:.1f} min. The study: optuna-dashboard {settings.storage} "
          "(pip install optuna-dashboard)", flush=True)
    return summary
