"""DDPG, TD3 and SAC: models, agents, losses, time limits, bad input, seeding."""
import gc
import math
import os
from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.distributed as dist

from rlframe.agents.ddp import unwrap_ddp
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.off_policy import SamplesToBufferTl
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3
from rlframe.envs.base import EnvSpaces
from rlframe.envs.gym import make as gym_make
from rlframe.models.qpg.mlp import MuMlpModel, PiMlpModel, QofMuMlpModel, VMlpModel
from rlframe.samplers.collections import BatchSpec
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.spaces.float_box import FloatBox
from rlframe.spaces.int_box import IntBox
from rlframe.utils.buffer import buffer_func
from rlframe.utils.distributed import master_store
from rlframe.utils.seed import set_seed
from samplers_helpers import flat_leaves

OBS_DIM, ACT_DIM = 3, 2
EnvInfo = namedtuple("EnvInfo", ["timeout"])
AGENTS = {"ddpg": DdpgAgent, "td3": Td3Agent, "sac": SacAgent}
ALGOS = {"ddpg": DDPG, "td3": TD3, "sac": SAC}


def spaces(bound=1., act_dim=ACT_DIM, low=None):
    low = -bound if low is None else low
    return EnvSpaces(observation=FloatBox(low=-10, high=10, shape=(OBS_DIM,)),
                     action=FloatBox(low=low, high=bound, shape=(act_dim,)))


def small(AgentCls, **kwargs):
    return AgentCls(model_kwargs=dict(hidden_sizes=[32]), q_model_kwargs=dict(hidden_sizes=[32]),
                    **kwargs)


def make_agent(name, bound=1., **kwargs):
    torch.manual_seed(0)
    agent = small(AGENTS[name], **kwargs)
    agent.initialize(spaces(bound))
    return agent


def examples(obs_dim=OBS_DIM, act_dim=ACT_DIM):
    return dict(observation=np.zeros(obs_dim, np.float32), action=np.zeros(act_dim, np.float32),
                reward=np.float32(0), done=np.bool_(False),
                env_info=EnvInfo(timeout=np.bool_(False)),
                agent_info=None)


def make_algo(name, T=1, B=1, **kwargs):
    """An initialized algo and agent (small nets), replay built from fake examples."""
    agent = make_agent(name)
    kwargs = dict(dict(min_steps_learn=0, replay_size=1000, batch_size=8), **kwargs)
    algo = ALGOS[name](**kwargs)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(T, B), mid_batch_reset=True,
                    examples=examples())
    return algo, agent


# ---------------------------------------------------------------------------- models
@pytest.mark.parametrize("lead", [(), (5,), (4, 3)])
def test_models_keep_leading_dims(lead):
    obs = torch.randn(*lead, OBS_DIM)
    act = torch.rand(*lead, ACT_DIM)
    pa, pr = torch.zeros(*lead, ACT_DIM), torch.zeros(lead)
    mu = MuMlpModel((OBS_DIM,), [16, 16], ACT_DIM, output_max=2.)(obs, pa, pr)
    assert mu.shape == (*lead, ACT_DIM) and mu.abs().max() <= 2.
    mean, log_std = PiMlpModel((OBS_DIM,), [16], ACT_DIM)(obs, pa, pr)
    assert mean.shape == log_std.shape == (*lead, ACT_DIM)
    assert QofMuMlpModel((OBS_DIM,), [16], ACT_DIM)(obs, pa, pr, act).shape == lead
    assert VMlpModel((OBS_DIM,), [16])(obs, pa, pr).shape == lead


def test_models_flatten_image_like_observations():
    obs = torch.randn(6, 2, 3, 4)
    q = QofMuMlpModel((2, 3, 4), 8, ACT_DIM)(obs, None, None, torch.zeros(6, ACT_DIM))
    assert q.shape == (6,)


# ---------------------------------------------------------------------------- agents
def test_sac_pi_log_prob_matches_numerical_density():
    """The squashed action's log-density from SacAgent.pi agrees with a histogram of
    its samples, for a bound of 2 (so the squash scale enters the correction)."""
    torch.manual_seed(0)
    agent = small(SacAgent)
    agent.initialize(spaces(bound=2., act_dim=1))
    with torch.no_grad():  # A spread-out policy: both tails of the tanh matter.
        last = agent.model.mlp.model[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.4, math.log(0.9)]))
    n = 400_000
    obs = torch.zeros(n, OBS_DIM)
    with torch.no_grad():
        action, log_pi, _ = agent.pi(obs, torch.zeros(n, 1), torch.zeros(n))
    action, density = action[:, 0].numpy(), torch.exp(log_pi).numpy()
    assert np.all(np.abs(action) <= 2.) and action.max() > 1.5 and action.min() < -1.5
    edges = np.linspace(-1.8, 1.8, 19)
    counts, _ = np.histogram(action, edges)
    empirical = counts / (n * np.diff(edges))
    bins = np.digitize(action, edges) - 1
    predicted = np.array([density[bins == k].mean() for k in range(len(counts))])
    np.testing.assert_allclose(empirical, predicted, rtol=0.06)
    # And exactly: change of variables from the pre-squash Gaussian.
    u = np.arctanh(action[:1000] / 2.)
    normal = -0.5 * ((u - 0.4) / 0.9) ** 2 - math.log(0.9) - 0.5 * math.log(2 * math.pi)
    expected = normal - np.log(2. * (1 - np.tanh(u) ** 2))
    np.testing.assert_allclose(log_pi[:1000].numpy(), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("bound", [1., 2., 0.4])
def test_actions_scaled_to_env_bounds(bound):
    for name in AGENTS:
        agent = make_agent(name, bound=bound)
        obs = torch.randn(2000, OBS_DIM) * 5
        pa, pr = torch.zeros(2000, ACT_DIM), torch.zeros(2000)
        agent.sample_mode(0)
        action = agent.step(obs, pa, pr).action
        assert action.shape == (2000, ACT_DIM) and action.dtype == torch.float32
        assert action.abs().max() <= bound + 1e-6
        assert action.abs().max() > 0.5 * bound  # The range is used, not just [-1, 1] ∩ it.


def test_ddpg_agent_noise_is_a_fraction_of_the_bound():
    agent = make_agent("ddpg", bound=2., action_std=0.1)
    assert agent.model._output_max == 2.
    obs = torch.zeros(20000, OBS_DIM)
    pa, pr = torch.zeros(20000, ACT_DIM), torch.zeros(20000)
    agent.sample_mode(0)
    step = agent.step(obs, pa, pr)
    noise = step.action - step.agent_info.mu
    assert abs(noise.std().item() - 0.2) < 0.01
    agent.eval_mode(1)
    step = agent.step(obs[:5], pa[:5], pr[:5])
    assert torch.equal(step.action, step.agent_info.mu)


def test_ddpg_agent_keeps_an_explicit_output_max():
    torch.manual_seed(0)
    agent = DdpgAgent(model_kwargs=dict(hidden_sizes=[8], output_max=0.5))
    agent.initialize(spaces(bound=2.))
    assert agent.model._output_max == 0.5


def test_td3_agent_pretrain_noise_then_action_noise():
    agent = make_agent("td3", action_std=0.1, pretrain_std=0.5)
    agent.give_min_itr_learn(5)
    obs = torch.zeros(20000, OBS_DIM)
    pa, pr = torch.zeros(20000, ACT_DIM), torch.zeros(20000)
    stds = []
    for itr in (4, 5):
        agent.sample_mode(itr)
        step = agent.step(obs, pa, pr)
        stds.append((step.action - step.agent_info.mu).std().item())
    assert stds[0] > 0.4 and abs(stds[1] - 0.1) < 0.01
    q1, q2 = agent.target_q_at_mu(obs[:7], pa[:7], pr[:7])
    assert q1.shape == q2.shape == (7,) and not torch.equal(q1, q2)


def test_sac_agent_modes():
    agent = make_agent("sac", pretrain_std=0.)
    agent.give_min_itr_learn(3)
    obs, pa, pr = torch.randn(4, OBS_DIM), torch.zeros(4, ACT_DIM), torch.zeros(4)
    mean, _ = agent.model(obs, pa, pr)
    agent.sample_mode(2)  # Before learning: pretrain_std (0: deterministic).
    assert torch.allclose(agent.step(obs, pa, pr).action, torch.tanh(mean))
    agent.sample_mode(3)  # Then the learned std.
    assert not torch.allclose(agent.step(obs, pa, pr).action, torch.tanh(mean))
    agent.eval_mode(3)
    step = agent.step(obs, pa, pr)
    assert torch.allclose(step.action, torch.tanh(mean))
    assert torch.equal(step.agent_info.dist_info.mean, mean)
    # pi() samples with the learned std whatever mode the sampler left set.
    action, log_pi, _ = agent.pi(obs, pa, pr)
    assert not torch.allclose(action, torch.tanh(mean)) and torch.isfinite(log_pi).all()


def test_sac_agent_models_property_and_parameters():
    agent = make_agent("sac")
    models = agent.models
    assert models._fields == ("pi", "q1", "q2")
    assert models.pi is agent.model and models.q1 is agent.q1_model
    assert len(list(agent.parameters())) == sum(len(list(m.parameters())) for m in models)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_agent_state_dict_round_trip(name):
    agent = make_agent(name)
    with torch.no_grad():  # Make the targets differ from the trained nets.
        for p in agent.parameters():
            p.add_(0.1)
    state = agent.state_dict()
    expected_keys = {"ddpg": {"model", "q_model", "target_model", "target_q_model"},
                     "td3": {"model", "q_model", "target_model", "target_q_model",
                             "q2_model", "target_q2_model"},
                     "sac": {"model", "q1_model", "q2_model", "target_q1_model",
                             "target_q2_model"}}[name]
    assert set(state) == expected_keys
    torch.manual_seed(1)
    other = small(AGENTS[name])
    other.initialize(spaces())
    other.load_state_dict(state)
    for key in expected_keys:
        a, b = state[key], other.state_dict()[key]
        assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(KeyError, match="unknown keys"):
        other.load_state_dict(dict(state, extra={}))


def test_sac_initial_model_state_dict_is_a_full_agent_state():
    agent = make_agent("sac")
    with torch.no_grad():
        for p in agent.parameters():
            p.add_(0.1)
    state = agent.state_dict()
    restored = small(SacAgent, initial_model_state_dict=state)
    restored.initialize(spaces())
    for key, value in restored.state_dict().items():
        assert all(torch.equal(value[k], state[key][k]) for k in value)


@pytest.mark.parametrize("name", sorted(AGENTS))
@pytest.mark.parametrize("tau", [1., 0.25])
def test_soft_target_update(name, tau):
    agent = make_agent(name)
    pairs = {"ddpg": [("target_model", "model"), ("target_q_model", "q_model")],
             "td3": [("target_model", "model"), ("target_q_model", "q_model"),
                     ("target_q2_model", "q2_model")],
             "sac": [("target_q1_model", "q1_model"), ("target_q2_model", "q2_model")]}[name]
    with torch.no_grad():
        for p in agent.parameters():
            p.add_(torch.randn_like(p))
    before = {t: {k: v.clone() for k, v in getattr(agent, t).state_dict().items()}
              for t, _ in pairs}
    pi_before = {k: v.clone() for k, v in agent.model.state_dict().items()}
    agent.update_target(tau)
    for target, source in pairs:
        new, src = getattr(agent, target).state_dict(), getattr(agent, source).state_dict()
        for k in new:
            torch.testing.assert_close(new[k], tau * src[k] + (1 - tau) * before[target][k])
    assert all(torch.equal(v, agent.model.state_dict()[k]) for k, v in pi_before.items())


def test_sac_target_update_every_interval_in_training():
    algo, agent = make_algo("sac", target_update_tau=0.5, target_update_interval=2,
                            replay_ratio=8)
    fill_replay(algo, n=40)
    targets = lambda: [p.clone() for p in agent.target_q1_model.parameters()]  # noqa: E731
    t0 = targets()
    algo.optimize_agent(0)  # Update 1: targets stay.
    assert all(torch.equal(a, b) for a, b in zip(t0, targets()))
    algo.optimize_agent(1)  # Update 2: targets move halfway to the critic.
    for old, new, q in zip(t0, targets(), agent.q1_model.parameters()):
        torch.testing.assert_close(new, 0.5 * q.detach() + 0.5 * old)
    assert algo.update_counter == 2


# ---------------------------------------------------------------- time-limit bootstrapping
def fill_replay(algo, n=40, seed=0):
    rng = np.random.default_rng(seed)
    algo.replay_buffer.append_samples(SamplesToBufferTl(
        observation=rng.standard_normal((n, 1, OBS_DIM)).astype(np.float32),
        action=rng.uniform(-1, 1, (n, 1, ACT_DIM)).astype(np.float32),
        reward=rng.standard_normal((n, 1)).astype(np.float32),
        done=np.zeros((n, 1), bool), timeout=np.zeros((n, 1), bool)))


def crafted_batch(algo):
    """Two episodes: steps 0-4 end by termination at 4; steps 5-9 are cut by a time
    limit at 9 (env reset after it, so step 10 starts a new episode)."""
    n = 16
    reward = np.arange(1, n + 1, dtype=np.float32).reshape(n, 1)
    done = np.zeros((n, 1), bool)
    timeout = np.zeros((n, 1), bool)
    done[4] = done[9] = True
    timeout[9] = True
    obs = np.random.default_rng(1).standard_normal((n, 1, OBS_DIM)).astype(np.float32)
    algo.replay_buffer.append_samples(SamplesToBufferTl(
        observation=obs, action=np.full((n, 1, ACT_DIM), 0.3, np.float32), reward=reward,
        done=done, timeout=timeout))
    t_idxs = np.array([3, 4, 8, 9])  # before termination, termination, before cut, cut
    return algo.replay_buffer.extract_batch(t_idxs, np.zeros(4, int)), reward[:, 0]


def target_values(algo, agent, batch, name):
    """min target Q - alpha log pi (SAC) / target Q at the next inputs, by hand."""
    with torch.no_grad():
        if name == "sac":
            action, log_pi, _ = agent.pi(*batch.target_inputs)
            q1, q2 = agent.target_q(*batch.target_inputs, action)
            return torch.min(q1, q2) - algo.alpha * log_pi
        value = agent.target_q_at_mu(*batch.target_inputs)
        return torch.min(*value) if name == "td3" else value


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_truncated_episode_bootstraps_terminated_does_not(name):
    algo, agent = make_algo(name, discount=0.9)
    assert algo.replay_buffer.targets.time_limit
    assert algo.replay_buffer.discount == 0.9  # Discount reaches the n-step replay.
    batch, reward = crafted_batch(algo)
    torch.manual_seed(5)
    y = algo.q_target(batch)
    torch.manual_seed(5)
    next_value = target_values(algo, agent, batch, name)
    valid = algo.valid_mask(batch)
    # Mid-episode steps bootstrap from the next observation.
    for k, t in ((0, 3), (2, 8)):
        torch.testing.assert_close(y[k], reward[t] + 0.9 * next_value[k])
        assert valid[k] == 1
    # The terminated step is trained toward its reward alone.
    assert y[1] == reward[4] and valid[1] == 1
    # The step cut by the time limit has no stored next state: it is left out of
    # the loss instead of being taken as an end of the episode.
    assert valid[3] == 0
    loss = lambda b: loss_of(algo, b, valid)  # noqa: E731
    changed = batch._replace(return_=batch.return_ + torch.tensor([0., 0., 0., 100.]))
    torch.manual_seed(5)
    base_loss = loss(batch)
    torch.manual_seed(5)
    assert torch.allclose(loss(changed), base_loss)
    changed = batch._replace(return_=batch.return_ + torch.tensor([0., 100., 0., 0.]))
    torch.manual_seed(5)
    assert not torch.allclose(loss(changed), base_loss)


def loss_of(algo, batch, valid):
    if isinstance(algo, SAC):
        q1_loss, q2_loss, _, _ = algo.q_loss(batch, valid)
        return q1_loss + q2_loss
    return algo.q_loss(batch, valid)


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_without_bootstrap_timelimit_a_cut_counts_as_termination(name):
    algo, _ = make_algo(name, bootstrap_timelimit=False)
    assert not algo.replay_buffer.targets.time_limit
    assert algo.valid_mask(None) is None
    example = algo.examples_to_buffer(examples())
    assert "timeout" not in example._fields


def test_n_step_window_cut_by_time_limit_is_masked():
    algo, _ = make_algo("sac", discount=0.5, n_step_return=2, fixed_alpha=0.2)
    batch, reward = crafted_batch(algo)
    valid = algo.valid_mask(batch)
    # Step 3: return r3 + 0.5 r4, episode over at 4 -> no bootstrap, trained.
    assert batch.return_[0] == reward[3] + 0.5 * reward[4] and batch.done_n[0]
    assert valid[0] == 1 and algo.q_target(batch)[0] == batch.return_[0]
    # Step 8: its window reaches the cut at 9 -> masked; so is 9 itself.
    assert valid[2] == 0 and valid[3] == 0


# ------------------------------------------------------------------ algorithms
def test_td3_uses_mu_learning_rate():
    algo, _ = make_algo("td3", mu_learning_rate=3e-4, q_learning_rate=2e-3)
    assert algo.mu_optimizer.param_groups[0]["lr"] == 3e-4
    assert algo.q_optimizer.param_groups[0]["lr"] == 2e-3
    algo, _ = make_algo("ddpg", learning_rate=5e-5)
    assert algo.mu_optimizer.param_groups[0]["lr"] == 5e-5


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_updates_per_iteration_and_learning_start(name):
    algo, agent = make_algo(name, T=4, B=2, batch_size=16, replay_ratio=8, min_steps_learn=24)
    assert algo.updates_per_optimize == 4  # 8 * 8 / 16
    assert algo.min_itr_learn == 3
    if hasattr(agent, "min_itr_learn"):
        assert agent.min_itr_learn == 3


def test_sac_fractional_updates_per_iteration():
    algo, _ = make_algo("sac", T=4, B=2, batch_size=256, replay_ratio=8)  # 8 * 8 / 256
    assert algo.updates_per_optimize == 0.25


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_training_changes_weights_and_logs(name):
    algo, agent = make_algo(name, replay_ratio=16)
    fill_replay(algo)
    before = [p.clone() for p in agent.parameters()]
    opt_info = algo.optimize_agent(0)
    assert algo.update_counter == 2  # TD3 updates its policy on the second.
    assert all(len(getattr(opt_info, f)) > 0 for f in algo.opt_info_fields)
    assert all(math.isfinite(v) for f in opt_info for v in f)
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters()))


def test_sac_fixed_alpha_target_entropy_prior_and_reward_scale():
    algo, _ = make_algo("sac", fixed_alpha=0.3, action_prior="gaussian", reward_scale=5.)
    assert algo.alpha_optimizer is None and abs(algo.alpha - 0.3) < 1e-6
    batch, reward = crafted_batch(algo)
    assert algo.q_target(batch)[1] == 5. * reward[4]
    algo.optimize_agent(0)
    assert abs(algo.alpha - 0.3) < 1e-6
    action = torch.zeros(1, ACT_DIM)
    assert abs(algo.action_prior_log_pi(action).item() + math.log(2 * math.pi)) < 1e-6
    algo, _ = make_algo("sac")
    assert algo._target_entropy == -ACT_DIM and algo.alpha == 1.
    fill_replay(algo)
    algo.optimize_agent(0)
    assert algo.alpha != 1.
    algo, _ = make_algo("sac", target_entropy=-0.5)
    assert algo._target_entropy == -0.5


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_optim_state_dict_round_trip_and_safe_load(name, tmp_path):
    algo, agent = make_algo(name)
    fill_replay(algo)
    algo.optimize_agent(0)
    state = algo.optim_state_dict()
    path = os.path.join(tmp_path, "snap.pkl")
    torch.save(dict(optim=state, agent=agent.state_dict()), path)
    loaded = torch.load(path, weights_only=True)
    other, _ = make_algo(name, initial_optim_state_dict=loaded["optim"])
    assert str(other.optim_state_dict()) == str(state)
    if name == "sac":
        assert set(state) == {"pi_optimizer", "q1_optimizer", "q2_optimizer",
                              "alpha_optimizer", "log_alpha"}
        assert other.alpha == algo.alpha
    else:
        assert set(state) == {"q", "mu"}


# --------------------------------------------------------------------- data parallel
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_data_parallel_wraps_every_trained_net(name):
    dist.init_process_group("gloo", store=master_store(0, world_size=1, timeout_s=30),
                            rank=0, world_size=1)
    algo = agent = None
    try:
        algo, agent = make_algo(name)
        assert agent.data_parallel() is None  # CPU: no device index.
        wrapped = {"ddpg": ["model", "q_model"], "td3": ["model", "q_model", "q2_model"],
                   "sac": ["model", "q1_model", "q2_model"]}[name]
        for attr in wrapped:
            assert isinstance(getattr(agent, attr), torch.nn.parallel.DistributedDataParallel)
        algo.optim_initialize()  # Optimizers over the wrapped parameters.
        fill_replay(algo)
        algo.optimize_agent(0)
        agent.update_target(0.5)
        state = agent.state_dict()
        assert not any(k.startswith("module.") for v in state.values() for k in v)
        agent.load_state_dict(state)
    finally:
        # The runners' order: DDP's reducers go while their group exists. Destroying
        # the group first leaves gloo's threads to end under a destructor that holds
        # the GIL one of them waits for (a hang, now and then).
        if agent is not None:
            unwrap_ddp(agent)
        algo = agent = None
        gc.collect()
        dist.destroy_process_group()


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_discrete_action_space_is_rejected(name):
    env_spaces = EnvSpaces(observation=FloatBox(-1, 1, shape=(3,)), action=IntBox(0, 4))
    with pytest.raises(TypeError) as info:
        AGENTS[name]().initialize(env_spaces)
    message = str(info.value)
    assert AGENTS[name].__name__ in message and "IntBox" in message
    assert "continuous" in message and "DqnAgent" in message


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_non_finite_or_asymmetric_bounds_are_rejected(name):
    unbounded = EnvSpaces(observation=FloatBox(-1, 1, shape=(3,)),
                          action=FloatBox(-np.inf, np.inf, shape=(2,)))
    with pytest.raises(ValueError, match=f"{AGENTS[name].__name__}.*non-finite bounds"):
        AGENTS[name]().initialize(unbounded)
    with pytest.raises(ValueError, match="RescaleAction"):
        AGENTS[name]().initialize(spaces(bound=1., low=0.))


def test_runner_rejects_a_discrete_env_before_training(in_tmp_cwd):
    from rlframe.runners.minibatch_rl import MinibatchRl
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=1,
                            batch_B=1)
    with pytest.raises(TypeError, match="SacAgent needs a continuous"):
        MinibatchRl(algo=SAC(), agent=SacAgent(), sampler=sampler, n_steps=100)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(discount=1.5), ValueError, "discount"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(replay_ratio=0), ValueError, "replay_ratio"),
    (dict(target_update_tau=0), ValueError, "target_update_tau"),
    (dict(target_update_interval=0.5), ValueError, "target_update_interval"),
    (dict(n_step_return=0), ValueError, "n_step_return"),
    (dict(learning_rate=-1), ValueError, "learning_rate"),
    (dict(replay_size=10, batch_size=64), ValueError, "replay_size"),
    (dict(min_steps_learn="many"), TypeError, "min_steps_learn"),
])
@pytest.mark.parametrize("AlgoCls", [DDPG, TD3, SAC])
def test_bad_algo_arguments(AlgoCls, kwargs, error, match):
    with pytest.raises(error, match=match):
        AlgoCls(**kwargs)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(target_entropy="high"), ValueError, "target_entropy"),
    (dict(action_prior="laplace"), ValueError, "action_prior"),
    (dict(fixed_alpha=0), ValueError, "fixed_alpha"),
    (dict(reward_scale=0), ValueError, "reward_scale"),
    (dict(reparameterize=False), ValueError, "reparameterize"),
])
def test_bad_sac_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SAC(**kwargs)


def test_bad_agent_arguments():
    with pytest.raises(ValueError, match="action_std"):
        DdpgAgent(action_std=-0.1)
    with pytest.raises(ValueError, match="target_noise_clip"):
        Td3Agent(target_noise_clip=0)
    with pytest.raises(ValueError, match="action_squash"):
        SacAgent(action_squash=0)
    with pytest.raises(ValueError, match="pretrain_std"):
        SacAgent(pretrain_std=-1)


def test_algo_warns_without_mid_batch_reset_or_timeout_info(capsys):
    agent = make_agent("sac")
    SAC(min_steps_learn=0, replay_size=100, batch_size=8).initialize(
        agent, 1, BatchSpec(4, 1), mid_batch_reset=False, examples=examples())
    out = capsys.readouterr().out
    assert "mid_batch_reset=False" in out and "at most batch_T - 1 = 3 per episode" in out
    no_timeout = dict(examples(), env_info=namedtuple("EnvInfo", ["x"])(0))
    algo = SAC(min_steps_learn=0, replay_size=100, batch_size=8)
    algo.initialize(agent, 1, BatchSpec(1, 1), mid_batch_reset=True, examples=no_timeout)
    assert "found no env_info.timeout" in capsys.readouterr().out
    assert not algo.replay_buffer.targets.time_limit  # Cuts count as terminations.
    SAC(min_steps_learn=0, replay_size=100, batch_size=8, bootstrap_timelimit=False).initialize(
        agent, 1, BatchSpec(1, 1), mid_batch_reset=True, examples=no_timeout)
    assert "found no env_info.timeout" not in capsys.readouterr().out


# ---------------------------------------------------------------------- seeding
def test_seeded_serial_sampler_with_sac_agent():
    """rlpyt's reproducibility check: same seed, same first batch; the next differs."""
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="MountainCarContinuous-v0"),
                            batch_T=1, batch_B=1)
    agent = SacAgent(pretrain_std=0.0)
    agent.give_min_itr_learn(10000)
    first = []
    for _ in range(2):
        set_seed(0)
        sampler.initialize(agent, seed=0)
        samples_and_infos = sampler.obtain_samples(0)
        first.append((buffer_func(samples_and_infos[0], torch.clone), samples_and_infos[1]))
    assert str(first[0]) == str(first[1])
    for x, y in zip(flat_leaves(first[0][0]), flat_leaves(first[1][0])):
        assert torch.equal(x, y)
    further = sampler.obtain_samples(0)
    assert further != first[0]
    assert not all(torch.equal(x, y) for x, y in zip(flat_leaves(further[0]),
                                                      flat_leaves(first[0][0])))
    sampler.shutdown()


@pytest.mark.parametrize("name", ["sac", "td3"])
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_parallel_workers_see_when_learning_starts(name, start_method):
    """The algorithm gives the agent min_itr_learn after the sampler started its
    workers; their agent copies must still sample with the pre-training noise (here
    none) before it, and with the learned / action noise from it on."""
    from rlframe.samplers.parallel.cpu.sampler import CpuSampler
    agent = SacAgent(pretrain_std=0.) if name == "sac" else Td3Agent(pretrain_std=0.)
    sampler = CpuSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"), batch_T=8,
                         batch_B=2, max_decorrelation_steps=0, start_method=start_method)
    sampler.initialize(agent, affinity=dict(workers_cpus=[0, 0]), seed=0)
    try:
        agent.give_min_itr_learn(3)
        deterministic = []
        for itr in (0, 3):
            samples, _ = sampler.obtain_samples(itr)
            obs = samples.env.observation
            with torch.no_grad():
                agent.eval_mode(itr)  # Noise-free actions of the same observations.
                greedy = agent.step(obs, samples.agent.prev_action, samples.env.prev_reward)
            deterministic.append(torch.allclose(samples.agent.action, greedy.action, atol=1e-6))
    finally:
        sampler.shutdown()
    assert deterministic == [True, False]
