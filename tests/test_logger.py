"""Logger, run-directory context and progress bar."""
from __future__ import annotations

import glob
import json
import math
import os
import pickle
import re
import sys

import numpy as np
import pytest
import torch

from conftest import read_csv
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import (add_exp_param, check_progress, get_log_dir,
                                           logger_context)
from rlframe.utils.prog_bar import ProgBarCounter


@pytest.fixture(autouse=True)
def own_logger():
    """Each test logs through a logger of its own, so nothing it sets outlives it."""
    own = logger.Logger()
    with logger.use_logger(own):
        yield own
    own.close()


def tabular_output(path):
    """Attach a tabular output for the duration of a test."""
    logger.add_tabular_output(str(path))
    return path


# ----------------------------------------------------------------------------- context

def test_context_creates_run_layout(in_tmp_cwd):
    params = dict(game="pong", nested=dict(lr=1e-3, sizes=[64, 64]), fn=object(),
                  count=np.int64(3))
    with logger_context("example_1", 0, "dqn_pong", params, snapshot_mode="last") as run_dir:
        assert logger.get_snapshot_dir() == run_dir
        logger.record_tabular("Iteration", 0)
        logger.dump_tabular(with_prefix=False)
        # Rows are flushed as they are written, so the file is readable mid-run.
        assert read_csv(os.path.join(run_dir, "progress.csv")) == (["Iteration"], [["0"]])
        logger.save_itr_params(0, dict(itr=0))

    relative = os.path.relpath(run_dir, in_tmp_cwd)
    assert re.fullmatch(r"data/local/\d{8}/\d{6}/example_1/run_0", relative.replace(os.sep, "/"))
    # params.json keeps a repr of the object JSON cannot hold; the whole dict is pickled.
    assert sorted(os.listdir(run_dir)) == ["debug.log", "log_params.pkl", "params.json",
                                           "params.pkl", "progress.csv"]
    assert params["name"] == "dqn_pong" and params["run_ID"] == 0  # mutated in place
    with open(os.path.join(run_dir, "params.json")) as f:
        written = json.load(f)
    assert written.pop("fn").startswith("<object object at 0x")
    assert written == dict(game="pong", nested=dict(lr=1e-3, sizes=[64, 64]), count=3,
                           name="dqn_pong", run_ID=0)
    with open(os.path.join(run_dir, "log_params.pkl"), "rb") as f:
        assert set(pickle.load(f)) == set(params)
    with open(os.path.join(run_dir, "debug.log")) as f:
        text = f.read()
    assert f"dqn_pong_0 Run directory: {run_dir}" in text
    assert logger.get_snapshot_dir() is None


def test_context_uses_data_dir_env_var(in_tmp_cwd, monkeypatch):
    monkeypatch.setenv("RLFRAME_DATA_DIR", str(in_tmp_cwd / "elsewhere"))
    with logger_context("exp", 3, "n") as run_dir:
        pass
    relative = os.path.relpath(run_dir, in_tmp_cwd / "elsewhere").replace(os.sep, "/")
    assert re.fullmatch(r"local/\d{8}/\d{6}/exp/run_3", relative)
    assert not (in_tmp_cwd / "data").exists()


def test_context_keeps_paths_inside_root_or_with_override(in_tmp_cwd):
    with logger_context("data/mine", 1, "n") as run_dir:
        pass
    assert run_dir == str(in_tmp_cwd / "data" / "mine" / "run_1")
    with logger_context("outside", 2, "n", override_prefix=True) as run_dir:
        pass
    assert run_dir == str(in_tmp_cwd / "outside" / "run_2")
    assert os.path.isfile(os.path.join(run_dir, "params.json"))


def test_context_nests_absolute_path_outside_root(in_tmp_cwd):
    outside = in_tmp_cwd / "abs"
    with logger_context(str(outside), 0, "n") as run_dir:
        pass
    assert run_dir.startswith(str(in_tmp_cwd / "data" / "local") + os.sep)
    assert run_dir.endswith(os.path.join(str(outside).lstrip(os.sep), "run_0"))
    assert not outside.exists()


def test_context_cleans_up_after_exception(in_tmp_cwd, capsys):
    with pytest.raises(RuntimeError, match="boom"):
        with logger_context("exp", 0, "crashy", snapshot_mode="all") as run_dir:
            logger.record_tabular("a", 1)
            logger.dump_tabular()
            raise RuntimeError("boom")
    capsys.readouterr()
    logger.log("after the run")
    logger.record_tabular("a", 2)
    logger.dump_tabular()
    assert "crashy_0" not in capsys.readouterr().out  # prefix popped
    with open(os.path.join(run_dir, "debug.log")) as f:
        assert "after the run" not in f.read()
    assert read_csv(os.path.join(run_dir, "progress.csv")) == (["a"], [["1"]])
    assert logger.get_snapshot_dir() is None


def test_context_rejects_bad_snapshot_mode_before_creating_anything(in_tmp_cwd):
    with pytest.raises(ValueError, match="'last'.*'sometimes'"):
        with logger_context("exp", 0, "n", snapshot_mode="sometimes"):
            pass
    assert not (in_tmp_cwd / "data").exists()


def test_summary_writer_writes_events(in_tmp_cwd):
    pytest.importorskip("tensorboard", reason="tensorboard extra not installed")
    with logger_context("tb", 0, "n", use_summary_writer=True) as run_dir:
        assert logger.get_tf_summary_writer() is not None
        logger.set_iteration(5)
        logger.record_tabular("Loss", 0.5)
        logger.record_tabular_misc_stat("Return", [1.0, 3.0])
        logger.dump_tabular()
    assert logger.get_tf_summary_writer() is None
    assert glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
    assert header[:3] == ["Loss", "Return/Average", "Return/Std"]


def test_missing_tensorboard_raises_before_creating_anything(in_tmp_cwd, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=re.escape("pip install rlframe[tensorboard]")):
        with logger_context("tb", 0, "n", use_summary_writer=True):
            pass
    assert not (in_tmp_cwd / "data").exists()


def test_get_log_dir_add_exp_param_check_progress(in_tmp_cwd):
    dated = get_log_dir("a/b").replace(os.sep, "/")
    assert re.fullmatch(re.escape(str(in_tmp_cwd / "data").replace(os.sep, "/"))
                        + r"/local/\d{8}/\d{6}/a/b", dated)
    assert get_log_dir("/abs/x", root_log_dir=str(in_tmp_cwd / "r"), date=False) == \
        str(in_tmp_cwd / "r" / "local" / "abs" / "x")

    with logger_context("data/exp", 0, "n", dict(opt=dict(lr=1))) as run_dir:
        logger.record_tabular("x", 1)
        logger.dump_tabular()
        logger.record_tabular("x", 2)
        logger.dump_tabular()
    params_path = os.path.join(run_dir, "params.json")
    assert add_exp_param("seed", 7, exp_dir=str(in_tmp_cwd)) == [params_path]
    assert add_exp_param("seed", 8, exp_dir=str(in_tmp_cwd)) == []  # kept without overwrite
    add_exp_param("opt", dict(lr=2, eps=0.1), exp_dir=str(in_tmp_cwd))  # merges missing sub-keys
    with open(params_path) as f:
        params = json.load(f)
    assert params["seed"] == 7 and params["opt"] == dict(lr=1, eps=0.1)
    add_exp_param("seed", 8, exp_dir=str(in_tmp_cwd), overwrite=True)
    with open(params_path) as f:
        assert json.load(f)["seed"] == 8
    assert check_progress(str(in_tmp_cwd)) == {os.path.join(run_dir, "progress.csv"): 2}


# ----------------------------------------------------------------------------- text log

def test_log_format_prefixes_and_switches(tmp_path, capsys):
    text_path = tmp_path / "out" / "debug.log"
    logger.add_text_output(str(text_path))
    try:
        with logger.prefix("outer "):
            with logger.prefix("inner "):
                logger.log("hello", color="green")
            logger.log("plain", with_prefix=False, with_timestamp=False)
        logger.disable()
        logger.log("hidden while disabled")
        logger.enable()
        logger.set_log_tabular_only(True)
        logger.log("hidden in tabular-only mode")
        logger.set_log_tabular_only(False)
        with pytest.raises(ValueError, match="color"):
            logger.log("x", color="plaid")
    finally:
        logger.remove_text_output(str(text_path))
    lines = text_path.read_text().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} \| outer inner hello", lines[0])
    assert lines[1] == "plain"
    assert len(lines) == 2
    assert capsys.readouterr().out.splitlines()[1] == "plain"


def test_dump_tabular_prints_aligned_table(capsys):
    with logger.tabular_prefix("Diagnostics/"):
        logger.record_tabular("Iteration", 3)
        logger.record_tabular("StepsPerSecond", 1234.56789)
    logger.dump_tabular(with_prefix=False, with_timestamp=False)
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "Diagnostics/Iteration             3"
    assert out[2] == "Diagnostics/StepsPerSecond  1234.57"
    assert out[0] == out[3] == "-" * len("Diagnostics/StepsPerSecond") + "  " + "-" * 7


# ----------------------------------------------------------------------------- tabular

def test_progress_csv_rewritten_with_union_of_keys(tmp_path):
    path = tabular_output(tmp_path / "progress.csv")
    try:
        for row in [dict(a=1, b=2), dict(a=3, b=4), dict(a=5, c=6), dict(b=7)]:
            for key, val in row.items():
                logger.record_tabular(key, val)
            logger.dump_tabular()
    finally:
        logger.remove_tabular_output(str(path))
    assert read_csv(path) == (["a", "b", "c"], [["1", "2", "nan"], ["3", "4", "nan"],
                                                 ["5", "nan", "6"], ["nan", "7", "nan"]])
    assert os.listdir(tmp_path) == ["progress.csv"]  # no temp files left


def test_hold_and_disable_tabular(tmp_path):
    path = tabular_output(tmp_path / "progress.csv")
    try:
        logger.record_tabular("a", 1)
        logger.dump_tabular()
        logger.hold_tabular_output(str(path))
        logger.record_tabular("a", 2)
        logger.dump_tabular()
        logger.add_tabular_output(str(path))  # resumes, does not truncate
        logger.disable_tabular()
        logger.record_tabular("a", 3)
        logger.dump_tabular()
        logger.enable_tabular()
        logger.record_tabular("a", 4)
        logger.dump_tabular()
    finally:
        logger.remove_tabular_output(str(path))
    assert read_csv(path) == (["a"], [["1"], ["4"]])


def test_record_tabular_accepts_numpy_and_torch_scalars(tmp_path):
    path = tabular_output(tmp_path / "progress.csv")
    try:
        logger.record_tabular("np", np.float32(1.5))
        logger.record_tabular("np0d", np.array(2))
        logger.record_tabular("torch", torch.tensor(2.5))
        logger.record_tabular("nan", float("nan"))
        logger.record_tabular("text", "hi")
        with pytest.raises(ValueError, match="'vec'.*record_tabular_misc_stat"):
            logger.record_tabular("vec", torch.zeros(3))
        logger.dump_tabular()
    finally:
        logger.remove_tabular_output(str(path))
    assert read_csv(path) == (["np", "np0d", "torch", "nan", "text"],
                              [["1.5", "2", "2.5", "nan", "hi"]])


def test_record_tabular_misc_stat(tmp_path):
    path = tabular_output(tmp_path / "progress.csv")
    values = [1.0, 2.0, 4.0, 9.0]
    try:
        logger.record_tabular_misc_stat("Return", values)
        logger.record_tabular_misc_stat("Length", torch.tensor([3, 5]), placement="front")
        logger.record_tabular_misc_stat("loss", [])
        with pytest.raises(ValueError, match="placement"):
            logger.record_tabular_misc_stat("x", [1], placement="middle")
        logger.dump_tabular()
    finally:
        logger.remove_tabular_output(str(path))
    header, (row,) = read_csv(path)
    got = dict(zip(header, map(float, row)))
    assert got["ReturnAverage"] == 4.0 and got["ReturnMedian"] == 3.0
    assert got["ReturnStd"] == pytest.approx(np.std(values))
    assert got["ReturnMin"] == 1.0 and got["ReturnMax"] == 9.0
    assert got["AverageLength"] == 4.0 and got["MaxLength"] == 5.0
    assert all(math.isnan(got["loss" + s]) for s in ("Average", "Std", "Median", "Min", "Max"))


# ----------------------------------------------------------------------------- snapshots

@pytest.mark.parametrize("mode, expected", [
    ("all", [f"itr_{i}.pkl" for i in range(6)]),
    ("last", ["params.pkl"]),
    ("gap", ["itr_0.pkl", "itr_2.pkl", "itr_5.pkl"]),
    ("last+gap", ["itr_0.pkl", "itr_2.pkl", "itr_5.pkl", "params.pkl"]),
    ("none", []),
])
def test_snapshot_modes(tmp_path, mode, expected):
    logger.set_snapshot_dir(str(tmp_path))
    logger.set_snapshot_mode(mode)
    logger.set_snapshot_gap(3)
    for itr in range(6):
        logger.save_itr_params(itr, dict(itr=itr))
    assert sorted(os.listdir(tmp_path)) == expected
    if "params.pkl" in expected:
        assert torch.load(tmp_path / "params.pkl", weights_only=True) == dict(itr=5)


def test_snapshot_mode_and_gap_validation(tmp_path):
    with pytest.raises(ValueError, match="'last\\+gap'.*'every'"):
        logger.set_snapshot_mode("every")
    with pytest.raises(ValueError, match="gap"):
        logger.set_snapshot_gap(0)
    logger.set_snapshot_dir(None)
    logger.set_snapshot_mode("all")
    logger.save_itr_params(0, dict(itr=0))  # no directory: nothing, no error


def test_snapshot_loads_with_weights_only(tmp_path):
    model = torch.nn.Linear(3, 2)
    optim = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optim.step()
    snapshot = dict(itr=4, cum_steps=400, agent_state_dict=model.state_dict(),
                    optimizer_state_dict=optim.state_dict(), tag="dqn", history=[1.5, 2])
    logger.set_snapshot_dir(str(tmp_path))
    logger.set_snapshot_mode("last")
    logger.save_itr_params(4, snapshot)
    loaded = torch.load(tmp_path / "params.pkl", weights_only=True)
    assert loaded["itr"] == 4 and loaded["tag"] == "dqn" and loaded["history"] == [1.5, 2]
    assert torch.equal(loaded["agent_state_dict"]["weight"], model.weight.detach())
    assert loaded["optimizer_state_dict"]["param_groups"] == \
        optim.state_dict()["param_groups"]


def test_snapshot_write_is_atomic(tmp_path, monkeypatch):
    logger.set_snapshot_dir(str(tmp_path))
    logger.set_snapshot_mode("last")
    logger.save_itr_params(0, dict(itr=0))

    with pytest.raises(Exception):
        logger.save_itr_params(1, dict(itr=1, bad=lambda: None))  # cannot be pickled

    def failing_fsync(fd):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        logger.save_itr_params(2, dict(itr=2, big=torch.zeros(1000)))

    assert os.listdir(tmp_path) == ["params.pkl"]  # no partial or temp files
    assert torch.load(tmp_path / "params.pkl", weights_only=True) == dict(itr=0)


# ----------------------------------------------------------------------------- progress bar

def test_prog_bar_handles_zero_and_forced_output(monkeypatch, capsys):
    bar = ProgBarCounter(0)
    bar.update(5)
    bar.stop()
    bar.stop()

    monkeypatch.setenv("RLFRAME_PROGRESS", "1")
    bar = ProgBarCounter(10)
    bar.update(4)
    bar.update(50)
    assert bar.cur_count == 10
    bar.stop()
    assert "10/10" in capsys.readouterr().out

    monkeypatch.delenv("RLFRAME_PROGRESS")  # captured stdout is not a terminal: silent
    bar = ProgBarCounter(10)
    bar.update(3)
    bar.stop()
    monkeypatch.setenv("RLFRAME_PROGRESS", "1")
    logger.set_log_tabular_only(True)
    bar = ProgBarCounter(10)
    bar.update(3)
    bar.stop()
    assert capsys.readouterr().out == ""


def test_runs_started_in_the_same_second_get_their_own_dated_directory(in_tmp_cwd,
                                                                       monkeypatch):
    """rlpyt's launched scripts log to a relative log_dir with the same run_ID: two started
    in the same second meet in one dated directory, where the second takes a suffix."""
    from rlframe.utils.logging import context
    monkeypatch.setattr(context, "get_log_dir",
                        lambda name, root_log_dir=None: context.os.path.join(
                            root_log_dir, "local", "20240101", "120000", name))
    with context.logger_context("exp", 0, "a", dict(lr=1)) as first:
        logger.log("first")
    with context.logger_context("exp", 0, "b", dict(lr=2)) as second:
        logger.log("second")
    assert second == first + "-1"
    with open(os.path.join(first, "params.json")) as f:
        assert json.load(f)["lr"] == 1
    with pytest.raises(FileExistsError, match="already holds a run"):  # a path as given
        with context.logger_context(first[:-len("/run_0")], 0, "c", override_prefix=True):
            pass
