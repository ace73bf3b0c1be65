"""Sequence replays storing one frame per step (Atari R2D1)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.layouts import SequenceLayout
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple


class UniformSequenceReplayFrameBuffer(ReplayBuffer):
    """Uniform sequence replay of frame-stacked observations.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, rnn_state_interval, batch_T, discount, n_step_return: see
            :class:`~rlframe.replays.sequence.n_step.SequenceNStepReturnBuffer`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int,
                 rnn_state_interval: int, batch_T: int | None = None, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B, targets=NStepTargets(discount, n_step_return),
                         layout=SequenceLayout(rnn_state_interval, batch_T), frames=True,
                         shared=self.async_)


class PrioritizedSequenceReplayFrameBuffer(ReplayBuffer):
    """Prioritized sequence replay of frame-stacked observations.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, rnn_state_interval, batch_T, discount, n_step_return: see
            :class:`~rlframe.replays.sequence.n_step.SequenceNStepReturnBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.sequence.prioritized.PrioritizedSequenceReplayBuffer`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int,
                 rnn_state_interval: int, batch_T: int | None = None, discount: float = 1,
                 n_step_return: int = 1,
                 alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0):
        super().__init__(
            example, size, B, targets=NStepTargets(discount, n_step_return),
            sampling=PrioritizedSampling(alpha, beta, default_priority, unique,
                                         input_priorities, input_priority_shift),
            layout=SequenceLayout(rnn_state_interval, batch_T), frames=True,
            shared=self.async_)


class AsyncUniformSequenceReplayFrameBuffer(UniformSequenceReplayFrameBuffer):
    """:class:`UniformSequenceReplayFrameBuffer` in shared memory, for asynchronous runners."""

    async_ = True


class AsyncPrioritizedSequenceReplayFrameBuffer(PrioritizedSequenceReplayFrameBuffer):
    """:class:`PrioritizedSequenceReplayFrameBuffer` in shared memory, for asynchronous
    runners."""

    async_ = True
