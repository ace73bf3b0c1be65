"""Replays that keep the env's ``timeout`` flag, for bootstrapping through time limits.

An episode cut by a time limit ends with ``done`` and ``timeout`` both true;
its last return should still be bootstrapped, but the state after it was never
stored (the env was reset). These buffers report which samples are affected so
the algorithm can leave them out of the loss:

* ``timeout``: ``[batch_B]``, the step itself was cut by the time limit;
* ``timeout_n``: ``[batch_B]``, the n-step return was cut short by a time limit,
  i.e. the first ``done`` within ``t .. t+n-1`` came with ``timeout``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.layouts import SamplesFromReplayPriTL, SamplesFromReplayTL
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple

__all__ = ["TlUniformReplayBuffer", "TlPrioritizedReplayBuffer", "AsyncTlUniformReplayBuffer",
           "AsyncTlPrioritizedReplayBuffer", "SamplesFromReplayTL", "SamplesFromReplayPriTL"]


class TlUniformReplayBuffer(ReplayBuffer):
    """Uniform replay with ``timeout``/``timeout_n``; batches are :data:`SamplesFromReplayTL`.

    Args:
        example: namedtuple of one step with a ``timeout`` field.
        size, B, discount, n_step_return: see
            :class:`~rlframe.replays.non_sequence.uniform.UniformReplayBuffer`.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B,
                         targets=NStepTargets(discount, n_step_return, time_limit=True),
                         shared=self.async_)


class TlPrioritizedReplayBuffer(ReplayBuffer):
    """Prioritized replay with ``timeout``/``timeout_n``; batches are
    :data:`SamplesFromReplayPriTL`.

    Args:
        example: namedtuple of one step with a ``timeout`` field.
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
            example, size, B, targets=NStepTargets(discount, n_step_return, time_limit=True),
            sampling=PrioritizedSampling(alpha, beta, default_priority, unique,
                                         input_priorities, input_priority_shift),
            shared=self.async_)


class AsyncTlUniformReplayBuffer(TlUniformReplayBuffer):
    """:class:`TlUniformReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True


class AsyncTlPrioritizedReplayBuffer(TlPrioritizedReplayBuffer):
    """:class:`TlPrioritizedReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True
