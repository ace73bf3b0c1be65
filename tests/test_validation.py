"""Bad input fails early, naming the parameter, the value and what is allowed."""
import os

import pytest

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler


def sampler(**kwargs):
    args = dict(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=4, batch_B=2)
    args.update(kwargs)
    return SerialSampler(**args)


@pytest.mark.parametrize("name", ["batch_T", "batch_B"])
@pytest.mark.parametrize("value,error,words", [
    (0, ValueError, "positive integer"), (-3, ValueError, "positive integer"),
    (2.5, ValueError, "whole number"), ("4", TypeError, "integer"), (None, TypeError, "integer"),
])
def test_bad_batch_dims(name, value, error, words):
    with pytest.raises(error, match=name) as info:
        sampler(**{name: value})
    assert words in str(info.value) and repr(value) in str(info.value) or str(value) in str(info.value)


def test_float_dims_that_are_whole_numbers_are_accepted():
    s = sampler(batch_T=5.0, batch_B=2)
    assert s.batch_spec == (5, 2) and isinstance(s.batch_spec.T, int)


def test_unknown_env_id_suggests_close_ids():
    with pytest.raises(ValueError) as info:
        sampler(env_kwargs=dict(id="CartPol-v1"))
    msg = str(info.value)
    assert "id" in msg and "CartPol-v1" in msg and "CartPole-v1" in msg


def test_eval_without_kwargs_or_steps():
    with pytest.raises(ValueError, match="eval_env_kwargs"):
        sampler(eval_n_envs=2, eval_max_steps=100)
    with pytest.raises(ValueError, match="eval_max_steps"):
        sampler(eval_n_envs=2, eval_env_kwargs=dict(id="CartPole-v1"))


@pytest.mark.parametrize("n_steps,error", [(0, ValueError), (-5, ValueError), (1.5, ValueError),
                                           ("100", TypeError)])
def test_bad_n_steps(in_tmp_cwd, n_steps, error):
    with pytest.raises(error, match="n_steps"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler(), n_steps=n_steps)
    assert not os.path.exists(in_tmp_cwd / "data")


def test_non_dict_affinity(in_tmp_cwd):
    with pytest.raises(TypeError, match="affinity") as info:
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler(), n_steps=100,
                    affinity=[0, 1])
    assert "[0, 1]" in str(info.value)


def test_unknown_affinity_key_warns():
    with pytest.warns(UserWarning, match="master_cpu"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler(), n_steps=100,
                    affinity=dict(master_cpu=[0]))


def test_unusable_cpu_id():
    with pytest.raises(ValueError, match=r"master_cpus.*9999"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler(), n_steps=100,
                    affinity=dict(master_cpus=[9999]))


def test_agent_that_cannot_handle_action_space(in_tmp_cwd):
    box_sampler = sampler(env_kwargs=dict(id="Pendulum-v1"))
    with pytest.raises(TypeError) as info:
        MinibatchRlEval(algo=PPO(), agent=CategoricalPgAgent(), sampler=box_sampler,
                        n_steps=100)
    msg = str(info.value)
    assert "CategoricalPgAgent" in msg and "discrete" in msg and "Box" in msg
    with pytest.raises(TypeError, match="MujocoFfAgent.*continuous"):
        MinibatchRl(algo=PPO(), agent=MujocoFfAgent(), sampler=sampler(), n_steps=100)
    assert not os.path.exists(in_tmp_cwd / "data")


def test_bad_algo_arguments():
    with pytest.raises(ValueError, match="minibatches"):
        PPO(minibatches=0)
    with pytest.raises(ValueError, match="discount"):
        PPO(discount=1.5)


def test_ppo_minibatches_larger_than_batch(in_tmp_cwd):
    with pytest.raises(ValueError, match="minibatches=16"):  # In the constructor.
        MinibatchRl(algo=PPO(minibatches=16), agent=CategoricalPgAgent(),
                    sampler=sampler(), n_steps=100)
    assert not os.path.exists(in_tmp_cwd / "data")
