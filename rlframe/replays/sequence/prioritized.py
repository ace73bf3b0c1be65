"""Prioritized sampling of sequences: one priority per stored-RNN-state start."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.layouts import SequenceLayout
from rlframe.replays.layouts import SequenceSamplesFromReplayPri as SamplesFromReplayPri
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling
from rlframe.replays.targets import NStepTargets

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple

__all__ = ["PrioritizedSequenceReplayBuffer", "AsyncPrioritizedSequenceReplayBuffer",
           "SamplesFromReplayPri"]


class PrioritizedSequenceReplayBuffer(ReplayBuffer):
    """Prioritized sequence replay; batches are sequence :data:`SamplesFromReplayPri`.

    Each start row (a multiple of the RNN-state interval) has one priority. The
    sequence length ``batch_T`` is fixed (it decides which starts are complete).
    Appended chunks must keep the cursor on a start row: their length must be a
    multiple of ``rnn_state_interval`` (the sampler's ``batch_T``), and input
    priorities, if any, are ``[T_chunk // rnn_state_interval, B]``.

    Args:
        example: namedtuple of one step (with ``prev_rnn_state`` if stored).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never).
        batch_T: sequence length (required).
        discount, n_step_return: see :class:`~rlframe.replays.targets.NStepTargets`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.sampling.PrioritizedSampling`
            (``input_priority_shift`` counts start rows, i.e. intervals).
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
            layout=SequenceLayout(rnn_state_interval, batch_T), shared=self.async_)


class AsyncPrioritizedSequenceReplayBuffer(PrioritizedSequenceReplayBuffer):
    """:class:`PrioritizedSequenceReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True
