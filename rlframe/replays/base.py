"""Interface shared by every replay buffer."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from rlframe.replays.samples import SamplesFromReplay, SequenceSamplesFromReplay
    from rlframe.utils.collections import NamedArrayTuple


class BaseReplayBuffer:
    """A store of past samples that an algorithm appends to and samples from.

    Attributes:
        async_: True for buffers on shared memory, written and read by different
            processes.
    """

    async_: bool = False

    def append_samples(self, samples: NamedArrayTuple) -> tuple[int, slice | np.ndarray]:
        """Store a ``[T, B]`` chunk of samples (a namedarraytuple of arrays or tensors)."""
        raise NotImplementedError

    def sample_batch(self, batch_B: int) -> SamplesFromReplay | SequenceSamplesFromReplay:
        """Draw a batch of ``batch_B`` samples as torch tensors."""
        raise NotImplementedError

    def can_sample(self) -> bool:
        """Whether :meth:`sample_batch` would find something to draw now (a buffer that
        cannot tell says True and raises from ``sample_batch`` instead)."""
        return True
