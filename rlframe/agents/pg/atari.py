"""Categorical policy-gradient agents with convolutional models for image observations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from rlframe.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                           CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlframe.envs.atari.frames import DEEPMIND_SHAPE, RLPYT_SHAPE
from rlframe.models.pg.atari_ff_model import AtariFfModel
from rlframe.models.pg.atari_lstm_model import AtariLstmModel
from rlframe.utils.checks import state_dict_mismatch

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces


class AtariMixin:
    """Model kwargs for [C, H, W] image observations and discrete actions."""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(image_shape=env_spaces.observation.shape,
                    output_size=env_spaces.action.n)

    def initial_state_hint(self, state_dict: Mapping[str, Any]) -> str:
        """Where ``initial_model_state_dict`` fits this agent's model built for another
        of AtariEnv's frame shapes (rlpyt's 104x80, DeepMind's 84x84), names both
        observation shapes."""
        shape = tuple(self.env_model_kwargs["image_shape"])
        for frame_shape in (RLPYT_SHAPE, DEEPMIND_SHAPE):
            other = (shape[0], *frame_shape)
            if other == shape:
                continue
            kwargs = dict(self.env_model_kwargs, image_shape=other)
            model = self.ModelCls(**kwargs, **self.model_kwargs)
            if state_dict_mismatch(model, state_dict) is None:
                return (f"It was made for observations of shape {other}; the env gives {shape}. "
                        f"Build the env with frame_shape={frame_shape} (AtariEnv), or start "
                        f"from a model trained on {shape} observations.")
        return ""


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
