"""Sequence replays storing one frame per step (Atari R2D1)."""
from __future__ import annotations

from typing import Any

from rlframe.replays.frame import FrameBufferMixin
from rlframe.replays.sequence.n_step import SequenceNStepReturnBuffer
from rlframe.replays.sequence.prioritized import PrioritizedSequenceReplay
from rlframe.replays.sequence.uniform import UniformSequenceReplay


class SequenceNStepFrameBuffer(FrameBufferMixin, SequenceNStepReturnBuffer):
    """:class:`SequenceNStepReturnBuffer` whose observations are rebuilt from single frames.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, rnn_state_interval, batch_T, discount, n_step_return: see
            :class:`SequenceNStepReturnBuffer`.
    """

    def __init__(self, example: Any, size: int | float, B: int, rnn_state_interval: int,
                 batch_T: int | None = None, discount: float = 1, n_step_return: int = 1):
        super().__init__(example=example, size=size, B=B, rnn_state_interval=rnn_state_interval,
                         batch_T=batch_T, discount=discount, n_step_return=n_step_return)


class UniformSequenceReplayFrameBuffer(UniformSequenceReplay, SequenceNStepFrameBuffer):
    """Uniform sequence replay of frame-stacked observations.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, rnn_state_interval, batch_T, discount, n_step_return: see
            :class:`SequenceNStepReturnBuffer`.
    """


class PrioritizedSequenceReplayFrameBuffer(PrioritizedSequenceReplay, SequenceNStepFrameBuffer):
    """Prioritized sequence replay of frame-stacked observations.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, rnn_state_interval, batch_T, discount, n_step_return: see
            :class:`SequenceNStepReturnBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`PrioritizedSequenceReplay`.
    """

    def __init__(self, example: Any, size: int | float, B: int, rnn_state_interval: int,
                 batch_T: int | None = None, discount: float = 1, n_step_return: int = 1,
                 alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0):
        if batch_T is None:
            raise ValueError("PrioritizedSequenceReplayFrameBuffer needs a fixed batch_T "
                             "(got None).")
        super().__init__(example=example, size=size, B=B, rnn_state_interval=rnn_state_interval,
                         batch_T=batch_T, discount=discount, n_step_return=n_step_return,
                         alpha=alpha, beta=beta, default_priority=default_priority,
                         unique=unique, input_priorities=input_priorities,
                         input_priority_shift=input_priority_shift)
