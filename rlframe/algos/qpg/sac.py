"""Soft Actor-Critic (Haarnoja et al., 2018), with twin critics and a learned temperature."""
from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlframe.algos.base import check_optimizer, make_optimizer
from rlframe.algos.off_policy import OffPolicyAlgorithm, SamplesToBuffer, SamplesToBufferTl
from rlframe.utils.checks import check_number
from rlframe.utils.distributed import average_gradients
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.agents.qpg.sac_agent import SacAgent
    from rlframe.distributions.gaussian import DistInfoStd
    from rlframe.replays.layouts import SamplesFromReplay

__all__ = ["SAC", "OptInfo", "SamplesToBuffer", "SamplesToBufferTl"]

OptInfo = namedtuple("OptInfo", ["q1Loss", "q2Loss", "piLoss", "q1GradNorm", "q2GradNorm",
                                 "piGradNorm", "q1", "q2", "piMu", "piLogStd", "qMeanDiff",
                                 "alpha"])

ACTION_PRIORS = ("uniform", "gaussian")


class SAC(OffPolicyAlgorithm):
    """SAC: maximum-entropy actor-critic with a reparameterised squashed-Gaussian policy.

    Per update, on a replay minibatch (leading dim ``[batch_size]``), with
    ``a' ~ pi(s_{t+n})`` and ``a~ ~ pi(s_t)`` sampled with the reparameterisation trick::

        y = reward_scale * return_n + (1 - done_n) * discount^n
            * (min(Q1_targ, Q2_targ)(s_{t+n}, a') - alpha * log pi(a' | s_{t+n}))
        q_loss_i = mean(0.5 * (y - Qi(s_t, a_t))^2)                      for i = 1, 2
        pi_loss = mean(alpha * log pi(a~ | s_t) - min(Q1, Q2)(s_t, a~) - log prior(a~))
        alpha_loss = -mean(log_alpha * (log pi(a~ | s_t) + target_entropy))

    The critics step first, then the policy (against the updated critics),
    then the temperature; every ``target_update_interval`` updates the target
    critics move toward the critics by ``target_update_tau``. Needs a
    :class:`SacAgent`-like agent (``pi``, ``q``, ``target_q``, ``update_target``).

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
        learning_rate: step size of the policy, critics and temperature.
        fixed_alpha: a fixed temperature; None learns it toward ``target_entropy``.
        OptimCls: optimizer class.
        optim_kwargs: extra optimizer arguments.
        initial_optim_state_dict: :meth:`optim_state_dict` output to resume from.
        action_prior: ``"uniform"`` (no prior term) or ``"gaussian"`` (a zero-mean
            Gaussian with the action bound as std, per component).
        reward_scale: multiplies the (n-step) rewards in the target.
        target_entropy: ``"auto"`` (minus the action size) or a number.
        reparameterize: must be True (the reparameterised policy gradient).
        clip_grad_norm: max gradient norm of each network.
        n_step_return, updates_per_sync, bootstrap_timelimit, ReplayBufferCls, compile:
            as :class:`~rlframe.algos.off_policy.OffPolicyAlgorithm` (``compile``
            compiles :meth:`q_loss` and :meth:`pi_loss`).
    """

    agent: SacAgent
    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 256,
                 min_steps_learn: int = int(1e4), replay_size: int = int(1e6),
                 replay_ratio: float = 256, target_update_tau: float = 0.005,
                 target_update_interval: int = 1, learning_rate: float = 3e-4,
                 fixed_alpha: float | None = None, OptimCls: type = torch.optim.Adam,
                 optim_kwargs: dict | None = None, initial_optim_state_dict: dict | None = None,
                 action_prior: str = "uniform", reward_scale: float = 1,
                 target_entropy: str | float = "auto", reparameterize: bool = True,
                 clip_grad_norm: float = 1e9, n_step_return: int = 1, updates_per_sync: int = 1,
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
        self.learning_rate = check_number("learning_rate", learning_rate)
        self.fixed_alpha = None if fixed_alpha is None else check_number("fixed_alpha",
                                                                         fixed_alpha)
        self.OptimCls = OptimCls
        self.optim_kwargs = check_optimizer(OptimCls, optim_kwargs)
        self.initial_optim_state_dict = initial_optim_state_dict
        if action_prior not in ACTION_PRIORS:
            raise ValueError(f"action_prior must be one of {ACTION_PRIORS}, got "
                             f"{action_prior!r}.")
        self.action_prior = action_prior
        self.reward_scale = check_number("reward_scale", reward_scale)
        if not (target_entropy == "auto" or (isinstance(target_entropy, (int, float))
                                              and not isinstance(target_entropy, bool)
                                              and math.isfinite(target_entropy))):
            raise ValueError(f"target_entropy must be 'auto' (minus the action size) or a "
                             f"finite number, got {target_entropy!r}.")
        self.target_entropy = target_entropy
        if not reparameterize:
            raise ValueError("reparameterize must be True, got False: the policy is trained "
                             "through reparameterised samples only.")
        self.reparameterize = reparameterize

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be a SacAgent (or a subclass)."""
        from rlframe.agents.qpg.sac_agent import SacAgent as _SacAgent
        if not isinstance(agent, _SacAgent):
            raise TypeError(f"SAC needs a SacAgent (or a subclass); got {type(agent).__name__}.")

    def agent_setup(self, agent: SacAgent, sampler_bs: int) -> None:
        """Tell the agent when learning starts (it samples with ``pretrain_std`` until then)."""
        agent.give_min_itr_learn(self.min_itr_learn)

    def optim_initialize(self, rank: int = 0) -> None:
        """Optimizers of policy, critics and temperature; target entropy and prior."""
        self.rank = rank
        agent = self.agent
        # Parameter lists kept for gradient clipping (gathered once, not per update).
        self._pi_params = list(agent.pi_parameters())
        self._q1_params = list(agent.q1_parameters())
        self._q2_params = list(agent.q2_parameters())
        lr, kwargs = self.learning_rate, self.optim_kwargs
        self.pi_optimizer = make_optimizer(self.OptimCls, self._pi_params, lr, kwargs)
        self.q1_optimizer = make_optimizer(self.OptimCls, self._q1_params, lr, kwargs)
        self.q2_optimizer = make_optimizer(self.OptimCls, self._q2_params, lr, kwargs)
        if self.fixed_alpha is None:
            self.log_alpha = torch.zeros(1, device=agent.device, requires_grad=True)
            self.alpha_optimizer = make_optimizer(self.OptimCls, (self.log_alpha,), lr, kwargs)
        else:
            self.log_alpha = torch.tensor([math.log(self.fixed_alpha)], device=agent.device)
            self.alpha_optimizer = None
        self._alpha = torch.exp(self.log_alpha.detach())
        action_shape = agent.env_spaces.action.shape
        self._target_entropy = (-float(np.prod(action_shape)) if self.target_entropy == "auto"
                                else float(self.target_entropy))
        self._prior_std = float(getattr(agent, "action_bound", 1.))
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)

    @property
    def alpha(self) -> float:
        """Current entropy temperature."""
        return float(self._alpha)

    def optim_state_dict(self) -> dict:
        """Optimizer states and ``log_alpha`` (tensors, dicts and None only)."""
        return dict(
            pi_optimizer=self.pi_optimizer.state_dict(),
            q1_optimizer=self.q1_optimizer.state_dict(),
            q2_optimizer=self.q2_optimizer.state_dict(),
            alpha_optimizer=(None if self.alpha_optimizer is None
                             else self.alpha_optimizer.state_dict()),
            log_alpha=self.log_alpha.detach().cpu().clone(),
        )

    def load_optim_state_dict(self, state_dict: dict) -> None:
        self.pi_optimizer.load_state_dict(state_dict["pi_optimizer"])
        self.q1_optimizer.load_state_dict(state_dict["q1_optimizer"])
        self.q2_optimizer.load_state_dict(state_dict["q2_optimizer"])
        if self.alpha_optimizer is not None and state_dict.get("alpha_optimizer") is not None:
            self.alpha_optimizer.load_state_dict(state_dict["alpha_optimizer"])
        if self.fixed_alpha is None:
            with torch.no_grad():
                self.log_alpha.copy_(torch.as_tensor(state_dict["log_alpha"]).reshape(1))
            self._alpha = torch.exp(self.log_alpha.detach())

    # --------------------------------------------------------------- training
    def update(self, samples: SamplesFromReplay) -> tuple[dict, None]:
        """Critics, then the policy (against the updated critics), then the temperature."""
        valid = self.valid_mask(samples)
        q1_loss, q2_loss, q1, q2 = self.compiled("q_loss")(samples, valid)
        # Disjoint parameters: one backward pass serves both critics.
        q1_grad_norm, q2_grad_norm = self.gradient_step(
            q1_loss + q2_loss, (self.q1_optimizer, self._q1_params),
            (self.q2_optimizer, self._q2_params))
        pi_loss, log_pi, dist_info = self.compiled("pi_loss")(samples, valid)
        pi_grad_norm, = self.gradient_step(pi_loss, (self.pi_optimizer, self._pi_params))
        if self.alpha_optimizer is not None:
            alpha_loss = -valid_mean(self.log_alpha * (log_pi.detach() + self._target_entropy),
                                     valid)
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            average_gradients((self.log_alpha,))  # Outside DDP: average over ranks here.
            self.alpha_optimizer.step()
            self._alpha = torch.exp(self.log_alpha.detach())
        q1, q2 = q1.detach(), q2.detach()
        stats = dict(q1Loss=q1_loss.detach(), q2Loss=q2_loss.detach(), piLoss=pi_loss.detach(),
                     q1GradNorm=q1_grad_norm, q2GradNorm=q2_grad_norm, piGradNorm=pi_grad_norm,
                     q1=q1[::10], q2=q2[::10],  # Every 10th value, for statistics.
                     piMu=dist_info.mean.detach()[::10], piLogStd=dist_info.log_std.detach()[::10],
                     qMeanDiff=torch.mean(torch.abs(q1 - q2)), alpha=self._alpha)
        return stats, None

    def q_target(self, samples: SamplesFromReplay) -> torch.Tensor:
        """Soft TD target ``y`` [batch_size] (no grad)."""
        with torch.no_grad():
            target_inputs = samples.target_inputs
            next_action, next_log_pi, _ = self.agent.pi(*target_inputs)
            target_q1, target_q2 = self.agent.target_q(*target_inputs, next_action)
            target_value = torch.min(target_q1, target_q2) - self._alpha * next_log_pi
            return (self.reward_scale * samples.return_
                    + self.bootstrap_weight(samples) * target_value)

    def q_loss(self, samples: SamplesFromReplay,
               valid: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Critic losses on one minibatch: ``(q1_loss, q2_loss, q1, q2)``, q's [batch_size]."""
        y = self.q_target(samples)
        q1, q2 = self.agent.q(*samples.agent_inputs, samples.action)
        q1_loss = 0.5 * valid_mean((y - q1) ** 2, valid)
        q2_loss = 0.5 * valid_mean((y - q2) ** 2, valid)
        return q1_loss, q2_loss, q1, q2

    def pi_loss(self, samples: SamplesFromReplay, valid: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, DistInfoStd]:
        """Policy loss; returns ``(loss, log_pi [batch_size], dist_info)``."""
        new_action, log_pi, dist_info = self.agent.pi(*samples.agent_inputs)
        q1, q2 = self.agent.q_for_pi(*samples.agent_inputs, new_action)
        pi_losses = self._alpha * log_pi - torch.min(q1, q2) - self.action_prior_log_pi(new_action)
        return valid_mean(pi_losses, valid), log_pi, dist_info

    def action_prior_log_pi(self, action: torch.Tensor) -> torch.Tensor | float:
        """Log-density of ``action`` [batch_size, A] under the action prior (0 if uniform)."""
        if self.action_prior == "uniform":
            return 0.
        z = action / self._prior_std
        return -0.5 * torch.sum(z ** 2, dim=-1) - action.shape[-1] * (
            math.log(self._prior_std) + 0.5 * math.log(2 * math.pi))
