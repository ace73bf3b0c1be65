"""Feed-forward Gaussian policy and value model for continuous control."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from rlframe.models.mlp import MlpModel
from rlframe.models.running_mean_std import RunningMeanStdModel
from rlframe.models.utils import orthogonal_init_
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


class MujocoFfModel(torch.nn.Module):
    """Separate MLPs for the action mean and the value; a state-independent ``log_std``.

    Args:
        observation_shape: shape of one observation (flattened for the MLPs).
        action_size: length of the action vector.
        hidden_sizes: hidden sizes of both MLPs (default ``[64, 64]``).
        hidden_nonlinearity: module class between hidden layers.
        mu_nonlinearity: module class applied to the mean output (None for linear).
        init_log_std: initial value of every entry of the ``log_std`` parameter.
        normalize_observation: normalise inputs with running statistics, updated by
            :meth:`update_obs_rms` (the agent calls it on sampled observations).
        norm_obs_clip: normalised observations are clamped to ``[-clip, clip]``.
        norm_obs_var_clip: lower bound on the running variance used to normalise.
        orthogonal_init: orthogonal weights and zero biases in both MLPs (gain sqrt(2) on
            hidden layers, 0.01 on the mean's output, 1 on the value's), as CleanRL's and
            SB3's PPO start; False keeps PyTorch's default initialisation (rlpyt's).
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        mu_nonlinearity: type[torch.nn.Module] | None = torch.nn.Tanh,
        init_log_std: float = 0.,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        orthogonal_init: bool = False,
    ) -> None:
        super().__init__()
        self._obs_ndim: int = len(observation_shape)
        input_size = int(np.prod(observation_shape))
        hidden_sizes = [64, 64] if hidden_sizes is None else hidden_sizes
        mu_mlp = MlpModel(input_size, hidden_sizes, output_size=action_size,
                          nonlinearity=hidden_nonlinearity)
        self.mu: torch.nn.Module = (mu_mlp if mu_nonlinearity is None
                                    else torch.nn.Sequential(mu_mlp, mu_nonlinearity()))
        self.v = MlpModel(input_size, hidden_sizes, output_size=1,
                          nonlinearity=hidden_nonlinearity)
        if orthogonal_init:
            orthogonal_init_(mu_mlp, output_gain=0.01)
            orthogonal_init_(self.v, output_gain=1.0)
        self.log_std = torch.nn.Parameter(init_log_std * torch.ones(action_size))
        self.normalize_observation: bool = normalize_observation
        self.norm_obs_clip: float = norm_obs_clip
        self.norm_obs_var_clip: float = norm_obs_var_clip
        if normalize_observation:
            self.obs_rms = RunningMeanStdModel(tuple(observation_shape))

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Action mean, log std and value.

        Args:
            observation: [T, B, *obs_shape], [B, *obs_shape] or [*obs_shape].
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            ``(mu [*lead, A], log_std [*lead, A], v [*lead])`` with the observation's leading dims.
        """
        lead_dim, T, B, _ = infer_leading_dims(observation, self._obs_ndim)
        observation = observation.to(self.log_std.dtype)
        if self.normalize_observation:
            observation = self.obs_rms.normalize(observation, self.norm_obs_clip,
                                                 self.norm_obs_var_clip)
        obs_flat = observation.reshape(T * B, -1)
        mu = self.mu(obs_flat)
        v = self.v(obs_flat).squeeze(-1)
        log_std = self.log_std.repeat(T * B, 1)
        return restore_leading_dims((mu, log_std, v), lead_dim, T, B)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Fold ``observation`` [*lead, *obs_shape] into the running statistics (if enabled)."""
        if self.normalize_observation:
            self.obs_rms.update(observation)
