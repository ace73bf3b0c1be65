"""Deep Deterministic Policy Gradient (Lillicrap et al., 2016)."""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

import torch

from rlframe.algos.base import check_optimizer, make_optimizer
from rlframe.algos.off_policy import OffPolicyAlgorithm, SamplesToBuffer, SamplesToBufferTl
from rlframe.utils.checks import check_number, positive_int
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.agents.qpg.ddpg_agent import DdpgAgent
    from rlframe.replays.layouts import SamplesFromReplay

__all__ = ["DDPG", "OptInfo", "SamplesToBuffer", "SamplesToBufferTl"]

OptInfo = namedtuple("OptInfo", ["muLoss", "qLoss", "muGradNorm", "qGradNorm"])


class DDPG(OffPolicyAlgorithm):
    """DDPG: a critic fit by TD learning, a deterministic policy that climbs it.

    Per update, on a replay minibatch (leading dim ``[batch_size]``)::

        y = return_n + (1 - done_n) * discount^n * Q_targ(s_{t+n}, mu_targ(s_{t+n}))
        q_loss = mean(0.5 * (clip(y, ±q_target_clip) - Q(s_t, a_t))^2)
        mu_loss = -mean(Q(s_t, mu(s_t)))           (every policy_update_interval updates)

    and every ``target_update_interval`` updates the targets move toward the
    trained networks by ``target_update_tau``. Needs a :class:`DdpgAgent`-like
    agent (``q``, ``q_at_mu``, ``target_q_at_mu``, ``update_target``,
    ``q_parameters``, ``mu_parameters``).

    Args:
        discount: reward discount (gamma), also used inside the n-step return.
        batch_size: transitions per update.
        min_steps_learn: env steps collected before the first update.
        replay_size: replay capacity in transitions.
        replay_ratio: transitions trained on per transition collected:
            ``replay_ratio * sampler_batch / batch_size`` updates per iteration, a
            fraction carried over to the next iteration.
        target_update_tau: Polyak weight of each target update (1 copies).
        target_update_interval: updates between target updates.
        policy_update_interval: critic updates per policy update.
        learning_rate: policy step size.
        q_learning_rate: critic step size.
        OptimCls: optimizer class (one optimizer for the policy, one for the critics).
        optim_kwargs: extra optimizer arguments.
        initial_optim_state_dict: ``{"q": ..., "mu": ...}`` to resume from.
        clip_grad_norm: max gradient norm of each network.
        q_target_clip: bound on the TD target ``y``.
        n_step_return, updates_per_sync, bootstrap_timelimit, ReplayBufferCls, compile:
            as :class:`~rlframe.algos.off_policy.OffPolicyAlgorithm` (``compile``
            compiles :meth:`q_loss` and :meth:`mu_loss`).
    """

    agent: DdpgAgent
    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 64,
                 min_steps_learn: int = int(1e4), replay_size: int = int(1e6),
                 replay_ratio: float = 64, target_update_tau: float = 0.01,
                 target_update_interval: int = 1, policy_update_interval: int = 1,
                 learning_rate: float = 1e-4, q_learning_rate: float = 1e-3,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 1e8,
                 q_target_clip: float = 1e6, n_step_return: int = 1, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, ReplayBufferCls: type | None = None,
                 compile: bool = False,
                 checkpoint_replay: bool = False):
        super().__init__(
            discount=discount, batch_size=batch_size, min_steps_learn=min_steps_learn,
            replay_size=replay_size, replay_ratio=replay_ratio,
            target_update_tau=target_update_tau, target_update_interval=target_update_interval,
            n_step_return=n_step_return, clip_grad_norm=clip_grad_norm,
            updates_per_sync=updates_per_sync, bootstrap_timelimit=bootstrap_timelimit,
            ReplayBufferCls=ReplayBufferCls, compile=compile,
            checkpoint_replay=checkpoint_replay)
        self.policy_update_interval = positive_int("policy_update_interval",
                                                   policy_update_interval)
        self.learning_rate = check_number("learning_rate", learning_rate)
        self.q_learning_rate = check_number("q_learning_rate", q_learning_rate)
        self.OptimCls = OptimCls
        self.optim_kwargs = check_optimizer(OptimCls, optim_kwargs)
        self.initial_optim_state_dict = initial_optim_state_dict
        self.q_target_clip = check_number("q_target_clip", q_target_clip)

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be a DdpgAgent (or a subclass)."""
        from rlframe.agents.qpg.ddpg_agent import DdpgAgent as _DdpgAgent
        if not isinstance(agent, _DdpgAgent):
            raise TypeError(f"{type(self).__name__} needs a DdpgAgent (or a subclass); got "
                            f"{type(agent).__name__}.")

    def agent_setup(self, agent: DdpgAgent, sampler_bs: int) -> None:
        """Tell the agent when learning starts (it samples with pre-training noise until then)."""
        agent.give_min_itr_learn(self.min_itr_learn)

    def policy_learning_rate(self) -> float:
        """Step size of the policy optimizer (DDPG: ``learning_rate``)."""
        return self.learning_rate

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the policy (``mu_optimizer``) and critic (``q_optimizer``) optimizers."""
        self.rank = rank
        # Parameter lists kept for gradient clipping (gathered once, not per update).
        self._mu_params = list(self.agent.mu_parameters())
        self._q_params = list(self.agent.q_parameters())
        self.mu_optimizer = make_optimizer(self.OptimCls, self._mu_params,
                                           self.policy_learning_rate(), self.optim_kwargs)
        self.q_optimizer = make_optimizer(self.OptimCls, self._q_params, self.q_learning_rate,
                                          self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)

    def optim_state_dict(self) -> dict:
        """``{"q": q_optimizer state, "mu": mu_optimizer state}``."""
        return dict(q=self.q_optimizer.state_dict(), mu=self.mu_optimizer.state_dict())

    def load_optim_state_dict(self, state_dict: dict) -> None:
        self.q_optimizer.load_state_dict(state_dict["q"])
        self.mu_optimizer.load_state_dict(state_dict["mu"])

    def update(self, samples: SamplesFromReplay) -> tuple[dict, None]:
        """A critic step, and a policy step every ``policy_update_interval`` updates."""
        valid = self.valid_mask(samples)
        q_loss = self.compiled("q_loss")(samples, valid)
        q_grad_norm, = self.gradient_step(q_loss, (self.q_optimizer, self._q_params))
        stats = dict(qLoss=q_loss.detach(), qGradNorm=q_grad_norm)
        if (self.update_counter + 1) % self.policy_update_interval == 0:
            mu_loss = self.compiled("mu_loss")(samples, valid)
            mu_grad_norm, = self.gradient_step(mu_loss, (self.mu_optimizer, self._mu_params))
            stats.update(muLoss=mu_loss.detach(), muGradNorm=mu_grad_norm)
        return stats, None

    def q_target(self, samples: SamplesFromReplay) -> torch.Tensor:
        """TD target ``y`` [batch_size] (no grad), clipped to ``±q_target_clip``."""
        with torch.no_grad():
            target_q = self.agent.target_q_at_mu(*samples.target_inputs)
            y = samples.return_ + self.bootstrap_weight(samples) * target_q
            return torch.clamp(y, -self.q_target_clip, self.q_target_clip)

    def q_loss(self, samples: SamplesFromReplay,
               valid: torch.Tensor | None = None) -> torch.Tensor:
        """Critic regression loss on one minibatch."""
        y = self.q_target(samples)
        q = self.agent.q(*samples.agent_inputs, samples.action)
        return 0.5 * valid_mean((y - q) ** 2, valid)

    def mu_loss(self, samples: SamplesFromReplay,
                valid: torch.Tensor | None = None) -> torch.Tensor:
        """Policy loss: minus the critic's value of the policy's actions."""
        return -valid_mean(self.agent.q_at_mu(*samples.agent_inputs), valid)
