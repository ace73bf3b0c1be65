"""DQN family: epsilon schedules, distributions, C51 projection, value rescaling,
agents (targets, state dicts), losses, training paths and argument checks."""
import math
import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlframe.agents.base import AgentInputs
from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent, R2d1AlternatingAgent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN, categorical_projection
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1, inv_value_rescale, value_rescale
from rlframe.distributions.epsilon_greedy import CategoricalEpsilonGreedy, EpsilonGreedy
from rlframe.envs.gym import make as gym_make
from rlframe.envs.wrappers import VelocityHiddenCartPole, make_velocity_hidden_cartpole
from rlframe.models.dqn.atari_catdqn_model import DistributionalHeadModel
from rlframe.models.dqn.dueling import DistributionalDuelingHeadModel, DuelingHeadModel
from rlframe.models.dqn.mlp_models import CatDqnMlpModel, DqnMlpModel, R2d1MlpModel
from rlframe.samplers.parallel.cpu.collectors import CpuWaitResetCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.seed import set_seed


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # Tiny models: extra intra-op threads only contend (badly so on a busy machine).
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    set_seed(0)
    yield
    torch.set_num_threads(n_threads)


def cartpole_spaces():
    env = gym_make("CartPole-v1")
    spaces = env.spaces
    env.close()
    return spaces


# --- distributions ---------------------------------------------------------------------

def test_epsilon_greedy_greedy_and_uniform():
    q = torch.tensor([[0., 2., 1.]]).repeat(4000, 1)
    greedy = EpsilonGreedy(epsilon=0, dim=3)
    assert torch.all(greedy.sample(q) == 1)
    assert greedy.sample(q).dtype == torch.long
    uniform = EpsilonGreedy(epsilon=1, dim=3)
    counts = torch.bincount(uniform.sample(q), minlength=3).float() / 4000
    assert torch.allclose(counts, torch.full((3,), 1 / 3), atol=0.03)
    half = EpsilonGreedy(epsilon=0.5, dim=3)
    counts = torch.bincount(half.sample(q), minlength=3).float() / 4000
    # Greedy half the time, plus a third of the random half.
    assert counts[1] == pytest.approx(0.5 + 0.5 / 3, abs=0.03)


def test_epsilon_greedy_vector_epsilon_broadcasts_over_time():
    dist = EpsilonGreedy(epsilon=[0., 1., 0.], dim=4)
    q = torch.zeros(500, 3, 4)
    q[..., 2] = 1.  # greedy action 2
    a = dist.sample(q)  # [T=500, B=3]
    assert a.shape == (500, 3)
    assert torch.all(a[:, 0] == 2) and torch.all(a[:, 2] == 2)
    assert (a[:, 1] != 2).float().mean() > 0.6  # random: 3/4 differ in expectation
    assert torch.all(dist.sample(q[0])[[0, 2]] == 2)  # [B, A] input too
    with pytest.raises(ValueError, match="vector epsilon of length 3"):
        dist.sample(torch.zeros(5, 4))
    with pytest.raises(ValueError, match="vector epsilon"):
        dist.sample(torch.zeros(4))


def test_epsilon_greedy_bad_epsilon():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        EpsilonGreedy(epsilon=1.5, dim=2)
    dist = EpsilonGreedy(dim=2)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        dist.set_epsilon([0.1, -0.1])
    with pytest.raises(ValueError, match="dim"):
        EpsilonGreedy(epsilon=0.1)
    dist.set_epsilon(torch.tensor(0.25))
    assert dist.epsilon == 0.25


def test_categorical_epsilon_greedy_uses_expectation():
    z = torch.linspace(-1, 1, 3)
    p = torch.tensor([[[0.5, 0., 0.5], [0., 0.2, 0.8]]])  # means 0 and 0.8
    dist = CategoricalEpsilonGreedy(z=z, epsilon=0, dim=2)
    assert dist.sample(p).tolist() == [1]
    dist.set_z(torch.linspace(1, -1, 3))  # reversed support flips the choice
    assert dist.sample(p).tolist() == [0]
    with pytest.raises(RuntimeError, match="set_z"):
        CategoricalEpsilonGreedy(dim=2, epsilon=0).sample(p)
    with pytest.raises(ValueError, match="atoms"):
        dist.sample(torch.ones(1, 2, 5) / 5)


# --- models ----------------------------------------------------------------------------

LEADS = [(), (5,), (3, 4)]


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
def test_mlp_q_models_keep_leading_dims(lead, dueling):
    obs = torch.randn(*lead, 2, 3)
    pa, pr = torch.zeros(*lead, 4), torch.zeros(lead)
    q = DqnMlpModel((2, 3), 4, dueling=dueling)(obs, pa, pr)
    assert q.shape == (*lead, 4)
    p = CatDqnMlpModel((2, 3), 4, n_atoms=7, hidden_sizes=[16, 16], dueling=dueling)(obs, pa, pr)
    assert p.shape == (*lead, 4, 7)
    assert torch.allclose(p.sum(-1), torch.ones(*lead, 4))
    model = R2d1MlpModel((2, 3), 4, lstm_size=8, dueling=dueling)
    q, state = model(obs, pa, pr, None)
    B = lead[-1] if lead else 1
    assert q.shape == (*lead, 4)
    assert state.h.shape == state.c.shape == (1, B, 8)


def test_r2d1_model_state_continues_sequence():
    model = R2d1MlpModel((2,), 3, lstm_size=8)
    obs, pa, pr = torch.randn(6, 2, 2), torch.zeros(6, 2, 3), torch.randn(6, 2)
    q_all, _ = model(obs, pa, pr, None)
    _, mid = model(obs[:4], pa[:4], pr[:4], None)
    q_rest, _ = model(obs[4:], pa[4:], pr[4:], mid)
    assert torch.allclose(q_all[4:], q_rest, atol=1e-6)


def test_dueling_heads_centre_advantages_and_scale_grad():
    head = DuelingHeadModel(5, [8], 3)
    x = torch.randn(7, 5, requires_grad=True)
    q = head(x)
    advantage = head.advantage(x)
    value = head.value(x)
    assert torch.allclose(q.mean(-1, keepdim=True), value, atol=1e-6)
    assert torch.allclose(q - value, advantage - advantage.mean(-1, keepdim=True), atol=1e-6)
    q.sum().backward()
    grad_scaled = x.grad.clone()
    x.grad = None
    head.grad_scale = 1.
    head(x).sum().backward()
    assert torch.allclose(grad_scaled, x.grad * 2 ** -0.5, atol=1e-6)
    dist_head = DistributionalDuelingHeadModel(5, [8], 3, n_atoms=11)
    assert dist_head(torch.randn(7, 5)).shape == (7, 3, 11)
    assert DistributionalHeadModel(5, [8], 3, n_atoms=11)(torch.randn(7, 5)).shape == (7, 3, 11)


# --- agents ----------------------------------------------------------------------------

def make_agent(**kwargs):
    agent = DqnAgent(**kwargs)
    agent.initialize(cartpole_spaces())
    return agent


def test_epsilon_schedule():
    agent = make_agent(eps_init=1., eps_final=0.1, eps_eval=0.05)
    agent.set_epsilon_itr_min_max(10, 20)
    expected = {0: 1., 10: 1., 15: 0.55, 20: 0.1, 100: 0.1}
    for itr, eps in expected.items():
        agent.sample_mode(itr)
        assert agent.distribution.epsilon == pytest.approx(eps)
    agent.eval_mode(0)
    assert agent.distribution.epsilon == 1.  # untrained: act at random
    agent.eval_mode(5)
    assert agent.distribution.epsilon == pytest.approx(0.05)
    agent.set_epsilon_itr_min_max(10, 10)  # instant switch at the start of learning
    agent.sample_mode(9)
    assert agent.distribution.epsilon == 1.
    agent.sample_mode(10)
    assert agent.distribution.epsilon == pytest.approx(0.1)


def test_epsilon_log_shows_the_schedule_the_algorithm_set(monkeypatch):
    """The sampler's first sample_mode logs the agent's default schedule; once the
    algorithm sets its own, iteration 0 is logged again with it."""
    from rlframe.agents.dqn import epsilon_greedy
    lines = []
    monkeypatch.setattr(epsilon_greedy.logger, "log", lines.append)
    agent = make_agent()
    agent.sample_mode(0)
    agent.sample_mode(0)
    agent.set_epsilon_itr_min_max(2500, 250000)
    agent.sample_mode(0)
    assert lines == ["Agent at itr 0, sample eps 1 (min itr: 50, max_itr: 1000)",
                     "Agent at itr 0, sample eps 1 (min itr: 2500, max_itr: 250000)"]


def _read_itrs(agent, ready, go, queue):
    ready.set()
    go.wait(10)
    queue.put((agent.eps_itr_min, agent.eps_itr_max))


def test_epsilon_itrs_reach_forked_workers():
    agent = DqnAgent(eps_itr_min=50, eps_itr_max=1000)
    ctx = mp.get_context("fork")
    ready, go, queue = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_read_itrs, args=(agent, ready, go, queue))
    proc.start()
    try:
        assert ready.wait(10)
        agent.set_epsilon_itr_min_max(7, 77)  # after the worker started
        go.set()
        assert queue.get(timeout=10) == (7, 77)
    finally:
        proc.join(10)


def test_vector_epsilon_per_env():
    agent = DqnAgent(eps_init=1., eps_final=0.1, eps_final_min=0.001, eps_itr_min=0,
                     eps_itr_max=10)
    agent.initialize(cartpole_spaces(), global_B=8, env_ranks=[2, 3, 4, 5])
    all_final = np.geomspace(0.001, 0.1, 8)
    agent.sample_mode(0)
    assert torch.allclose(agent.distribution.epsilon, torch.ones(4))
    agent.sample_mode(10)
    assert np.allclose(agent.distribution.epsilon.numpy(), all_final[2:6], rtol=1e-5)
    agent.sample_mode(5)
    assert np.allclose(agent.distribution.epsilon.numpy(), 0.5 + 0.5 * all_final[2:6], rtol=1e-5)
    agent.collector_initialize(global_B=8, env_ranks=[0, 1])
    agent.sample_mode(10)
    assert np.allclose(agent.distribution.epsilon.numpy(), all_final[:2], rtol=1e-5)
    agent.eval_mode(10)
    assert agent.distribution.epsilon == pytest.approx(0.001)  # eval stays scalar
    # Alternating agents: both env halves share one vector over global_B // 2 values.
    alt = R2d1AlternatingAgent(eps_final=0.1, eps_final_min=0.001, eps_itr_min=0, eps_itr_max=1)
    alt.initialize(cartpole_spaces(), global_B=8, env_ranks=range(8))
    alt.sample_mode(1)
    assert np.allclose(alt.distribution.epsilon.numpy(), np.geomspace(0.001, 0.1, 4), rtol=1e-5)
    with pytest.raises(ValueError, match="eps_final_min"):
        DqnAgent(eps_final=0.01, eps_final_min=0.1)


class PreferActionZero(torch.nn.Module):
    """Q-values that always make action 0 the greedy one."""

    def __init__(self, observation_shape, action_size):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor([1.] + [0.] * (action_size - 1)))

    def forward(self, observation, prev_action, prev_reward):
        return self.bias + 0 * observation.float().sum(-1, keepdim=True)


@pytest.mark.parametrize("sampler_cls", ["serial", "cpu", "gpu"])
def test_vector_epsilon_reaches_each_env_through_the_sampler(sampler_cls):
    """Per-env epsilons 1e-6, 1e-4, 1e-2 and 1 over global_B=4 envs: with two workers
    each worker's agent copy acts with its own slice, seen in the actions taken."""
    from rlframe.samplers.parallel.cpu.sampler import CpuSampler
    from rlframe.samplers.parallel.gpu.sampler import GpuSampler
    SamplerCls = dict(serial=SerialSampler, cpu=CpuSampler, gpu=GpuSampler)[sampler_cls]
    agent = DqnAgent(ModelCls=PreferActionZero, eps_init=1., eps_final=1., eps_final_min=1e-6,
                     eps_itr_min=0, eps_itr_max=1)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=400,
                         batch_B=4, max_decorrelation_steps=0)
    kwargs = {} if sampler_cls == "serial" else dict(affinity=dict(workers_cpus=[0, 0]))
    sampler.initialize(agent, seed=0, **kwargs)
    try:
        samples, _ = sampler.obtain_samples(5)  # Past eps_itr_max: final epsilons.
        share_of_action_1 = samples.agent.action.float().mean(dim=0).numpy()
    finally:
        sampler.shutdown()
    # Env b picks at random with probability eps_b, then action 1 half the time.
    assert share_of_action_1[0] == 0 and share_of_action_1[1] == 0
    assert share_of_action_1[2] < 0.04
    assert 0.4 < share_of_action_1[3] < 0.6, share_of_action_1


def test_dqn_agent_step_and_target_updates():
    agent = make_agent(eps_init=0.)
    agent.sample_mode(0)
    obs, pa, pr = torch.randn(3, 4), torch.zeros(3, dtype=torch.long), torch.zeros(3)
    step = agent.step(obs, pa, pr)
    assert step.action.shape == (3,) and step.action.dtype == torch.long
    q = agent(obs, pa, pr)
    assert torch.equal(step.action, q.argmax(-1))
    assert torch.allclose(step.agent_info.q, q.detach())
    assert torch.allclose(agent.target(obs, pa, pr), q.detach())  # target starts equal

    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(1.)
    old_target = {k: v.clone() for k, v in agent.target_model.state_dict().items()}
    agent.update_target(tau=0.25)
    for k, v in agent.target_model.state_dict().items():
        assert torch.allclose(v, 0.25 * agent.model.state_dict()[k] + 0.75 * old_target[k])
    agent.update_target()
    for k, v in agent.target_model.state_dict().items():
        assert torch.equal(v, agent.model.state_dict()[k])


class CountingModel(torch.nn.Module):
    """Wraps a model and counts its forward calls."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.calls = model, 0

    def forward(self, *args):
        self.calls += 1
        return self.inner(*args)


@pytest.mark.parametrize("AgentCls", [DqnAgent, CatDqnAgent])
@pytest.mark.parametrize("epsilon", [0., 0.3, 1., [1., 0., 1.], [1., 1., 1.]])
def test_dqn_agents_skip_the_model_only_when_every_env_explores(AgentCls, epsilon):
    """Drawing the exploration before the model changes no action: the same seed gives
    the same actions with and without ``q_when_exploring``; steps where every env
    explores make no forward pass and record NaN, all others record the model's output."""
    field = "p" if AgentCls is CatDqnAgent else "q"
    runs = {}
    for q_when_exploring in (True, False):
        set_seed(3)
        agent = AgentCls(q_when_exploring=q_when_exploring)
        agent.initialize(cartpole_spaces())
        agent.model = CountingModel(agent.model)
        agent.sample_mode(0)
        agent.distribution.set_epsilon(epsilon)
        torch.manual_seed(5)
        obs = torch.randn(40, 3, 4)
        steps = [agent.step(obs[t], torch.zeros(3, dtype=torch.long), torch.zeros(3))
                 for t in range(40)]
        runs[q_when_exploring] = (steps, agent)
    always, skipping = runs[True][0], runs[False][0]
    n_skipped = 0
    for t, (full, lean) in enumerate(zip(always, skipping)):
        assert torch.equal(full.action, lean.action), t
        full_out, lean_out = getattr(full.agent_info, field), getattr(lean.agent_info, field)
        assert full_out.shape == lean_out.shape
        assert torch.isfinite(full_out).all()
        if torch.isnan(lean_out).all():
            n_skipped += 1
        else:
            assert torch.equal(full_out, lean_out), t
    assert runs[True][1].model.calls == 40
    assert runs[False][1].model.calls == 40 - n_skipped
    if epsilon in (1., [1., 1., 1.]):
        assert n_skipped == 40
    elif epsilon == 0.3:  # All 3 envs explore on 2.7% of the steps.
        assert n_skipped <= 6
    else:  # Some env is always greedy.
        assert n_skipped == 0


def test_dqn_agent_skips_a_step_where_all_envs_happen_to_explore():
    agent = DqnAgent()
    agent.initialize(cartpole_spaces())
    agent.model = CountingModel(agent.model)
    agent.sample_mode(0)
    agent.distribution.set_epsilon(0.5)
    steps = [agent.step(torch.randn(2, 4), torch.zeros(2, dtype=torch.long), torch.zeros(2))
             for _ in range(400)]
    skipped = sum(bool(torch.isnan(s.agent_info.q).all()) for s in steps)
    assert 60 < skipped < 140  # Both of 2 envs explore on a quarter of the steps.
    assert agent.model.calls == 400 - skipped
    with pytest.raises(TypeError, match="q_when_exploring must be True or False, got 'yes'"):
        DqnAgent(q_when_exploring="yes")


def test_dqn_agent_state_dict_round_trip():
    agent = make_agent()
    with torch.no_grad():
        for p in agent.target_model.parameters():
            p.mul_(0.5)  # model and target differ
    state = agent.state_dict()
    assert set(state) == {"model", "target"}
    other = make_agent()
    other.load_state_dict(state)
    for mine, theirs in ((agent.model, other.model), (agent.target_model, other.target_model)):
        for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()):
            assert torch.equal(a, b)
    # As the initial state: the agent's own format, or a plain model state dict.
    resumed = make_agent(initial_model_state_dict=state)
    for a, b in zip(resumed.target_model.parameters(), agent.target_model.parameters()):
        assert torch.equal(a, b)
    plain = make_agent(initial_model_state_dict=state["model"])
    for a, b, c in zip(plain.model.parameters(), plain.target_model.parameters(),
                       agent.model.parameters()):
        assert torch.equal(a, c) and torch.equal(b, c)


def test_dqn_agent_rejects_continuous_actions():
    env = gym_make("Pendulum-v1")
    with pytest.raises(TypeError, match="discrete action space"):
        DqnAgent().initialize(env.spaces)
    env.close()


def test_catdqn_agent_support_and_step():
    agent = CatDqnAgent(n_atoms=11, eps_init=0.)
    agent.initialize(cartpole_spaces())
    assert agent.model(torch.zeros(4), None, None).shape == (2, 11)
    agent.give_V_min_max(-5, 5)
    assert torch.allclose(agent.distribution.z, torch.linspace(-5, 5, 11))
    agent.sample_mode(0)
    step = agent.step(torch.randn(3, 4), torch.zeros(3, dtype=torch.long), torch.zeros(3))
    assert step.agent_info.p.shape == (3, 2, 11)
    expected = torch.tensordot(step.agent_info.p, agent.distribution.z, dims=1).argmax(-1)
    assert torch.equal(step.action, expected)
    with pytest.raises(ValueError, match="n_atoms"):
        CatDqnAgent(n_atoms=11, model_kwargs=dict(n_atoms=51))
    with pytest.raises(ValueError, match="V_min"):
        agent.give_V_min_max(1, 1)


def test_r2d1_agent_records_batch_first_state():
    agent = R2d1Agent(model_kwargs=dict(lstm_size=8), eps_init=0.)
    env = make_velocity_hidden_cartpole()
    agent.initialize(env.spaces)
    env.close()
    agent.reset()
    agent.sample_mode(0)
    obs, pa, pr = torch.randn(3, 2), torch.zeros(3, dtype=torch.long), torch.zeros(3)
    first = agent.step(obs, pa, pr)
    assert first.agent_info.prev_rnn_state.h.shape == (3, 1, 8)
    assert torch.all(first.agent_info.prev_rnn_state.h == 0)
    second = agent.step(obs, first.action, pr)
    assert torch.any(second.agent_info.prev_rnn_state.h != 0)
    agent.reset_one(1)
    third = agent.step(obs, second.action, pr)
    assert torch.all(third.agent_info.prev_rnn_state.h[1] == 0)
    assert torch.any(third.agent_info.prev_rnn_state.h[0] != 0)
    # Training pass over [T, B] from a given state returns (q, state).
    q, state = agent(torch.randn(5, 3, 2), torch.zeros(5, 3, dtype=torch.long),
                     torch.zeros(5, 3), None)
    assert q.shape == (5, 3, 2) and state.h.shape == (1, 3, 8)


# --- C51 projection ---------------------------------------------------------------------

def brute_force_projection(target_z, target_p, V_min, V_max):
    """Atom by atom: split each atom's mass between its two nearest support points."""
    B, n = target_p.shape
    z = np.linspace(V_min, V_max, n)
    dz = z[1] - z[0]
    out = np.zeros((B, n))
    for b in range(B):
        for j in range(n):
            tz = min(max(float(target_z[b, j]), V_min), V_max)
            for i in range(n):
                out[b, i] += max(0., 1 - abs(tz - z[i]) / dz) * float(target_p[b, j])
    return out


@pytest.mark.parametrize("n_atoms,V_min,V_max", [(51, -10., 10.), (7, -1., 3.), (2, 0., 1.)])
def test_categorical_projection_matches_brute_force(n_atoms, V_min, V_max):
    B = 16
    target_p = torch.softmax(torch.randn(B, n_atoms), dim=-1).double()
    z = torch.linspace(V_min, V_max, n_atoms, dtype=torch.float64)
    reward = torch.randn(B, 1, dtype=torch.float64) * (V_max - V_min) / 3
    not_done = (torch.rand(B, 1) > 0.2).double()
    target_z = reward + not_done * 0.9 * z  # some atoms fall outside the support
    projected = categorical_projection(target_z, target_p, V_min, V_max)
    expected = brute_force_projection(target_z.numpy(), target_p.numpy(), V_min, V_max)
    assert np.allclose(projected.numpy(), expected, atol=1e-10)
    assert torch.allclose(projected.sum(-1), torch.ones(B, dtype=torch.float64))


def test_categorical_projection_fixed_points():
    z = torch.linspace(-2, 2, 5)
    p = torch.softmax(torch.randn(3, 5), dim=-1)
    # Atoms already on the support stay where they are.
    assert torch.allclose(categorical_projection(z.expand(3, 5), p, -2, 2), p, atol=1e-6)
    # Half-way between two support points: mass split evenly.
    one_hot = torch.tensor([[0., 1., 0., 0., 0.]])
    out = categorical_projection((z + 0.5).unsqueeze(0), one_hot, -2, 2)
    assert torch.allclose(out, torch.tensor([[0., 0.5, 0.5, 0., 0.]]))


# --- R2D1 value rescaling ------------------------------------------------------------------

@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.])
def test_value_rescale_round_trip(eps):
    x = torch.cat([torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64),
                   torch.tensor([0., 1e-9, -1e-9, 1e6, -1e6], dtype=torch.float64)])
    assert torch.allclose(inv_value_rescale(value_rescale(x, eps), eps), x,
                          rtol=1e-10, atol=1e-8)
    assert torch.allclose(value_rescale(inv_value_rescale(x, eps), eps), x,
                          rtol=1e-10, atol=1e-8)
    # float32 stays accurate too (no cancellation for small eps).
    x32 = torch.linspace(-500, 500, 1001)
    assert torch.allclose(inv_value_rescale(value_rescale(x32, eps), eps), x32,
                          rtol=1e-4, atol=1e-3)


def test_value_rescale_known_values():
    x = torch.tensor([0., 3., -8., 99.])
    assert torch.allclose(value_rescale(x, 0.), torch.tensor([0., 1., -2., 9.]))
    assert torch.allclose(value_rescale(x, 0.01), torch.tensor([0., 1.03, -2.08, 9.99]))


# --- losses ------------------------------------------------------------------------------

class LinearQ(torch.nn.Module):
    """Q(s) = W s, for hand-checked losses."""

    def __init__(self, observation_shape, action_size):
        super().__init__()
        self.linear = torch.nn.Linear(observation_shape[0], action_size, bias=False)

    def forward(self, observation, prev_action, prev_reward):
        return self.linear(observation)


def fake_batch(B=6, n_obs=4, seed=0):
    g = torch.Generator().manual_seed(seed)

    def inputs():
        return AgentInputs(torch.randn(B, n_obs, generator=g), torch.zeros(B, dtype=torch.long),
                           torch.zeros(B))
    from rlframe.utils.collections import namedarraytuple
    Batch = namedarraytuple("Batch", ["agent_inputs", "action", "return_", "done", "done_n",
                                      "target_inputs", "is_weights", "timeout", "timeout_n"])
    return Batch(agent_inputs=inputs(), action=torch.randint(2, (B,), generator=g),
                 return_=torch.randn(B, generator=g), done=torch.zeros(B, dtype=torch.bool),
                 done_n=torch.tensor([0, 1, 0, 0, 1, 0], dtype=torch.bool)[:B],
                 target_inputs=inputs(), is_weights=torch.rand(B, generator=g),
                 timeout=torch.zeros(B, dtype=torch.bool),
                 timeout_n=torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool)[:B])


@pytest.mark.parametrize("double_dqn", [False, True])
@pytest.mark.parametrize("delta_clip", [None, 0.5])
def test_dqn_loss_by_hand(double_dqn, delta_clip):
    agent = DqnAgent(ModelCls=LinearQ)
    agent.initialize(cartpole_spaces())
    with torch.no_grad():
        for p in agent.target_model.parameters():
            p.copy_(torch.randn_like(p))
    algo = DQN(discount=0.9, n_step_return=3, double_dqn=double_dqn, delta_clip=delta_clip,
               prioritized_replay=True)
    algo.agent, algo._timelimit = agent, True
    s = fake_batch()
    loss, td = algo.loss(s)

    W, W_t = agent.model.linear.weight.detach(), agent.target_model.linear.weight.detach()
    q = (s.agent_inputs.observation @ W.T)[torch.arange(6), s.action]
    next_q_target = s.target_inputs.observation @ W_t.T
    if double_dqn:
        a_star = (s.target_inputs.observation @ W.T).argmax(-1)
    else:
        a_star = next_q_target.argmax(-1)
    y = s.return_ + (1 - s.done_n.float()) * 0.9 ** 3 * next_q_target[torch.arange(6), a_star]
    delta = y - q
    if delta_clip is None:
        losses = 0.5 * delta ** 2
    else:
        losses = torch.where(delta.abs() <= delta_clip, 0.5 * delta ** 2,
                             delta_clip * (delta.abs() - 0.5 * delta_clip))
    valid = 1 - s.timeout_n.float()  # the return cut by a time limit is left out
    expected = (losses * s.is_weights * valid).sum() / valid.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    expected_td = delta.abs() if delta_clip is None else delta.abs().clamp(max=delta_clip)
    assert torch.allclose(td, expected_td * valid, atol=1e-6)


def test_cat_dqn_loss_is_cross_entropy_to_projection():
    agent = CatDqnAgent(n_atoms=5, model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(cartpole_spaces())
    algo = CategoricalDQN(V_min=-2, V_max=2, discount=0.5, n_step_return=2)
    algo.agent, algo._timelimit = agent, False
    algo.agent_setup(agent, sampler_bs=1)
    s = fake_batch()
    loss, kl = algo.loss(s)
    z = torch.linspace(-2, 2, 5)
    with torch.no_grad():
        target_ps = agent.target(*s.target_inputs)
        a_star = torch.tensordot(target_ps, z, dims=1).argmax(-1)
        target_z = s.return_[:, None] + (1 - s.done_n.float())[:, None] * 0.25 * z
        target_p = torch.from_numpy(brute_force_projection(
            target_z.numpy(), target_ps[torch.arange(6), a_star].numpy(), -2, 2)).float()
        p = agent(*s.agent_inputs)[torch.arange(6), s.action]
    expected = -(target_p * torch.log(p.clamp(1e-6, 1))).sum(-1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    assert kl.shape == (6,) and torch.all(kl > 0)


# --- training paths and schedules ----------------------------------------------------------

def run_iterations(algo, agent, n_itr, EnvCls=gym_make, env_kwargs=None, batch_T=4, batch_B=2,
                   CollectorCls=None):
    kwargs = dict(CollectorCls=CollectorCls) if CollectorCls else {}
    env_kwargs = dict(id="CartPole-v1") if env_kwargs is None else env_kwargs
    sampler = SerialSampler(EnvCls=EnvCls, env_kwargs=env_kwargs,
                            batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0, **kwargs)
    examples = sampler.initialize(agent, seed=0)
    algo.initialize(agent, n_itr=n_itr, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset, examples=examples)
    infos = []
    for itr in range(n_itr):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        infos.append(algo.optimize_agent(itr, samples))
    sampler.shutdown()
    return infos


DQN_CASES = [
    dict(),
    dict(n_step_return=3, double_dqn=True, prioritized_replay=True),
    dict(n_step_return=2, prioritized_replay=True, bootstrap_timelimit=False,
         target_update_tau=0.1, target_update_interval=1, delta_clip=None),
]


@pytest.mark.parametrize("kwargs", DQN_CASES)
@pytest.mark.parametrize("AlgoCls,AgentCls", [(DQN, DqnAgent), (CategoricalDQN, CatDqnAgent)])
def test_dqn_family_trains(AlgoCls, AgentCls, kwargs):
    agent = AgentCls()
    algo = AlgoCls(batch_size=16, min_steps_learn=40, replay_size=400, replay_ratio=8,
                   eps_steps=80, pri_beta_steps=160, **kwargs)
    infos = run_iterations(algo, agent, n_itr=12)
    assert algo.min_itr_learn == 5  # 40 steps // 8 per iteration
    assert (agent.eps_itr_min, agent.eps_itr_max) == (5, 10)
    assert algo.updates_per_optimize == 4  # 8 * 8 / 16
    assert all(not info.loss for info in infos[:5])
    assert all(len(info.loss) == 4 for info in infos[5:])
    assert all(math.isfinite(v) for info in infos for v in info.loss + info.tdAbsErr)
    assert algo.update_counter == 7 * 4
    replay = algo.replay_buffer
    assert replay.sampling.prioritized == bool(kwargs.get("prioritized_replay"))
    assert replay.targets.time_limit == kwargs.get("bootstrap_timelimit", True)
    if kwargs.get("prioritized_replay"):
        # Beta annealed from learning start (itr 5) to pri_beta_steps (itr 20).
        assert algo.replay_buffer.beta == pytest.approx(0.4 + 0.6 * (11 - 5) / 15)


R2D1_CASES = [
    dict(store_rnn_state_interval=4, prioritized_replay=True, input_priorities=True),
    dict(store_rnn_state_interval=4, prioritized_replay=False),
    dict(store_rnn_state_interval=1, prioritized_replay=True, input_priorities=False),
    dict(store_rnn_state_interval=0, prioritized_replay=False, warmup_T=0),
]


@pytest.mark.parametrize("kwargs", R2D1_CASES)
def test_r2d1_trains(kwargs):
    agent = R2d1Agent(model_kwargs=dict(lstm_size=16, head_size=16))
    algo = R2D1(**{**dict(batch_T=8, batch_B=4, warmup_T=4, min_steps_learn=64,
                          replay_size=800, replay_ratio=2, n_step_return=2,
                          target_update_interval=3, eps_steps=200), **kwargs})
    infos = run_iterations(algo, agent, n_itr=14, EnvCls=make_velocity_hidden_cartpole,
                           env_kwargs={}, batch_T=8, batch_B=2)
    assert algo.batch_size == (8 + algo.warmup_T) * 4
    learned = [info for info in infos if info.loss]
    assert learned and all(math.isfinite(v) for info in learned for v in info.loss)
    assert all(len(info.priority) == 4 for info in learned)
    assert all(p >= 0 for info in learned for p in info.priority)


def test_r2d1_input_priorities_shape():
    agent = R2d1Agent(model_kwargs=dict(lstm_size=8))
    algo = R2D1(batch_T=8, batch_B=4, warmup_T=4, store_rnn_state_interval=4,
                min_steps_learn=1000, replay_size=800, n_step_return=3)
    sampler = SerialSampler(EnvCls=make_velocity_hidden_cartpole, env_kwargs={}, batch_T=8,
                            batch_B=3, max_decorrelation_steps=0)
    examples = sampler.initialize(agent, seed=0)
    algo.initialize(agent, n_itr=1, batch_spec=sampler.batch_spec, mid_batch_reset=True,
                    examples=examples)
    samples, _ = sampler.obtain_samples(0)
    priorities = algo.compute_input_priorities(samples)
    assert priorities.shape == (3,) and np.all(priorities >= 0)
    assert algo.input_priority_shift == 1
    sampler.shutdown()


# --- argument checks -----------------------------------------------------------------------

def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="replay_size=16 is smaller than one batch"):
        DQN(replay_size=16, batch_size=32)
    with pytest.raises(ValueError, match="n_step_return"):
        DQN(n_step_return=0)
    with pytest.raises(ValueError, match="V_min must be below V_max"):
        CategoricalDQN(V_min=10, V_max=-10)
    with pytest.raises(ValueError, match="target_update_tau"):
        DQN(target_update_tau=0)
    with pytest.raises(ValueError, match="discount"):
        DQN(discount=1.5)
    with pytest.raises(ValueError, match="pri_eta"):
        R2D1(pri_eta=2)


def test_dqn_with_wait_reset_collector_warns_and_learns_from_real_steps(capsys):
    """Held steps (zeros, done) reach the replay as terminal transitions; the warning says
    so, and the real transitions before them keep their own returns."""
    algo = DQN(min_steps_learn=0, replay_size=200, batch_size=8)
    infos = run_iterations(algo, DqnAgent(), 4, batch_T=16, CollectorCls=CpuWaitResetCollector)
    assert "mid_batch_reset=False" in capsys.readouterr().out
    done = algo.replay_buffer.samples.done[:64]  # 4 batches of 16 steps.
    reward = algo.replay_buffer.samples.reward[:64]
    held = np.zeros_like(done)
    held[1:] = done[:-1] & done[1:]
    assert held.any() and (reward[held] == 0).all() and (reward[~done] == 1).all()
    assert all(np.isfinite(info.loss).all() for info in infos)


def test_replay_too_small_for_n_step():
    with pytest.raises(ValueError, match="n_step_return=5"):
        run_iterations(DQN(batch_size=8, replay_size=10, n_step_return=5), DqnAgent(), 1,
                       batch_B=2)


def test_r2d1_sequence_longer_than_replay():
    algo = R2D1(batch_T=40, warmup_T=20, batch_B=4, replay_size=100,
                store_rnn_state_interval=20)
    with pytest.raises(ValueError, match="batch_T \\+ warmup_T = 40 \\+ 20 is longer than"):
        run_iterations(algo, R2d1Agent(), 1, EnvCls=make_velocity_hidden_cartpole,
                       env_kwargs={}, batch_T=20)


def test_r2d1_checks_agent_and_chunk_alignment():
    with pytest.raises(TypeError, match="recurrent agent"):
        run_iterations(R2D1(replay_size=1000, batch_B=2), DqnAgent(), 1)
    algo = R2D1(batch_T=8, warmup_T=4, batch_B=2, store_rnn_state_interval=4, replay_size=1000)
    with pytest.raises(ValueError, match="multiple of store_rnn_state_interval=4"):
        run_iterations(algo, R2d1Agent(), 1, EnvCls=make_velocity_hidden_cartpole,
                       env_kwargs={}, batch_T=6)


def test_cat_dqn_needs_distributional_agent():
    with pytest.raises(TypeError, match="distributional agent"):
        run_iterations(CategoricalDQN(replay_size=100, batch_size=8), DqnAgent(), 1)


# --- envs ----------------------------------------------------------------------------------

def test_velocity_hidden_cartpole():
    env = make_velocity_hidden_cartpole()
    assert env.observation_space.shape == (2,)
    inner = gym.make("CartPole-v1")
    inner.reset(seed=3)
    env.seed(3)
    full = inner.unwrapped.state
    obs = env.reset()
    assert np.allclose(obs, np.asarray(full)[[0, 2]])
    o, r, d, info = env.step(1)
    assert o.shape == (2,) and hasattr(info, "timeout") and env.horizon == 500
    env.close()
    with pytest.raises(ValueError, match="CartPole"):
        VelocityHiddenCartPole(gym.make("Pendulum-v1"))


class ObservationQ(torch.nn.Module):
    """Recurrent-signature model whose Q-values depend on the observation only:
    Q(o) = o * [1, 2] + w (w trainable), so targets can be checked by hand."""

    def __init__(self, observation_shape, action_size):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(action_size))
        self.scale = torch.arange(1., action_size + 1)

    def forward(self, observation, prev_action, prev_reward, init_rnn_state):
        q = observation[..., :1] * self.scale + self.w
        return q, init_rnn_state


def test_r2d1_loss_aligns_actions_and_targets():
    from rlframe.replays.sequence.n_step import SamplesFromReplay
    agent = R2d1Agent(ModelCls=ObservationQ)
    env = make_velocity_hidden_cartpole()
    agent.initialize(env.spaces)
    env.close()
    wT, bT, n, B, gamma, eps = 2, 3, 2, 2, 0.9, 1e-3
    algo = R2D1(discount=gamma, batch_T=bT, warmup_T=wT, batch_B=B, n_step_return=n,
                store_rnn_state_interval=0, prioritized_replay=False, double_dqn=False,
                value_scale_eps=eps)
    algo.agent = agent
    L = wT + bT
    obs = torch.randn(L + n, B, 2)
    all_action = torch.randint(2, (L + n, B))
    return_ = torch.randn(L, B)
    done = torch.zeros(L, B, dtype=torch.bool)
    done[wT + 1, 1] = True  # env 1's episode ends at training step 1
    done_n = done.clone()
    done_n[wT, 1] = True  # (its 2-step window reaches the end)
    samples = SamplesFromReplay(all_observation=obs, all_action=all_action,
                                all_reward=torch.zeros(L + n, B), return_=return_, done=done,
                                done_n=done_n, init_rnn_state=None)
    loss, td, priorities = algo.loss(samples)

    def Q(o):
        return o[..., :1] * torch.tensor([1., 2.])
    k = torch.arange(bT)
    q = Q(obs[wT + k]).gather(-1, all_action[wT + 1 + k].unsqueeze(-1)).squeeze(-1)
    bootstrap = Q(obs[wT + k + n]).max(-1).values
    target = return_[wT:] + (1 - done_n[wT:].float()) * gamma ** n * inv_value_rescale(
        bootstrap, eps)
    delta = value_rescale(target, eps) - q
    valid = torch.tensor([[1., 1.], [1., 1.], [1., 0.]])  # after env 1's done: left out
    expected = (0.5 * delta ** 2 * valid).sum() / valid.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert torch.allclose(td, delta.abs() * valid, atol=1e-6)
    d = delta.abs() * valid
    expected_pri = 0.9 * d.max(0).values + 0.1 * d.sum(0) / valid.sum(0)
    assert torch.allclose(priorities, expected_pri, atol=1e-6)


class FrameStackEnv(gym.Env):
    """Tiny env with Atari-like observations: a stack of 4 uint8 frames, oldest first."""

    observation_space = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.stack = np.zeros((4, 6, 6), np.uint8)
        self.t = 0
        return self._push(), {}

    def _push(self):
        self.stack = np.concatenate([self.stack[1:], self.np_random.integers(
            0, 256, (1, 6, 6), dtype=np.uint8)])
        return self.stack.copy()

    def step(self, action):
        self.t += 1
        return self._push(), float(action == 1), self.t >= 15, False, {}


def make_frame_env():
    from rlframe.envs.gym import GymEnvWrapper
    return GymEnvWrapper(FrameStackEnv())


def test_frame_stack_observations_use_frame_replays():
    algo = DQN(batch_size=16, min_steps_learn=16, replay_size=400, n_step_return=2,
               prioritized_replay=True, eps_steps=40)
    infos = run_iterations(algo, DqnAgent(), 8, EnvCls=make_frame_env, env_kwargs={})
    replay = algo.replay_buffer
    assert replay.observations is not None and replay.sampling.prioritized
    assert replay.samples_frames.shape[2:] == replay.samples_new_frames.shape[2:]
    assert any(info.loss for info in infos)
    r2d1 = R2D1(batch_T=4, warmup_T=4, batch_B=2, store_rnn_state_interval=4,
                min_steps_learn=32, replay_size=400, n_step_return=2, eps_steps=40)
    infos = run_iterations(r2d1, R2d1Agent(model_kwargs=dict(lstm_size=8)), 10,
                           EnvCls=make_frame_env, env_kwargs={})
    replay = r2d1.replay_buffer
    assert replay.observations is not None and replay.sampling.prioritized
    assert replay.start_interval == 4 and replay.batch_T == 8
    assert any(info.loss for info in infos)
