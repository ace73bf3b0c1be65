"""Ring storage of ``[T, B]`` steps: the arrays, the cursor, and who may touch them when.

The storage holds ``T`` time steps for each of ``B`` envs. A cursor ``t`` marks
the next row to write; once the ring is full, new chunks overwrite the oldest
rows. Positions are described by *age*: the newest stored step has age 0, the
one before it age 1, and so on up to ``n_stored - 1``.

Process-local storage keeps plain numpy arrays. Shared storage puts the arrays,
the cursor and the full flag in shared memory and guards them with a
readers-writer lock, so that one process appends while others sample.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
from typing import TYPE_CHECKING, Any, Callable, ContextManager, overload

import numpy as np

from rlframe.utils.buffer import buffer_from_example, build_array, get_leading_dims
from rlframe.utils.synchronize import RWLock

if TYPE_CHECKING:
    import numpy.typing as npt

    from rlframe.utils.buffer import ArrayTree
    from rlframe.utils.collections import NamedArrayTuple


class RingStorage:
    """Preallocated ``[T, B]`` arrays for the fields of one example step.

    Args:
        example: namedtuple of one step's values (numpy scalars/arrays, nested
            namedtuples allowed).
        T: time steps per env.
        B: envs appended together.
        shared: allocate arrays and cursor in shared memory and lock around access.

    Attributes:
        samples: namedarraytuple of ``[T, B, ...]`` arrays.
        lock: the :class:`RWLock` of shared storage (None when process-local).
    """

    def __init__(self, example: NamedArrayTuple, T: int, B: int, shared: bool = False):
        self.T: int = int(T)
        self.B: int = int(B)
        self.shared: bool = shared
        self.samples: NamedArrayTuple = buffer_from_example(example, (self.T, self.B),
                                                            share_memory=shared)
        # [cursor t, full flag]; in shared memory so every process sees the same ring.
        self._cursor: np.ndarray = build_array(np.int64(0), 2, share_memory=shared)
        # Made in the spawn context, the lock can go to children of any start method
        # (one from the fork context cannot be handed to a spawned child).
        self.lock: RWLock | None = RWLock(mp.get_context("spawn")) if shared else None

    @overload
    def allocate(self, example: np.ndarray | np.generic | float, leading_dims: tuple[int, ...]
                 ) -> np.ndarray: ...
    @overload
    def allocate(self, example: NamedArrayTuple, leading_dims: tuple[int, ...]
                 ) -> NamedArrayTuple: ...
    def allocate(self, example: npt.ArrayLike, leading_dims: tuple[int, ...]) -> ArrayTree:
        """An extra buffer shaped like ``example`` with ``leading_dims``, shared if the storage is."""
        return buffer_from_example(example, leading_dims, share_memory=self.shared)

    def cursor(self) -> tuple[int, bool]:
        """``(t, full)`` read together."""
        t, full = self._cursor.tolist()
        return t, bool(full)

    @property
    def t(self) -> int:
        """The row the next appended step goes to."""
        return int(self._cursor[0])

    @property
    def full(self) -> bool:
        """Whether the ring has wrapped at least once."""
        return bool(self._cursor[1])

    @property
    def n_stored(self) -> int:
        """Time steps per env currently stored (``T`` once the ring has wrapped)."""
        return self.T if self._cursor[1] else int(self._cursor[0])

    def rows_of_ages(self, ages: np.ndarray | int) -> np.ndarray | int:
        """Row index of the step ``ages`` steps older than the newest one."""
        return (self._cursor[0] - 1 - ages) % self.T

    def check_chunk(self, samples: NamedArrayTuple) -> int:
        """Raise unless ``samples`` fits this storage; returns its length ``T_new``.

        Args:
            samples: namedarraytuple with the stored fields, each ``[T_new, B, ...]``
                (numpy arrays or CPU torch tensors).
        """
        fields = getattr(samples, "_fields", None)
        if fields != self.samples._fields:
            raise ValueError(f"append_samples got fields {fields}; this buffer stores "
                             f"{self.samples._fields}.")
        T_new, B = get_leading_dims(samples, n_dim=2)
        if B != self.B:
            raise ValueError(f"append_samples got B={B} envs; the buffer was built with "
                             f"B={self.B}.")
        if not 1 <= T_new <= self.T:
            raise ValueError(f"append_samples got T={T_new} steps; must be within [1, "
                             f"{self.T}] (the buffer's steps per env).")
        return T_new

    def write(self, samples: NamedArrayTuple, T_new: int) -> slice | np.ndarray:
        """Write a checked ``[T_new, B]`` chunk at the cursor, wrapping; returns the rows
        written (a slice, or an index array when the chunk wrapped). The cursor moves
        with :meth:`advance`, once every part has stored its share of the chunk."""
        t = self.t
        idxs: slice | np.ndarray
        if t + T_new <= self.T:
            idxs = slice(t, t + T_new)
        else:
            idxs = np.arange(t, t + T_new) % self.T
        self.samples[idxs] = samples
        return idxs

    def advance(self, T_new: int) -> None:
        """Move the cursor past ``T_new`` written rows."""
        t = self.t
        if t + T_new >= self.T:
            self._cursor[1] = 1
        self._cursor[0] = (t + T_new) % self.T

    def write_access(self) -> ContextManager:
        """Exclusive access while appending (and updating priorities)."""
        if self.lock is None:
            return contextlib.nullcontext()
        return _Held(self.lock.acquire_write, self.lock.release_write)

    def read_access(self) -> ContextManager:
        """Shared access while sampling."""
        if self.lock is None:
            return contextlib.nullcontext()
        return _Held(self.lock.acquire_read, self.lock.release_read)


class _Held:
    """Context manager around an acquire/release pair."""

    def __init__(self, acquire: Callable[[], None], release: Callable[[], None]):
        self._acquire, self._release = acquire, release

    def __enter__(self) -> None:
        self._acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._release()
