"""Recurrent Gaussian policy and value model for continuous control."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from rlframe.models.mlp import MlpModel
from rlframe.models.running_mean_std import RunningMeanStdModel
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


class MujocoLstmModel(torch.nn.Module):
    """MLP features, then an LSTM, then one linear head for mean, log std and value.

    The LSTM input at each step is ``[mlp(observation), prev_action, prev_reward]``.

    Args:
        observation_shape: shape of one observation (flattened for the MLP).
        action_size: length of the action vector.
        hidden_sizes: MLP hidden sizes (default ``[256, 256]``).
        lstm_size: LSTM hidden size.
        nonlinearity: module class between MLP layers.
        normalize_observation, norm_obs_clip, norm_obs_var_clip: as in
            :class:`~rlframe.models.pg.mujoco_ff_model.MujocoFfModel`.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        lstm_size: int = 256,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ) -> None:
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        self._action_size: int = int(action_size)
        hidden_sizes = [256, 256] if hidden_sizes is None else hidden_sizes
        self.mlp = MlpModel(int(np.prod(observation_shape)), hidden_sizes, output_size=None,
                            nonlinearity=nonlinearity)
        self.lstm = torch.nn.LSTM(self.mlp.output_size + self._action_size + 1, lstm_size)
        self.head = torch.nn.Linear(lstm_size, 2 * self._action_size + 1)
        self.normalize_observation: bool = normalize_observation
        self.norm_obs_clip: float = norm_obs_clip
        self.norm_obs_var_clip: float = norm_obs_var_clip
        if normalize_observation:
            self.obs_rms = RunningMeanStdModel(tuple(observation_shape))

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: RnnState | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, RnnState]:
        """Run the LSTM over the T steps of the batch.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action: [*lead, A] action taken before each observation.
            prev_reward: [*lead] reward received before each observation.
            init_rnn_state: ``RnnState`` with h, c [1, B, lstm_size], or None for zeros.

        Returns:
            ``(mu [*lead, A], log_std [*lead, A], v [*lead], RnnState)``; the state is
            the one after the last step, h and c [1, B, lstm_size].
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        dtype = self.head.weight.dtype
        observation = observation.to(dtype)
        if self.normalize_observation:
            observation = self.obs_rms.normalize(observation, self.norm_obs_clip,
                                                 self.norm_obs_var_clip)
        features = self.mlp(observation.reshape(T * B, -1))
        lstm_out, (h, c) = run_lstm(self.lstm, features, prev_action, prev_reward,
                                    init_rnn_state, T, B)
        out = self.head(lstm_out.reshape(T * B, -1))
        mu = out[:, :self._action_size]
        log_std = out[:, self._action_size:-1]
        v = out[:, -1]
        mu, log_std, v = restore_leading_dims((mu, log_std, v), lead_dim, T, B)
        return mu, log_std, v, RnnState(h=h, c=c)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Fold ``observation`` [*lead, *obs_shape] into the running statistics (if enabled)."""
        if self.normalize_observation:
            self.obs_rms.update(observation)
