"""Serial sampling: determinism, reset semantics, recurrent state, bootstrap values."""
import numpy as np
import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.envs.traj_info import TrajInfo
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector, CpuWaitResetCollector
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.buffer import buffer_func
from rlframe.utils.seed import set_seed
from samplers_helpers import flat_leaves


def make_sampler(T=32, B=3, agent=None, seed=0, env_kwargs=None, **kwargs):
    set_seed(seed)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=env_kwargs or dict(id="CartPole-v1"),
                            batch_T=T, batch_B=B, **kwargs)
    agent = agent or CategoricalPgAgent()
    sampler.initialize(agent, seed=seed + 1, bootstrap_value=True,
                       traj_info_kwargs=dict(discount=0.9))
    return sampler, agent


def copy_samples(samples):
    return buffer_func(samples, torch.clone)


def test_same_seed_same_samples_other_seed_differs():
    batches = []
    for seed in (3, 3, 4):
        sampler, _ = make_sampler(seed=seed)
        first = copy_samples(sampler.obtain_samples(0)[0])
        second = copy_samples(sampler.obtain_samples(1)[0])
        sampler.shutdown()
        batches.append((first, second))
    for x, y in zip(flat_leaves(batches[0]), flat_leaves(batches[1])):
        assert torch.equal(x, y)
    assert not all(torch.equal(x, y) for x, y in zip(flat_leaves(batches[0][0]), flat_leaves(batches[0][1])))
    assert not all(torch.equal(x, y) for x, y in zip(flat_leaves(batches[0]), flat_leaves(batches[2])))


def test_buffer_layout_and_prev_views():
    sampler, agent = make_sampler(T=16, B=2)
    samples, _ = sampler.obtain_samples(0)
    last_action = samples.agent.action[-1].clone()
    last_reward = samples.env.reward[-1].clone()
    assert samples.env.observation.shape == (16, 2, 4)
    assert samples.agent.action.dtype == torch.int64
    assert samples.agent.agent_info.dist_info.prob.shape == (16, 2, 2)
    assert samples.agent.bootstrap_value.shape == (1, 2)
    # prev_action[t] is action[t-1]: offset views of one array.
    assert torch.equal(samples.agent.prev_action[1:], samples.agent.action[:-1])
    assert torch.equal(samples.env.prev_reward[1:], samples.env.reward[:-1])
    samples, _ = sampler.obtain_samples(1)
    assert torch.equal(samples.agent.prev_action[0], last_action)
    assert torch.equal(samples.env.prev_reward[0], last_reward)
    sampler.shutdown()


def test_mid_batch_reset_collector_resets_inside_batch():
    sampler, agent = make_sampler(T=200, B=2, CollectorCls=CpuResetCollector)
    samples, traj_infos = sampler.obtain_samples(0)
    done = samples.env.done.numpy()
    assert done.sum() >= 2 and len(traj_infos) == done.sum()
    t, b = np.argwhere(done[:-1])[0]
    assert np.abs(samples.env.observation[t + 1, b].numpy()).max() <= 0.05  # fresh reset state
    assert not done[t + 1:, b].all()
    assert all(info.Length > 0 and info.Return == info.Length for info in traj_infos)
    lengths = [info.Length for info in traj_infos]
    expected = [sum(0.9 ** k for k in range(n)) for n in lengths]
    assert np.allclose([info.DiscountedReturn for info in traj_infos], expected)
    sampler.shutdown()


def test_wait_reset_collector_idles_done_envs_until_next_batch():
    sampler, agent = make_sampler(T=200, B=2, CollectorCls=CpuWaitResetCollector)
    assert sampler.mid_batch_reset is False
    samples, traj_infos = sampler.obtain_samples(0)
    done = samples.env.done.numpy()
    for b in range(2):
        t = int(np.argmax(done[:, b]))
        assert done[t:, b].all()  # done stays set
        assert np.all(samples.env.reward[t + 1:, b].numpy() == 0)
        assert np.all(samples.env.observation[t + 1:, b].numpy() == 0)
        assert np.all(samples.agent.action[t + 1:, b].numpy() == 0)
    assert len(traj_infos) == 2
    samples, _ = sampler.obtain_samples(1)
    obs0 = samples.env.observation[0].numpy()
    assert np.abs(obs0).max() <= 0.05  # both envs restarted between batches
    assert np.all(samples.agent.prev_action[0].numpy() == 0)
    assert np.all(samples.env.prev_reward[0].numpy() == 0)
    sampler.shutdown()


def test_bootstrap_value_is_value_of_next_observation():
    sampler, agent = make_sampler(T=8, B=3)
    samples, _ = sampler.obtain_samples(0)
    obs, prev_act, prev_rew = (torch.as_tensor(x) for x in sampler.agent_inputs)
    expected = agent.value(obs, prev_act, prev_rew)
    assert torch.allclose(samples.agent.bootstrap_value[0], expected)
    sampler.shutdown()


def test_recurrent_state_recorded_and_reset_at_done():
    agent = RecurrentCategoricalPgAgent()
    sampler, agent = make_sampler(T=150, B=2, agent=agent, CollectorCls=CpuResetCollector)
    samples, _ = sampler.obtain_samples(0)
    h = samples.agent.agent_info.prev_rnn_state.h  # [T, B, N, H]
    assert h.shape == (150, 2, 1, 64)
    done = samples.env.done.numpy()
    t, b = np.argwhere(done[:-1])[0]
    assert torch.all(h[t + 1, b] == 0)  # state reset for the new episode
    assert torch.any(h[t, b] != 0)
    other = 1 - b
    if not done[t, other]:
        assert torch.any(h[t + 1, other] != 0)
    # Sample-mode state survives a train/eval round trip.
    state = agent.prev_rnn_state
    agent.train_mode(0)
    assert agent.prev_rnn_state is None
    agent.sample_mode(1)
    assert agent.prev_rnn_state is state
    sampler.shutdown()


def test_timeout_reported_for_time_limit():
    sampler, _ = make_sampler(T=25, B=2, env_kwargs=dict(id="CartPole-v1", max_episode_steps=10))
    samples, traj_infos = sampler.obtain_samples(0)
    done = samples.env.done.numpy()
    timeout = samples.env.env_info.timeout.numpy()
    assert timeout.any() and np.all(done[timeout])  # a timeout is always a done
    assert all(info.Length <= 10 for info in traj_infos)
    sampler.shutdown()


def test_evaluation_stops_at_max_trajectories():
    sampler, _ = make_sampler(T=4, B=1, eval_n_envs=2,
                              eval_env_kwargs=dict(id="CartPole-v1"), eval_max_steps=2000,
                              eval_max_trajectories=3)
    traj_infos = sampler.evaluate_agent(0)
    assert len(traj_infos) == 3  # The first 2 of env 0, the first of env 1.
    sampler.shutdown()


def test_inference_mode_stepping_gives_the_no_grad_batches():
    batches = []
    for inference in (True, False):
        agent = CategoricalPgAgent()
        agent.step_inference_mode = inference
        sampler, agent = make_sampler(T=40, B=3, agent=agent)
        samples, infos = sampler.obtain_samples(0)
        batches.append((copy_samples(samples), [i.Length for i in infos]))
        # Sampled tensors train as usual afterwards: the buffers are normal tensors.
        dist_info, value = agent(samples.env.observation, samples.agent.prev_action,
                                 samples.env.prev_reward)
        (value.sum() + dist_info.prob.sum()).backward()
        sampler.shutdown()
    (inference_samples, inference_lengths), (no_grad_samples, no_grad_lengths) = batches
    for x, y in zip(flat_leaves(inference_samples), flat_leaves(no_grad_samples)):
        assert torch.equal(x, y)
    assert inference_lengths == no_grad_lengths


def test_recurrent_agents_step_without_inference_mode():
    assert CategoricalPgAgent.step_inference_mode
    assert not RecurrentCategoricalPgAgent.step_inference_mode


def test_agent_step_has_no_grad_with_grad_mode_on_or_off():
    sampler, agent = make_sampler(T=4, B=2)
    inputs = [torch.as_tensor(x) for x in sampler.agent_inputs]
    assert torch.is_grad_enabled()
    step = agent.step(*inputs)
    assert not step.agent_info.value.requires_grad and torch.is_grad_enabled()
    with torch.no_grad():
        assert not agent.step(*inputs).agent_info.dist_info.prob.requires_grad
    sampler.shutdown()


def test_eval_env_quotas_split_the_trajectories_evenly():
    from rlframe.samplers.collectors import eval_env_quotas
    assert eval_env_quotas(None, 4) is None
    assert eval_env_quotas(5, 5).tolist() == [1, 1, 1, 1, 1]
    assert eval_env_quotas(6, 4).tolist() == [2, 2, 1, 1]
    assert eval_env_quotas(3, 5).tolist() == [1, 1, 1, 0, 0]  # Two envs count nothing.
    assert eval_env_quotas(10, 1).tolist() == [10]  # One env: its first 10 episodes.
    # A collector's part: envs 2 and 3 of 4 (a second worker's).
    assert eval_env_quotas(6, 4, first=2, count=2).tolist() == [1, 1]
    assert sum(eval_env_quotas(7, 6, w * 2, 2).sum() for w in range(3)) == 7
    with pytest.raises(ValueError, match=r"env_quota has \(3,\) entries; give one per "
                                         r"evaluation env \(2\)"):
        SerialEvalCollector(envs=[gym_make(id="CartPole-v1") for _ in range(2)],
                            agent=CategoricalPgAgent(), TrajInfoCls=TrajInfo, max_T=10,
                            env_quota=[1, 1, 1])
