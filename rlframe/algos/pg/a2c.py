"""Advantage Actor-Critic: one gradient step per batch of on-policy samples."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlframe.agents.base import AgentInputs
from rlframe.algos.base import check_compile, check_optimizer
from rlframe.algos.pg.base import OptInfo, PolicyGradientAlgo
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.buffer import TensorTree


class A2C(PolicyGradientAlgo):
    """Synchronous advantage actor-critic.

    Args:
        discount: reward discount (gamma).
        learning_rate: optimizer step size.
        value_loss_coeff: weight of the value regression loss.
        entropy_loss_coeff: weight of the entropy bonus.
        OptimCls: optimizer class.
        optim_kwargs: extra optimizer arguments.
        clip_grad_norm: max global gradient norm.
        initial_optim_state_dict: optimizer state to resume from.
        gae_lambda: 1 for discounted returns, < 1 for GAE.
        normalize_advantage: standardize advantages over the batch.
        bootstrap_timelimit: bootstrap episodes cut by a time limit (envs that
            report ``env_info.timeout``) instead of treating them as terminal.
        compile: run :meth:`batch_loss` (with the model) through ``torch.compile``,
            built at the first update; a RuntimeError names this argument if torch
            cannot compile here (see :meth:`RlAlgorithm.compiled`).
        normalize_reward: divide rewards by the running standard deviation of each
            env's discounted return and clip them to [-10, 10] before computing returns
            and advantages (:class:`~rlframe.algos.pg.base.RewardScale`; as
            gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize`` do in the env).
    """

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 0.5, entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1., initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, normalize_advantage: bool = False,
                 bootstrap_timelimit: bool = True, compile: bool = False,
                 normalize_reward: bool = False):
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        self.optim_kwargs = check_optimizer(OptimCls, optim_kwargs)
        self.clip_grad_norm = clip_grad_norm
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.normalize_advantage = normalize_advantage
        self.bootstrap_timelimit = bootstrap_timelimit
        self.compile = check_compile(compile)
        self.normalize_reward = normalize_reward
        self.update_counter = 0
        self._check_common_args()

    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        super().initialize(agent, n_itr, batch_spec, mid_batch_reset=mid_batch_reset,
                           examples=examples, world_size=world_size, rank=rank)
        self._batch_size = self.batch_spec.size

    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """One gradient step on the whole [T, B] batch."""
        loss, entropy, perplexity = self.loss(samples)
        grad_norm, = self.gradient_step(loss, (self.optimizer, self._params))
        if not self.check_update(samples):  # Skipped by the non-finite guard.
            return OptInfo(loss=[], gradNorm=[], entropy=[], perplexity=[])
        self.update_counter += 1
        # One read from the device for the four statistics.
        values = torch.stack([loss.detach(), grad_norm.to(loss.device), entropy, perplexity])
        return OptInfo(*values.tolist())

    def loss(self, samples: Samples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Policy-gradient + value + entropy loss over samples [T, B].

        Returns:
            ``(loss, entropy, perplexity)`` scalars; the last two detached.
        """
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        self.agent.update_obs_rms(agent_inputs.observation)
        init_rnn_state = (samples.agent.agent_info.prev_rnn_state[0] if self.agent.recurrent
                          else None)
        return_, advantage, valid = self.process_returns(samples)
        return self.compiled("batch_loss")(agent_inputs, samples.agent.action, return_,
                                           advantage, valid, init_rnn_state)

    def batch_loss(self, agent_inputs: AgentInputs, action: torch.Tensor,
                   return_: torch.Tensor, advantage: torch.Tensor, valid: torch.Tensor | None,
                   init_rnn_state: TensorTree | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loss given returns and advantages (the part ``compile=True`` compiles).

        Args:
            agent_inputs, action, return_, advantage, valid: leading [T, B].
            init_rnn_state: [B, N, H] recurrent state at the batch start, or None.
        """
        dist_info, value = self.forward(agent_inputs, init_rnn_state)
        logli = self.agent.distribution.log_likelihood(action, dist_info)
        pi_loss = -valid_mean(logli * advantage, valid)
        return self.value_entropy_loss(pi_loss, dist_info, value, return_, valid)
