"""``deterministic_eval``: policy-gradient agents evaluate with their distribution's mode."""
import pickle

import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent, MujocoLstmAgent
from rlframe.distributions.categorical import Categorical
from rlframe.distributions.gaussian import Gaussian
from rlframe.envs.gym import make as gym_make

B = 64


def built(AgentCls, env_id, **kwargs):
    env = gym_make(env_id)
    agent = AgentCls(**kwargs)
    agent.initialize(env.spaces)
    env.close()
    obs = torch.as_tensor(env.spaces.observation.sample()).float().repeat(B, 1)
    prev_action = torch.as_tensor(env.spaces.action.null_value()).float().repeat(B)
    prev_action = prev_action.reshape(B, *env.spaces.action.shape)
    return agent, (obs, prev_action, torch.zeros(B))


def mode_of(agent, step):
    info = step.agent_info.dist_info
    return info.mean if hasattr(info, "mean") else info.prob.argmax(-1)


CASES = [(MujocoFfAgent, "Pendulum-v1", Gaussian), (MujocoLstmAgent, "Pendulum-v1", Gaussian),
         (CategoricalPgAgent, "CartPole-v1", Categorical),
         (RecurrentCategoricalPgAgent, "CartPole-v1", Categorical)]


@pytest.mark.parametrize("AgentCls, env_id, DistCls", CASES)
def test_eval_takes_the_mode_and_sampling_comes_back(AgentCls, env_id, DistCls):
    torch.manual_seed(0)
    agent, inputs = built(AgentCls, env_id, deterministic_eval=True)
    for _ in range(2):  # Eval, sample, eval again: each switch holds.
        agent.reset()
        agent.eval_mode(1)
        step = agent.step(*inputs)
        assert torch.equal(step.action.float(), mode_of(agent, step).float())
        agent.reset()
        agent.sample_mode(1)
        step = agent.step(*inputs)
        assert not torch.equal(step.action.float(), mode_of(agent, step).float())
    agent.train_mode(1)
    assert type(agent.distribution) is DistCls  # Training sees the distribution itself.
    agent.eval_mode(2)
    copy = pickle.loads(pickle.dumps(agent))  # How a worker process may get it.
    copy.reset()
    step = copy.step(*inputs)
    assert torch.equal(step.action.float(), mode_of(copy, step).float())


@pytest.mark.parametrize("AgentCls, env_id, DistCls", CASES[:1] + CASES[2:3])
def test_by_default_eval_samples_as_rlpyt_does(AgentCls, env_id, DistCls):
    torch.manual_seed(0)
    agent, inputs = built(AgentCls, env_id)
    agent.eval_mode(1)
    step = agent.step(*inputs)
    assert type(agent.distribution) is DistCls
    assert not torch.equal(step.action.float(), mode_of(agent, step).float())
    assert agent.act(inputs[0][0].numpy(), deterministic=True).shape == \
        step.action[0].shape  # act() still wraps and unwraps on its own.
    assert type(agent.distribution) is DistCls


@pytest.mark.parametrize("AgentCls", [MujocoFfAgent, CategoricalPgAgent])
def test_a_non_bool_is_refused(AgentCls):
    with pytest.raises(TypeError, match="deterministic_eval must be True or False, got 'yes'"):
        AgentCls(deterministic_eval="yes")
