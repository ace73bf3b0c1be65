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
from rlframe.models.running_mean_std import RunningMeanStdModel
from rlframe.utils.buffer import buffer_method
from rlframe.utils.checks import check_number
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import valid_mean, valid_standardize

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


class RewardScale:
    """Divides rewards by the running standard deviation of the discounted return.

    Each env's discounted return ``G = discount * G + reward`` runs on across batches and
    starts again after every ``done``; the variance of all ``G`` seen so far (every rank's,
    under torch.distributed) scales the rewards, which are then clipped to
    ``[-clip, clip]``. Values and returns are learned in these units: with rewards of a
    few units per step and a discount of 0.99, returns of hundreds otherwise leave the
    value loss to dominate the clipped gradient. The mean is not subtracted (that would
    change which episodes are better).

    Args:
        discount: the algorithm's discount.
        clip: bound of the scaled rewards.
    """

    def __init__(self, discount: float, clip: float = 10.) -> None:
        self.discount = discount
        self.clip = clip
        self.return_rms = RunningMeanStdModel(())
        self.running_return: torch.Tensor | None = None  # [B], the envs' returns so far.

    def __call__(self, reward: torch.Tensor, done: torch.Tensor,
                 valid: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled rewards [T, B] from ``reward`` and ``done`` [T, B]; statistics are taken
        over the steps where ``valid`` [T, B] is nonzero (all when None)."""
        self.return_rms.to(reward.device)
        G = self.running_return
        if G is None or G.shape != reward.shape[1:]:
            G = torch.zeros_like(reward[0])
        returns = torch.empty_like(reward)
        for t in range(reward.shape[0]):
            G = G * self.discount + reward[t]
            returns[t] = G
            G = G * (1 - done[t])
        self.running_return = G
        self.return_rms.update(returns if valid is None else returns[valid.bool()])
        scale = torch.sqrt(self.return_rms.var + 1e-8).to(reward.dtype)
        return torch.clamp(reward / scale, -self.clip, self.clip)

    def state_dict(self) -> dict:
        """The return statistics and each env's running return."""
        return dict(rms={k: v.clone() for k, v in self.return_rms.state_dict().items()},
                    running_return=None if self.running_return is None
                    else self.running_return.clone())

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` saved."""
        self.return_rms.load_state_dict(state_dict["rms"])
        self.running_return = state_dict["running_return"]


class PolicyGradientAlgo(RlAlgorithm):
    """Returns, advantages and validity masks from on-policy [T, B] samples.

    Subclasses set ``discount``, ``gae_lambda``, ``normalize_advantage``,
    ``normalize_reward``, ``bootstrap_timelimit``, ``compile`` and the optimizer
    arguments; their losses share :meth:`forward` (one agent call for policy and
    value) and :meth:`value_entropy_loss`.
    """

    bootstrap_value = True
    normalize_reward = False  # Subclasses that take no such argument keep the rewards as they are.
    normalize_advantage_choices: tuple = (False, True)
    reward_scale: RewardScale | None = None
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
        given, choices = self.normalize_advantage, self.normalize_advantage_choices
        # Compared by type too: 1 == True, but the update tests ``is True``.
        if not any(type(given) is type(choice) and given == choice for choice in choices):
            raise ValueError(f"normalize_advantage={given!r}: give "
                             + " or ".join(repr(choice) for choice in choices))
        if not isinstance(self.normalize_reward, bool):
            raise TypeError(f"normalize_reward={self.normalize_reward!r}: give True or False")
        self.reward_scale = RewardScale(self.discount) if self.normalize_reward else None

    def state_dict(self) -> dict:
        """Counters, plus the reward scale's statistics with ``normalize_reward``."""
        state = super().state_dict()
        if self.reward_scale is not None:
            state["reward_scale"] = self.reward_scale.state_dict()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if self.reward_scale is not None and "reward_scale" in state_dict:
            self.reward_scale.load_state_dict(state_dict["reward_scale"])

    def process_returns(self, samples: Samples
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Compute ``(return_ [T, B], advantage [T, B], valid [T, B] or None)``.

        Uses discounted returns when ``gae_lambda == 1``, else GAE, bootstrapping
        from ``samples.agent.bootstrap_value``. With ``bootstrap_timelimit`` and
        an env that reports ``env_info.timeout``, episodes cut by a time limit
        bootstrap instead of ending at zero. ``valid`` masks the steps after a
        ``done`` when envs do not reset mid-batch or the agent is recurrent. With
        ``normalize_reward``, returns and advantages are of the scaled rewards
        (:class:`RewardScale`).
        """
        reward, done = samples.env.reward, samples.env.done
        value, bootstrap_value = samples.agent.agent_info.value, samples.agent.bootstrap_value
        done = done.type(reward.dtype)
        valid = None
        if not self.mid_batch_reset or self.agent.recurrent:
            valid = valid_from_done(done)
        if self.reward_scale is not None:
            reward = self.reward_scale(reward, done, valid)
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

        if self.normalize_advantage is True:  # PPO's "minibatch" standardizes in its loop.
            advantage = valid_standardize(advantage, valid)
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
                           valid: torch.Tensor | None, old_value: torch.Tensor | None = None,
                           value_clip: float | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``pi_loss`` plus the value regression and entropy bonus terms.

        Args:
            pi_loss: the policy loss (scalar).
            dist_info, value, return_, valid: the minibatch's, same leading dims.
            old_value, value_clip: with a ``value_clip``, each step's value error is the
                larger of the new value's and that of ``old_value`` (same leading dims)
                moved toward the new value by at most ``value_clip``.

        Returns:
            ``(loss, entropy, perplexity)`` scalars; the last two detached, for logging.
        """
        value_error = 0.5 * (value - return_) ** 2
        if value_clip is not None:
            clipped_value = old_value + torch.clamp(value - old_value, -value_clip, value_clip)
            value_error = torch.max(value_error, 0.5 * (clipped_value - return_) ** 2)
        value_loss = self.value_loss_coeff * valid_mean(value_error, valid)
        entropies = self.agent.distribution.entropy(dist_info)  # Once, for both statistics.
        entropy = valid_mean(entropies, valid)
        entropy_loss = -self.entropy_loss_coeff * entropy
        loss = pi_loss + value_loss + entropy_loss
        perplexity = valid_mean(torch.exp(entropies.detach()), valid)
        return loss, entropy.detach(), perplexity
