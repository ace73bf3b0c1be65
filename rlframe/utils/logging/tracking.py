"""Experiment trackers: every progress row, the config and the run's files sent to MLflow
or Weights & Biases as well as to ``progress.csv``.

``logger_context(..., outputs=["mlflow", "wandb"])`` (``rlframe train --track mlflow``)
starts one tracked run per rlframe run:

* **params**: the run's config (``params.json``), nested keys joined by dots;
* **metrics**: every numeric cell of every progress row, at the row's
  ``Diagnostics/CumSteps`` (its env steps; the row's number where a row lacks it);
* **files**, when the run ends: ``params.json``, ``progress.csv``, ``debug.log``, the
  last snapshot (``params.pkl``; not the replay buffer beside it) and a learning-curve
  PNG (with matplotlib installed);
* **status**: finished, failed (an exception) or killed (Ctrl-C).

Runs are grouped by ``tracking_group`` (default: the experiment name): an MLflow
experiment, a W&B group. Where each tracked run lives is kept in the run directory's
``tracking.json``, so a resumed run (``rlframe resume``) continues the same tracked run;
rows the tracker already holds (those after the snapshot, logged again) are not sent
twice.

MLflow (``pip install rlframe[mlflow]``): the store is ``MLFLOW_TRACKING_URI``, else
MLflow's default in the current directory (``sqlite:///mlflow.db`` with MLflow 3, the
``./mlruns`` folder with MLflow 2), made absolute so that every process of a study uses
the same one. ``mlflow ui --backend-store-uri URI`` shows it (the ``mlflow`` package).

Weights & Biases (``pip install rlframe[wandb]``): offline unless ``WANDB_MODE`` says
otherwise or the machine is logged in (``WANDB_API_KEY`` or ``wandb login``); the run's
files go under ``<run_dir>/wandb`` (``wandb sync`` uploads an offline run later). The
project is ``WANDB_PROJECT``, else ``"rlframe"``.
"""
from __future__ import annotations

import abc
import importlib.util
import json
import math
import netrc
import numbers
import os
import pathlib
import re
import secrets
import time
from typing import Any, Sequence

from rlframe.utils.files import write_json_atomic

TRACKING_FILE = "tracking.json"
TRACKERS = ("mlflow", "wandb")
"""Names ``outputs`` takes."""
STEP_KEY = "Diagnostics/CumSteps"
_EXTRAS = dict(mlflow=("mlflow", "MLflow"), wandb=("wandb", "Weights & Biases"))
_RUN_FILES = ("params.json", "progress.csv", "debug.log", "params.pkl")


class Tracker(abc.ABC):
    """One tracked run of an rlframe run; subclasses send the calls to their service.
    ``name`` keys the tracker's state in ``tracking.json``."""

    name = ""

    @abc.abstractmethod
    def start(self, run_dir: str, run_name: str, group: str, params: dict[str, Any],
              state: dict[str, Any] | None) -> dict[str, Any]:
        """Start the tracked run, or continue the one ``state`` (from an earlier start of
        this run) names. Returns the state to keep for a later continuation."""

    @abc.abstractmethod
    def log_row(self, metrics: dict[str, float], step: int) -> None:
        """Send one progress row's numeric cells at ``step``."""

    @abc.abstractmethod
    def finish(self, run_dir: str, files: list[str], status: str) -> None:
        """Attach ``files`` (paths in ``run_dir``) and end the run with ``status``:
        ``"FINISHED"``, ``"FAILED"`` or ``"KILLED"``."""


class MlflowTracker(Tracker):
    """An MLflow run in the experiment named by the group.

    Args:
        tracking_uri: the store; default ``MLFLOW_TRACKING_URI`` or MLflow's default.
    """

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient
        self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        self.run_id: str | None = None

    def start(self, run_dir: str, run_name: str, group: str, params: dict[str, Any],
              state: dict[str, Any] | None) -> dict[str, Any]:
        from mlflow.entities import Param
        if state is not None:
            self._client = type(self._client)(tracking_uri=state["tracking_uri"])
            self.tracking_uri, self.run_id = state["tracking_uri"], state["run_id"]
            self._client.update_run(self.run_id, status="RUNNING")
            return state
        experiment = self._client.get_experiment_by_name(group)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self._client.create_experiment(
                             group, artifact_location=_artifact_location(self.tracking_uri)))
        run = self._client.create_run(experiment_id, run_name=run_name,
                                      tags={"rlframe.run_dir": run_dir})
        self.run_id = run.info.run_id
        flat = [Param(mlflow_key(key)[:250], _param_text(value))
                for key, value in flatten(params).items()]
        for i in range(0, len(flat), 100):  # MLflow takes at most 100 params per batch.
            self._client.log_batch(self.run_id, params=flat[i:i + 100])
        return dict(tracking_uri=self.tracking_uri, run_id=self.run_id)

    def log_row(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(key), value, now, step) for key, value in metrics.items()]
        for i in range(0, len(batch), 1000):
            self._client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def finish(self, run_dir: str, files: list[str], status: str) -> None:
        for path in files:
            self._client.log_artifact(self.run_id, path)
        self._client.set_terminated(self.run_id, status)


class WandbTracker(Tracker):
    """A Weights & Biases run in the project ``WANDB_PROJECT`` (default ``"rlframe"``)."""

    name = "wandb"

    def __init__(self) -> None:
        import wandb
        self._wandb = wandb
        self._run: Any = None

    def start(self, run_dir: str, run_name: str, group: str, params: dict[str, Any],
              state: dict[str, Any] | None) -> dict[str, Any]:
        wandb = self._wandb
        run_id = state["id"] if state is not None else secrets.token_hex(6)
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_logged_in() else "offline")
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlframe"),
                               group=group, name=run_name, dir=run_dir, config=params,
                               id=run_id, resume="allow", mode=mode, reinit="create_new")
        return dict(id=run_id, mode=mode)

    def log_row(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def finish(self, run_dir: str, files: list[str], status: str) -> None:
        try:
            for path in files:
                self._run.save(path, base_path=run_dir, policy="now")
            self._run.finish(exit_code=0 if status == "FINISHED" else 1)
        finally:
            if self._wandb.run is None:  # No run of the caller's own is left:
                self._wandb.teardown()  # stop W&B's service process.


def _artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment's files go: beside a local SQLite store's database (MLflow
    would put them under the current directory, which may differ between processes),
    else the store's default (None)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    database = tracking_uri[len(prefix):].split("?")[0]
    return pathlib.Path(os.path.abspath(database)).parent.joinpath("mlruns").as_uri()


def wandb_logged_in() -> bool:
    """Whether W&B has an API key here (``WANDB_API_KEY`` or ``wandb login``'s netrc)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check_outputs(outputs: Sequence[str] | None) -> tuple[str, ...]:
    """``outputs`` checked: known names whose packages are installed.

    Raises:
        ValueError: an unknown name (naming the allowed ones).
        ImportError: a tracker's package is missing (naming the extra to install).
    """
    if outputs is None:
        return ()
    if isinstance(outputs, str):
        outputs = [outputs]
    names = []
    for name in outputs:
        if name not in TRACKERS:
            raise ValueError(f"outputs: unknown tracker {name!r}; choose from "
                             f"{', '.join(TRACKERS)}.")
        module, title = _EXTRAS[name]
        try:
            __import__(module)
        except ImportError as error:
            raise ImportError(f"outputs={list(outputs)!r}: tracking with {title} needs its "
                              f"package: pip install rlframe[{name}] ({error}).") from None
        if name not in names:
            names.append(name)
    return tuple(names)


def make_tracker(name: str) -> Tracker:
    """The tracker called ``name`` (one of :data:`TRACKERS`)."""
    return MlflowTracker() if name == "mlflow" else WandbTracker()


def read_state(run_dir: str) -> dict[str, Any]:
    """``tracking.json`` of ``run_dir`` (empty when the run has no tracked outputs)."""
    path = os.path.join(run_dir, TRACKING_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


class RunTracking:
    """The trackers of one run: started together, sent each row, finished together.

    Args:
        run_dir: the run directory (``tracking.json`` is kept there).
        names: tracker names, checked by :func:`check_outputs`.
        resumed: the run continues from a snapshot: trackers named in ``tracking.json``
            continue their runs.
    """

    def __init__(self, run_dir: str, names: Sequence[str], resumed: bool) -> None:
        self.run_dir = run_dir
        self._state = read_state(run_dir) if resumed else {}
        self._to_start: list[Tracker] = [make_tracker(name) for name in names]
        self.trackers: list[Tracker] = []  # Those started.

    def start(self, run_name: str, group: str, params: dict[str, Any]) -> None:
        """Start (or continue) every tracker's run; record where each one lives. Those
        started before one that fails are ended by :meth:`finish` all the same."""
        for tracker in self._to_start:
            previous = self._state.get(tracker.name)
            state = tracker.start(self.run_dir, run_name, group, params, previous)
            self._state[tracker.name] = dict(state, last_step=(previous or {}).get(
                "last_step", -1))
            self.trackers.append(tracker)
            self._save()

    def log_row(self, row: dict[str, Any], row_number: int) -> None:
        """Send the numeric cells of ``row`` to every tracker that does not hold its step."""
        if not self.trackers:
            return
        step = row.get(STEP_KEY, row_number)
        step = int(step) if isinstance(step, numbers.Real) and math.isfinite(step) else row_number
        metrics = {key: float(value) for key, value in row.items()
                   if isinstance(value, numbers.Real)}
        sent = False
        for tracker in self.trackers:
            state = self._state[tracker.name]
            if step > state["last_step"]:
                tracker.log_row(metrics, step)
                state["last_step"] = step
                sent = True
        if sent:
            self._save()

    def finish(self, status: str) -> None:
        """Attach the run's files and end every tracked run with ``status``."""
        files = [os.path.join(self.run_dir, name) for name in _RUN_FILES
                 if os.path.isfile(os.path.join(self.run_dir, name))]
        curve = _learning_curve(self.run_dir)
        errors = []
        for tracker in self.trackers:
            try:
                tracker.finish(self.run_dir, files + ([curve] if curve else []), status)
            except Exception as error:  # Finish the others; report it after.
                errors.append(f"{tracker.name}: {error}")
        if errors:
            raise RuntimeError("could not end the tracked runs: " + "; ".join(errors))

    def _save(self) -> None:
        write_json_atomic(os.path.join(self.run_dir, TRACKING_FILE), self._state)


def _learning_curve(run_dir: str) -> str | None:
    """``learning_curve.png`` of the run's returns, where matplotlib and a row exist."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    from rlframe.utils.plotting import plot_runs
    out = os.path.join(run_dir, "learning_curve.png")
    try:
        plot_runs([run_dir], out)
    except (OSError, ValueError):  # PlotError too: a run with nothing to draw.
        return None
    return out


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level, keys joined by dots."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= 6000 else text[:5997] + "..."


def mlflow_key(key: str) -> str:
    """``key`` with the characters MLflow refuses in metric and param names replaced by
    ``_``."""
    return re.sub(r"[^\w\-. :/]", "_", key)
