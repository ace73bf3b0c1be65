"""DQN-family learning to a threshold: a user's own Q-model handed to DqnAgent /
CatDqnAgent on CartPole-v1, and R2D1 with a recurrent model on CartPole
without velocity observations."""
import pytest
import torch
from learning_helpers import assert_learned, train_until_threshold

from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.envs.gym import make as gym_make
from rlframe.envs.wrappers import make_velocity_hidden_cartpole
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims

pytestmark = pytest.mark.slow


class UserQNet(torch.nn.Module):
    """A Q-network written by a user: only the constructor arguments the agent
    supplies (observation_shape, action_size) and the forward signature matter."""

    def __init__(self, observation_shape, action_size, hidden=128):
        super().__init__()
        self.obs_ndim = len(observation_shape)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(observation_shape[0], hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, action_size))

    def forward(self, observation, prev_action, prev_reward):
        lead_dim, T, B, _ = infer_leading_dims(observation, self.obs_ndim)
        q = self.net(observation.reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B)


class UserDistributionalQNet(torch.nn.Module):
    """A user's C51 network: probabilities [..., action_size, n_atoms]."""

    def __init__(self, observation_shape, action_size, n_atoms, hidden=128):
        super().__init__()
        self.obs_ndim = len(observation_shape)
        self.action_size, self.n_atoms = action_size, n_atoms
        self.net = torch.nn.Sequential(
            torch.nn.Linear(observation_shape[0], hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, action_size * n_atoms))

    def forward(self, observation, prev_action, prev_reward):
        lead_dim, T, B, _ = infer_leading_dims(observation, self.obs_ndim)
        logits = self.net(observation.reshape(T * B, -1))
        p = torch.softmax(logits.view(T * B, self.action_size, self.n_atoms), dim=-1)
        return restore_leading_dims(p, lead_dim, T, B)


def train_until(threshold, algo, agent, EnvCls, env_kwargs, batch_T, batch_B, n_steps,
                log_interval_steps, seed):
    """Train until the evaluation return reaches ``threshold``; return the history."""
    sampler = SerialSampler(EnvCls=EnvCls, env_kwargs=env_kwargs, eval_env_kwargs=env_kwargs,
                            batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0,
                            eval_n_envs=4, eval_max_steps=4 * 1000, eval_max_trajectories=8)
    return train_until_threshold(threshold, algo, agent, sampler, n_steps, log_interval_steps,
                                 seed)


DQN_KWARGS = dict(discount=0.99, batch_size=64, min_steps_learn=1000, replay_size=int(5e4),
                  replay_ratio=24, target_update_interval=96, n_step_return=3,
                  learning_rate=2.3e-3, delta_clip=1., eps_steps=8000, double_dqn=True,
                  prioritized_replay=True, pri_beta_steps=60000)
AGENT_KWARGS = dict(eps_final=0.04, eps_eval=0.)
CARTPOLE = dict(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=32, batch_B=8,
                n_steps=30e3, log_interval_steps=4096)


@pytest.mark.timeout(300)
def test_dqn_user_model_cartpole_reaches_475(in_tmp_cwd):
    agent = DqnAgent(ModelCls=UserQNet, **AGENT_KWARGS)
    history = train_until(475, DQN(**DQN_KWARGS), agent, seed=1, **CARTPOLE)
    assert_learned(history, 475, max_steps=60e3, untrained_below=100)


@pytest.mark.timeout(300)
def test_categorical_dqn_user_model_cartpole_reaches_475(in_tmp_cwd):
    agent = CatDqnAgent(ModelCls=UserDistributionalQNet, n_atoms=51, **AGENT_KWARGS)
    algo = CategoricalDQN(V_min=0., V_max=100., **{**DQN_KWARGS, "pri_beta_steps": 30000})
    history = train_until(475, algo, agent, seed=1, **CARTPOLE)
    assert_learned(history, 475, max_steps=60e3, untrained_below=100)


@pytest.mark.timeout(600)
def test_r2d1_velocity_hidden_cartpole_reaches_400(in_tmp_cwd):
    """With these settings each of seeds 0-7 reached 400 within 200k steps (at 96k, 152k,
    160k, 32k, 48k, 136k, 80k and 40k env steps); seed 3 keeps the test short."""
    algo = R2D1(discount=0.99, batch_T=40, batch_B=32, warmup_T=20, store_rnn_state_interval=20,
                min_steps_learn=5000, replay_size=int(1e5), replay_ratio=64,
                target_update_interval=20, n_step_return=5, learning_rate=1e-3,
                clip_grad_norm=10., eps_steps=30000, pri_beta_steps=int(200e3))
    agent = R2d1Agent(model_kwargs=dict(dueling=True), eps_final=0.02, eps_eval=0.)
    history = train_until(400, algo, agent, EnvCls=make_velocity_hidden_cartpole, env_kwargs={},
                          batch_T=20, batch_B=16, n_steps=200e3, log_interval_steps=8000, seed=3)
    assert_learned(history, 400, max_steps=200e3, untrained_below=100)
