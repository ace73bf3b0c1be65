"""Proportional prioritized sampling of single steps (Schaul et al., 2016)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.layouts import SamplesFromReplayPri
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple

__all__ = ["PrioritizedReplayBuffer", "AsyncPrioritizedReplayBuffer", "SamplesFromReplayPri"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Prioritized n-step replay; batches are :data:`SamplesFromReplayPri`.

    Args:
        example: namedtuple of one step, e.g. ``SamplesToBuffer(observation, action,
            reward, done)``.
        size: capacity in transitions.
        B: envs appended together.
        discount: discount inside the n-step return.
        n_step_return: rewards summed per return.
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
            shared=self.async_)


class AsyncPrioritizedReplayBuffer(PrioritizedReplayBuffer):
    """:class:`PrioritizedReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True
