"""Interface shared by every replay buffer."""
from __future__ import annotations

from typing import Any

from rlframe.utils.collections import namedarraytuple


class BaseReplayBuffer:
    """A store of past samples that an algorithm appends to and samples from.

    Attributes:
        async_: True for buffers on shared memory, written and read by different
            processes (the storage helpers allocate shared memory when set).
    """

    async_: bool = False

    def append_samples(self, samples: Any) -> Any:
        """Store a ``[T, B]`` chunk of samples (a namedarraytuple of arrays or tensors)."""
        raise NotImplementedError

    def sample_batch(self, batch_B: int) -> Any:
        """Draw a batch of ``batch_B`` samples as torch tensors."""
        raise NotImplementedError


def without_field(example: Any, field: str) -> Any:
    """``example`` (a namedtuple) with ``field`` removed, as a namedarraytuple.

    Used by buffers that keep one field in separate storage (frames, RNN states)
    and store the rest in the common ``[T, B]`` samples.
    """
    fields = tuple(f for f in example._fields if f != field)
    cls = namedarraytuple(type(example).__name__, fields)
    return cls(*(getattr(example, f) for f in fields))
