"""Categorical DQN (C51, Bellemare et al., 2017): learn return distributions on a fixed support."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.utils.tensor import select_at_indexes, valid_mean

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.replays.layouts import SamplesFromReplay

EPS = 1e-6  # Floor on probabilities inside logs.


def categorical_projection(target_z: torch.Tensor, target_p: torch.Tensor, V_min: float,
                           V_max: float) -> torch.Tensor:
    """Project distributions with atoms at ``target_z`` onto ``linspace(V_min, V_max, n)``.

    Each atom's mass goes to the two neighbouring support points, split in
    proportion to closeness; atoms outside ``[V_min, V_max]`` give all their
    mass to the nearest end. Total mass is preserved.

    Args:
        target_z: [B, n_atoms] atom positions (e.g. ``r + discount^n * z``).
        target_p: [B, n_atoms] their probabilities.
        V_min, V_max: ends of the support, which has ``n = n_atoms`` points.

    Returns:
        [B, n_atoms] probabilities on the support.
    """
    n_atoms = target_p.shape[-1]
    delta_z = (V_max - V_min) / (n_atoms - 1)
    # Fractional support index of every atom, in [0, n - 1].
    b = (target_z.clamp(V_min, V_max) - V_min) / delta_z
    lower = b.floor().clamp(0, n_atoms - 1)
    upper_weight = b - lower  # 0 when the atom sits exactly on a support point
    upper = (lower + 1).clamp(max=n_atoms - 1)
    projected = torch.zeros_like(target_p)
    projected.scatter_add_(-1, lower.long(), target_p * (1 - upper_weight))
    projected.scatter_add_(-1, upper.long(), target_p * upper_weight)
    return projected


class CategoricalDQN(DQN):
    """DQN on return distributions: cross-entropy to the projected Bellman target.

    The agent's model gives probabilities [batch, A, n_atoms] over the support
    ``z = linspace(V_min, V_max, n_atoms)``. The target distribution of
    ``return_n + (1 - done_n) * discount^n * z`` under the target network's
    greedy action (the online network's with ``double_dqn``) is projected back
    onto ``z`` (:func:`categorical_projection`). The KL divergence from that
    target serves as the priority (and is logged as ``tdAbsErr``).

    Args:
        V_min, V_max: ends of the support.
        Other arguments: as :class:`~rlframe.algos.dqn.dqn.DQN`; ``delta_clip``
        only sets the default priority here.
    """

    agent: CatDqnAgent

    def __init__(self, V_min: float = -10, V_max: float = 10, discount: float = 0.99,
                 batch_size: int = 32, min_steps_learn: int = int(5e4),
                 delta_clip: float | None = 1., replay_size: int = int(1e6),
                 replay_ratio: float = 8, target_update_tau: float = 1,
                 target_update_interval: int = 312, n_step_return: int = 1,
                 learning_rate: float = 2.5e-4, OptimCls: type = torch.optim.Adam,
                 optim_kwargs: dict | None = None, initial_optim_state_dict: dict | None = None,
                 clip_grad_norm: float = 10., eps_steps: int = int(1e6),
                 double_dqn: bool = False, prioritized_replay: bool = False,
                 pri_alpha: float = 0.6, pri_beta_init: float = 0.4,
                 pri_beta_final: float = 1., pri_beta_steps: int = int(50e6),
                 default_priority: float | None = None, ReplayBufferCls: type | None = None,
                 updates_per_sync: int = 1, bootstrap_timelimit: bool = True,
                 compile: bool = False,
                 checkpoint_replay: bool = False):
        if not V_min < V_max:
            raise ValueError(f"V_min must be below V_max, got V_min={V_min}, V_max={V_max}.")
        super().__init__(
            discount=discount, batch_size=batch_size, min_steps_learn=min_steps_learn,
            delta_clip=delta_clip, replay_size=replay_size, replay_ratio=replay_ratio,
            target_update_tau=target_update_tau, target_update_interval=target_update_interval,
            n_step_return=n_step_return, learning_rate=learning_rate, OptimCls=OptimCls,
            optim_kwargs=optim_kwargs, initial_optim_state_dict=initial_optim_state_dict,
            clip_grad_norm=clip_grad_norm, eps_steps=eps_steps, double_dqn=double_dqn,
            prioritized_replay=prioritized_replay, pri_alpha=pri_alpha,
            pri_beta_init=pri_beta_init, pri_beta_final=pri_beta_final,
            pri_beta_steps=pri_beta_steps, default_priority=default_priority,
            ReplayBufferCls=ReplayBufferCls, updates_per_sync=updates_per_sync,
            bootstrap_timelimit=bootstrap_timelimit, compile=compile,
            checkpoint_replay=checkpoint_replay)
        self.V_min = float(V_min)
        self.V_max = float(V_max)

    def check_agent(self, agent: BaseAgent) -> None:
        """The agent must be distributional (a CatDqnAgent)."""
        if not isinstance(agent, CatDqnAgent):
            raise TypeError(f"CategoricalDQN needs a distributional agent (e.g. CatDqnAgent) "
                            f"with give_V_min_max(); got {type(agent).__name__}.")

    def agent_setup(self, agent: BaseAgent, sampler_bs: int) -> None:
        """The epsilon schedule, and the support of the agent's return distributions."""
        super().agent_setup(agent, sampler_bs)
        agent.give_V_min_max(self.V_min, self.V_max)
        self.z = torch.linspace(self.V_min, self.V_max, agent.n_atoms)

    def loss(self, samples: SamplesFromReplay) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy between the projected target and the predicted distribution.

        Returns:
            ``(loss, kl [batch_size])``, the KL divergence of each sample.
        """
        z = self.z
        if z.device != samples.return_.device:  # Batches on the model's GPU: once.
            self.z = z = z.to(samples.return_.device)
        not_done_n = 1 - samples.done_n.float()
        disc = self.discount ** self.n_step_return
        target_z = samples.return_.unsqueeze(-1) + (not_done_n * disc).unsqueeze(-1) * z
        with torch.no_grad():
            target_ps = self.agent.target(*samples.target_inputs)  # [B, A, n_atoms]
            greedy_ps = self.agent(*samples.target_inputs) if self.double_dqn else target_ps
            next_a = torch.argmax(torch.tensordot(greedy_ps, z, dims=1), dim=-1)
            target_p = select_at_indexes(next_a, target_ps)  # [B, n_atoms]
            target_p = categorical_projection(target_z, target_p, self.V_min, self.V_max)
        ps = self.agent(*samples.agent_inputs)  # [B, A, n_atoms]
        p = select_at_indexes(samples.action, ps).clamp(EPS, 1)
        losses = -torch.sum(target_p * torch.log(p), dim=-1)
        if self.prioritized_replay:
            losses = losses * samples.is_weights
        with torch.no_grad():
            target_p = target_p.clamp(EPS, 1)
            kl = torch.sum(target_p * (torch.log(target_p) - torch.log(p)), dim=-1)
            kl = kl.clamp(EPS, 1 / EPS)  # Priorities must be positive and finite.
        valid = self.valid_mask(samples)
        if valid is not None:  # Untrainable samples get priority 0: never drawn again.
            kl = kl * valid
        return valid_mean(losses, valid), kl
