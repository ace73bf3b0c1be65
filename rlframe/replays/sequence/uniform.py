"""Uniform sampling of sequences."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlframe.replays.sequence.n_step import SequenceNStepReturnBuffer


class UniformSequenceReplay:
    """Mixin: ``sample_batch`` draws sequence starts uniformly, with replacement.

    A start is valid when it is a multiple of the RNN-state interval, is not
    among the ``off_forward`` oldest steps, and the whole sequence plus its
    ``n_step_return`` targets is stored.
    """

    def sample_batch(self, batch_B: int, batch_T: int | None = None) -> Any:
        """Draw ``batch_B`` sequences of ``batch_T`` steps (default: the buffer's)."""
        batch_T = self.resolve_batch_T(batch_T)
        T_idxs, B_idxs = self.sample_idxs(batch_B, batch_T)
        return self.extract_batch(T_idxs, B_idxs, batch_T)

    def sample_idxs(self, batch_B: int, batch_T: int) -> tuple[np.ndarray, np.ndarray]:
        """Start rows and envs of ``batch_B`` uniform draws, each ``[batch_B]``."""
        u, count = self.start_interval, self.n_stored
        # Time-order positions, 0 = oldest stored step.
        oldest = self.t if self._buffer_full else 0
        last = count - self.n_step_return - batch_T  # latest start with its targets stored
        first = self.off_forward + (-(oldest + self.off_forward)) % u  # first aligned start
        n_valid = (last - first) // u + 1 if last >= first else 0
        if n_valid < 1:
            raise ValueError(
                f"{type(self).__name__}.sample_batch: the replay holds {count} steps per env but "
                f"sequences of batch_T={batch_T} need at least "
                f"{self.min_steps_to_sample(batch_T)} (n_step_return={self.n_step_return}, "
                f"starts at multiples of rnn_state_interval={self.rnn_state_interval}, oldest "
                f"{self.off_forward} steps not used); append more samples first.")
        positions = first + u * np.random.randint(n_valid, size=batch_B)
        T_idxs = (oldest + positions) % self.T
        B_idxs = np.random.randint(self.B, size=batch_B)
        return T_idxs, B_idxs


class UniformSequenceReplayBuffer(UniformSequenceReplay, SequenceNStepReturnBuffer):
    """Uniformly sampled sequence replay; batches are sequence ``SamplesFromReplay``.

    Args:
        example: namedtuple of one step (with ``prev_rnn_state`` if stored).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never).
        batch_T: default sequence length.
        discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
    """
