"""Single-step replays storing one frame per step (Atari DQN)."""
from __future__ import annotations

from typing import Any

from rlframe.replays.frame import FrameBufferMixin
from rlframe.replays.non_sequence.n_step import NStepReturnBuffer
from rlframe.replays.non_sequence.prioritized import PrioritizedReplay
from rlframe.replays.non_sequence.uniform import UniformReplay


class NStepFrameBuffer(FrameBufferMixin, NStepReturnBuffer):
    """:class:`NStepReturnBuffer` whose observations are rebuilt from single frames.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
    """

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example=example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return)


class UniformReplayFrameBuffer(UniformReplay, NStepFrameBuffer):
    """Uniform replay of frame-stacked observations; batches are ``SamplesFromReplay``.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
    """


class PrioritizedReplayFrameBuffer(PrioritizedReplay, NStepFrameBuffer):
    """Prioritized replay of frame-stacked observations; batches are ``SamplesFromReplayPri``.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.non_sequence.prioritized.PrioritizedReplay`.
    """

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0):
        super().__init__(example=example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return, alpha=alpha, beta=beta,
                         default_priority=default_priority, unique=unique,
                         input_priorities=input_priorities,
                         input_priority_shift=input_priority_shift)
