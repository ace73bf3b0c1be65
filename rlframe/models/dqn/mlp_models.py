"""Q-value models for vector observations (e.g. CartPole), for DQN, C51 and R2D1.

Each model flattens the observation, so any observation shape works, and
accepts inputs with leading ``[T, B]``, ``[B]`` or no leading dims, returning
outputs with the same leading dims.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rlframe.models.dqn.atari_catdqn_model import DistributionalHeadModel
from rlframe.models.dqn.dueling import DistributionalDuelingHeadModel, DuelingHeadModel
from rlframe.models.mlp import MlpModel
from rlframe.models.utils import run_lstm
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    RnnState: TypeAlias = NamedArrayTuple
else:
    RnnState = namedarraytuple("RnnState", ["h", "c"])
    """LSTM state: ``h``, ``c`` each [1, B, lstm_size]."""


def _split_hidden(hidden_sizes: Sequence[int]) -> tuple[list[int], list[int]]:
    """Dueling MLPs share all hidden layers but the last, which each stream has its own of."""
    hidden_sizes = list(hidden_sizes)
    return hidden_sizes[:-1], hidden_sizes[-1:]


class DqnMlpModel(torch.nn.Module):
    """Q-values from an MLP over the flattened observation.

    Args:
        observation_shape: shape of one observation.
        action_size: number of discrete actions.
        hidden_sizes: hidden layer sizes (default ``[64, 64]``).
        dueling: split the last hidden layer into value and advantage streams
            (:class:`DuelingHeadModel`).
    """

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 hidden_sizes: Sequence[int] | None = None, dueling: bool = False):
        super().__init__()
        self._obs_ndim = len(observation_shape)
        input_size = int(np.prod(observation_shape))
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        if dueling:
            body_sizes, head_sizes = _split_hidden(hidden_sizes)
            body = MlpModel(input_size, body_sizes)
            self.q = torch.nn.Sequential(
                body, DuelingHeadModel(body.output_size, head_sizes, action_size))
        else:
            self.q = MlpModel(input_size, hidden_sizes, output_size=action_size)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Q-values.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            q [*lead, action_size].
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        obs = observation.reshape(T * B, -1).float()
        return restore_leading_dims(self.q(obs), lead_dim, T, B)


class CatDqnMlpModel(torch.nn.Module):
    """Return distributions (C51) from an MLP over the flattened observation.

    Args:
        observation_shape: shape of one observation.
        action_size: number of discrete actions.
        n_atoms: atoms per return distribution.
        hidden_sizes: hidden layer sizes (default ``[64, 64]``).
        dueling: use :class:`DistributionalDuelingHeadModel` on the last hidden layer.
    """

    def __init__(self, observation_shape: Sequence[int], action_size: int, n_atoms: int = 51,
                 hidden_sizes: Sequence[int] | None = None, dueling: bool = False):
        super().__init__()
        self._obs_ndim = len(observation_shape)
        input_size = int(np.prod(observation_shape))
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        if dueling:
            body_sizes, head_sizes = _split_hidden(hidden_sizes)
            body = MlpModel(input_size, body_sizes)
            head = DistributionalDuelingHeadModel(body.output_size, head_sizes, action_size,
                                                  n_atoms)
            self.logits = torch.nn.Sequential(body, head)
        else:
            self.logits = DistributionalHeadModel(input_size, hidden_sizes, action_size, n_atoms)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Atom probabilities.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action, prev_reward: unused.

        Returns:
            p [*lead, action_size, n_atoms], summing to 1 over the last dim.
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        obs = observation.reshape(T * B, -1).float()
        p = F.softmax(self.logits(obs), dim=-1)
        return restore_leading_dims(p, lead_dim, T, B)


class R2d1MlpModel(torch.nn.Module):
    """Recurrent Q-model: MLP features, an LSTM, then a Q head.

    The LSTM input at each step is ``[mlp(observation), one-hot prev_action,
    prev_reward]``, so the model can infer hidden state (e.g. velocities) from
    the history of observations and actions.

    Args:
        observation_shape: shape of one observation.
        action_size: number of discrete actions.
        hidden_sizes: MLP sizes before the LSTM (default ``[64]``).
        lstm_size: LSTM hidden size.
        head_size: hidden size of the Q head (of each stream when dueling).
        dueling: use a :class:`DuelingHeadModel`.
    """

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 hidden_sizes: Sequence[int] | None = None, lstm_size: int = 64,
                 head_size: int = 64, dueling: bool = False):
        super().__init__()
        self._obs_ndim = len(observation_shape)
        hidden_sizes = [64] if hidden_sizes is None else list(hidden_sizes)
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes)
        self.lstm = torch.nn.LSTM(self.mlp.output_size + action_size + 1, lstm_size)
        if dueling:
            self.head: torch.nn.Module = DuelingHeadModel(lstm_size, head_size, action_size)
        else:
            self.head = MlpModel(lstm_size, head_size, output_size=action_size)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor,
                init_rnn_state: RnnState | None) -> tuple[torch.Tensor, RnnState]:
        """Run the LSTM over the T steps of the input.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action: [*lead, action_size] one-hot previous action.
            prev_reward: [*lead] previous reward.
            init_rnn_state: ``RnnState`` with h, c [1, B, lstm_size], or None for zeros.

        Returns:
            ``(q [*lead, action_size], RnnState)``: the state after the last step,
            h and c [1, B, lstm_size].
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        features = self.mlp(observation.reshape(T * B, -1).float())
        lstm_out, (h, c) = run_lstm(self.lstm, features, prev_action, prev_reward,
                                    init_rnn_state, T, B)
        q = self.head(lstm_out.reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B), RnnState(h=h, c=c)
