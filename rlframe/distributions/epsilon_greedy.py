"""Epsilon-greedy action selection over Q-values (DQN family).

Unlike :class:`~rlframe.distributions.categorical.Categorical`, the "dist_info"
here is the Q-value tensor itself: ``sample(q)`` returns the greedy action,
replaced by a uniformly random one with probability ``epsilon``.
"""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.distributions.base import Distribution
from rlframe.distributions.discrete import DiscreteMixin

Epsilon = float | Sequence[float] | torch.Tensor
Exploration = tuple[torch.Tensor, torch.Tensor]
"""``(explore [*lead] bool, random_action [*lead] int64)``, drawn by
:meth:`EpsilonGreedy.draw_exploration`."""


class EpsilonGreedy(DiscreteMixin, Distribution):
    """Greedy actions with probability ``1 - epsilon``, uniform random otherwise.

    Args:
        epsilon: exploration probability: a scalar, or a vector [B] giving one
            value per env (the last leading dim of the Q-values), broadcast
            over a leading T dim.
        dim: number of actions.
        dtype, onehot_dtype: see :class:`DiscreteMixin`.
    """

    def __init__(self, epsilon: Epsilon = 1, dim: int | None = None,
                 dtype: torch.dtype = torch.long, onehot_dtype: torch.dtype = torch.float):
        if dim is None:
            raise ValueError(f"{type(self).__name__} needs dim (the number of actions).")
        super().__init__(dim=dim, dtype=dtype, onehot_dtype=onehot_dtype)
        self._epsilon: float | torch.Tensor = 1.
        self.set_epsilon(epsilon)

    @property
    def epsilon(self) -> float | torch.Tensor:
        """The current exploration probability (float or [B] tensor)."""
        return self._epsilon

    def set_epsilon(self, epsilon: Epsilon) -> None:
        """Set the exploration probability: a scalar or a vector [B] in [0, 1]."""
        if isinstance(epsilon, (int, float)):
            value: float | torch.Tensor = float(epsilon)
            low = high = value
        else:
            value = torch.as_tensor(epsilon, dtype=torch.float32).detach().clone()
            if value.dim() == 0:
                value = float(value)
                low = high = value
            elif value.dim() != 1:
                raise ValueError(f"epsilon must be a scalar or a vector [B], got shape "
                                 f"{tuple(value.shape)}.")
            else:
                low, high = float(value.min()), float(value.max())
        if not 0 <= low <= high <= 1:
            raise ValueError(f"epsilon must lie in [0, 1], got {epsilon!r}.")
        self._epsilon = value

    def draw_exploration(self, lead_shape: Sequence[int] | torch.Size,
                         device: torch.device | str | None = None) -> Exploration | None:
        """Draw which actions explore, before any Q-values are computed.

        Args:
            lead_shape: the leading dims [*lead] of the actions (B last).
            device: where to draw (default: the CPU).

        Returns:
            ``(explore [*lead] bool, random_action [*lead] int64)``, or None when
            epsilon is 0 (every action is greedy; nothing is drawn).
        """
        lead_shape = torch.Size(lead_shape)
        eps = self._epsilon
        if isinstance(eps, torch.Tensor):
            if len(lead_shape) == 0 or lead_shape[-1] != eps.shape[0]:
                raise ValueError(f"A vector epsilon of length {eps.shape[0]} needs that many "
                                 f"envs in the last leading dim of the actions; got leading "
                                 f"shape {tuple(lead_shape)}.")
            eps = eps.to(device)
        elif eps == 0:
            return None
        explore = torch.rand(lead_shape, device=device) < eps
        random_action = torch.randint(0, self.dim, lead_shape, device=device)
        return explore, random_action

    def select(self, q: torch.Tensor, exploration: Exploration | None) -> torch.Tensor:
        """Actions [*lead] (``self.dtype``): the random action where ``exploration``
        (from :meth:`draw_exploration`) explores, the greedy one of ``q`` [*lead, dim]
        elsewhere (everywhere for None)."""
        action = torch.argmax(q, dim=-1)
        if exploration is None:
            return action.to(self.dtype)
        explore, random_action = exploration
        if explore.shape != action.shape:
            raise ValueError(f"The exploration draw has leading shape {tuple(explore.shape)} "
                             f"but the Q-values {tuple(q.shape)} have {tuple(action.shape)}.")
        explore, random_action = explore.to(q.device), random_action.to(q.device)
        return torch.where(explore, random_action, action).to(self.dtype)

    def sample(self, q: torch.Tensor) -> torch.Tensor:
        """Actions [*lead] from Q-values ``q`` [*lead, dim] (``self.dtype``)."""
        lead_shape = q.shape[:-1]
        return self.select(q, self.draw_exploration(lead_shape, q.device))

    def mode(self, q: torch.Tensor) -> torch.Tensor:
        """Greedy actions [*lead] (``self.dtype``) from Q-values ``q`` [*lead, dim]."""
        return torch.argmax(q, dim=-1).to(self.dtype)


class CategoricalEpsilonGreedy(EpsilonGreedy):
    """Epsilon-greedy over the expected values of return distributions (C51).

    ``sample(p)`` takes probabilities ``p`` [*lead, dim, n_atoms] over the
    support ``z`` [n_atoms] and acts greedily on ``q = sum_i p_i z_i``.

    Args:
        z: the support (atom values), set later with :meth:`set_z` if None.
        epsilon, dim, dtype, onehot_dtype: see :class:`EpsilonGreedy`.
    """

    def __init__(self, z: torch.Tensor | Sequence[float] | None = None, epsilon: Epsilon = 1,
                 dim: int | None = None, dtype: torch.dtype = torch.long,
                 onehot_dtype: torch.dtype = torch.float):
        super().__init__(epsilon=epsilon, dim=dim, dtype=dtype, onehot_dtype=onehot_dtype)
        self.z: torch.Tensor | None = None
        if z is not None:
            self.set_z(z)

    def set_z(self, z: torch.Tensor | Sequence[float]) -> None:
        """Set the support [n_atoms]."""
        self.z = torch.as_tensor(z, dtype=torch.float32).detach().clone()

    def select(self, p: torch.Tensor, exploration: Exploration | None) -> torch.Tensor:
        """Actions [*lead]: as :meth:`EpsilonGreedy.select`, greedy in the expected
        values of atom probabilities ``p`` [*lead, dim, n_atoms]."""
        return super().select(self._expected_q(p), exploration)

    def sample(self, p: torch.Tensor) -> torch.Tensor:
        """Actions [*lead] from atom probabilities ``p`` [*lead, dim, n_atoms]."""
        return self.select(p, self.draw_exploration(p.shape[:-2], p.device))

    def mode(self, p: torch.Tensor) -> torch.Tensor:
        """Greedy actions [*lead] from atom probabilities ``p`` [*lead, dim, n_atoms]."""
        return super().mode(self._expected_q(p))

    def _expected_q(self, p: torch.Tensor) -> torch.Tensor:
        """``q = sum_i p_i z_i`` [*lead, dim] of probabilities ``p`` [*lead, dim, n_atoms]."""
        if self.z is None:
            raise RuntimeError("CategoricalEpsilonGreedy.sample: set the support first "
                               "(set_z, or the agent's give_V_min_max).")
        if p.shape[-1] != self.z.shape[0]:
            raise ValueError(f"p has {p.shape[-1]} atoms in its last dim but z has "
                             f"{self.z.shape[0]}.")
        return torch.tensordot(p, self.z.to(device=p.device, dtype=p.dtype), dims=1)
