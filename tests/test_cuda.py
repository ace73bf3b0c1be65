"""The CUDA paths, run for real on a machine with a GPU (skipped without one).

What a GPU changes in rlframe: the agent's model and the updates live on
``cuda_idx`` while envs step on CPUs; GPU-style samplers pick every env's action
in one batch on the device; AsyncRl's optimizer trains on the device and hands
parameters to a CPU sampler through shared memory; SyncRl and AsyncRl's ranks
use NCCL; snapshots written from a GPU run load on a machine without one.
Each test trains to the same thresholds as the CPU learning tests.
"""
import csv
import math
import os
import subprocess
import sys

import pytest
import torch
from learning_helpers import assert_learned, train_until_threshold
from test_dqn_learning import AGENT_KWARGS, DQN_KWARGS, UserDistributionalQNet, UserQNet
from test_qpg_learning import MAX_STEPS, THRESHOLD, pendulum_setups

from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.td3 import TD3
from rlframe.envs.gym import make as gym_make
from rlframe.envs.wrappers import make_velocity_hidden_cartpole
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.runners.async_rl import AsyncRlEval
from rlframe.runners.callbacks import Callback, StopAtReturn
from rlframe.runners.sync_rl import SyncRlEval
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cartpole_sampler(SamplerCls=SerialSampler, batch_T=128, batch_B=8, **kwargs):
    return SamplerCls(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                      eval_env_kwargs=dict(id="CartPole-v1"), batch_T=batch_T, batch_B=batch_B,
                      max_decorrelation_steps=0, eval_n_envs=4, eval_max_steps=4000,
                      eval_max_trajectories=8, **kwargs)


def cartpole_ppo():
    return PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, minibatches=4, epochs=8,
               ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
               clip_grad_norm=10., normalize_advantage=True)


def every_algorithm():
    """name -> (algo, agent, env id or EnvCls); each learns from its first iterations."""
    off = dict(min_steps_learn=256, replay_size=4096, batch_size=32)
    return dict(
        a2c=(A2C(), CategoricalPgAgent(), "CartPole-v1"),
        ppo_gaussian=(PPO(minibatches=2, epochs=2), MujocoFfAgent(), "Pendulum-v1"),
        dqn=(DQN(**off, double_dqn=True, prioritized_replay=True, n_step_return=3),
             DqnAgent(ModelCls=UserQNet), "CartPole-v1"),
        catdqn=(CategoricalDQN(V_min=0., V_max=100., double_dqn=True, **off),
                CatDqnAgent(ModelCls=UserDistributionalQNet, n_atoms=51), "CartPole-v1"),
        r2d1=(R2D1(batch_T=8, batch_B=4, warmup_T=4, store_rnn_state_interval=4,
                   min_steps_learn=256, replay_size=4096, n_step_return=2),
              R2d1Agent(model_kwargs=dict(dueling=True)), make_velocity_hidden_cartpole),
        ddpg=(DDPG(**off), DdpgAgent(), "Pendulum-v1"),
        td3=(TD3(**off), Td3Agent(), "Pendulum-v1"),
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(every_algorithm()))
def test_every_algorithm_updates_on_the_gpu(name, in_tmp_cwd):
    """A few iterations of each algorithm with its model on the GPU: updates happen,
    the parameters stay finite and on the device, and none is left unchanged."""
    algo, agent, env = every_algorithm()[name]
    EnvCls, env_kwargs = (gym_make, dict(id=env)) if isinstance(env, str) else (env, {})
    sampler = SerialSampler(EnvCls=EnvCls, env_kwargs=env_kwargs, batch_T=16, batch_B=4,
                            max_decorrelation_steps=0)
    initial = InitialParams()
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=1024,
                         log_interval_steps=512, seed=0, affinity=dict(cuda_idx=0),
                         callbacks=[initial])
    with logger_context("every_algo", 0, name, {}, snapshot_mode="none"):
        runner.train()
    params = dict(agent.model.named_parameters())
    assert {p.device.type for p in params.values()} == {"cuda"}
    assert all(torch.isfinite(p).all() for p in params.values())
    assert algo.update_counter > 0
    unchanged = [k for k, p in params.items() if torch.equal(p.cpu(), initial.params[k])]
    assert not unchanged, unchanged


class InitialParams(Callback):
    """The model's parameters (on the CPU) when the run starts."""

    def on_startup(self, runner):
        self.params = {k: p.detach().cpu().clone()
                       for k, p in runner.agent.model.named_parameters()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_with_the_model_on_the_gpu_reaches_475(in_tmp_cwd):
    agent = CategoricalPgAgent()
    history = train_until_threshold(475, cartpole_ppo(), agent, cartpole_sampler(), 150e3,
                                    10240, seed=0, affinity=dict(cuda_idx=0))
    assert_learned(history, 475, 150e3, untrained_below=100)
    assert {p.device.type for p in agent.model.parameters()} == {"cuda"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dqn_with_a_gpu_sampler_picks_actions_on_the_device_and_reaches_475(in_tmp_cwd):
    """GpuSampler: 4 worker processes step the envs, the master picks all 8 envs'
    actions in one forward pass of the model on the GPU."""
    agent = DqnAgent(ModelCls=UserQNet, **AGENT_KWARGS)
    sampler = cartpole_sampler(GpuSampler, batch_T=32, batch_B=8)
    history = train_until_threshold(475, DQN(**DQN_KWARGS), agent, sampler, 60e3, 4096, seed=1,
                                    affinity=dict(cuda_idx=0, workers_cpus=[0, 1, 2, 3]))
    assert_learned(history, 475, 60e3, untrained_below=100)
    assert {p.device.type for p in agent.model.parameters()} == {"cuda"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sac_with_the_model_on_the_gpu_learns_pendulum(in_tmp_cwd):
    algo, agent = pendulum_setups()["sac"]
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"),
                            eval_env_kwargs=dict(id="Pendulum-v1"), batch_T=1, batch_B=1,
                            max_decorrelation_steps=0, eval_n_envs=5, eval_max_steps=1000,
                            eval_max_trajectories=5)
    history = train_until_threshold(THRESHOLD, algo, agent, sampler, MAX_STEPS, 1000, seed=0,
                                    affinity=dict(cuda_idx=0))
    assert_learned(history, THRESHOLD, MAX_STEPS, untrained_below=-700)


def async_affinity(sampler_cuda_idx):
    return dict(all_cpus=(0, 1, 2, 3, 4),
                optimizer=[dict(cpus=(0,), cuda_idx=0, torch_threads=1, set_affinity=True)],
                sampler=dict(all_cpus=(1, 2, 3, 4), master_cpus=(1,),
                             workers_cpus=((1,), (2,), (3,), (4,)), master_torch_threads=1,
                             worker_torch_threads=1, cuda_idx=sampler_cuda_idx,
                             alternating=False, set_affinity=True),
                set_affinity=True)


def test_children_on_the_gpu_are_not_forked_after_torch_asked_for_devices():
    """torch.cuda.is_available() initializes nothing that torch.cuda.is_initialized()
    reports, yet CUDA then fails in forked children: the runners' check sees it."""
    probe = ("import torch; from rlframe.utils.synchronize import cuda_fork_problem, "
             "forked_child_in_bad_cuda_fork as bad; before = bad(); torch.cuda.is_available(); "
             "print(before, bad(), torch.cuda.is_initialized(), cuda_fork_problem([0]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split(" ", 3)
    assert out[:3] == ["False", "True", "False"], out
    assert "asked the CUDA runtime for its devices" in out[3], out


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sampler_cuda_idx", [None, 0], ids=["cpu_actions", "gpu_actions"])
def test_async_dqn_with_the_optimizer_on_the_gpu_reaches_475(sampler_cuda_idx, in_tmp_cwd):
    """AsyncRl: the optimizer process trains on the GPU; new parameters reach the
    sampler's model (on the CPU, or on the same GPU) through shared memory."""
    stop = StopAtReturn(475)
    agent = DqnAgent(ModelCls=UserQNet, **AGENT_KWARGS)
    runner = AsyncRlEval(algo=DQN(**DQN_KWARGS), agent=agent,
                         sampler=cartpole_sampler(AsyncGpuSampler, batch_T=32, batch_B=8),
                         n_steps=80e3, affinity=async_affinity(sampler_cuda_idx), seed=1,
                         log_interval_steps=4096, callbacks=[stop], sampler_lead_steps=2048)
    with logger_context("async_cuda", 0, "async_cuda", {}, snapshot_mode="last"):
        runner.train()
    history = [(steps, ret) for steps, ret in stop.history if not math.isnan(ret)]
    reached = [steps for steps, ret in history if ret >= 475]
    assert reached and reached[0] <= 80e3, history
    assert runner.algo.update_counter > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sync_rl_on_nccl_trains_and_reaches_475(in_tmp_cwd):
    """SyncRl with a cuda_idx uses NCCL and DistributedDataParallel on the GPU (one
    rank: this machine has one GPU, and NCCL takes one rank per device)."""
    stop = StopAtReturn(475)
    runner = SyncRlEval(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                        sampler=cartpole_sampler(), n_steps=150e3, log_interval_steps=10240,
                        seed=0, callbacks=[stop],
                        affinity=[dict(cuda_idx=0, master_torch_threads=1, workers_cpus=[0])])
    with logger_context("sync_cuda", 0, "sync_cuda", {}, snapshot_mode="none"):
        runner.train()
    history = [(steps, ret) for steps, ret in stop.history if not math.isnan(ret)]
    assert_learned(history, 475, 150e3, untrained_below=100)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_gpu_run_trains_from_the_command_line_and_evaluates_without_a_gpu(in_tmp_cwd):
    """``rlframe train --cuda-idx 0`` writes a snapshot of CUDA tensors;
    ``rlframe evaluate`` loads it in a process that sees no GPU."""
    log_dir = os.path.join(in_tmp_cwd, "runs")
    train = subprocess.run(
        [sys.executable, "-m", "rlframe", "train", "ppo", "CartPole-v1", "--n-steps", "40960",
         "--cuda-idx", "0", "--seed", "0", "--log-dir", log_dir, "--log-interval-steps", "10240"],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert train.returncode == 0, train.stderr[-3000:]
    run_dir = os.path.join(log_dir, "run_0")
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert int(rows[-1]["Diagnostics/CumSteps"]) == 40960
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), map_location="cpu",
                          weights_only=True)
    assert snapshot["agent_state_dict"]
    evaluate = subprocess.run(
        [sys.executable, "-m", "rlframe", "evaluate", run_dir, "--episodes", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "return" in (evaluate.stdout + evaluate.stderr).lower()
    on_gpu = subprocess.run(
        [sys.executable, "-m", "rlframe", "evaluate", run_dir, "--episodes", "3", "--device",
         "cuda:0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert on_gpu.returncode == 0, on_gpu.stderr[-3000:]
