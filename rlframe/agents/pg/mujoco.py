"""Gaussian policy-gradient agents with MLP/LSTM models for vector observations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.agents.pg.gaussian import (AlternatingRecurrentGaussianPgAgent, GaussianPgAgent,
                                        RecurrentGaussianPgAgent)
from rlframe.models.pg.mujoco_ff_model import MujocoFfModel
from rlframe.models.pg.mujoco_lstm_model import MujocoLstmModel

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree


class MujocoMixin:
    """Model kwargs for vector observations and running observation normalization."""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.shape[0])

    def update_obs_rms(self, observation: TensorTree) -> None:
        """Update the model's running observation statistics with [T, B, *obs] data."""
        model = self.model.module if self._ddp else self.model
        if hasattr(model, "update_obs_rms"):
            model.update_obs_rms(self.to_model_device(observation))


class MujocoFfAgent(MujocoMixin, GaussianPgAgent):
    """Feed-forward Gaussian agent (default model :class:`MujocoFfModel`)."""

    def __init__(self, ModelCls: type = MujocoFfModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class MujocoLstmAgent(MujocoMixin, RecurrentGaussianPgAgent):
    """Recurrent Gaussian agent (default model :class:`MujocoLstmModel`)."""

    def __init__(self, ModelCls: type = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingMujocoLstmAgent(MujocoMixin, AlternatingRecurrentGaussianPgAgent):
    """Recurrent Gaussian agent for alternating samplers."""

    def __init__(self, ModelCls: type = MujocoLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
