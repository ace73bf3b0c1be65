"""What a replay's parts may read of the replay they are built into.

The layout and the sampling strategy are parts of a
:class:`~rlframe.replays.replay_buffer.ReplayBuffer`; they see it only through
this narrow view, so they need not import the buffer that imports them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rlframe.replays.storage import RingStorage


class ReplayView(Protocol):
    """The replay as its layout and sampling strategy see it.

    Attributes:
        storage: the ``[T, B]`` ring of stored samples.
        n_step_return: steps of return the targets sum (the newest are not sampled).
        off_forward: oldest steps not sampled (their predecessors are overwritten).
        start_interval: items start at rows that are multiples of this.
        batch_T: default item length (None: given with each draw).
    """

    storage: RingStorage
    n_step_return: int
    off_forward: int
    start_interval: int
    batch_T: int | None

    def min_steps_to_sample(self, batch_T: int | None = None) -> int:
        """Steps per env the replay must hold to draw items of ``batch_T``."""
        ...

    def raise_cannot_sample(self, batch_T: int) -> None:
        """Raise the error for a draw before enough is stored."""
        ...
