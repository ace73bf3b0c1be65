"""Sequences of steps with n-step returns and stored RNN states (rlpyt's module path)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.layouts import SequenceLayout
from rlframe.replays.layouts import SequenceSamplesFromReplay as SamplesFromReplay
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple

__all__ = ["SequenceNStepReturnBuffer", "SamplesFromReplay"]


class SequenceNStepReturnBuffer(ReplayBuffer):
    """Uniformly sampled ``[batch_T, batch_B]`` sequences (see
    :class:`~rlframe.replays.layouts.SequenceLayout`).

    Args:
        example: namedtuple of one step; with ``rnn_state_interval > 0`` it needs a
            ``prev_rnn_state`` field (``[...]`` per env, e.g. an ``RnnState`` of arrays).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never,
            1: every step).
        batch_T: default sequence length.
        discount, n_step_return: see
            :class:`~rlframe.replays.targets.NStepTargets`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int,
                 rnn_state_interval: int, batch_T: int | None = None, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B, targets=NStepTargets(discount, n_step_return),
                         layout=SequenceLayout(rnn_state_interval, batch_T),
                         shared=self.async_)
