"""Uniform sampling of single steps."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple


class UniformReplayBuffer(ReplayBuffer):
    """Uniformly sampled n-step replay; batches are ``SamplesFromReplay``.

    Args:
        example: namedtuple of one step, e.g. ``SamplesToBuffer(observation, action,
            reward, done)``.
        size: capacity in transitions.
        B: envs appended together.
        discount: discount inside the n-step return.
        n_step_return: rewards summed per return.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B, targets=NStepTargets(discount, n_step_return),
                         shared=self.async_)


class AsyncUniformReplayBuffer(UniformReplayBuffer):
    """:class:`UniformReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True
