"""Recurrent (R2D1) DQN agents for Atari frames."""
from __future__ import annotations

from typing import Any

from rlframe.agents.dqn.atari.mixin import AtariMixin
from rlframe.agents.dqn.r2d1_agent import R2d1Agent, R2d1AlternatingAgent
from rlframe.models.dqn.atari_r2d1_model import AtariR2d1Model


class AtariR2d1Agent(AtariMixin, R2d1Agent):
    """:class:`~rlframe.agents.dqn.r2d1_agent.R2d1Agent` with a conv + LSTM
    Q-model (default :class:`AtariR2d1Model`), for serial and CPU samplers.

    Args:
        ModelCls: recurrent Q-model class.
        **kwargs: see :class:`~rlframe.agents.dqn.dqn_agent.DqnAgent`.
    """

    def __init__(self, ModelCls: type = AtariR2d1Model, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariR2d1AlternatingAgent(AtariMixin, R2d1AlternatingAgent):
    """:class:`AtariR2d1Agent` for alternating samplers (one RNN state per env half).

    Args:
        ModelCls: recurrent Q-model class.
        **kwargs: see :class:`~rlframe.agents.dqn.dqn_agent.DqnAgent`.
    """

    def __init__(self, ModelCls: type = AtariR2d1Model, **kwargs: Any):
        super().__init__(ModelCls=ModelCls, **kwargs)
