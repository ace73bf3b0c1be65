"""MLP policies and critics for continuous actions (DDPG, TD3, SAC).

Every model flattens the observation, so any observation shape works, and
accepts inputs with leading ``[T, B]``, ``[B]`` or no leading dims, returning
outputs with the same leading dims. ``prev_action`` and ``prev_reward`` are
part of the common model signature and are not used.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from rlframe.models.mlp import MlpModel
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


class MuMlpModel(torch.nn.Module):
    """Deterministic policy: ``mu = output_max * tanh(mlp(observation))``.

    Args:
        observation_shape: shape of one observation.
        hidden_sizes: hidden layer sizes.
        action_size: length of the action vector.
        output_max: bound of every action component (the agent passes the
            env's action bound).
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: int | Sequence[int],
                 action_size: int, output_max: float = 1):
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        self._output_max: float = float(output_max)
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes,
                            output_size=action_size)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Action [*lead, action_size] for observation [*lead, *obs_shape]."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        mu = self._output_max * torch.tanh(self.mlp(observation.reshape(T * B, -1).float()))
        return restore_leading_dims(mu, lead_dim, T, B)


class PiMlpModel(torch.nn.Module):
    """Gaussian policy head: the MLP's output is split into ``(mu, log_std)``.

    The distribution (with its tanh squash and std bounds) lives in the agent.

    Args:
        observation_shape: shape of one observation.
        hidden_sizes: hidden layer sizes.
        action_size: length of the action vector.
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: int | Sequence[int],
                 action_size: int):
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        self._action_size: int = int(action_size)
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes,
                            output_size=2 * self._action_size)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, log_std)``, each [*lead, action_size], before any squashing."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        output = self.mlp(observation.reshape(T * B, -1).float())
        mu, log_std = output[:, :self._action_size], output[:, self._action_size:]
        return restore_leading_dims((mu, log_std), lead_dim, T, B)


class QofMuMlpModel(torch.nn.Module):
    """Action-value critic: ``q = mlp(observation ++ action)``.

    Args:
        observation_shape: shape of one observation.
        hidden_sizes: hidden layer sizes.
        action_size: length of the action vector.
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: int | Sequence[int],
                 action_size: int):
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        self.mlp = MlpModel(int(np.prod(observation_shape)) + int(action_size), hidden_sizes,
                            output_size=1)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-value [*lead] of ``action`` [*lead, action_size] at ``observation``."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        q_input = torch.cat([observation.reshape(T * B, -1).float(),
                             action.reshape(T * B, -1).float()], dim=1)
        q = self.mlp(q_input).squeeze(-1)
        return restore_leading_dims(q, lead_dim, T, B)


class VMlpModel(torch.nn.Module):
    """State-value critic: ``v = mlp(observation)``.

    Args:
        observation_shape: shape of one observation.
        hidden_sizes: hidden layer sizes.
        action_size: unused (accepted so that agents can pass the same env kwargs
            to every model).
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: int | Sequence[int],
                 action_size: int | None = None):
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes, output_size=1)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """State value [*lead] of ``observation`` [*lead, *obs_shape]."""
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        v = self.mlp(observation.reshape(T * B, -1).float()).squeeze(-1)
        return restore_leading_dims(v, lead_dim, T, B)
