"""Shared machinery of on-policy policy-gradient algorithms (A2C, PPO)."""
from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING

import torch

from rlframe.algos.base import RlAlgorithm, make_optimizer
from rlframe.algos.returns import (discount_return, discount_return_tl,
                                   generalized_advantage_estimation,
                                   generalized_advantage_estimation_tl, valid_from_done)
from rlframe.utils.buffer import buffer_method
from rlframe.utils.checks import check_number
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.agents.base import AgentInputs, BaseAgent
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "entropy", "perplexity"])
AgentTrain = namedtuple("AgentTrain", ["dist_info", "value"])

if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    LossInputs: TypeAlias = NamedArrayTuple
else:
    LossInputs = namedarraytuple("LossInputs", ["agent_inputs", "action", "return_", "advantage",
                                                "valid", "old_dist_info"])


class PolicyGradientAlgo(RlAlgorithm):
    """Returns, advantages and validity masks from on-policy [T, B] samples.

    Subclasses set ``discount``, ``gae_lambda``, ``normalize_advantage``,
    ``bootstrap_timelimit``, ``compile`` and the optimizer arguments; their losses
    share :meth:`forward` (one agent call for policy and value) and
    :meth:`value_entropy_loss`.
    """

    bootstrap_value = True
    opt_info_fields = tuple(f for f in OptInfo._fields)

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be a policy-gradient agent: one with a policy and a value."""
        from rlframe.agents.base import BaseAgent as _BaseAgent
        if type(agent).value is _BaseAgent.value:
            raise TypeError(f"{type(self).__name__} needs a policy-gradient agent, whose model "
                            "gives a policy and a value (e.g. CategoricalPgAgent, "
                            f"GaussianPgAgent, MujocoFfAgent, AtariFfAgent); got "
                            f"{type(agent).__name__}.")

    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        """Build the optimizer over ``agent.parameters()``."""
        self.agent = agent
        self.n_itr = n_itr
        self.batch_spec = batch_spec
        self.mid_batch_reset = mid_batch_reset
        self.world_size = world_size
        self.rank = rank
        self._params = list(agent.parameters())  # Gathered once, clipped every update.
        self.optimizer = make_optimizer(self.OptimCls, self._params, self.learning_rate,
                                        self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)

    def _check_common_args(self) -> None:
        self.discount = check_number("discount", self.discount, high=1., low_open=False)
        self.gae_lambda = check_number("gae_lambda", self.gae_lambda, high=1., low_open=False)
        self.learning_rate = check_number("learning_rate", self.learning_rate)
        self.value_loss_coeff = check_number("value_loss_coeff", self.value_loss_coeff,
                                             low_open=False)
        self.entropy_loss_coeff = check_number("entropy_loss_coeff", self.entropy_loss_coeff,
                                               low=-math.inf)
        self.clip_grad_norm = check_number("clip_grad_norm", self.clip_grad_norm)

    def process_returns(self, samples: Samples
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Compute ``(return_ [T, B], advantage [T, B], valid [T, B] or None)``.

        Uses discounted returns when ``gae_lambda == 1``, else GAE, bootstrapping
        from ``samples.agent.bootstrap_value``. With ``bootstrap_timelimit`` and
        an env that reports ``env_info.timeout``, episodes cut by a time limit
        bootstrap instead of ending at zero. ``valid`` masks the steps after a
        ``done`` when envs do not reset mid-batch or the agent is recurrent.
        """
        reward, done = samples.env.reward, samples.env.done
        value, bootstrap_value = samples.agent.agent_info.value, samples.agent.bootstrap_value
        done = done.type(reward.dtype)
        timeout = getattr(samples.env.env_info, "timeout", None)
        if self.bootstrap_timelimit and timeout is not None:
            timeout = timeout.type(reward.dtype)
            if self.gae_lambda == 1:
                return_ = discount_return_tl(reward, done, bootstrap_value, self.discount,
                                             timeout, value)
                advantage = return_ - value
            else:
                advantage, return_ = generalized_advantage_estimation_tl(
                    reward, value, done, bootstrap_value, self.discount, self.gae_lambda, timeout)
        elif self.gae_lambda == 1:
            return_ = discount_return(reward, done, bootstrap_value, self.discount)
            advantage = return_ - value
        else:
            advantage, return_ = generalized_advantage_estimation(
                reward, value, done, bootstrap_value, self.discount, self.gae_lambda)

        valid = None
        if not self.mid_batch_reset or self.agent.recurrent:
            valid = valid_from_done(done)
        if self.normalize_advantage:
            mean = valid_mean(advantage, valid)
            var = valid_mean((advantage - mean) ** 2, valid)
            advantage = (advantage - mean) / (var.sqrt() + 1e-6)
        return return_, advantage, valid

    def forward(self, agent_inputs: AgentInputs, init_rnn_state: TensorTree | None = None
                ) -> tuple[NamedArrayTuple, torch.Tensor]:
        """One pass of the agent: distribution parameters and value together.

        Args:
            agent_inputs: AgentInputs with leading [T, B] (recurrent) or [M] dims.
            init_rnn_state: [B, N, H] recurrent state at the sequence starts (as the
                sampler stores it per env), or None for feed-forward agents.

        Returns:
            ``(dist_info, value)`` with the inputs' leading dims.
        """
        if init_rnn_state is None:
            return self.agent(*agent_inputs)
        # The model wants [N, B, H].
        init_rnn_state = buffer_method(buffer_method(init_rnn_state, "transpose", 0, 1),
                                       "contiguous")
        dist_info, value, _rnn_state = self.agent(*agent_inputs, init_rnn_state)
        return dist_info, value

    def value_entropy_loss(self, pi_loss: torch.Tensor, dist_info: NamedArrayTuple,
                           value: torch.Tensor, return_: torch.Tensor,
                           valid: torch.Tensor | None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``pi_loss`` plus the value regression and entropy bonus terms.

        Args:
            pi_loss: the policy loss (scalar).
            dist_info, value, return_, valid: the minibatch's, same leading dims.

        Returns:
            ``(loss, entropy, perplexity)`` scalars; the last two detached, for logging.
        """
        value_error = 0.5 * (value - return_) ** 2
        value_loss = self.value_loss_coeff * valid_mean(value_error, valid)
        entropies = self.agent.distribution.entropy(dist_info)  # Once, for both statistics.
        entropy = valid_mean(entropies, valid)
        entropy_loss = -self.entropy_loss_coeff * entropy
        loss = pi_loss + value_loss + entropy_loss
        perplexity = valid_mean(torch.exp(entropies.detach()), valid)
        return loss, entropy.detach(), perplexity
