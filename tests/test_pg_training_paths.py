"""Every policy-gradient agent family trains through A2C and PPO without error."""
import math

import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent, MujocoLstmAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector, CpuWaitResetCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.seed import set_seed

CASES = [
    (CategoricalPgAgent, "CartPole-v1", CpuResetCollector),
    (RecurrentCategoricalPgAgent, "CartPole-v1", CpuWaitResetCollector),
    (RecurrentCategoricalPgAgent, "CartPole-v1", CpuResetCollector),
    (MujocoFfAgent, "Pendulum-v1", CpuResetCollector),
    (MujocoLstmAgent, "Pendulum-v1", CpuWaitResetCollector),
]


@pytest.mark.parametrize("AlgoCls", [A2C, PPO])
@pytest.mark.parametrize("AgentCls,env_id,CollectorCls", CASES)
def test_training_updates_parameters(AlgoCls, AgentCls, env_id, CollectorCls):
    set_seed(0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=20,
                            batch_B=4, CollectorCls=CollectorCls, max_decorrelation_steps=5)
    agent = AgentCls()
    sampler.initialize(agent, seed=0, bootstrap_value=True)
    algo = AlgoCls(**(dict(minibatches=2, epochs=2) if AlgoCls is PPO else {}))
    algo.initialize(agent, n_itr=3, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset)
    before = [p.detach().clone() for p in agent.parameters()]
    for itr in range(3):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        opt_info = algo.optimize_agent(itr, samples)
        values = opt_info.loss if isinstance(opt_info.loss, list) else [opt_info.loss]
        assert values and all(math.isfinite(v) for v in values)
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.parameters()))
    expected_updates = 3 * (2 * 2 if AlgoCls is PPO else 1)
    assert algo.update_counter == expected_updates
    if AlgoCls is PPO:
        # Linear schedule: the learning rate has decayed to zero after n_itr iterations.
        assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.)
    sampler.shutdown()


def test_ppo_trains_with_the_observation_statistics_the_batch_was_sampled_with():
    """A normalizing model's statistics take in the batch after PPO's epochs: every
    forward pass of the epochs uses the statistics the batch was sampled with (so the
    likelihood ratio starts at 1), and the next batch is sampled with the updated ones."""
    set_seed(0)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"), batch_T=16,
                            batch_B=2, max_decorrelation_steps=0)
    agent = MujocoFfAgent(model_kwargs=dict(normalize_observation=True))
    sampler.initialize(agent, seed=0, bootstrap_value=True)
    algo = PPO(minibatches=1, epochs=2, linear_lr_schedule=False)
    algo.initialize(agent, n_itr=2, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset)
    rms = agent.model.obs_rms
    for itr in range(2):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        count, mean = rms.count.clone(), rms.mean.clone()
        with torch.no_grad():  # Now, as when sampling: the distribution the batch holds.
            mu, _, _ = agent.model(samples.env.observation, None, None)
        assert torch.allclose(mu, samples.agent.agent_info.dist_info.mean, atol=1e-6)
        seen = []
        forward = agent.model.forward

        def recording(*args, **kwargs):
            seen.append((rms.count.clone(), rms.mean.clone()))
            return forward(*args, **kwargs)

        agent.model.forward = recording
        try:
            algo.optimize_agent(itr, samples)
        finally:
            del agent.model.forward
        assert len(seen) == 2 and all(torch.equal(c, count) and torch.equal(m, mean)
                                      for c, m in seen)
        assert rms.count == count + 32
    sampler.shutdown()
