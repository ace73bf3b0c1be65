"""The policy losses of DDPG, TD3 and SAC backpropagate through the critics
without computing the critics' weight gradients, and give the policy the same
gradient as a full backward pass."""
import pytest
import torch

from rlframe.agents.qpg.base import without_weight_grads
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.envs.base import EnvSpaces
from rlframe.spaces.float_box import FloatBox

OBS, ACT, BATCH = 5, 2, 16


def spaces():
    return EnvSpaces(observation=FloatBox(-10, 10, shape=(OBS,)),
                     action=FloatBox(-2, 2, shape=(ACT,)))


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(BATCH, OBS, generator=g), torch.zeros(BATCH, ACT), torch.zeros(BATCH))


def test_no_weight_gradient_but_the_same_input_gradient():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(4, 3, requires_grad=True)
    model(x).sum().backward()
    full_input_grad = x.grad.clone()
    model.zero_grad(set_to_none=True)
    x.grad = None
    with without_weight_grads(model) as (inner,):
        assert inner is model
        y = inner(x)
    assert all(p.requires_grad for p in model.parameters())  # restored on leaving
    y.sum().backward()
    assert all(p.grad is None for p in model.parameters())
    torch.testing.assert_close(x.grad, full_input_grad, rtol=0, atol=0)


def test_requires_grad_is_restored_after_an_error_and_frozen_parameters_stay_frozen():
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    with pytest.raises(RuntimeError, match="boom"):
        with without_weight_grads(model):
            assert not model.weight.requires_grad
            raise RuntimeError("boom")
    assert model.weight.requires_grad and not model.bias.requires_grad


def policy_grads(agent, loss_fn):
    for p in agent.parameters():
        p.grad = None
    loss_fn().backward()
    return [p.grad.clone() for p in agent.model.parameters()]


def test_sac_policy_gradient_equals_a_full_backward_and_leaves_the_critics_alone():
    agent = SacAgent()
    agent.initialize(spaces())
    obs = inputs()

    def loss(q_fn):
        torch.manual_seed(1)  # the same reparameterised sample both times
        action, log_pi, _ = agent.pi(*obs)
        q1, q2 = q_fn(*obs, action)
        return (0.2 * log_pi - torch.min(q1, q2)).mean()

    full = policy_grads(agent, lambda: loss(agent.q))
    assert all(p.grad is not None for p in agent.q1_model.parameters())
    lean = policy_grads(agent, lambda: loss(agent.q_for_pi))
    for a, b in zip(full, lean):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    critics = list(agent.q1_model.parameters()) + list(agent.q2_model.parameters())
    assert all(p.grad is None and p.requires_grad for p in critics)


@pytest.mark.parametrize("AgentCls", [DdpgAgent, Td3Agent])
def test_q_at_mu_gives_the_policy_its_full_gradient_and_the_critic_none(AgentCls):
    agent = AgentCls()
    agent.initialize(spaces())
    obs = inputs()

    def full_loss():
        q = agent.q(*obs, agent.model(*obs))
        return -(q[0] if isinstance(q, tuple) else q).mean()  # TD3: its first critic

    full = policy_grads(agent, full_loss)
    lean = policy_grads(agent, lambda: -agent.q_at_mu(*obs).mean())
    for a, b in zip(full, lean):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(p.grad is None and p.requires_grad for p in agent.q_model.parameters())
