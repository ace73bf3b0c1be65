"""Prioritized sampling of sequences: one priority per stored-RNN-state start."""
from __future__ import annotations

import math
from typing import Any

from rlframe.replays.non_sequence.prioritized import PrioritizedReplay
from rlframe.replays.sequence.n_step import SamplesFromReplay, SequenceNStepReturnBuffer
from rlframe.utils.collections import namedarraytuple

SamplesFromReplayPri = namedarraytuple("SamplesFromReplayPri",
                                       SamplesFromReplay._fields + ("is_weights",))


class PrioritizedSequenceReplay(PrioritizedReplay):
    """Mixin: sequences drawn by priority; each start row (a multiple of the
    RNN-state interval) has one priority, so the tree has ``T // interval`` rows.

    The sequence length ``batch_T`` is fixed (it decides which starts are
    complete). Appended chunks must keep the cursor on a start row: their
    length must be a multiple of ``rnn_state_interval`` (sampler ``batch_T``),
    and input priorities, if any, are ``[T_chunk // rnn_state_interval, B]``.

    Args:
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.non_sequence.prioritized.PrioritizedReplay`
            (``input_priority_shift`` counts tree rows, i.e. intervals).
        **kwargs: the sequence storage's arguments (``batch_T`` required).
    """

    SamplesFromReplayPriCls = SamplesFromReplayPri

    def priority_tree_geometry(self) -> tuple[int, int, int]:
        """Tree rows = start rows; invalid zones in rows, from ``batch_T``."""
        if self.batch_T is None:
            raise ValueError(f"{type(self).__name__} needs a fixed batch_T (got None).")
        u = self.start_interval
        # Start row j (step j*u) is complete once the step j*u + batch_T + n - 1 is stored.
        off_backward = math.ceil((self.batch_T + self.n_step_return) / u) - 1
        off_forward = math.ceil(self.off_forward / u)
        return self.T // u, off_backward, off_forward

    def tree_rows_appended(self, T: int) -> int:
        """Check that the chunk keeps the cursor on a start row; tree rows it covers."""
        u = self.start_interval
        if T % u != 0:
            raise ValueError(f"{type(self).__name__}.append_samples got T={T} steps, not a "
                             f"multiple of rnn_state_interval={self.rnn_state_interval}; "
                             "use a sampler batch_T that is.")
        return T // u

    def append_samples(self, samples: Any) -> tuple[int, Any]:
        """Store a ``[T, B]`` chunk (``T`` a multiple of ``rnn_state_interval``)."""
        chunk = samples.samples if self.input_priorities and hasattr(samples, "samples") \
            else samples
        T = getattr(chunk, "done").shape[0]
        self.tree_rows_appended(T)  # validate before anything is written
        return super().append_samples(samples)

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """Draw ``batch_B`` sequences of the fixed ``batch_T`` by priority (adds ``is_weights``)."""
        if batch_T is not None and batch_T != self.batch_T:
            raise ValueError(f"{type(self).__name__} samples sequences of the fixed "
                             f"batch_T={self.batch_T}; got batch_T={batch_T}.")
        self.check_can_sample()
        (rows, B_idxs), priorities = self.priority_tree.sample(batch_B, unique=self.unique)
        T_idxs = rows * self.start_interval
        batch = self.extract_batch(T_idxs, B_idxs, self.batch_T)
        return self.with_is_weights(batch, priorities)

    def check_can_sample(self) -> None:
        """Raise a clear error while no sequence can be sampled yet."""
        needed = self.min_steps_to_sample(self.batch_T)
        if self.n_stored < needed:
            raise ValueError(
                f"{type(self).__name__}.sample_batch: the replay holds {self.n_stored} steps per "
                f"env but sequences of batch_T={self.batch_T} need at least {needed}; append "
                "more samples first.")


class PrioritizedSequenceReplayBuffer(PrioritizedSequenceReplay, SequenceNStepReturnBuffer):
    """Prioritized sequence replay; batches are sequence :data:`SamplesFromReplayPri`.

    Args:
        example: namedtuple of one step (with ``prev_rnn_state`` if stored).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never).
        batch_T: sequence length (required).
        discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`PrioritizedSequenceReplay`.
    """

    def __init__(self, example: Any, size: int | float, B: int, rnn_state_interval: int,
                 batch_T: int | None = None, discount: float = 1, n_step_return: int = 1,
                 alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0):
        if batch_T is None:
            raise ValueError("PrioritizedSequenceReplayBuffer needs a fixed batch_T (got None).")
        super().__init__(example=example, size=size, B=B, rnn_state_interval=rnn_state_interval,
                         batch_T=batch_T, discount=discount, n_step_return=n_step_return,
                         alpha=alpha, beta=beta, default_priority=default_priority,
                         unique=unique, input_priorities=input_priorities,
                         input_priority_shift=input_priority_shift)
