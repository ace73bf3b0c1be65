"""Twin Delayed DDPG (Fujimoto et al., 2018)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlframe.utils.checks import check_number
from rlframe.algos.qpg.ddpg import DDPG, OptInfo
from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.agents.qpg.td3_agent import Td3Agent
    from rlframe.replays.layouts import SamplesFromReplay

__all__ = ["TD3", "OptInfo"]


class TD3(DDPG):
    """TD3: DDPG with twin critics, delayed policy updates and target smoothing.

    Per update, on a replay minibatch (leading dim ``[batch_size]``)::

        a' = clip(mu_targ(s_{t+n}) + clip(noise, ±c), ±bound)         (agent's target noise)
        y = return_n + (1 - done_n) * discount^n * min(Q1_targ(s', a'), Q2_targ(s', a'))
        q_loss = mean(0.5 * (y - Q1(s_t, a_t))^2) + mean(0.5 * (y - Q2(s_t, a_t))^2)
        mu_loss = -mean(Q1(s_t, mu(s_t)))          (every policy_update_interval updates)

    Needs a :class:`Td3Agent`-like agent (``q`` returns both critics).

    Args:
        batch_size, replay_ratio, target_update_tau, target_update_interval,
        policy_update_interval: as in :class:`DDPG`, with TD3's defaults.
        mu_learning_rate: policy step size.
        q_learning_rate: critics' step size.
        **kwargs: other :class:`DDPG` arguments.
    """

    agent: Td3Agent

    def __init__(self, batch_size: int = 100, replay_ratio: float = 100,
                 target_update_tau: float = 0.005, target_update_interval: int = 2,
                 policy_update_interval: int = 2, mu_learning_rate: float = 1e-3,
                 q_learning_rate: float = 1e-3, **kwargs: Any):
        super().__init__(batch_size=batch_size, replay_ratio=replay_ratio,
                         target_update_tau=target_update_tau,
                         target_update_interval=target_update_interval,
                         policy_update_interval=policy_update_interval,
                         q_learning_rate=q_learning_rate, **kwargs)
        self.mu_learning_rate = check_number("mu_learning_rate", mu_learning_rate)

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be a Td3Agent (two critics), or a subclass."""
        from rlframe.agents.qpg.td3_agent import Td3Agent as _Td3Agent
        if not isinstance(agent, _Td3Agent):
            raise TypeError(f"TD3 needs a Td3Agent (two critics), or a subclass; got "
                            f"{type(agent).__name__}.")

    def policy_learning_rate(self) -> float:
        """Step size of the policy optimizer (TD3: ``mu_learning_rate``)."""
        return self.mu_learning_rate

    def q_target(self, samples: SamplesFromReplay) -> torch.Tensor:
        """TD target ``y`` [batch_size] (no grad) from the smaller target critic."""
        with torch.no_grad():
            target_q1, target_q2 = self.agent.target_q_at_mu(*samples.target_inputs)
            target_q = torch.min(target_q1, target_q2)
            y = samples.return_ + self.bootstrap_weight(samples) * target_q
            return torch.clamp(y, -self.q_target_clip, self.q_target_clip)

    def q_loss(self, samples: SamplesFromReplay,
               valid: torch.Tensor | None = None) -> torch.Tensor:
        """Sum of both critics' regression losses."""
        y = self.q_target(samples)
        q1, q2 = self.agent.q(*samples.agent_inputs, samples.action)
        return 0.5 * valid_mean((y - q1) ** 2, valid) + 0.5 * valid_mean((y - q2) ** 2, valid)
