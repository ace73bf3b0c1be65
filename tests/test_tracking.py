"""Experiment trackers (rlframe.utils.logging.tracking): MLflow and W&B receive the
config and the same metrics as progress.csv, keep one tracked run across a resume, and
refuse bad input before a run directory is made."""
import csv
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import psutil
import pytest

from rlframe.utils.logging import tracking
from rlframe.utils.logging.context import logger_context
from rlframe.utils.logging.tracking import (RunTracking, Tracker, check_outputs, flatten,
                                            mlflow_key)

CONFIG = dict(algo="ppo", env_id="CartPole-v1", n_steps=512, log_interval_steps=128,
              batch_T=64, batch_B=2, seed=3)


def progress_columns(run_dir):
    """Numeric columns of progress.csv, by CumSteps."""
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    columns = {}
    for key in rows[0]:
        try:
            columns[key] = [float(row[key]) for row in rows]
        except ValueError:
            continue
    return columns


def train_tracked(run_root, outputs, group="tracked"):
    from rlframe.presets import build_experiment
    runner, config = build_experiment(dict(CONFIG))
    with logger_context(str(run_root), 0, "ppo_cartpole", config, snapshot_mode="last",
                        override_prefix=True, outputs=outputs, tracking_group=group) as run_dir:
        runner.train()
    return run_dir


def wandb_history(run_dir):
    """The history rows of the run's offline W&B file: its records are framed as in
    LevelDB's log (32 KiB blocks; 7-byte headers: CRC, length, type), after W&B's 7-byte
    file header."""
    from wandb.proto import wandb_internal_pb2
    path, = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B"
    pos, parts, records = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # Block trailer or padding.
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        else:
            parts = chunk if kind == 2 else parts + chunk
            if kind == 4:
                records.append(parts)
    rows = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


@pytest.mark.slow
def test_mlflow_and_wandb_hold_the_config_and_the_progress_rows(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    import mlflow
    from mlflow.tracking import MlflowClient
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path / "..")  # The files go beside the database, not here.
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = train_tracked(tmp_path / "runs", ["mlflow", "wandb"])
    columns = progress_columns(run_dir)
    steps = columns["Diagnostics/CumSteps"]
    assert steps == [0., 128., 256., 384., 512.]

    mlflow.set_tracking_uri(uri)
    run, = mlflow.search_runs(experiment_names=["tracked"], output_format="list")
    assert run.info.status == "FINISHED" and run.info.run_name == "ppo_cartpole_0"
    with open(os.path.join(run_dir, "params.json")) as f:
        params = flatten(json.load(f))
    assert run.data.params["kwargs.algo.learning_rate"] == str(
        params["kwargs.algo.learning_rate"])
    assert set(run.data.params) == set(params)
    client = MlflowClient(tracking_uri=uri)
    for key, values in columns.items():
        history = sorted(client.get_metric_history(run.info.run_id, mlflow_key(key)),
                         key=lambda m: m.step)
        assert [m.step for m in history] == steps, key
        np.testing.assert_allclose([m.value for m in history], values, rtol=1e-9,
                                   equal_nan=True, err_msg=key)
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {
        "params.json", "progress.csv", "debug.log", "params.pkl", "learning_curve.png"}
    assert run.info.artifact_uri.startswith((tmp_path / "mlruns").as_uri())
    assert not os.path.exists(tmp_path / ".." / "mlruns")

    rows = wandb_history(run_dir)
    assert [row["_step"] for row in rows] == steps
    for key, values in columns.items():
        logged = [math.nan if row.get(key) is None else row[key] for row in rows]
        np.testing.assert_allclose(logged, values, rtol=1e-9, equal_nan=True, err_msg=key)
    saved = json.load(open(os.path.join(run_dir, "tracking.json")))
    assert saved["mlflow"]["run_id"] == run.info.run_id and saved["wandb"]["last_step"] == 512
    assert not [p for p in psutil.Process().children(recursive=True)
                if "wandb" in " ".join(p.cmdline())]  # W&B's service was stopped.


class FakeTracker(Tracker):
    """Records the calls it gets."""

    name = "mlflow"
    calls: list = []

    def start(self, run_dir, run_name, group, params, state):
        self.calls.append(("start", run_name, group, state))
        return dict(run_id=state["run_id"] if state else "r1")

    def log_row(self, metrics, step):
        self.calls.append(("row", step, metrics))

    def finish(self, run_dir, files, status):
        self.calls.append(("finish", sorted(os.path.basename(f) for f in files), status))


@pytest.fixture
def fake(monkeypatch):
    FakeTracker.calls = []
    monkeypatch.setattr(tracking, "make_tracker", lambda name: FakeTracker())
    monkeypatch.setattr(tracking, "check_outputs", lambda outputs: tuple(outputs or ()))
    monkeypatch.setattr("rlframe.utils.logging.context.check_outputs",
                        lambda outputs: tuple(outputs or ()))
    return FakeTracker.calls


def test_a_resumed_run_continues_its_tracked_run_without_sending_rows_twice(tmp_path, fake):
    first = RunTracking(str(tmp_path), ["mlflow"], resumed=False)
    first.start("exp_0", "group", {"a": 1})
    for step in (0, 100, 200):
        first.log_row({"Diagnostics/CumSteps": step, "ReturnAverage": step / 10,
                       "Label": "text"}, row_number=step // 100)
    again = RunTracking(str(tmp_path), ["mlflow"], resumed=True)
    again.start("exp_0", "group", {"a": 1})
    for step in (100, 200, 300):  # Rows after the snapshot, written again, then new.
        again.log_row({"Diagnostics/CumSteps": step, "ReturnAverage": -1.}, row_number=0)
    again.log_row({"ReturnAverage": 5.}, row_number=4)  # No step column: the row's number.
    starts = [c for c in fake if c[0] == "start"]
    assert starts == [("start", "exp_0", "group", None),
                      ("start", "exp_0", "group", dict(run_id="r1", last_step=200))]
    rows = [(c[1], c[2]["ReturnAverage"]) for c in fake if c[0] == "row"]
    assert rows == [(0, 0.), (100, 10.), (200, 20.), (300, -1.)]
    assert "Label" not in fake[1][2]
    assert json.load(open(tmp_path / "tracking.json"))["mlflow"]["last_step"] == 300


@pytest.mark.parametrize("error, status", [(None, "FINISHED"), (RuntimeError, "FAILED"),
                                           (KeyboardInterrupt, "KILLED")])
def test_the_tracked_run_ends_with_the_runs_status_and_files(tmp_path, fake, error, status):
    from rlframe.utils.logging import logger
    with pytest.raises(error) if error else open(os.devnull) as _:
        with logger_context(str(tmp_path), 0, "exp", {"lr": 0.1}, override_prefix=True,
                            outputs=["mlflow"]):
            logger.record_tabular("Diagnostics/CumSteps", 64)
            logger.record_tabular("ReturnAverage", 1.5)
            logger.dump_tabular()
            if error:
                raise error()
    assert fake[0] == ("start", "exp_0", "exp", None)
    assert fake[1] == ("row", 64, {"Diagnostics/CumSteps": 64., "ReturnAverage": 1.5})
    assert fake[-1][0] == "finish" and fake[-1][2] == status
    assert {"params.json", "progress.csv", "debug.log"} <= set(fake[-1][1])


def test_resume_keeps_tracking_with_the_runs_own_trackers(tmp_path, fake):
    """``rlframe resume`` passes no outputs: the run's tracking.json says which."""
    import torch
    from rlframe.utils.logging.context import logger_context_at
    run_dir = tmp_path / "run_0"
    with logger_context_at(str(run_dir), 0, "exp", {"lr": 0.1}, outputs=["mlflow"]):
        pass
    torch.save(dict(itr=0), run_dir / "params.pkl")  # A snapshot to resume from.
    del fake[:]
    with logger_context_at(str(run_dir), 0, "exp", {"lr": 0.1}, resume=True):
        pass
    assert fake[0] == ("start", "exp_0", "exp", dict(run_id="r1", last_step=-1))
    assert fake[-1][0] == "finish"


def test_bad_outputs_are_refused_before_a_run_directory_is_made(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown tracker 'mlfow'; choose from mlflow, wandb"):
        with logger_context(str(tmp_path / "a"), 0, "exp", override_prefix=True,
                            outputs=["mlfow"]):
            pass
    monkeypatch.setitem(sys.modules, "wandb", None)  # As if not installed.
    with pytest.raises(ImportError, match=r"pip install rlframe\[wandb\]"):
        with logger_context(str(tmp_path / "b"), 0, "exp", override_prefix=True,
                            outputs=["wandb"]):
            pass
    with pytest.raises(ImportError, match=r"pip install rlframe\[wandb\]"):
        check_outputs("wandb")
    assert not os.listdir(tmp_path)
