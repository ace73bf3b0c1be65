"""Sum tree over ``[T, B]`` priorities for proportional prioritized sampling.

The leaves are the ``T * B`` priorities (leaf ``t * B + b``), padded with zeros
to a power of two; every inner node holds the sum of its two children, so the
root is the total and a uniform draw in ``[0, total)`` descends to leaf ``i``
with probability ``priority[i] / total``. The tree lives in one float64 array
in heap order (root at index 1, children of node ``k`` at ``2k`` and ``2k+1``).
All updates and draws are vectorised over the leaves involved.

The tree follows the replay's cursor (:meth:`SumTree.advance`): a step's
priority is switched on once the step can be sampled and is zero while it lies
in the replay's invalid zone near the cursor (``off_backward`` newest rows,
``off_forward`` oldest rows).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlframe.utils.buffer import build_array

if TYPE_CHECKING:
    import numpy.typing as npt

class SumTree:
    """Priorities of a ``[T, B]`` ring buffer, sampled in proportion to their value.

    Args:
        T: rows (time steps, or sequence starts) per env.
        B: envs.
        off_backward: newest rows kept at zero (their data is not complete yet).
        off_forward: oldest rows kept at zero (their predecessors are overwritten).
        default_value: priority given to rows when they become valid.
        enable_input_priorities: accept priorities in :meth:`advance`.
        input_priority_shift: rows by which input priorities are moved back: the
            priority given with the row appended at ``t`` belongs to row
            ``t - input_priority_shift``.
        shared: keep the tree, its inputs and its cursor in shared memory, so a
            process that appends and one that samples see one tree (guard calls
            with the replay's lock).

    Attributes:
        tree: float64 ``[2 * n_leaves]`` heap array (index 0 unused).
        priorities: ``[T, B]`` view of the leaves.
        input_priorities: ``[T, B]`` priorities waiting for (or given to) their row,
            or None when input priorities are disabled.
        t: cursor, the row the next appended step goes to.
        prev_tree_idxs: leaf positions of the last :meth:`sample` call.
    """

    def __init__(self, T: int, B: int, off_backward: int, off_forward: int,
                 default_value: float = 1, enable_input_priorities: bool = False,
                 input_priority_shift: int = 0, shared: bool = False):
        if T < 1 or B < 1:
            raise ValueError(f"SumTree needs T >= 1 and B >= 1, got T={T}, B={B}.")
        if off_backward < 0 or off_forward < 0:
            raise ValueError(f"off_backward={off_backward} and off_forward={off_forward} "
                             "must be >= 0.")
        if off_backward + off_forward >= T:
            raise ValueError(f"SumTree with T={T} rows has none valid when off_backward="
                             f"{off_backward} + off_forward={off_forward} >= T.")
        if not default_value > 0:
            raise ValueError(f"default_value={default_value} must be > 0.")
        if input_priority_shift < 0:
            raise ValueError(f"input_priority_shift={input_priority_shift} must be >= 0.")
        self.T: int = int(T)
        self.B: int = int(B)
        self.size: int = self.T * self.B
        self.off_backward: int = int(off_backward)
        self.off_forward: int = int(off_forward)
        self.default_value: float = float(default_value)
        self.input_priority_shift: int = int(input_priority_shift)
        self.shared: bool = shared
        self.n_leaves: int = 1 << max(0, (self.size - 1).bit_length())
        self.depth: int = self.n_leaves.bit_length() - 1  # levels below the root
        self.tree: np.ndarray = self._allocate(2 * self.n_leaves)
        self.priorities: np.ndarray = self.tree[self.n_leaves:self.n_leaves + self.size].reshape(
            self.T, self.B)
        self.input_priorities: np.ndarray | None = (
            self._allocate((self.T, self.B)) if enable_input_priorities else None)
        # [cursor t, full flag], shared with the tree when the tree is.
        self._cursor: np.ndarray = self._allocate(2, np.int64)
        self.prev_tree_idxs: np.ndarray | None = None  # Per process: the last draws here.
        self.reset()

    def _allocate(self, shape: int | tuple[int, ...], dtype: npt.DTypeLike = np.float64
                  ) -> np.ndarray:
        """Zeroed storage, in shared memory for a shared tree."""
        return build_array(np.zeros((), dtype), shape, share_memory=self.shared)

    @property
    def t(self) -> int:
        """Cursor: the row the next appended step goes to."""
        return int(self._cursor[0])

    @property
    def _full(self) -> bool:
        return bool(self._cursor[1])

    def reset(self) -> None:
        """All priorities zero, cursor at row 0."""
        self.tree.fill(0)
        if self.input_priorities is not None:
            self.input_priorities.fill(self.default_value)
        self._cursor[:] = 0
        self.prev_tree_idxs = None

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self.tree[1])

    @property
    def n_stored(self) -> int:
        """Rows per env holding data (``T`` once the cursor has wrapped)."""
        return self.T if self._full else self.t

    # ------------------------------------------------------------------ cursor
    def advance(self, T: int, priorities: npt.ArrayLike | None = None) -> None:
        """Move the cursor over ``T`` newly appended rows.

        Rows that became sampleable get their priority (the input priority if one
        was given for them, else ``default_value``); rows now in the invalid zone
        are set to zero.

        Args:
            T: rows appended (1 <= T <= self.T).
            priorities: None, or ``[T, B]``, ``[B]`` or scalar priorities for the
                appended rows (needs ``enable_input_priorities``); each is stored
                ``input_priority_shift`` rows back.
        """
        T = int(T)
        if not 1 <= T <= self.T:
            raise ValueError(f"SumTree.advance(T={T}): T must be within [1, {self.T}].")
        t_old = self.t
        self._cursor[0] = (t_old + T) % self.T
        if t_old + T >= self.T:
            self._cursor[1] = 1
        count, b, f = self.n_stored, self.off_backward, self.off_forward

        inputs = self.input_priorities
        if inputs is not None:
            # The rows just overwritten hold new data: forget their old inputs.
            self._write_rows(inputs, 0, T, self.default_value)
        if priorities is not None:
            if inputs is None:
                raise ValueError("SumTree.advance got priorities, but the tree was built with "
                                 "enable_input_priorities=False.")
            p = np.broadcast_to(np.asarray(priorities, dtype=np.float64), (T, self.B))
            # Appended row k (age T-1-k) feeds the row shift steps older; keep
            # those that exist (at the very start some fall before row 0).
            shift = self.input_priority_shift
            a_hi = min(T + shift, count)  # exclusive, oldest target age + 1
            if a_hi > shift:
                n = a_hi - shift
                self._write_rows(inputs, shift, a_hi, p[T - n:])

        # Switch on rows that just left the newest invalid zone.
        on_lo, on_hi = b, min(b + T, count - f)
        if on_hi > on_lo:
            values = (self.default_value if inputs is None
                      else self._read_rows(inputs, on_lo, on_hi))
            self._set_leaf_rows(on_lo, on_hi, values)
        if priorities is not None:
            # Inputs for rows that are already sampleable take effect at once.
            lo, hi = max(self.input_priority_shift, on_hi, b), min(
                T + self.input_priority_shift, count - f)
            if hi > lo:
                self._set_leaf_rows(lo, hi, self._read_rows(inputs, lo, hi))
        # Invalid zones: the newest b rows and the oldest f rows.
        if b > 0:
            self._set_leaf_rows(0, min(b, count), 0.)
        if f > 0 and count > 0:
            self._set_leaf_rows(max(count - f, 0), count, 0.)

    def _age_row_ranges(self, a_lo: int, a_hi: int) -> list[tuple[int, int]]:
        """Rows of ages ``[a_lo, a_hi)`` as up to two ascending ``[start, stop)`` ranges."""
        start = (self.t - a_hi) % self.T
        stop = start + (a_hi - a_lo)
        if stop <= self.T:
            return [(start, stop)]
        return [(start, self.T), (0, stop - self.T)]

    def _write_rows(self, array: np.ndarray, a_lo: int, a_hi: int, values: Any) -> None:
        """``array[rows of ages a_lo..a_hi-1] = values`` (values in time order)."""
        offset = 0
        for start, stop in self._age_row_ranges(a_lo, a_hi):
            if np.ndim(values) == 0:
                array[start:stop] = values
            else:
                array[start:stop] = values[offset:offset + stop - start]
            offset += stop - start

    def _read_rows(self, array: np.ndarray, a_lo: int, a_hi: int) -> np.ndarray:
        """Rows of ages ``[a_lo, a_hi)`` of ``array``, in time order."""
        return np.concatenate([array[start:stop]
                               for start, stop in self._age_row_ranges(a_lo, a_hi)])

    def _set_leaf_rows(self, a_lo: int, a_hi: int, values: Any) -> None:
        """Set the priorities of rows of ages ``[a_lo, a_hi)`` and refresh their sums."""
        offset = 0
        for start, stop in self._age_row_ranges(a_lo, a_hi):
            lo, hi = self.n_leaves + start * self.B, self.n_leaves + stop * self.B
            if np.ndim(values) == 0:
                self.tree[lo:hi] = values
            else:
                self.tree[lo:hi] = np.ravel(values[offset:offset + stop - start])
            offset += stop - start
            self._refresh_range(lo, hi)

    def _refresh_range(self, lo: int, hi: int) -> None:
        """Recompute the sums above the contiguous leaves ``[lo, hi)``."""
        while lo > 1:
            lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
            self.tree[lo:hi] = self.tree[2 * lo:2 * hi:2] + self.tree[2 * lo + 1:2 * hi:2]

    def _refresh_idxs(self, idxs: np.ndarray) -> None:
        """Recompute the sums above the leaves ``idxs`` (duplicates are harmless)."""
        for _ in range(self.depth):
            idxs = idxs >> 1
            self.tree[idxs] = self.tree[2 * idxs] + self.tree[2 * idxs + 1]

    # ---------------------------------------------------------------- sampling
    def find(self, random_values: np.ndarray) -> np.ndarray:
        """Leaf positions for draws ``random_values`` in ``[0, 1)`` (scaled by the total)."""
        idxs = self._descend(random_values * self.tree[1], guarded=False)
        stray = self.tree.take(idxs) == 0
        if stray.any():
            # Rounding sent a draw into an empty subtree: descend again, avoiding them.
            idxs[stray] = self._descend(random_values[stray] * self.tree[1], guarded=True)
        return idxs

    def _descend(self, u: np.ndarray, guarded: bool) -> np.ndarray:
        """Walk from the root: left if ``u`` < left sum, else right with ``u`` reduced."""
        tree = self.tree
        u = u.copy()
        idxs = np.ones(len(u), dtype=np.int64)
        for _ in range(self.depth):
            idxs <<= 1  # left child
            left_value = tree.take(idxs)
            go_right = u >= left_value
            if guarded:
                go_right &= tree.take(idxs + 1) > 0
            u -= left_value * go_right
            idxs += go_right
        return idxs

    def sample(self, n: int, unique: bool = False) -> tuple[tuple[np.ndarray, np.ndarray],
                                                             np.ndarray]:
        """Draw ``n`` rows in proportion to priority.

        Args:
            n: number of draws.
            unique: draw without replacement.

        Returns:
            ``((T_idxs [n], B_idxs [n]), priorities [n])``.
        """
        if not self.tree[1] > 0:
            raise ValueError("SumTree.sample: every priority is zero; append more data first "
                             f"(the newest {self.off_backward} and oldest {self.off_forward} "
                             "rows of each env are never sampled).")
        idxs = self.find(np.random.random_sample(n))
        if unique:
            idxs = self._unique_draws(idxs, n)
        self.prev_tree_idxs = idxs
        T_idxs, B_idxs = np.divmod(idxs - self.n_leaves, self.B)
        return (T_idxs, B_idxs), self.tree[idxs]

    def _unique_draws(self, idxs: np.ndarray, n: int) -> np.ndarray:
        """Drop repeated draws and draw again until ``n`` distinct leaves are found."""
        for _ in range(100):
            _, first = np.unique(idxs, return_index=True)
            idxs = idxs[np.sort(first)]  # keep draw order: earlier draws win
            if len(idxs) >= n:
                return idxs[:n]
            more = self.find(np.random.random_sample(2 * (n - len(idxs))))
            idxs = np.concatenate([idxs, more])
        n_positive = int(np.count_nonzero(self.priorities))
        raise ValueError(f"SumTree.sample(n={n}, unique=True): could not find {n} distinct rows "
                         f"({n_positive} have nonzero priority).")

    def update_batch_priorities(self, priorities: npt.ArrayLike) -> None:
        """Give new priorities to the rows drawn by the last :meth:`sample`.

        Rows drawn twice take the priority of their first draw. Rows that have
        become invalid since they were drawn (zero priority) stay zero.

        Args:
            priorities: [n], matching the last sample's draws.
        """
        if self.prev_tree_idxs is None:
            raise RuntimeError("SumTree.update_batch_priorities called before sample().")
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        idxs = self.prev_tree_idxs
        if len(p) != len(idxs):
            raise ValueError(f"update_batch_priorities got {len(p)} priorities for the "
                             f"{len(idxs)} rows of the last sample.")
        idxs, first = np.unique(idxs, return_index=True)
        p = p[first]
        keep = self.tree[idxs] > 0
        idxs = idxs[keep]
        self.tree[idxs] = p[keep]
        self._refresh_idxs(idxs)

    def print_tree(self, level: int | None = None) -> None:
        """Print the sums level by level (all levels, or only ``level``; 0 = root)."""
        levels = range(self.depth + 1) if level is None else [level]
        for lv in levels:
            start = 1 << lv
            print(f"level {lv}: {self.tree[start:2 * start]}")


class AsyncSumTree(SumTree):
    """:class:`SumTree` in shared memory (``shared=True``), for asynchronous runners."""

    def __init__(self, T: int, B: int, off_backward: int, off_forward: int,
                 default_value: float = 1, enable_input_priorities: bool = False,
                 input_priority_shift: int = 0):
        super().__init__(T=T, B=B, off_backward=off_backward, off_forward=off_forward,
                         default_value=default_value,
                         enable_input_priorities=enable_input_priorities,
                         input_priority_shift=input_priority_shift, shared=True)
