"""Deep Q-learning with experience replay (Mnih et al., 2015), with the usual extensions:
double DQN, n-step returns, prioritized replay, dueling models (through the agent's model),
soft target updates and bootstrapping through time limits.
"""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from rlframe.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlframe.algos.base import check_optimizer, make_optimizer
from rlframe.algos.off_policy import (OffPolicyAlgorithm, SamplesToBuffer,  # noqa: F401
                                      SamplesToBufferTl, is_frame_stack)
from rlframe.utils.checks import as_int, check_number
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.agents.dqn.dqn_agent import DqnAgent
    from rlframe.replays.layouts import SamplesFromReplay

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "tdAbsErr"])


class DQN(OffPolicyAlgorithm):
    """DQN: minimize the TD error of the agent's Q-values against a target network.

    Every iteration appends the sampler's batch to the replay buffer and, once
    ``min_steps_learn`` steps were collected, makes gradient updates on
    minibatches drawn from the replay (see
    :class:`~rlframe.algos.off_policy.OffPolicyAlgorithm`)::

        y = return_n + (1 - done_n) * discount^n * Q_target(s_{t+n}, a*)
        a* = argmax_a Q_target(s_{t+n}, a)        (argmax of the online Q with double_dqn)
        loss = mean(huber(y - Q(s_t, a_t)))       (0.5 * squared error if delta_clip is None)

    Needs a sampler whose collector resets envs mid-batch (the default
    ``CpuResetCollector``), so that each replay row continues the previous one.

    Args:
        discount: reward discount (gamma).
        batch_size: transitions per gradient update.
        min_steps_learn: env steps collected before the first update.
        delta_clip: Huber loss threshold; None for the squared error.
        replay_size: replay capacity in transitions.
        replay_ratio: transitions trained on per transition collected:
            ``replay_ratio * sampler_batch / batch_size`` updates per iteration, a
            fraction carried over to the next iteration.
        target_update_tau: 1 copies the model into the target network; smaller
            values blend it in (Polyak averaging).
        target_update_interval: gradient updates between target updates.
        n_step_return: rewards summed before bootstrapping.
        learning_rate: optimizer step size.
        OptimCls: optimizer class.
        optim_kwargs: optimizer arguments (default ``eps=0.01 / batch_size``).
        initial_optim_state_dict: optimizer state to resume from.
        clip_grad_norm: max global gradient norm.
        eps_steps: env steps (counted from the start) at which the agent's
            exploration epsilon reaches its final value; it starts decaying at
            ``min_steps_learn``.
        double_dqn: choose the bootstrap action with the online network.
        prioritized_replay: sample in proportion to TD error (Schaul et al., 2016).
        pri_alpha: priority exponent.
        pri_beta_init, pri_beta_final: importance-sampling exponent, annealed
            linearly from the start of learning ...
        pri_beta_steps: ... to this many env steps.
        default_priority: priority of new transitions (default: ``delta_clip``, or 1).
        ReplayBufferCls: replay class to use instead of the default (built
            with the same keyword arguments).
        updates_per_sync: updates per iteration in asynchronous runners.
        bootstrap_timelimit: when the env reports ``env_info.timeout`` (gymnasium
            truncation), do not train on transitions whose n-step return was
            cut by a time limit, instead of taking the cut as the end of the
            episode. rlpyt's DQN has no such option (it behaves as False).
        compile: run :meth:`loss` (with the model) through ``torch.compile``, built
            at the first update (see :meth:`RlAlgorithm.compiled`).
    """

    agent: DqnAgent
    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 32,
                 min_steps_learn: int = int(5e4), delta_clip: float | None = 1.,
                 replay_size: int = int(1e6), replay_ratio: float = 8,
                 target_update_tau: float = 1, target_update_interval: int = 312,
                 n_step_return: int = 1, learning_rate: float = 2.5e-4,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 10.,
                 eps_steps: int = int(1e6), double_dqn: bool = False,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta_init: float = 0.4, pri_beta_final: float = 1.,
                 pri_beta_steps: int = int(50e6), default_priority: float | None = None,
                 ReplayBufferCls: type | None = None, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, compile: bool = False,
                 checkpoint_replay: bool = False):
        if delta_clip is not None and not delta_clip > 0:
            raise ValueError(f"delta_clip must be positive or None, got {delta_clip}.")
        if default_priority is None:
            default_priority = 1. if delta_clip is None else delta_clip
        super().__init__(
            discount=discount, batch_size=batch_size, min_steps_learn=min_steps_learn,
            replay_size=replay_size, replay_ratio=replay_ratio,
            target_update_tau=target_update_tau, target_update_interval=target_update_interval,
            n_step_return=n_step_return, clip_grad_norm=clip_grad_norm,
            updates_per_sync=updates_per_sync, bootstrap_timelimit=bootstrap_timelimit,
            ReplayBufferCls=ReplayBufferCls, prioritized_replay=prioritized_replay,
            pri_alpha=pri_alpha, pri_beta_init=pri_beta_init, pri_beta_final=pri_beta_final,
            pri_beta_steps=pri_beta_steps, default_priority=default_priority, compile=compile,
            checkpoint_replay=checkpoint_replay)
        self.delta_clip = delta_clip
        self.learning_rate = check_number("learning_rate", learning_rate)
        self.OptimCls = OptimCls
        self.optim_kwargs = check_optimizer(OptimCls, dict(eps=0.01 / self.batch_size)
                                            if optim_kwargs is None else optim_kwargs)
        self.initial_optim_state_dict = initial_optim_state_dict
        self.eps_steps = as_int("eps_steps", eps_steps, minimum=0)
        self.double_dqn = double_dqn

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be a Q-learning agent with an epsilon schedule."""
        if not isinstance(agent, EpsilonGreedyAgentMixin):
            raise TypeError(f"{type(self).__name__} needs a Q-learning agent with an epsilon "
                            f"schedule (e.g. DqnAgent, built on EpsilonGreedyAgentMixin); got "
                            f"{type(agent).__name__}.")

    def agent_setup(self, agent: BaseAgent, sampler_bs: int) -> None:
        """Epsilon decays from learning start to ``eps_steps``."""
        self.check_agent(agent)
        agent.set_epsilon_itr_min_max(self.min_itr_learn,
                                      max(1, int(self.eps_steps // sampler_bs)))

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer over the agent's parameters."""
        self.rank = rank
        self._params = list(self.agent.parameters())  # Gathered once, clipped every update.
        self.optimizer = make_optimizer(self.OptimCls, self._params, self.learning_rate,
                                        self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)

    def update(self, samples: SamplesFromReplay) -> tuple[dict, torch.Tensor | None]:
        """One TD step; returns the logged values and the new priorities."""
        loss, td_abs_errors = self.compiled("loss")(samples)
        grad_norm, = self.gradient_step(loss, (self.optimizer, self._params))
        stats = dict(loss=loss.detach(), gradNorm=grad_norm,
                     tdAbsErr=td_abs_errors[::8])  # A sample of the errors, for logging.
        return stats, td_abs_errors if self.prioritized_replay else None

    def loss(self, samples: SamplesFromReplay) -> tuple[torch.Tensor, torch.Tensor]:
        """TD loss on one replay minibatch.

        Args:
            samples: ``SamplesFromReplay`` with leading [batch_size]: agent_inputs,
                action, return_, done_n, target_inputs (the observation n steps
                later), and ``is_weights`` (prioritized) / ``timeout_n`` (time limit).

        Returns:
            ``(loss, td_abs_errors [batch_size])``; the errors are clipped at
            ``delta_clip`` (zero for samples left out of the loss) and serve as
            new priorities.
        """
        # First: it reads whether the batch has time-limit cuts, which would split a
        # compiled loss in two anywhere later.
        valid = self.valid_mask(samples)
        agent = self.agent
        # Plain gathers: the model's [B, A] output was checked when the run started, so
        # select_at_indexes' shape checks would only repeat themselves every update.
        qs = agent(*samples.agent_inputs)  # [B, A]
        q = qs.gather(-1, samples.action.long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target_qs = agent.target(*samples.target_inputs)
            if self.double_dqn:
                next_a = agent(*samples.target_inputs).argmax(dim=-1, keepdim=True)
                target_q = target_qs.gather(-1, next_a).squeeze(-1)
            else:
                target_q = target_qs.max(dim=-1).values
            # y = return_n + (1 - done_n) * discount^n * target_q, in two ops.
            y = torch.add(samples.return_, target_q.masked_fill_(samples.done_n.bool(), 0.),
                          alpha=self.discount ** self.n_step_return)
        losses = self.elementwise_loss(q, y)
        if self.prioritized_replay:
            losses = losses * samples.is_weights
        td_abs_errors = (y - q.detach()).abs()
        if self.delta_clip is not None:
            td_abs_errors = torch.clamp(td_abs_errors, 0, self.delta_clip)
        if valid is not None:  # Untrainable samples get priority 0: never drawn again.
            td_abs_errors = td_abs_errors * valid
        return valid_mean(losses, valid), td_abs_errors

    def elementwise_loss(self, q: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Huber loss of the TD errors ``y - q`` [batch] with threshold ``delta_clip``
        (``0.5 * (y - q)^2`` if None).

        Written on ``(q, y)``, not on the error against zeros: the same values and
        gradients, one op and one backward node fewer.
        """
        if self.delta_clip is None:
            return 0.5 * (y - q) ** 2
        return F.huber_loss(q, y, reduction="none", delta=self.delta_clip)
