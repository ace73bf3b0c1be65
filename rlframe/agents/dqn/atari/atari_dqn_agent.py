"""DQN agent for Atari frames."""
from __future__ import annotations

from typing import Any

from rlframe.agents.dqn.atari.mixin import AtariMixin
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.models.dqn.atari_dqn_model import AtariDqnModel


class AtariDqnAgent(AtariMixin, DqnAgent):
    """:class:`~rlframe.agents.dqn.dqn_agent.DqnAgent` with a conv Q-model
    (default :class:`AtariDqnModel`), built with ``image_shape`` and ``output_size``.

    Args:
        ModelCls: Q-model class.
        **kwargs: see :class:`~rlframe.agents.dqn.dqn_agent.DqnAgent`.
    """

    def __init__(self, ModelCls: type = AtariDqnModel, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
