"""Learning to a threshold on CartPole-v1 (about half a minute each on 2 cores)."""
import csv
import os

import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.callbacks import StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context

pytestmark = pytest.mark.slow


def train_and_read_returns(algo, batch_T, batch_B, n_steps, log_interval_steps, seed=0,
                           SamplerCls=SerialSampler, affinity=None, stop_at=None):
    """Train on CartPole-v1; returns the progress.csv's evaluation returns and env steps.

    With ``stop_at``, the run ends at the first evaluation (after training) whose
    return reaches it: the rows up to there are those the full run logs, so
    "some return within ``n_steps`` reaches ``stop_at``" holds for both or neither.
    """
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                         eval_env_kwargs=dict(id="CartPole-v1"), batch_T=batch_T,
                         batch_B=batch_B, max_decorrelation_steps=0, eval_n_envs=4,
                         eval_max_steps=2000)
    runner = MinibatchRlEval(algo=algo, agent=CategoricalPgAgent(), sampler=sampler,
                             n_steps=n_steps, log_interval_steps=log_interval_steps, seed=seed,
                             affinity=dict(master_torch_threads=1, **(affinity or {})),
                             callbacks=None if stop_at is None else [StopAtReturn(stop_at)])
    n_threads = torch.get_num_threads()
    try:
        with logger_context("learning", 0, "learning", {}, snapshot_mode="none"):
            runner.train()
            run_dir = logger.get_snapshot_dir()
    finally:
        torch.set_num_threads(n_threads)
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    return [float(r["ReturnAverage"]) for r in rows], [int(r["Diagnostics/CumSteps"]) for r in rows]


def cartpole_ppo():
    return PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, minibatches=4, epochs=8,
               ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
               clip_grad_norm=10., normalize_advantage=True)


@pytest.mark.timeout(300)
def test_ppo_cartpole_reaches_475(in_tmp_cwd):
    returns, steps = train_and_read_returns(cartpole_ppo(), 128, 8, 150e3, 10240,
                                            stop_at=475)
    assert returns[0] < 100  # untrained policy
    assert steps[-1] <= 150e3 + 10240
    assert max(returns) >= 475, returns


@pytest.mark.timeout(300)
def test_a2c_cartpole_reaches_400(in_tmp_cwd):
    algo = A2C(discount=0.99, learning_rate=7e-4, OptimCls=torch.optim.RMSprop,
               optim_kwargs=dict(alpha=0.99, eps=1e-5), value_loss_coeff=0.5,
               entropy_loss_coeff=0., clip_grad_norm=0.5)
    returns, steps = train_and_read_returns(algo, 5, 16, 300e3, 10000, stop_at=400)
    assert returns[0] < 100
    assert max(returns) >= 400, returns


@pytest.mark.timeout(300)
def test_ppo_cartpole_with_cpu_sampler_reaches_475(in_tmp_cwd):
    returns, steps = train_and_read_returns(cartpole_ppo(), 128, 8, 150e3, 10240,
                                            SamplerCls=CpuSampler,
                                            affinity=dict(workers_cpus=[0, 1]),
                                            stop_at=475)
    assert returns[0] < 100
    assert steps[-1] <= 150e3 + 10240
    assert max(returns) >= 475, returns


@pytest.mark.parametrize("SamplerCls,workers", [(GpuSampler, [0, 1]),
                                                (AlternatingSampler, [0, 1, 0, 1])])
def test_ppo_trains_with_gpu_style_samplers(in_tmp_cwd, SamplerCls, workers):
    returns, steps = train_and_read_returns(cartpole_ppo(), 128, 8, 30720, 10240,
                                            SamplerCls=SamplerCls,
                                            affinity=dict(workers_cpus=workers))
    assert steps == [0, 10240, 20480, 30720]  # The first row is before training.
    assert max(returns[1:]) > 2 * returns[0]  # it learns
