"""Categorical policy-gradient agents with convolutional models for image observations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                           CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlframe.models.pg.atari_ff_model import AtariFfModel
from rlframe.models.pg.atari_lstm_model import AtariLstmModel

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces


class AtariMixin:
    """Model kwargs for [C, H, W] image observations and discrete actions."""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(image_shape=env_spaces.observation.shape,
                    output_size=env_spaces.action.n)


class AtariFfAgent(AtariMixin, CategoricalPgAgent):
    """Feed-forward conv agent (default model :class:`AtariFfModel`)."""

    def __init__(self, ModelCls: type = AtariFfModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariLstmAgent(AtariMixin, RecurrentCategoricalPgAgent):
    """Conv + LSTM agent (default model :class:`AtariLstmModel`)."""

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingAtariLstmAgent(AtariMixin, AlternatingRecurrentCategoricalPgAgent):
    """Conv + LSTM agent for alternating samplers."""

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
