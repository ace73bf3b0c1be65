"""Runner callbacks: early stop with StopAtReturn, hooks seen in order, errors."""
import csv
import math
import os
import types

import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.callbacks import Callback, StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context

ENV = dict(id="CartPole-v1")


def make_runner(RunnerCls=MinibatchRlEval, batch_T=16, batch_B=2, n_steps=320,
                log_interval_steps=64, callbacks=None, eval_max_steps=200, **algo_kwargs):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=ENV, eval_env_kwargs=ENV,
                            batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0,
                            eval_n_envs=2, eval_max_steps=eval_max_steps)
    algo = PPO(**({"epochs": 1, "minibatches": 1} | algo_kwargs))
    return RunnerCls(algo=algo, agent=CategoricalPgAgent(), sampler=sampler, n_steps=n_steps,
                     log_interval_steps=log_interval_steps, seed=0,
                     affinity=dict(master_torch_threads=1), callbacks=callbacks)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFRAME_DATA_DIR", str(tmp_path))
    n_threads = torch.get_num_threads()
    yield tmp_path
    torch.set_num_threads(n_threads)


def train(runner, snapshot_mode="none"):
    """Train inside a run directory; returns (run_dir, progress.csv rows)."""
    with logger_context("callbacks", 0, "callbacks", {}, snapshot_mode=snapshot_mode):
        run_dir = logger.get_snapshot_dir()
        runner.train()
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return run_dir, list(csv.DictReader(f))


class Recorder(Callback):
    def __init__(self):
        self.calls = []

    def on_startup(self, runner):
        self.calls.append(("startup",))

    def on_iteration_end(self, runner, itr, samples, opt_info):
        self.calls.append(("iteration", itr))

    def on_log(self, runner, itr, diagnostics):
        self.calls.append(("log", itr, diagnostics))

    def on_shutdown(self, runner):
        self.calls.append(("shutdown",))


def same_value(csv_cell, value):
    return (math.isnan(value) and csv_cell == "nan") or float(csv_cell) == pytest.approx(value)


# ---------------------------------------------------------------------------- StopAtReturn


@pytest.mark.slow
def test_stop_at_return_ends_ppo_run_at_first_evaluation_over_threshold(data_dir):
    stop = StopAtReturn(150.)
    runner = make_runner(batch_T=128, batch_B=8, n_steps=200e3, log_interval_steps=2048,
                         callbacks=[stop], eval_max_steps=1000, discount=0.98, learning_rate=1e-3,
                         gae_lambda=0.95, minibatches=4, epochs=8, clip_grad_norm=10.)
    run_dir, rows = train(runner, snapshot_mode="last")

    itr = stop.stopped_itr
    assert itr is not None and itr < runner.n_itr - 1
    returns = [float(row["ReturnAverage"]) for row in rows]
    assert returns[-1] >= 150.
    assert not any(r >= 150. for r in returns[1:-1])  # The first row over it stops the run.
    assert int(rows[-1]["Diagnostics/Iteration"]) == itr
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    assert snapshot["itr"] == itr
    assert [ret for _, ret in stop.history] == pytest.approx(returns, nan_ok=True)
    assert stop.history[0][0] == 0  # The untrained evaluation.
    assert [s for s, _ in stop.history[1:]] == [int(r["Diagnostics/CumSteps"]) for r in rows[1:]]
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    assert (f"StopAtReturn(threshold=150.0, key='ReturnAverage') returned False from on_log "
            f"at iteration {itr}") in log
    assert "Training stopped by a callback." in log


def test_stop_at_return_ignores_the_row_before_training(data_dir):
    # Every row reaches -inf: only the first one after training may stop the run.
    stop = StopAtReturn(-math.inf)
    runner = make_runner(callbacks=[stop])
    _, rows = train(runner)
    assert [int(row["Diagnostics/Iteration"]) for row in rows] == [-1, 1]
    assert stop.stopped_itr == runner.log_interval_itrs - 1 == 1


def test_stop_at_return_units():
    stop = StopAtReturn(10, key="Score")
    stop.on_startup(None)
    assert stop.on_log(None, 0, {"Diagnostics/CumSteps": 8, "Score": 50.}) is True
    stop.on_iteration_end(None, 0, None, None)
    assert stop.on_log(None, 0, {"Diagnostics/CumSteps": 8, "Score": float("nan")}) is True
    assert stop.on_log(None, 1, {"Diagnostics/CumSteps": 16, "Score": 9.}) is True
    assert stop.on_log(None, 2, {"Diagnostics/CumSteps": 24, "Score": 10.}) is False
    assert stop.stopped_itr == 2
    assert stop.history[0] == (0, 50.) and stop.history[2:] == [(16, 9.), (24, 10.)]
    assert math.isnan(stop.history[1][1])
    with pytest.raises(KeyError, match=r"key='Return'.*available.*'Diagnostics/CumSteps'"):
        StopAtReturn(1., key="Return").on_log(None, 0, {"Diagnostics/CumSteps": 8})
    with pytest.raises(TypeError, match="threshold"):
        StopAtReturn(float("nan"))
    with pytest.raises(TypeError, match="threshold"):
        StopAtReturn("100")


# ---------------------------------------------------------------------------- user callbacks


@pytest.mark.parametrize("RunnerCls", [MinibatchRl, MinibatchRlEval])
def test_callback_sees_every_iteration_and_every_row(data_dir, RunnerCls):
    recorder = Recorder()
    runner = make_runner(RunnerCls, callbacks=[recorder])
    _, rows = train(runner)

    n_itr, log_itrs = runner.n_itr, runner.log_interval_itrs
    assert (n_itr, log_itrs) == (10, 2)
    calls = recorder.calls
    assert calls[0] == ("startup",) and calls[-1] == ("shutdown",)
    assert [c[0] for c in calls].count("startup") == 1
    assert [c[0] for c in calls].count("shutdown") == 1
    assert [c[1] for c in calls if c[0] == "iteration"] == list(range(n_itr))
    logs = [c for c in calls if c[0] == "log"]
    expected_log_itrs = [itr for itr in range(n_itr) if (itr + 1) % log_itrs == 0]
    if RunnerCls is MinibatchRlEval:
        expected_log_itrs = [-1] + expected_log_itrs
        assert calls[1][0] == "log"  # The untrained evaluation, before any iteration.
    assert [c[1] for c in logs] == expected_log_itrs
    for i, c in enumerate(calls[2:], start=2):  # A row right after its iteration ended.
        if c[0] == "log":
            assert calls[i - 1] == ("iteration", c[1])
    assert len(rows) == len(logs)
    for row, (_, _, diagnostics) in zip(rows, logs):
        assert list(diagnostics) == list(row)
        assert all(same_value(row[k], float(v)) for k, v in diagnostics.items()), (row, diagnostics)


def test_duck_typed_callback_and_stop_before_training(data_dir):
    seen = []
    callback = types.SimpleNamespace(
        on_log=lambda runner, itr, diagnostics: False,
        on_iteration_end=lambda runner, itr, samples, opt_info: seen.append(itr))
    runner = make_runner(callbacks=[callback])
    run_dir, rows = train(runner)
    assert len(rows) == 1 and seen == []
    with open(os.path.join(run_dir, "debug.log")) as f:
        assert "returned False from on_log at iteration -1" in f.read()


def test_on_shutdown_runs_when_the_run_raises(data_dir):
    class Crash(Recorder):
        def on_iteration_end(self, runner, itr, samples, opt_info):
            super().on_iteration_end(runner, itr, samples, opt_info)
            if itr == 2:
                raise RuntimeError("boom")

    crash = Crash()
    runner = make_runner(MinibatchRl, callbacks=[crash])
    with pytest.raises(RuntimeError, match="boom"):
        train(runner)
    assert crash.calls[-1] == ("shutdown",)
    assert [c[0] for c in crash.calls].count("shutdown") == 1
    assert runner.sampler.envs is None  # The sampler was shut down too.


def test_bad_callbacks_argument():
    with pytest.raises(TypeError, match=r"callbacks must be a list.*wrap a single callback"):
        make_runner(callbacks=StopAtReturn(1.))
    with pytest.raises(TypeError, match=r"callbacks\[1\] must be a callback.*got 'early'"):
        make_runner(callbacks=[StopAtReturn(1.), "early"])
    with pytest.raises(TypeError, match=r"callbacks\[0\].*instance, not the class"):
        make_runner(callbacks=[StopAtReturn])
