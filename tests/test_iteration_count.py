"""Iteration counts follow rlpyt's rule (SPEC 2.1), and tiny runs work."""
import csv
import os

import pytest
import torch

from conftest import run_dirs
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from rlframe.samplers.collections import BatchSpec
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


class _Sampler:
    def __init__(self, T, B):
        self.batch_spec = BatchSpec(T, B)


@pytest.mark.parametrize("T,B,world_size,n_steps,log_steps,log_itrs,n_itr", [
    (5, 16, 1, 50e6, 1e5, 1250, 625000),
    (4, 1, 1, 1, 1e3, 250, 0),
    (64, 1, 1, 1000, 300, 4, 16),
    (7, 3, 2, 1e6, 3e4, 714, 24276),
    (10, 10, 1, 1000, 50, 1, 10),  # log interval shorter than one batch: log every itr
    (10, 10, 1, 1000, 1e5, 1000, 1000),  # rounds up to one whole log interval
])
def test_n_itr_worked_examples(T, B, world_size, n_steps, log_steps, log_itrs, n_itr):
    runner = MinibatchRlBase(algo=object(), agent=object(), sampler=_Sampler(T, B),
                             n_steps=n_steps, log_interval_steps=log_steps)
    runner.itr_batch_size = T * B * world_size
    assert runner.get_n_itr() == n_itr
    assert runner.log_interval_itrs == log_itrs
    assert runner.n_itr % runner.log_interval_itrs == 0


def _make(RunnerCls, n_steps, eval_n_envs=0):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            eval_env_kwargs=dict(id="CartPole-v1"), batch_T=4, batch_B=2,
                            max_decorrelation_steps=0, eval_n_envs=eval_n_envs,
                            eval_max_steps=40)
    return RunnerCls(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=n_steps,
                     log_interval_steps=8, seed=1)


@pytest.mark.parametrize("RunnerCls,eval_n_envs", [(MinibatchRl, 0), (MinibatchRlEval, 2)])
@pytest.mark.parametrize("n_steps,expect_itr", [(1, 0), (8, 1)])
def test_zero_and_one_iteration_runs(in_tmp_cwd, RunnerCls, eval_n_envs, n_steps, expect_itr):
    runner = _make(RunnerCls, n_steps, eval_n_envs)
    with logger_context("tiny", 0, "tiny", dict(n_steps=n_steps), snapshot_mode="last"):
        runner.train()
    assert runner.n_itr == expect_itr
    (run_dir,) = run_dirs(in_tmp_cwd)
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    # The Eval runner logs the pre-training evaluation row; both log each interval.
    n_rows = expect_itr + (1 if RunnerCls is MinibatchRlEval else 0)
    assert len(rows) == n_rows
    # Snapshots follow training iterations; the row before training writes none.
    assert os.path.exists(os.path.join(run_dir, "params.pkl")) == (expect_itr > 0)
    if expect_itr:
        snap = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
        assert set(snap) == {"itr", "cum_steps", "agent_state_dict", "optimizer_state_dict",
                             "agent_spec", "algo_state_dict", "rng_state", "runner_state"}
        assert (snap["itr"], snap["cum_steps"]) == (0, 8)
