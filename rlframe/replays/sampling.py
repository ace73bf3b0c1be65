"""How a replay picks what to train on: uniformly, or in proportion to priority.

Both strategies draw *starts*: rows of ``[T, B]`` storage where a training
item begins (a single step, or a sequence of ``L`` steps). A start is valid
when it is a multiple of the replay's ``start_interval`` (the steps at which
RNN states are stored; 1 without them), is not among the oldest
``off_forward`` steps (their predecessors are overwritten), and the ``L``
steps from it plus their ``n_step_return`` targets are stored.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlframe.replays.sum_tree import SumTree
from rlframe.utils.buffer import numpify_buffer

if TYPE_CHECKING:
    from rlframe.replays.view import ReplayView


class UniformSampling:
    """Starts drawn uniformly over the valid ones, with replacement."""

    prioritized: bool = False
    needs_fixed_batch_T: bool = False
    input_priorities: bool = False  # append_samples never takes priorities here.

    def __init__(self) -> None:
        self._replay: ReplayView | None = None

    def build(self, replay: ReplayView) -> None:
        """Attach to ``replay`` (its storage and geometry)."""
        self._replay = replay

    def on_append(self, T_new: int, priorities: np.ndarray | torch.Tensor | None = None) -> None:
        """Nothing to track: validity follows from the storage's cursor."""

    def _valid_range(self, L: int) -> tuple[int, int, int]:
        """``(oldest row, first valid position, number of valid starts)``; positions
        count from the oldest stored step (0)."""
        r = self._replay
        u, T = r.start_interval, r.storage.T
        t, full = r.storage.cursor()
        oldest, n_stored = (t, T) if full else (0, t)
        last = n_stored - r.n_step_return - L  # Latest start whose targets are stored.
        first = r.off_forward + (-(oldest + r.off_forward)) % u  # First aligned start.
        n_valid = (last - first) // u + 1 if last >= first else 0
        return oldest, first, n_valid

    def can_sample(self, L: int) -> bool:
        """Whether at least one start of length ``L`` is valid."""
        return self._valid_range(L)[2] > 0

    def starts(self, batch_B: int, L: int) -> tuple[np.ndarray, np.ndarray, None]:
        """``(T_idxs [batch_B], B_idxs [batch_B], None)`` of uniform draws."""
        oldest, first, n_valid = self._valid_range(L)
        if n_valid < 1:
            self._replay.raise_cannot_sample(L)
        r = self._replay
        u = r.start_interval
        # Counted back from the latest valid start (for single steps: by age).
        positions = first + u * (n_valid - 1) - u * np.random.randint(n_valid, size=batch_B)
        T_idxs = (oldest + positions) % r.storage.T
        B_idxs = np.random.randint(r.storage.B, size=batch_B)
        return T_idxs, B_idxs, None


class PrioritizedSampling:
    """Starts drawn with probability ``p_i^alpha / sum_k p_k^alpha`` (Schaul et al., 2016).

    New starts get ``default_priority`` (or the priority given with them, see
    ``input_priorities``); the algorithm reports new priorities for the last
    batch (e.g. TD errors) through the replay's ``update_batch_priorities``.
    Batches gain ``is_weights`` ``[batch_B]``, the importance-sampling
    correction ``(1 / (p + 1e-6))^beta`` divided by its batch maximum, where
    ``p`` is the drawn start's stored ``priority^alpha``. The sum tree has one
    leaf per start row: ``T // start_interval`` rows per env.

    Args:
        alpha: priority exponent (0 = uniform).
        beta: importance-sampling exponent (annealed by the algorithm via
            the replay's ``set_beta``).
        default_priority: priority of new starts.
        unique: draw a batch without repeated starts.
        input_priorities: ``append_samples`` takes ``(priorities, samples)``
            namedtuples carrying a priority per appended start row.
        input_priority_shift: start rows by which input priorities move back.

    Attributes:
        tree: the :class:`SumTree` (after ``build``).
    """

    prioritized: bool = True
    needs_fixed_batch_T: bool = True

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0):
        if alpha < 0:
            raise ValueError(f"alpha={alpha} must be >= 0.")
        if beta < 0:
            raise ValueError(f"beta={beta} must be >= 0.")
        if not default_priority > 0:
            raise ValueError(f"default_priority={default_priority} must be > 0.")
        self.alpha: float = alpha
        self.beta: float = beta
        self.default_priority: float = default_priority
        self.unique: bool = unique
        self.input_priorities: bool = input_priorities
        self.input_priority_shift: int = int(input_priority_shift)
        self.tree: SumTree | None = None
        self._replay: ReplayView | None = None

    def build(self, replay: ReplayView) -> None:
        """Build the sum tree for ``replay``'s geometry (its fixed ``batch_T``)."""
        self._replay = replay
        u, L = replay.start_interval, replay.batch_T
        # Start row j (step j*u) is complete once step j*u + L + n - 1 is stored.
        off_backward = math.ceil((L + replay.n_step_return) / u) - 1
        off_forward = math.ceil(replay.off_forward / u)
        self.tree = SumTree(
            T=replay.storage.T // u, B=replay.storage.B, off_backward=off_backward,
            off_forward=off_forward, default_value=self.default_priority ** self.alpha,
            enable_input_priorities=self.input_priorities,
            input_priority_shift=self.input_priority_shift, shared=replay.storage.shared)

    def check_chunk(self, T_new: int) -> None:
        """Appended chunks must keep the cursor on a start row."""
        u = self._replay.start_interval
        if T_new % u != 0:
            raise ValueError(f"{type(self._replay).__name__}.append_samples got T={T_new} steps, "
                             f"not a multiple of rnn_state_interval={u}; use a sampler batch_T "
                             "that is.")

    def on_append(self, T_new: int, priorities: np.ndarray | torch.Tensor | None = None) -> None:
        """Switch on the starts that the last ``T_new`` steps completed.

        Args:
            T_new: steps appended.
            priorities: None, or raw priorities ``[T_new // start_interval, B]``
                (raised to ``alpha`` here).
        """
        if priorities is not None:
            priorities = np.asarray(numpify_buffer(priorities), dtype=np.float64) ** self.alpha
        self.tree.advance(T_new // self._replay.start_interval, priorities=priorities)

    def can_sample(self, L: int) -> bool:
        """Whether enough is stored to draw starts of the fixed length."""
        return self._replay.storage.n_stored >= self._replay.min_steps_to_sample(L)

    def starts(self, batch_B: int, L: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """``(T_idxs [batch_B], B_idxs [batch_B], is_weights [batch_B])`` drawn by priority."""
        if not self.can_sample(L):
            self._replay.raise_cannot_sample(L)
        (rows, B_idxs), priorities = self.tree.sample(batch_B, unique=self.unique)
        is_weights = (1. / (priorities + 1e-6)) ** self.beta
        is_weights /= is_weights.max()
        T_idxs = rows * self._replay.start_interval
        return T_idxs, B_idxs, torch.from_numpy(is_weights.astype(np.float32))

    def update_batch_priorities(self, priorities: np.ndarray | torch.Tensor) -> None:
        """New raw priorities ``[batch_B]`` for the last batch (stored as ``priorities^alpha``)."""
        p = np.asarray(numpify_buffer(priorities), dtype=np.float64)
        self.tree.update_batch_priorities(p ** self.alpha)
