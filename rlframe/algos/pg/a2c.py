"""Advantage Actor-Critic: one gradient step per batch of on-policy samples."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlframe.agents.base import AgentInputs
from rlframe.algos.pg.base import OptInfo, PolicyGradientAlgo
from rlframe.utils.buffer import buffer_method
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.samplers.collections import Samples


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
    """

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 0.5, entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1., initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, normalize_advantage: bool = False,
                 bootstrap_timelimit: bool = True):
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        self.optim_kwargs = dict() if optim_kwargs is None else optim_kwargs
        self.clip_grad_norm = clip_grad_norm
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.normalize_advantage = normalize_advantage
        self.bootstrap_timelimit = bootstrap_timelimit
        self.update_counter = 0
        self._check_common_args()

    def initialize(self, *args: Any, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self._batch_size = self.batch_spec.size

    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """One gradient step on the whole [T, B] batch."""
        loss, entropy, perplexity = self.loss(samples)
        grad_norm, = self.gradient_step(loss, (self.optimizer, self._params))
        if not self.check_update(samples):  # Skipped by the non-finite guard.
            return OptInfo(loss=[], gradNorm=[], entropy=[], perplexity=[])
        self.update_counter += 1
        return OptInfo(loss=loss.item(), gradNorm=float(grad_norm),
                       entropy=entropy.item(), perplexity=perplexity.item())

    def loss(self, samples: Samples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Policy-gradient + value + entropy loss over samples [T, B].

        Returns:
            ``(loss, entropy, perplexity)`` scalars.
        """
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        self.agent.update_obs_rms(agent_inputs.observation)
        if self.agent.recurrent:
            # Stored per env as [B, N, H]; the model wants [N, B, H] at the batch start.
            init_rnn_state = samples.agent.agent_info.prev_rnn_state[0]
            init_rnn_state = buffer_method(buffer_method(init_rnn_state, "transpose", 0, 1),
                                           "contiguous")
            dist_info, value, _rnn_state = self.agent(*agent_inputs, init_rnn_state)
        else:
            dist_info, value = self.agent(*agent_inputs)
        return_, advantage, valid = self.process_returns(samples)
        dist = self.agent.distribution
        logli = dist.log_likelihood(samples.agent.action, dist_info)
        pi_loss = -valid_mean(logli * advantage, valid)
        value_error = 0.5 * (value - return_) ** 2
        value_loss = self.value_loss_coeff * valid_mean(value_error, valid)
        entropy = dist.mean_entropy(dist_info, valid)
        entropy_loss = -self.entropy_loss_coeff * entropy
        loss = pi_loss + value_loss + entropy_loss
        perplexity = dist.mean_perplexity(dist_info, valid)
        return loss, entropy, perplexity



