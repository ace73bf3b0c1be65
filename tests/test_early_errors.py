"""Bad configuration is refused before any run directory exists, in rlframe's words."""
import os
import subprocess
import sys

import pytest
import torch

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.models.pg.mlp_models import CategoricalPgMlpModel
from rlframe.runners.async_rl import AsyncRl
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

CARTPOLE = dict(id="CartPole-v1")


def serial(batch_T=16, batch_B=2):
    return SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=batch_T, batch_B=batch_B)


# ---------------------------------------------------------------- parallel samplers
@pytest.mark.parametrize("SamplerCls,workers_cpus,batch_B,words", [
    (CpuSampler, [0, 1, 0, 1], 6, r"CpuSampler: batch_B=6 must be a multiple of the number of "
     r"workers, 4 \(len\(affinity\['workers_cpus'\]\).*Use batch_B=8, or workers_cpus with "
     r"1, 2, 3 or 6 entries"),
    (GpuSampler, [0, 1], 3, r"GpuSampler: batch_B=3 .* workers, 2 \(len\(affinity"),
    (AlternatingSampler, [0, 0, 1, 1], 6, r"batch_B=6 .* workers, 4 .*two groups of "
     r"alternating workers.*workers_cpus with 2 or 6 entries"),
])
def test_batch_B_not_split_by_workers_fails_in_the_runner(in_tmp_cwd, SamplerCls, workers_cpus,
                                                          batch_B, words):
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=batch_B)
    with pytest.raises(ValueError, match=words):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=64,
                    affinity=dict(workers_cpus=workers_cpus))
    assert not os.path.exists(in_tmp_cwd / "data")


def test_async_sampler_batch_B_not_split_by_workers_fails_in_the_runner(in_tmp_cwd):
    affinity = make_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=2, async_sample=True)
    affinity["sampler"]["workers_cpus"] = [0, 1]
    sampler = AsyncCpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=3)
    with pytest.raises(ValueError, match=r"AsyncCpuSampler: batch_B=3 must be a multiple of the "
                                         r"number of workers, 2 \(len\(affinity\['sampler'\]"
                                         r"\['workers_cpus'\]\)"):
        AsyncRl(algo=DQN(), agent=DqnAgent(), sampler=sampler, n_steps=1000, affinity=affinity)
    assert not os.path.exists(in_tmp_cwd / "data")


def test_parallel_sampler_without_workers_cpus_fails_in_the_runner(in_tmp_cwd):
    sampler = CpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=2)
    with pytest.raises(ValueError, match=r"affinity\['workers_cpus'\] is required"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=64)
    assert not os.path.exists(in_tmp_cwd / "data")


# ---------------------------------------------------------------- PPO batch split
def test_ppo_minibatches_larger_than_the_batch_fail_in_the_runner(in_tmp_cwd):
    with pytest.raises(ValueError, match=r"PPO minibatches=64 exceeds batch_T \* batch_B = "
                                         r"16 \* 2 = 32 samples.*minibatches <= 32"):
        MinibatchRl(algo=PPO(minibatches=64), agent=CategoricalPgAgent(), sampler=serial(),
                    n_steps=64)
    with pytest.raises(ValueError, match=r"PPO minibatches=4 exceeds batch_B=2: a recurrent "
                                         r"agent trains on whole \[T\] sequences"):
        MinibatchRl(algo=PPO(minibatches=4), agent=RecurrentCategoricalPgAgent(),
                    sampler=serial(), n_steps=64)
    MinibatchRl(algo=PPO(minibatches=32), agent=CategoricalPgAgent(), sampler=serial(),
                n_steps=64)
    assert not os.path.exists(in_tmp_cwd / "data")


# ---------------------------------------------------------------- optimizers
@pytest.mark.parametrize("AlgoCls", [PPO, A2C, DQN, DDPG, SAC])
def test_optim_kwargs_the_optimizer_does_not_take_fail_at_construction(AlgoCls):
    with pytest.raises(TypeError, match=r"optim_kwargs holds 'betas2', which "
                                        r"OptimCls=torch.optim.Adam does not take. Did you mean "
                                        r"'betas'\? OptimCls=torch.optim.Adam takes: betas, eps"):
        AlgoCls(optim_kwargs=dict(betas2=0.9))
    with pytest.raises(TypeError, match=r"optim_kwargs holds 'lr'.*set learning_rate instead"):
        AlgoCls(optim_kwargs=dict(lr=0.1))
    AlgoCls(OptimCls=torch.optim.RMSprop, optim_kwargs=dict(alpha=0.9, eps=1e-5))


@pytest.mark.parametrize("OptimCls,words", [
    (torch.nn.Linear, r"got the class torch.nn.modules.linear.Linear"),
    ("torch.optim.Adam", r"got 'torch.optim.Adam' \(str\)"),
])
@pytest.mark.parametrize("AlgoCls", [PPO, A2C, DQN, DDPG, SAC])
def test_optim_cls_not_an_optimizer_fails_at_construction(AlgoCls, OptimCls, words):
    with pytest.raises(TypeError, match=r"OptimCls must be a torch.optim.Optimizer subclass "
                                        r"\(e.g. torch.optim.Adam.*" + words):
        AlgoCls(OptimCls=OptimCls)


# ---------------------------------------------------------------- initial model state
def test_state_dict_mismatch_lists_keys_and_shapes_with_a_limit():
    from rlframe.utils.checks import state_dict_mismatch
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(12)))
    other = {f"x{i}": torch.zeros(1) for i in range(13)}
    other.update({"0.weight": torch.zeros(3, 2)})
    text = state_dict_mismatch(model, other)
    assert "missing keys: 0.bias, 1.weight" in text
    assert "and 13 more" in text  # 23 missing, 10 named.
    assert "unexpected keys: x0, x1" in text and "and 3 more" in text
    assert "other shapes: 0.weight (3, 2) (model: (2, 2))" in text
    assert state_dict_mismatch(model, model.state_dict()) is None


def test_initial_model_state_dict_that_does_not_fit_fails_in_the_runner(in_tmp_cwd):
    wrong = CategoricalPgMlpModel(observation_shape=(4,), action_size=2,
                                  hidden_sizes=[8]).state_dict()
    wrong["extra.weight"] = torch.zeros(1)
    agent = CategoricalPgAgent(initial_model_state_dict=wrong)
    with pytest.raises(ValueError, match=r"initial_model_state_dict does not fit "
                                         r"CategoricalPgAgent's model CategoricalPgMlpModel: "
                                         r"missing keys: .*unexpected keys: extra.weight; "
                                         r"other shapes: .*\(8, 4\) \(model: \(64, 4\)\)"):
        MinibatchRl(algo=PPO(), agent=agent, sampler=serial(), n_steps=64)
    assert not os.path.exists(in_tmp_cwd / "data")
    fits = CategoricalPgMlpModel(observation_shape=(4,), action_size=2).state_dict()
    runner = MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(initial_model_state_dict=fits),
                         sampler=serial(), n_steps=64)
    assert runner.agent.model is None  # The check built a copy, not the agent's model.


@pytest.mark.parametrize("AgentCls,AlgoCls,env_id,keyword,words", [
    (DqnAgent, DQN, "CartPole-v1", "initial_model_state_dict",
     r"initial_model_state_dict does not fit DqnAgent's model DqnMlpModel: missing keys: "
     r".*; unexpected keys: nope"),
    (DdpgAgent, DDPG, "Pendulum-v1", "initial_q_model_state_dict",
     r"initial_q_model_state_dict does not fit DdpgAgent's models: .*QofMuMlpModel"),
])
def test_other_agents_initial_state_dicts_fail_in_the_runner(in_tmp_cwd, AgentCls, AlgoCls,
                                                              env_id, keyword, words):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=4, batch_B=2)
    agent = AgentCls(**{keyword: {"nope": torch.zeros(1)}})
    with pytest.raises(ValueError, match=words):
        MinibatchRl(algo=AlgoCls(), agent=agent, sampler=sampler, n_steps=64)
    assert not os.path.exists(in_tmp_cwd / "data")


def test_model_kwargs_the_model_does_not_take_fail_in_the_runner(in_tmp_cwd):
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_size=[8]))
    with pytest.raises(TypeError, match=r"model_kwargs holds 'hidden_size', which "
                                        r"ModelCls=CategoricalPgMlpModel does not take. Did you "
                                        r"mean 'hidden_sizes'\? .* takes: hidden_sizes"):
        MinibatchRl(algo=PPO(), agent=agent, sampler=serial(), n_steps=64)
    assert not os.path.exists(in_tmp_cwd / "data")


def test_wrong_state_dict_in_logger_context_leaves_the_run_directory_unwritten(in_tmp_cwd):
    agent = CategoricalPgAgent(initial_model_state_dict={"nope": torch.zeros(1)})
    with pytest.raises(ValueError, match="unexpected keys: nope"):
        runner = MinibatchRl(algo=PPO(), agent=agent, sampler=serial(), n_steps=64)
        with logger_context("early", 0, "early"):
            runner.train()
    assert not os.path.exists(in_tmp_cwd / "data")


# ---------------------------------------------------------------- the command line
def rlframe_train(cwd, *argv):
    env = {k: v for k, v in os.environ.items() if k != "RLFRAME_DATA_DIR"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # A machine without a GPU, wherever the test runs.
    return subprocess.run([sys.executable, "-m", "rlframe", "train", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv,words", [
    (["--config", '{"algo": {"learning_rate": "fast"}}'],
     "config section 'algo' (PPO): learning_rate must be a number, got 'fast' (str)."),
    (["--config", '{"agent": {"model_kwargs": {"hidden_size": [32]}}}'],
     "model_kwargs holds 'hidden_size', which ModelCls=CategoricalPgMlpModel does not take. "
     "Did you mean 'hidden_sizes'?"),
    (["--config", '{"algo": {"optim_kwargs": {"betas2": 0.9}}}'],
     "optim_kwargs holds 'betas2', which OptimCls=torch.optim.Adam does not take."),
    (["--config", '{"algo": {"OptimCls": "torch.nn.Linear"}}'],
     "OptimCls must be a torch.optim.Optimizer subclass"),
    (["--config", '{"algo": {"minibatches": 1000}, "sampler": {"eval_n_envs": "4"}}'],
     "config section 'sampler' (SerialSampler): eval_n_envs must be an integer, got '4'"),
    (["--config", '{"algo": {"minibatches": 1000}}', "--batch-T", "8", "--batch-B", "2"],
     "PPO minibatches=1000 exceeds batch_T * batch_B = 8 * 2 = 16 samples"),
    (["--cuda-idx", "0"], "--cuda-idx 0 asks for a GPU, but torch"),
    (["--log-dir", "a_file"], "--log-dir 'a_file' is a file, not a directory"),
])
def test_train_command_user_errors_are_one_line_and_status_2(tmp_path, argv, words):
    (tmp_path / "a_file").write_text("")
    if "--log-dir" not in argv:
        argv = [*argv, "--log-dir", "runs"]
    result = rlframe_train(tmp_path, "ppo", "CartPole-v1", "--n-steps", "64", *argv)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlframe train: error: "), result.stderr
    assert words in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["a_file"]  # No run directory, no data/.
