"""Small MLP models for discrete-action policy gradient (e.g. CartPole)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rlframe.models.mlp import MlpModel
from rlframe.models.utils import orthogonal_init_, run_lstm
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


class CategoricalPgMlpModel(torch.nn.Module):
    """Separate policy and value MLPs over a flat observation.

    The policy's output layer starts with small weights (gain 0.01), so the initial
    policy is close to uniform.

    Args:
        observation_shape: shape of one observation (flattened).
        action_size: number of discrete actions.
        hidden_sizes: hidden sizes of both MLPs (default ``[64, 64]``).
        nonlinearity: module class between layers.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
    ) -> None:
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        input_size = int(np.prod(observation_shape))
        hidden_sizes = [64, 64] if hidden_sizes is None else hidden_sizes
        self.pi = MlpModel(input_size, hidden_sizes, output_size=action_size,
                           nonlinearity=nonlinearity)
        self.v = MlpModel(input_size, hidden_sizes, output_size=1, nonlinearity=nonlinearity)
        orthogonal_init_(self.pi, output_gain=0.01)
        orthogonal_init_(self.v, output_gain=1.0)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and value.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            ``(pi [*lead, A] softmax probabilities, v [*lead])``.
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        obs_flat = observation.reshape(T * B, -1).to(next(self.parameters()).dtype)
        pi = F.softmax(self.pi(obs_flat), dim=-1)
        v = self.v(obs_flat).squeeze(-1)
        return restore_leading_dims((pi, v), lead_dim, T, B)


class CategoricalPgLstmModel(torch.nn.Module):
    """MLP features, then an LSTM, then policy and value heads.

    The LSTM input at each step is ``[mlp(observation), one-hot prev_action, prev_reward]``.

    Args:
        observation_shape: shape of one observation (flattened).
        action_size: number of discrete actions.
        hidden_sizes: MLP hidden sizes before the LSTM (default ``[64]``).
        lstm_size: LSTM hidden size.
        nonlinearity: module class between MLP layers.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        lstm_size: int = 64,
        nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
    ) -> None:
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        hidden_sizes = [64] if hidden_sizes is None else hidden_sizes
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes, output_size=None,
                            nonlinearity=nonlinearity)
        self.lstm = torch.nn.LSTM(self.mlp.output_size + action_size + 1, lstm_size)
        self.pi = torch.nn.Linear(lstm_size, action_size)
        self.value = torch.nn.Linear(lstm_size, 1)
        orthogonal_init_(self.mlp, output_gain=math.sqrt(2))
        orthogonal_init_(self.pi, output_gain=0.01)
        orthogonal_init_(self.value, output_gain=1.0)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: RnnState | None,
    ) -> tuple[torch.Tensor, torch.Tensor, RnnState]:
        """Run the LSTM over the T steps of the batch.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action: [*lead, A] one-hot previous action.
            prev_reward: [*lead] previous reward.
            init_rnn_state: ``RnnState`` with h, c [1, B, lstm_size], or None for zeros.

        Returns:
            ``(pi [*lead, A] probabilities, v [*lead], RnnState)``, the state after the
            last step with h, c [1, B, lstm_size].
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = self.pi.weight.dtype
        features = self.mlp(observation.reshape(T * B, -1).to(dtype))
        lstm_out, (h, c) = run_lstm(self.lstm, features, prev_action, prev_reward,
                                    init_rnn_state, T, B)
        lstm_flat = lstm_out.reshape(T * B, -1)
        pi = F.softmax(self.pi(lstm_flat), dim=-1)
        v = self.value(lstm_flat).squeeze(-1)
        pi, v = restore_leading_dims((pi, v), lead_dim, T, B)
        return pi, v, RnnState(h=h, c=c)
