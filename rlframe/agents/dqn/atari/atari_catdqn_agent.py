"""Categorical (C51) DQN agent for Atari frames."""
from __future__ import annotations

from typing import Any

from rlframe.agents.dqn.atari.mixin import AtariMixin
from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.models.dqn.atari_catdqn_model import AtariCatDqnModel


class AtariCatDqnAgent(AtariMixin, CatDqnAgent):
    """:class:`~rlframe.agents.dqn.catdqn_agent.CatDqnAgent` with a conv
    distributional model (default :class:`AtariCatDqnModel`), built with
    ``image_shape``, ``output_size`` and the agent's ``n_atoms``.

    Args:
        ModelCls: distributional Q-model class.
        **kwargs: see :class:`~rlframe.agents.dqn.catdqn_agent.CatDqnAgent`.
    """

    def __init__(self, ModelCls: type = AtariCatDqnModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
