"""The off-policy update loop shared by the DQN family and DDPG/TD3/SAC."""
import math

import pytest
import torch

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.serial.sampler import SerialSampler

SMALL = dict(model_kwargs=dict(hidden_sizes=[16]))


def make(name, replay_ratio, batch_size):
    common = dict(batch_size=batch_size, replay_ratio=replay_ratio, min_steps_learn=16,
                  replay_size=2000)
    if name == "dqn":
        return DQN(**common), DqnAgent(**SMALL), "CartPole-v1"
    AgentCls, AlgoCls = dict(ddpg=(DdpgAgent, DDPG), sac=(SacAgent, SAC))[name]
    return AlgoCls(**common), AgentCls(**SMALL, q_model_kwargs=dict(hidden_sizes=[16])), \
        "Pendulum-v1"


def updates_per_iteration(name, replay_ratio, batch_size, n_itr):
    """Updates made in each of ``n_itr`` iterations of 8 env steps."""
    algo, agent, env_id = make(name, replay_ratio, batch_size)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=4, batch_B=2,
                            max_decorrelation_steps=0)
    examples = sampler.initialize(agent, seed=0)
    algo.initialize(agent, n_itr=n_itr, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset, examples=examples)
    counts = []
    try:
        for itr in range(n_itr):
            agent.sample_mode(itr)
            samples, _ = sampler.obtain_samples(itr)
            agent.train_mode(itr)
            before = algo.update_counter
            algo.optimize_agent(itr, samples)
            counts.append(algo.update_counter - before)
    finally:
        sampler.shutdown()
    return algo, counts


@pytest.mark.parametrize("replay_ratio,batch_size", [(1, 32), (3, 32), (5, 16), (0.1, 4)])
def test_fractional_replay_ratio_is_exact_for_every_algorithm(replay_ratio, batch_size):
    n_itr = 42
    results = {name: updates_per_iteration(name, replay_ratio, batch_size, n_itr)
               for name in ("dqn", "ddpg", "sac")}
    counts = {name: c for name, (_, c) in results.items()}
    assert counts["dqn"] == counts["ddpg"] == counts["sac"]
    algo = results["dqn"][0]
    learning_itrs = n_itr - algo.min_itr_learn  # Learning starts at 16 steps: iteration 2.
    exact = replay_ratio * 8 / batch_size * learning_itrs
    assert abs(sum(counts["dqn"]) - exact) < 1
    assert all(c == 0 for c in counts["dqn"][:algo.min_itr_learn])
    # Updates are spread evenly: per iteration, the floor or the ceiling of the ratio.
    per_itr = replay_ratio * 8 / batch_size
    assert set(counts["dqn"][algo.min_itr_learn:]) <= {math.floor(per_itr), math.ceil(per_itr)}


def test_one_update_every_fourth_iteration():
    _, counts = updates_per_iteration("sac", replay_ratio=1, batch_size=32, n_itr=18)
    assert counts[2:] == [0, 0, 0, 1] * 4  # 0.25 updates per iteration from iteration 2.


def test_opt_info_lists_per_update_and_finite():
    algo, counts = updates_per_iteration("dqn", replay_ratio=8, batch_size=16, n_itr=4)
    assert counts == [0, 0, 4, 4]
    opt_info = algo.optimize_agent(4)  # No new samples: trains on the replay.
    assert len(opt_info.loss) == len(opt_info.gradNorm) == 4
    assert len(opt_info.tdAbsErr) == 4 * 2  # Every 8th of 16 errors, per update.
    assert all(math.isfinite(v) for v in opt_info.loss + opt_info.gradNorm)


def test_gradient_step_clips_each_group_on_its_own():
    algo = DQN(clip_grad_norm=1.)
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt_a, opt_b = torch.optim.SGD([a], lr=1.), torch.optim.SGD([b], lr=1.)
    loss = 10 * a.sum() + 0.1 * b.sum()
    norm_a, norm_b = algo.gradient_step(loss, (opt_a, [a]), (opt_b, [b]))
    assert norm_a.item() == pytest.approx(10 * math.sqrt(3))
    assert norm_b.item() == pytest.approx(0.1 * math.sqrt(2))
    assert torch.linalg.vector_norm(a.detach()).item() == pytest.approx(1., rel=1e-4)  # Clipped.
    torch.testing.assert_close(b.detach(), torch.full((2,), -0.1))  # Under the bound: as is.
