"""PPO's and A2C's ``normalize_reward``: rewards divided by the running standard deviation
of each env's discounted return (rlframe.algos.pg.base.RewardScale)."""
import copy

import numpy as np
import pytest
import torch

from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.base import RewardScale
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.seed import set_seed

GAMMA = 0.5
# Column 0 ends an episode at t=1; column 1 runs on.
REWARD = torch.tensor([[1., 4.], [2., 0.], [4., 2.]])
DONE = torch.tensor([[0., 0.], [1., 0.], [0., 0.]])
# G[t] = gamma * G[t-1] * (1 - done[t-1]) + r[t], by hand.
RETURNS = np.array([[1., 4.], [2.5, 2.], [4., 3.]])


def test_scales_by_the_standard_deviation_of_the_discounted_returns():
    scale = RewardScale(GAMMA, clip=10.)
    scaled = scale(REWARD, DONE)
    std = np.sqrt(RETURNS.var() + 1e-8)
    np.testing.assert_allclose(scaled.numpy(), REWARD.numpy() / std, rtol=1e-6)
    # Column 0 starts again after its done; column 1 carries 3 over.
    assert scale.running_return.tolist() == [4., 3.]


def test_returns_run_on_across_batches_and_the_statistics_take_in_every_batch():
    scale = RewardScale(GAMMA, clip=10.)
    scale(REWARD, DONE)
    second = torch.tensor([[2., 2.]])
    scaled = scale(second, torch.zeros(1, 2))
    returns = np.concatenate([RETURNS.ravel(), [GAMMA * 4 + 2, GAMMA * 3 + 2]])
    np.testing.assert_allclose(scaled.numpy(), 2. / np.sqrt(returns.var() + 1e-8), rtol=1e-6)


def test_invalid_steps_stay_out_of_the_statistics_and_scaled_rewards_are_clipped():
    scale = RewardScale(GAMMA, clip=1.5)
    valid = torch.tensor([[1., 1.], [1., 1.], [0., 1.]])
    scaled = scale(REWARD, DONE, valid)
    kept = RETURNS[valid.numpy().astype(bool)]
    expected = np.clip(REWARD.numpy() / np.sqrt(kept.var() + 1e-8), -1.5, 1.5)
    np.testing.assert_allclose(scaled.numpy(), expected, rtol=1e-6)
    assert scaled.max() == pytest.approx(1.5)


def _pendulum(AlgoCls, **kwargs):
    set_seed(0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"), batch_T=32,
                            batch_B=2, max_decorrelation_steps=0)
    agent = MujocoFfAgent()
    sampler.initialize(agent, seed=0, bootstrap_value=True)
    algo = AlgoCls(normalize_reward=True, **kwargs)
    algo.initialize(agent, n_itr=4, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset)
    return sampler, agent, algo


@pytest.mark.parametrize("AlgoCls", [A2C, PPO])
def test_returns_are_computed_from_the_scaled_rewards(AlgoCls):
    """Pendulum's rewards (down to -16 a step) come out of the scale within [-10, 10]
    and the returns the loss sees are those of the scaled rewards."""
    sampler, agent, algo = _pendulum(AlgoCls)
    agent.sample_mode(0)
    samples, _ = sampler.obtain_samples(0)
    reference = copy.deepcopy(algo.reward_scale)
    return_, _, _ = algo.process_returns(samples)
    scaled = reference(samples.env.reward, samples.env.done.float())
    assert scaled.abs().max() <= 10. and not torch.allclose(scaled, samples.env.reward)
    last = scaled[-1] + algo.discount * samples.agent.bootstrap_value.squeeze(0) * (
        1 - samples.env.done[-1].float())
    # GAE with lambda = 1 (the default): the return of the last step is r + gamma * V.
    assert torch.allclose(return_[-1], last, atol=1e-5)
    sampler.shutdown()


def test_the_scale_is_saved_and_restored_with_the_algorithm():
    sampler, agent, algo = _pendulum(PPO, minibatches=2, epochs=1)
    for itr in range(2):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        algo.optimize_agent(itr, samples)
    state = copy.deepcopy(algo.state_dict())
    fresh = PPO(normalize_reward=True, minibatches=2, epochs=1)
    fresh.initialize(agent, n_itr=4, batch_spec=sampler.batch_spec)
    fresh.load_state_dict(state)
    rms, loaded = algo.reward_scale.return_rms, fresh.reward_scale.return_rms
    assert rms.count == 128 and torch.equal(loaded.count, rms.count)
    assert torch.equal(loaded.var, rms.var)
    assert torch.equal(fresh.reward_scale.running_return, algo.reward_scale.running_return)
    assert "reward_scale" not in PPO(linear_lr_schedule=False).state_dict()
    sampler.shutdown()


def test_normalize_reward_must_be_a_bool():
    with pytest.raises(TypeError, match="normalize_reward='yes': give True or False"):
        PPO(normalize_reward="yes")
