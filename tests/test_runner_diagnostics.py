"""One diagnostics row, one evaluation path and a runner state_dict for every runner:
progress.csv's columns come from ``DiagnosticsRow``, an ``Evaluation`` given to
``MinibatchRl`` logs ``MinibatchRlEval``'s rows, ``state_dict()`` round-trips, and the
three evaluation collectors share one loop."""
import glob
import math
import os

import pytest
import torch
from conftest import read_csv, run_dirs

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners import diagnostics as diagnostics_module
from rlframe.runners.async_rl import AsyncRl, AsyncRlEval
from rlframe.runners.evaluation import AsyncEvaluation, Evaluation
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.collectors import BaseEvalCollector
from rlframe.samplers.parallel.cpu.collectors import CpuEvalCollector
from rlframe.samplers.parallel.gpu.collectors import GpuEvalCollector
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context, logger_context_at

D = "Diagnostics/"
COUNTERS = [D + c for c in ("Iteration", "CumTime (s)", "CumSteps", "CumCompletedTrajs",
                            "CumUpdates", "StepsPerSecond", "UpdatesPerSecond", "ReplayRatio",
                            "CumReplayRatio", "NonFiniteUpdates")]
ASYNC_COUNTERS = [D + c for c in ("Iteration", "SamplerIteration", "CumTime (s)", "CumSteps",
                                  "CumUpdates", "ReplayRatio", "CumReplayRatio",
                                  "LearningReplayRatio", "StepsPerSecond")]
ASYNC_TAIL = [D + c for c in ("UpdatesPerSecond", "OptThrottle", "SamplerThrottle",
                              "NonFiniteUpdates")]
EVAL_HEAD = [D + "StepsInEval", D + "TrajsInEval", D + "CumEvalTime"]
WINDOW_HEAD = [D + "NewCompletedTrajs", D + "StepsInTrajWindow"]
STATS = ("Average", "Std", "Median", "Min", "Max")
TRAJ = [f"{k}{s}" for k in ("Length", "Return", "NonzeroRewards", "DiscountedReturn")
        for s in STATS]
A2C_INFOS = [f"{k}{s}" for k in ("loss", "gradNorm", "entropy", "perplexity") for s in STATS]
DQN_INFOS = [f"{k}{s}" for k in ("loss", "gradNorm", "tdAbsErr") for s in STATS]
EXPECTED_HEADERS = {
    "MinibatchRl": WINDOW_HEAD + COUNTERS + TRAJ + A2C_INFOS,
    "MinibatchRlEval": EVAL_HEAD + [D + "CumTrainTime"] + COUNTERS + TRAJ + A2C_INFOS,
    "AsyncRl": [D + "CumCompletedTrajs"] + WINDOW_HEAD + ASYNC_COUNTERS + ASYNC_TAIL + TRAJ
    + DQN_INFOS,
    "AsyncRlEval": EVAL_HEAD + ASYNC_COUNTERS + [D + "NonEvalSamplesPerSecond"] + ASYNC_TAIL
    + TRAJ + DQN_INFOS,
}
# Columns that depend on the clock; every other column is the same in two equal runs.
TIMED = {D + c for c in ("CumTime (s)", "StepsPerSecond", "UpdatesPerSecond", "CumEvalTime",
                         "CumTrainTime")}
EVAL = dict(eval_env_kwargs=dict(id="CartPole-v1"), eval_n_envs=2, eval_max_steps=40)


def serial_sampler(evaluate):
    return SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                         batch_B=2, max_decorrelation_steps=0, **(EVAL if evaluate else {}))


def minibatch(RunnerCls, evaluate, **kwargs):
    return RunnerCls(algo=A2C(), agent=CategoricalPgAgent(), sampler=serial_sampler(evaluate),
                     n_steps=64, log_interval_steps=16, seed=1, **kwargs)


def asynchronous(RunnerCls, evaluate):
    sampler = AsyncSerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                                 batch_T=8, batch_B=2, max_decorrelation_steps=0,
                                 **(EVAL if evaluate else {}))
    algo = DQN(batch_size=16, min_steps_learn=64, replay_size=1000, replay_ratio=8)
    return RunnerCls(algo=algo, agent=DqnAgent(), sampler=sampler, n_steps=512,
                     affinity=make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0,
                                            async_sample=True),
                     log_interval_steps=128, seed=1)


def train(runner, root, name):
    with logger_context(name, 0, name, {}, snapshot_mode="last"):
        runner.train()
    (run_dir,) = [d for d in run_dirs(root) if os.sep + name + os.sep in d + os.sep]
    return run_dir


MAKERS = {
    "MinibatchRl": lambda: minibatch(MinibatchRl, False),
    "MinibatchRlEval": lambda: minibatch(MinibatchRlEval, True),
    "AsyncRl": lambda: asynchronous(AsyncRl, False),
    "AsyncRlEval": lambda: asynchronous(AsyncRlEval, True),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("family", list(MAKERS))
def test_every_runner_family_writes_its_rows_with_the_one_row_builder(in_tmp_cwd, monkeypatch,
                                                                      family):
    written = []
    write = diagnostics_module.DiagnosticsRow.write

    def recording_write(row, *args, **kwargs):
        diagnostics = write(row, *args, **kwargs)
        written.append(list(diagnostics))
        return diagnostics

    monkeypatch.setattr(diagnostics_module.DiagnosticsRow, "write", recording_write)
    run_dir = train(MAKERS[family](), in_tmp_cwd, family)
    header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
    assert header == EXPECTED_HEADERS[family]
    assert len(written) == len(rows) >= 2
    assert all(columns == header for columns in written)


def test_an_evaluation_given_to_minibatch_rl_logs_the_rows_of_minibatch_rl_eval(in_tmp_cwd):
    given = train(minibatch(MinibatchRl, True, evaluation=Evaluation()), in_tmp_cwd, "given")
    eval_runner = train(minibatch(MinibatchRlEval, True), in_tmp_cwd, "eval")
    header_a, rows_a = read_csv(os.path.join(given, "progress.csv"))
    header_b, rows_b = read_csv(os.path.join(eval_runner, "progress.csv"))
    assert header_a == header_b == EXPECTED_HEADERS["MinibatchRlEval"]
    assert len(rows_a) == len(rows_b) == 5  # The untrained agent's row, then 4 log points.
    for row_a, row_b in zip(rows_a, rows_b):
        same = {k: (a, b) for k, a, b in zip(header_a, row_a, row_b) if k not in TIMED}
        assert all(a == b for a, b in same.values()), same
    assert rows_a[0][header_a.index(D + "Iteration")] == "-1"


def test_runners_refuse_an_evaluation_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"MinibatchRl: evaluation must be an Evaluation .*"
                                        r"got str"):
        minibatch(MinibatchRl, True, evaluation="yes")
    with pytest.raises(TypeError, match=r"AsyncRl: evaluation must be an AsyncEvaluation .*"
                                        r"got Evaluation"):
        AsyncRl(algo=DQN(), agent=DqnAgent(), sampler=AsyncSerialSampler(
            EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=8, batch_B=2, **EVAL),
            n_steps=512, affinity=make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0,
                                                async_sample=True),
            evaluation=Evaluation())
    assert isinstance(asynchronous(AsyncRlEval, True).evaluation, AsyncEvaluation)


def fresh_copy(runner, RunnerCls, evaluate):
    """A runner made like ``runner`` and set up for logging, as startup leaves it."""
    other = minibatch(RunnerCls, evaluate)
    other.log_interval_itrs, other.n_itr = runner.log_interval_itrs, runner.n_itr
    other.initialize_logging()
    other._stop_pbar()
    return other


@pytest.mark.parametrize("RunnerCls,evaluate", [(MinibatchRl, False), (MinibatchRlEval, True)])
def test_runner_state_dict_round_trips(in_tmp_cwd, RunnerCls, evaluate):
    runner = minibatch(RunnerCls, evaluate)
    train(runner, in_tmp_cwd, "first")
    state = runner.state_dict()
    assert state["last_completed_itr"] == runner.n_itr - 1 == 7
    assert state["cum_completed_trajs"] == runner.stats.cum_completed_trajs > 0
    assert ("traj_window" in state) is not evaluate
    assert (state["cum_eval_time"] > 0) is evaluate

    other = fresh_copy(runner, RunnerCls, evaluate)
    other.load_state_dict(state)
    again = other.state_dict()
    assert math.isclose(again.pop("cum_time"), state.pop("cum_time"), abs_tol=0.5)
    assert again == state
    assert other.last_completed_itr == runner.last_completed_itr
    assert other.stats.cum_completed_trajs == runner.stats.cum_completed_trajs
    # Counters continue: one more iteration's trajectories add to the restored ones.
    infos = [runner.sampler.TrajInfoCls(**runner.sampler.traj_info_kwargs) for _ in range(2)]
    other.stats.store(infos, None)
    assert other.stats.cum_completed_trajs == runner.stats.cum_completed_trajs + 2
    if not evaluate:
        assert list(other.stats.traj_window) == list(runner.stats.traj_window) + infos
        assert other.stats.new_completed_trajs == 2


def test_rlpyt_private_statistic_names_read_and_write_the_runner_statistics(in_tmp_cwd):
    """Runner subclasses written against rlpyt's ``self._cum_completed_trajs``, ...
    see and change the statistics the rows are built from."""
    runner = minibatch(MinibatchRl, False)
    train(runner, in_tmp_cwd, "names")
    stats = runner.stats
    assert runner._cum_completed_trajs == stats.cum_completed_trajs > 0
    assert runner._traj_infos is stats.traj_window and len(runner._traj_infos) > 0
    assert (runner._start_time, runner._last_time) == (stats.start_time, stats.last_time)
    runner._new_completed_trajs = 5
    runner._cum_completed_trajs += 3
    assert stats.new_completed_trajs == 5
    assert stats.cum_completed_trajs == runner.state_dict()["cum_completed_trajs"]


def test_snapshots_hold_the_runner_state_dict_and_resume_loads_it(in_tmp_cwd, monkeypatch):
    runner = minibatch(MinibatchRl, False)
    run_dir = train(runner, in_tmp_cwd, "snap")
    (path,) = glob.glob(os.path.join(run_dir, "params*.pkl"))
    snapshot = torch.load(path, weights_only=True)
    saved = snapshot["runner_state"]
    assert set(saved) == set(runner.state_dict())
    assert saved["last_completed_itr"] == snapshot["itr"] == 7

    loaded = []
    monkeypatch.setattr(MinibatchRlBase, "load_state_dict",
                        lambda self, state: loaded.append(state))
    resumed = MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(),
                          sampler=serial_sampler(False), n_steps=96, log_interval_steps=16,
                          seed=1)
    with logger_context_at(run_dir, 0, "snap", {}, snapshot_mode="last", resume=True):
        resumed.train()
    (state,) = loaded
    assert state["cum_completed_trajs"] == saved["cum_completed_trajs"]
    assert state["traj_window"] == saved["traj_window"]
    assert resumed.start_itr == 8


@pytest.mark.parametrize("mode,built", [("none", 0), ("gap", 2), ("last", 4)])
def test_snapshots_are_built_only_where_the_mode_writes_one(mode, built, in_tmp_cwd,
                                                             monkeypatch):
    """Log points at iterations 1, 3, 5 and 7: "last" writes at each, "gap" (of 4) at 3 and
    7, "none" at none; a snapshot (the agent's and optimizer's whole state) is built only
    for a write."""
    calls = []
    get = MinibatchRlBase.get_itr_snapshot
    monkeypatch.setattr(MinibatchRlBase, "get_itr_snapshot",
                        lambda self, itr: calls.append(itr) or get(self, itr))
    runner = minibatch(MinibatchRl, False)
    with logger_context("modes", 0, "modes", {}, snapshot_mode=mode):
        logger.set_snapshot_gap(4)
        runner.train()
    assert len(calls) == built, calls


def test_minibatch_runners_read_their_rank_as_an_attribute():
    assert MinibatchRlBase.rank == 0 and MinibatchRlBase.world_size == 1
    runner = minibatch(MinibatchRl, False)
    assert runner.rank == 0 and "rank" not in vars(runner)


# --------------------------------------------------------------------------- collectors

def test_the_three_evaluation_collectors_share_one_loop():
    for cls in (SerialEvalCollector, CpuEvalCollector, GpuEvalCollector):
        assert issubclass(cls, BaseEvalCollector)
        assert "collect_evaluation" not in vars(cls), cls


class _Queue(list):
    put = list.append


class _Value:
    def __init__(self, value):
        self.value = value


def cartpole_envs(n):
    return [gym_make(id="CartPole-v1") for _ in range(n)]


def test_a_cpu_evaluation_reports_on_its_queue_and_stops_when_asked():
    agent = CategoricalPgAgent()
    envs = cartpole_envs(2)
    agent.initialize(envs[0].spaces)
    queue = _Queue()
    collector = CpuEvalCollector(rank=0, envs=envs, TrajInfoCls=SerialSampler(
        EnvCls=gym_make, env_kwargs={}, batch_T=1, batch_B=1).TrajInfoCls,
        traj_infos_queue=queue, max_T=300, agent=agent,
        sync=AttrDict(stop_eval=_Value(False)))
    completed = collector.collect_evaluation(1)
    assert queue[-1] is None and queue[:-1] == completed and len(completed) >= 2
    queue.clear()
    collector.sync.stop_eval.value = True
    assert collector.collect_evaluation(2) == [] and queue == [None]  # Stopped after a step.
    for env in envs:
        env.close()


def test_a_serial_evaluation_stops_at_max_trajectories():
    agent = CategoricalPgAgent()
    envs = cartpole_envs(3)
    agent.initialize(envs[0].spaces)
    collector = SerialEvalCollector(envs=envs, agent=agent, TrajInfoCls=SerialSampler(
        EnvCls=gym_make, env_kwargs={}, batch_T=1, batch_B=1).TrajInfoCls, max_T=500,
        max_trajectories=2)
    completed = collector.collect_evaluation(1)
    assert 2 <= len(completed) <= 3
    for env in envs:
        env.close()
