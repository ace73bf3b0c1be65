"""Single-step replays storing one frame per step (Atari DQN)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple


class UniformReplayFrameBuffer(ReplayBuffer):
    """Uniform replay of frame-stacked observations; batches are ``SamplesFromReplay``.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, discount, n_step_return: see
            :class:`~rlframe.replays.non_sequence.uniform.UniformReplayBuffer`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B, targets=NStepTargets(discount, n_step_return),
                         frames=True, shared=self.async_)


class PrioritizedReplayFrameBuffer(ReplayBuffer):
    """Prioritized replay of frame-stacked observations; batches are ``SamplesFromReplayPri``.

    Args:
        example: namedtuple of one step; ``observation`` is ``[n_frames, H, W]``.
        size, B, discount, n_step_return: see
            :class:`~rlframe.replays.non_sequence.uniform.UniformReplayBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.sampling.PrioritizedSampling`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0):
        super().__init__(
            example, size, B, targets=NStepTargets(discount, n_step_return),
            sampling=PrioritizedSampling(alpha, beta, default_priority, unique,
                                         input_priorities, input_priority_shift),
            frames=True, shared=self.async_)


class AsyncUniformReplayFrameBuffer(UniformReplayFrameBuffer):
    """:class:`UniformReplayFrameBuffer` in shared memory, for asynchronous runners."""

    async_ = True


class AsyncPrioritizedReplayFrameBuffer(PrioritizedReplayFrameBuffer):
    """:class:`PrioritizedReplayFrameBuffer` in shared memory, for asynchronous runners."""

    async_ = True
