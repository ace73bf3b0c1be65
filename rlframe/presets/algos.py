"""The standard algorithms: classes, agents and default hyperparameters per kind of env.

Each :class:`AlgoPreset` says which agent acts in which kind of env and what
settings make a sensible first run. Settings are grouped by *profile*, the kind
of env a run is on (see :mod:`rlframe.presets.envs`):

* ``"discrete"``: gymnasium envs with discrete actions (CartPole-v1, LunarLander-v3);
* ``"continuous"``: gymnasium envs with continuous actions (Pendulum-v1);
* ``"mujoco"``: gymnasium's MuJoCo tasks (Hopper-v5, HalfCheetah-v5);
* ``"atari"``: Atari games on :class:`~rlframe.envs.atari.atari_env.AtariEnv`.

A profile's settings are plain JSON-able dicts: ``run`` (``n_steps``,
``log_interval_steps``, ``batch_T``, ``batch_B``) and the keyword arguments of
the ``algo``, the ``agent`` and the ``sampler``. Class-valued keywords
(``OptimCls``, ``ModelCls``) are written as dotted import paths.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rlframe.agents.dqn.atari.atari_catdqn_agent import AtariCatDqnAgent
from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
from rlframe.agents.dqn.atari.atari_r2d1_agent import AtariR2d1Agent, AtariR2d1AlternatingAgent
from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent, R2d1AlternatingAgent
from rlframe.agents.pg.atari import AtariFfAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3

PROFILES = ("discrete", "continuous", "mujoco", "atari")
"""Kinds of env with settings of their own (see the module docstring)."""

Settings = dict[str, dict[str, Any]]  # {"run": {...}, "algo": {...}, "agent": {...}, ...}


@dataclasses.dataclass(frozen=True)
class AlgoPreset:
    """One algorithm with its agents and default settings.

    Args:
        name: command-line name (``"ppo"``).
        AlgoCls: the algorithm class.
        agents: agent class per env kind: ``"discrete"`` and ``"continuous"``
            (gymnasium vector observations) and ``"atari"`` (image observations).
        alternating_agents: recurrent agents' variants for the alternating sampler.
        settings: default settings per profile (a profile missing here is not
            supported, e.g. DDPG on Atari).
    """

    name: str
    AlgoCls: type
    agents: dict[str, type]
    settings: dict[str, Settings]
    alternating_agents: dict[str, type] = dataclasses.field(default_factory=dict)

    @property
    def action_kinds(self) -> tuple[str, ...]:
        """Action spaces the algorithm handles: ``"discrete"`` and/or ``"continuous"``."""
        return tuple(kind for kind in ("discrete", "continuous") if kind in self.agents)


# Evaluation episodes at every log point (MinibatchRlEval), per profile.
_EVAL = {
    "discrete": dict(eval_n_envs=4, eval_max_steps=4000, eval_max_trajectories=8),
    "continuous": dict(eval_n_envs=5, eval_max_steps=5000, eval_max_trajectories=5),
    "mujoco": dict(eval_n_envs=5, eval_max_steps=10000, eval_max_trajectories=5),
    # Each of the 5 eval envs may play a whole game: AtariEnv's horizon is 27,000 steps
    # (a trained Pong agent's games take several thousand; 1,000 steps per env, as 10
    # envs in 10,000 steps had, finished none once play got longer than that).
    "atari": dict(eval_n_envs=5, eval_max_steps=5 * 27000, eval_max_trajectories=5),
}


def _settings(profile: str, run: dict, algo: dict, agent: dict | None = None,
              sampler: dict | None = None) -> Settings:
    """A profile's settings; the sampler gets the profile's evaluation settings and no
    decorrelation steps unless ``sampler`` says otherwise."""
    sampler_kwargs = dict(max_decorrelation_steps=0, **_EVAL[profile])
    sampler_kwargs.update(sampler or {})
    return dict(run=run, algo=algo, agent=agent or {}, sampler=sampler_kwargs)


# --- Policy gradient --------------------------------------------------------------------------

_PG_CONTINUOUS = _settings(
    "continuous",
    run=dict(n_steps=int(1e6), log_interval_steps=20480, batch_T=2048, batch_B=1),
    algo=dict(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, minibatches=32, epochs=10,
              ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
              clip_grad_norm=0.5, normalize_advantage=True),
    agent=dict(model_kwargs=dict(normalize_observation=True)),
)

PPO_PRESET = AlgoPreset(
    name="ppo", AlgoCls=PPO,
    agents=dict(discrete=CategoricalPgAgent, continuous=MujocoFfAgent, atari=AtariFfAgent),
    settings=dict(
        discrete=_settings(
            "discrete",
            run=dict(n_steps=int(150e3), log_interval_steps=10240, batch_T=128, batch_B=8),
            algo=dict(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2,
                      epochs=8, value_loss_coeff=0.5, entropy_loss_coeff=0.,
                      clip_grad_norm=10., normalize_advantage=True),
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]))),
        continuous=_PG_CONTINUOUS,
        mujoco=dict(_PG_CONTINUOUS, sampler=dict(_PG_CONTINUOUS["sampler"], **_EVAL["mujoco"])),
        # CleanRL's ppo_atari.py settings, advantages normalized as there: with rewards
        # clipped to [-1, 1] the raw ones are small, and the entropy bonus outweighed the
        # policy gradient (unnormalized, a 3M-step Breakout run kept its policy's entropy
        # near 1.15, the uniform policy's being 1.39). CleanRL standardizes them per
        # minibatch and clips the value loss (normalize_advantage="minibatch",
        # value_clip=0.1); these stay rlpyt's, whole-batch and unclipped.
        atari=_settings(
            "atari",
            run=dict(n_steps=int(10e6), log_interval_steps=int(1e5), batch_T=128, batch_B=8),
            algo=dict(discount=0.99, learning_rate=2.5e-4, gae_lambda=0.95, minibatches=4,
                      epochs=4, ratio_clip=0.1, value_loss_coeff=0.5, entropy_loss_coeff=0.01,
                      clip_grad_norm=0.5, normalize_advantage=True,
                      optim_kwargs=dict(eps=1e-5)),
            sampler=dict(max_decorrelation_steps=400)),
    ),
)

A2C_PRESET = AlgoPreset(
    name="a2c", AlgoCls=A2C,
    agents=dict(discrete=CategoricalPgAgent, continuous=MujocoFfAgent, atari=AtariFfAgent),
    settings=dict(
        discrete=_settings(
            "discrete",
            run=dict(n_steps=int(150e3), log_interval_steps=10240, batch_T=16, batch_B=8),
            algo=dict(discount=0.99, learning_rate=1e-3, gae_lambda=0.95, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.01, clip_grad_norm=0.5),
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]))),
        continuous=_settings(
            "continuous",
            run=dict(n_steps=int(1e6), log_interval_steps=20480, batch_T=32, batch_B=8),
            algo=dict(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, value_loss_coeff=0.5,
                      entropy_loss_coeff=0., clip_grad_norm=0.5, normalize_advantage=True),
            agent=dict(model_kwargs=dict(normalize_observation=True))),
        mujoco=_settings(
            "mujoco",
            run=dict(n_steps=int(1e6), log_interval_steps=20480, batch_T=32, batch_B=8),
            algo=dict(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, value_loss_coeff=0.5,
                      entropy_loss_coeff=0., clip_grad_norm=0.5, normalize_advantage=True),
            agent=dict(model_kwargs=dict(normalize_observation=True))),
        atari=_settings(  # The usual A2C settings: RMSprop, 16 envs x 5 steps.
            "atari",
            run=dict(n_steps=int(10e6), log_interval_steps=int(1e5), batch_T=5, batch_B=16),
            algo=dict(discount=0.99, learning_rate=7e-4, OptimCls="torch.optim.RMSprop",
                      optim_kwargs=dict(alpha=0.99, eps=1e-5), value_loss_coeff=0.5,
                      entropy_loss_coeff=0.01, clip_grad_norm=0.5),
            sampler=dict(max_decorrelation_steps=400)),
    ),
)

# --- Q-learning -------------------------------------------------------------------------------

_DQN_DISCRETE_ALGO = dict(
    discount=0.99, batch_size=64, min_steps_learn=1000, replay_size=int(5e4), replay_ratio=24,
    target_update_interval=96, n_step_return=3, learning_rate=2.3e-3, delta_clip=1.,
    eps_steps=8000, double_dqn=True, prioritized_replay=True, pri_beta_steps=int(60e3))
_DQN_DISCRETE_RUN = dict(n_steps=int(50e3), log_interval_steps=4096, batch_T=32, batch_B=8)
_DQN_ATARI_RUN = dict(n_steps=int(10e6), log_interval_steps=int(1e5), batch_T=4, batch_B=1)
_DQN_ATARI_ALGO = dict(min_steps_learn=int(5e4), replay_size=int(1e6), eps_steps=int(1e6),
                       double_dqn=True)

DQN_PRESET = AlgoPreset(
    name="dqn", AlgoCls=DQN,
    agents=dict(discrete=DqnAgent, atari=AtariDqnAgent),
    settings=dict(
        discrete=_settings(
            "discrete", run=_DQN_DISCRETE_RUN, algo=_DQN_DISCRETE_ALGO,
            agent=dict(model_kwargs=dict(hidden_sizes=[128, 128]), eps_final=0.04,
                       eps_eval=0.)),
        atari=_settings("atari", run=_DQN_ATARI_RUN, algo=_DQN_ATARI_ALGO),
    ),
)

CATDQN_PRESET = AlgoPreset(
    name="catdqn", AlgoCls=CategoricalDQN,
    agents=dict(discrete=CatDqnAgent, atari=AtariCatDqnAgent),
    settings=dict(
        discrete=_settings(  # Returns of 1 per step discounted by 0.99 stay below 100.
            "discrete", run=_DQN_DISCRETE_RUN, algo=dict(_DQN_DISCRETE_ALGO, V_min=0., V_max=100.),
            agent=dict(model_kwargs=dict(hidden_sizes=[128, 128]), eps_final=0.04,
                       eps_eval=0.)),
        atari=_settings("atari", run=_DQN_ATARI_RUN, algo=dict(_DQN_ATARI_ALGO, V_min=-10.,
                                                                V_max=10.)),
    ),
)

R2D1_PRESET = AlgoPreset(
    name="r2d1", AlgoCls=R2D1,
    agents=dict(discrete=R2d1Agent, atari=AtariR2d1Agent),
    alternating_agents=dict(discrete=R2d1AlternatingAgent, atari=AtariR2d1AlternatingAgent),
    settings=dict(
        discrete=_settings(  # batch_T: a multiple of store_rnn_state_interval.
            "discrete",
            run=dict(n_steps=int(200e3), log_interval_steps=8000, batch_T=20, batch_B=16),
            algo=dict(discount=0.99, batch_T=40, batch_B=32, warmup_T=20,
                      store_rnn_state_interval=20, min_steps_learn=5000, replay_size=int(1e5),
                      replay_ratio=64, target_update_interval=20, n_step_return=5,
                      learning_rate=1e-3, clip_grad_norm=10., eps_steps=30000,
                      pri_beta_steps=int(200e3)),
            agent=dict(model_kwargs=dict(dueling=True), eps_final=0.02, eps_eval=0.)),
        atari=_settings(  # R2D1's own defaults are its Atari settings.
            "atari",
            run=dict(n_steps=int(10e6), log_interval_steps=int(1e5), batch_T=40, batch_B=16),
            algo=dict()),
    ),
)

# --- Q-learning with a policy (continuous actions) --------------------------------------------

_QPG_RUN = dict(
    continuous=dict(n_steps=int(20e3), log_interval_steps=2000, batch_T=1, batch_B=1),
    mujoco=dict(n_steps=int(1e6), log_interval_steps=int(1e4), batch_T=1, batch_B=1),
)
_QPG_ALGO = dict(
    continuous=dict(min_steps_learn=1000, replay_size=int(1e5)),
    mujoco=dict(min_steps_learn=int(1e4)),
)


def _qpg_preset(name: str, AlgoCls: type, AgentCls: type) -> AlgoPreset:
    """DDPG, TD3 and SAC: one env, one step per iteration, the algorithm's defaults."""
    return AlgoPreset(
        name=name, AlgoCls=AlgoCls, agents=dict(continuous=AgentCls),
        settings={profile: _settings(profile, run=_QPG_RUN[profile], algo=_QPG_ALGO[profile])
                  for profile in ("continuous", "mujoco")},
    )


DDPG_PRESET = _qpg_preset("ddpg", DDPG, DdpgAgent)
TD3_PRESET = _qpg_preset("td3", TD3, Td3Agent)
SAC_PRESET = _qpg_preset("sac", SAC, SacAgent)

ALGOS: dict[str, AlgoPreset] = {preset.name: preset for preset in (
    PPO_PRESET, A2C_PRESET, DQN_PRESET, CATDQN_PRESET, R2D1_PRESET, DDPG_PRESET, TD3_PRESET,
    SAC_PRESET)}
"""The algorithms ``build_experiment`` knows, by command-line name."""
