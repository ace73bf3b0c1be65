"""Uniform sampling of sequences."""
from __future__ import annotations

from rlframe.replays.sequence.n_step import SequenceNStepReturnBuffer


class UniformSequenceReplayBuffer(SequenceNStepReturnBuffer):
    """Uniformly sampled sequence replay; batches are sequence ``SamplesFromReplay``.

    A start is valid when it is a multiple of the RNN-state interval, is not
    among the ``off_forward`` oldest steps, and the whole sequence plus its
    ``n_step_return`` targets is stored.

    Args:
        example: namedtuple of one step (with ``prev_rnn_state`` if stored).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never).
        batch_T: default sequence length.
        discount, n_step_return: see :class:`~rlframe.replays.targets.NStepTargets`.
    """


class AsyncUniformSequenceReplayBuffer(UniformSequenceReplayBuffer):
    """:class:`UniformSequenceReplayBuffer` in shared memory, for asynchronous runners."""

    async_ = True
