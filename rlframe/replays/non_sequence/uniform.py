"""Uniform sampling of single steps."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlframe.replays.non_sequence.n_step import NStepReturnBuffer


class UniformReplay:
    """Mixin: ``sample_batch`` draws valid steps uniformly, with replacement.

    Valid steps are those outside the ``off_backward`` newest and
    ``off_forward`` oldest steps of each env.
    """

    def sample_batch(self, batch_B: int) -> Any:
        """Draw ``batch_B`` steps; returns the buffer's batch namedarraytuple (torch)."""
        T_idxs, B_idxs = self.sample_idxs(batch_B)
        return self.extract_batch(T_idxs, B_idxs)

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and envs of ``batch_B`` uniform draws, each ``[batch_B]``."""
        b, f = self.off_backward, self.off_forward
        n_valid = self.n_stored - b - f
        if n_valid < 1:
            raise ValueError(
                f"{type(self).__name__}.sample_batch: the replay holds {self.n_stored} steps per "
                f"env but needs at least {b + f + 1} to sample (the newest {b} and oldest {f} "
                "are not sampled); append more samples first.")
        ages = b + np.random.randint(n_valid, size=batch_B)
        T_idxs = self.rows_of_ages(ages)
        B_idxs = np.random.randint(self.B, size=batch_B)
        return T_idxs, B_idxs


class UniformReplayBuffer(UniformReplay, NStepReturnBuffer):
    """Uniformly sampled n-step replay; batches are :data:`SamplesFromReplay`.

    Args:
        example: namedtuple of one step, e.g. ``SamplesToBuffer(observation, action,
            reward, done)``.
        size: capacity in transitions.
        B: envs appended together.
        discount: discount inside the n-step return.
        n_step_return: rewards summed per return.
    """
