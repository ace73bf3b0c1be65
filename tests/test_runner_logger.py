"""``runner.logger``: a runner writes to the logger of the run it trains in."""
import multiprocessing as mp
import os
import pickle

import pytest

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.base import BaseRunner
from rlframe.runners.callbacks import Callback
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from conftest import read_csv
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context


def read_text(path):
    with open(path) as f:
        return f.read()


def tiny_ppo_runner(callbacks=None):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=16,
                            batch_B=2, max_decorrelation_steps=0)
    return MinibatchRl(algo=PPO(minibatches=2, epochs=1), agent=CategoricalPgAgent(),
                       sampler=sampler, n_steps=64, log_interval_steps=64, seed=0,
                       affinity=dict(master_torch_threads=1), callbacks=callbacks)


class TinyRunner(BaseRunner):
    """Logs one line and one row per ``train()`` through ``self.logger``."""

    def __init__(self, name):
        self.name = name

    def train(self):
        self.bind_logger()
        self.logger.log(f"{self.name} trains", with_timestamp=False)
        self.logger.record_tabular("Runner", self.name)
        self.logger.dump_tabular(with_timestamp=False)


class LogsTo(Callback):
    """At the runner's log point, writes through ``target.logger`` (default: the runner's)."""

    def __init__(self, text, target=None, action=None):
        self.text, self.target, self.action = text, target, action

    def on_log(self, runner, itr, diagnostics):
        (self.target or runner).logger.log(self.text, with_timestamp=False)
        if self.action is not None:
            self.action()


def test_runner_binds_to_the_run_it_trains_in(in_tmp_cwd):
    seen = []

    class Startup(Callback):
        def on_startup(self, runner):
            seen.append((runner.logger, logger.current_logger()))

    runner = tiny_ppo_runner([Startup(), LogsTo("via runner.logger")])
    run_dirs = []
    for run_ID in (0, 1):
        with logger_context("exp", run_ID, "ppo", dict(lr=1)) as run_dir:
            runner.train()
            run_dirs.append(run_dir)
        # Kept after the run: the runner still names the run it trained in.
        assert runner.logger.get_snapshot_dir() == run_dir
        assert runner.logger is not logger.current_logger()
    (first, current_first), (second, current_second) = seen
    assert first is current_first and second is current_second and first is not second
    for run_dir in run_dirs:
        log = read_text(os.path.join(run_dir, "debug.log"))
        assert log.count("via runner.logger") == 1
        assert len(read_csv(os.path.join(run_dir, "progress.csv"))[1]) == 1


def test_runner_writes_to_its_own_run_while_another_run_is_current(in_tmp_cwd):
    """Runner A's callback trains runner B in a nested run; B's callback writes through
    ``runner_a.logger``, which reaches A's run although B's logger is current."""
    outer = tiny_ppo_runner()
    inner_dir = []

    def train_inner():
        inner = tiny_ppo_runner([LogsTo("to A from inside B", target=outer),
                                 LogsTo("to B")])
        with logger_context("inner", 0, "b", dict(run="b")) as run_dir:
            inner.train()
            inner_dir.append(run_dir)
        assert inner.logger is not outer.logger

    outer.callbacks = [LogsTo("to A", action=train_inner), LogsTo("A after B")]
    with logger_context("outer", 0, "a", dict(run="a")) as outer_dir:
        outer.train()
    log_a = read_text(os.path.join(outer_dir, "debug.log"))
    log_b = read_text(os.path.join(inner_dir[0], "debug.log"))
    assert "to A from inside B" in log_a and "A after B" in log_a and "to A\n" in log_a
    assert "to A" not in log_b and "to B" in log_b
    assert len(read_csv(os.path.join(outer_dir, "progress.csv"))[1]) == 1


def test_two_runners_in_sequential_and_nested_runs(in_tmp_cwd, capsys):
    first, second = TinyRunner("first"), TinyRunner("second")
    with logger_context("a", 0, "a") as dir_a:
        first.train()
        with logger_context("b", 0, "b") as dir_b:
            second.train()
            first.logger.log("first again", with_timestamp=False)
        second.logger.log("second after its run", with_timestamp=False)  # stdout only
    assert read_csv(os.path.join(dir_a, "progress.csv"))[1] == [["first"]]
    assert read_csv(os.path.join(dir_b, "progress.csv"))[1] == [["second"]]
    assert "first again" in read_text(os.path.join(dir_a, "debug.log"))
    assert "first" not in read_text(os.path.join(dir_b, "debug.log"))
    assert "second after its run" in capsys.readouterr().out


def test_unbound_runner_uses_the_current_logger_and_bind_checks_its_argument():
    runner = TinyRunner("r")
    run_logger = logger.Logger()
    with logger.use_logger(run_logger):
        assert runner.logger is run_logger
    assert runner.logger is logger.current_logger()
    other = logger.Logger()
    assert runner.bind_logger(other) is other and runner.logger is other
    with pytest.raises(TypeError, match=r"run_logger must be a Logger \(or None for the "
                                        r"current one\), got str"):
        runner.bind_logger("debug.log")


def test_subclass_train_binds_once_through_super(in_tmp_cwd):
    class Outer(TinyRunner):
        def train(self):
            super().train()
            self.logger.log("outer done", with_timestamp=False)

    runner = Outer("sub")
    with logger_context("sub", 0, "s") as run_dir:
        runner.train()
    log = read_text(os.path.join(run_dir, "debug.log"))
    assert "sub trains" in log and "outer done" in log


def train_in_child(payload, result):
    """A rank or child process: runs the runner quietly, as SyncRl ranks do."""
    runner = pickle.loads(payload)
    unbound = runner._logger is None
    quiet = logger.quiet_logger()
    with logger.use_logger(quiet):
        runner.train()
    result.put((unbound, runner.logger is quiet))


def test_runner_sent_to_a_child_binds_to_the_child_logger(in_tmp_cwd):
    runner = TinyRunner("parent")
    with logger_context("parent", 0, "p") as run_dir:
        runner.train()
        payload = pickle.dumps(runner)  # a bound runner pickles (its logger stays here)
        ctx = mp.get_context("fork")
        result = ctx.Queue()
        child = ctx.Process(target=train_in_child, args=(payload, result))
        child.start()
        outcome = result.get(timeout=60)
        child.join(timeout=60)
        result.close()
        result.join_thread()
    assert child.exitcode == 0
    assert outcome == (True, True)
    assert runner.logger.get_snapshot_dir() == run_dir  # the parent keeps its binding
    assert read_csv(os.path.join(run_dir, "progress.csv"))[1] == [["parent"]]
