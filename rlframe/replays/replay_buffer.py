"""A replay buffer composed of independent parts.

* **storage**: ``[T, B]`` ring arrays, process-local or in shared memory with a
  readers-writer lock and a shared cursor (``shared=True``, for one process
  appending while others sample);
* **observations**: stored with every step, or as single frames stacked again
  on sampling (``frames=True``, for frame-stacked image observations);
* **targets**: n-step returns, optionally with time-limit flags
  (:class:`~rlframe.replays.targets.NStepTargets`);
* **sampling**: uniform or prioritized
  (:mod:`~rlframe.replays.sampling`);
* **layout**: single steps or sequences with stored RNN states
  (:mod:`~rlframe.replays.layouts`).

Every combination works. rlpyt's buffer classes (``UniformReplayBuffer``,
``TlPrioritizedReplayBuffer``, ``PrioritizedSequenceReplayFrameBuffer``, ...)
are named configurations of these parts, kept at rlpyt's module paths.

A step can be trained on only when what it needs is stored: its n-step
targets need the ``n_step_return`` steps after it (the newest
``off_backward = n_step_return`` steps are not sampled), and its previous
action and reward (and older frames) come from the steps before it (the
oldest ``off_forward`` steps are not sampled: 1, or ``n_frames - 1`` with frames).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from rlframe.replays.base import BaseReplayBuffer
from rlframe.replays.frame import FrameStore
from rlframe.replays.layouts import SequenceLayout, TransitionLayout
from rlframe.replays.sampling import PrioritizedSampling, UniformSampling
from rlframe.replays.storage import RingStorage
from rlframe.replays.targets import NStepTargets
from rlframe.utils.collections import namedarraytuple, namedarraytuple_like

if TYPE_CHECKING:
    import torch

    from rlframe.replays.layouts import SamplesFromReplay, SequenceSamplesFromReplay
    from rlframe.replays.sum_tree import SumTree
    from rlframe.utils.buffer import ArrayTree
    from rlframe.utils.collections import NamedArrayTuple


class ReplayBuffer(BaseReplayBuffer):
    """Replay of ``[T, B]`` sampler batches, built from parts.

    Args:
        example: namedtuple of one step's values, e.g. ``SamplesToBuffer(observation,
            action, reward, done)``; needs ``reward`` and ``done`` (and ``timeout``
            for time-limit targets, ``prev_rnn_state`` for stored RNN states).
        size: capacity in transitions (floats such as ``1e6`` accepted); ``T =
            ceil(size / B)`` steps per env, rounded up to the RNN-state interval.
        B: envs appended together.
        targets: return targets (default: 1-step, discount 1).
        sampling: :class:`UniformSampling` (default) or :class:`PrioritizedSampling`.
        layout: :class:`TransitionLayout` (default) or :class:`SequenceLayout`.
        frames: store the newest frame of each ``[n_frames, ...]`` observation only.
        shared: put everything in shared memory and lock around access.

    Attributes:
        storage, targets, sampling, layout: the parts.
        observations: the :class:`FrameStore`, or None when observations are
            stored whole.
        T, B, size: steps per env, envs, capacity allocated.
        samples: namedarraytuple of ``[T, B, ...]`` stored fields.
        samples_return_, samples_done_n, samples_timeout_n: target arrays.
        off_backward, off_forward: steps not sampled at the newest / oldest end.
        start_interval: items start at rows that are multiples of this.
        batch_T: default item length (1 for single steps).
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int,
                 targets: NStepTargets | None = None,
                 sampling: UniformSampling | PrioritizedSampling | None = None,
                 layout: TransitionLayout | SequenceLayout | None = None,
                 frames: bool = False, shared: bool = False):
        self.targets = NStepTargets() if targets is None else targets
        self.sampling = UniformSampling() if sampling is None else sampling
        self.layout = TransitionLayout() if layout is None else layout
        for field in self.targets.required_fields():
            if not hasattr(example, field):
                raise ValueError(f"Replay example must be a namedtuple with a '{field}' field; "
                                 f"got {type(example).__name__} with fields "
                                 f"{getattr(example, '_fields', None)}.")
        self.layout.check_example(example)
        B = int(B)
        if B < 1:
            raise ValueError(f"B={B} must be >= 1 (number of envs appended together).")
        if size < B:
            raise ValueError(f"Replay size={size} is smaller than B={B}: the buffer must hold "
                             "at least one time step per env.")
        self.async_: bool = shared
        self.observations: FrameStore | None = FrameStore(example.observation) if frames else None
        left_out = {"observation"} if frames else set()
        if self.layout.stored_state_field is not None:
            left_out.add(self.layout.stored_state_field)
        stored_fields = tuple(f for f in example._fields if f not in left_out)
        StoredCls = _stored_type(example, stored_fields)
        T = self.layout.round_T(math.ceil(size / B))
        self.storage = RingStorage(StoredCls(*(getattr(example, f) for f in stored_fields)),
                                   T, B, shared=shared)
        self._example_fields: tuple[str, ...] = tuple(example._fields)
        self._stored_fields: tuple[str, ...] = stored_fields
        self.T: int = T
        self.B: int = B
        self.size: int = T * B
        self.samples: NamedArrayTuple = self.storage.samples
        self.discount: float = self.targets.discount
        self.n_step_return: int = self.targets.n_step_return
        self.off_backward: int = self.targets.off_backward
        self.off_forward: int = 1 if self.observations is None else self.observations.off_forward
        self.start_interval: int = self.layout.start_interval
        self.batch_T: int | None = self.layout.batch_T
        self.targets.build(self.storage)
        if self.observations is not None:
            self.observations.build(self.storage)
        self.layout.build(self, example)
        self.samples_return_: np.ndarray = self.targets.return_
        self.samples_done_n: np.ndarray = self.targets.done_n
        self.samples_timeout_n: np.ndarray | None = self.targets.timeout_n
        if self.sampling.needs_fixed_batch_T and self.batch_T is None:
            raise ValueError(f"{type(self).__name__} needs a fixed batch_T (got None): "
                             "prioritized sampling decides which sequences are complete from it.")
        self.validate_capacity()
        self.sampling.build(self)

    # ------------------------------------------------------------- geometry
    @property
    def t(self) -> int:
        """The row the next appended step goes to."""
        return self.storage.t

    @property
    def n_stored(self) -> int:
        """Time steps per env currently stored (``T`` once the buffer has wrapped)."""
        return self.storage.n_stored

    def rows_of_ages(self, ages: np.ndarray | int) -> np.ndarray | int:
        """Row index of the step ``ages`` steps older than the newest one."""
        return self.storage.rows_of_ages(ages)

    def validate_capacity(self) -> None:
        """Raise if, even when full, nothing could ever be sampled."""
        b, f = self.off_backward, self.off_forward
        if self.T < b + f + 1:
            raise ValueError(
                f"Replay size={self.size} with B={self.B} holds T={self.T} steps per env, but "
                f"n_step_return={self.n_step_return} (off_backward={b}, off_forward={f}) needs at "
                f"least {b + f + 1} steps per env (size >= {(b + f + 1) * self.B}).")
        if self.batch_T is not None:
            self.check_batch_T(self.batch_T)

    def check_batch_T(self, batch_T: int) -> None:
        """Raise if items of ``batch_T`` steps can never be sampled from this replay."""
        u, n, f = self.start_interval, self.n_step_return, self.off_forward
        # Once full, the valid starts span T - n - f - batch_T + 1 rows; they must
        # include an aligned row wherever the cursor is.
        needed_T = batch_T + n + f + u - 1
        if self.T < needed_T:
            raise ValueError(
                f"batch_T={batch_T} is longer than the replay holds: T={self.T} steps per env "
                f"(size={self.size}, B={self.B}) fits sequences of at most "
                f"{self.T - n - f - u + 1} steps with n_step_return={n}, off_forward={f}, "
                f"rnn_state_interval={self.layout.rnn_state_interval}; need "
                f"size >= {needed_T * self.B}.")

    def min_steps_to_sample(self, batch_T: int | None = None) -> int:
        """Steps per env the replay must hold (from the start) to draw items of ``batch_T``.

        The oldest ``off_forward`` steps cannot start an item, so the first start
        is the first aligned row at or after them.
        """
        batch_T = self.resolve_batch_T(batch_T)
        u = self.start_interval
        return u * math.ceil(self.off_forward / u) + batch_T + self.n_step_return

    def resolve_batch_T(self, batch_T: int | None) -> int:
        """``batch_T``, or the replay's default, validated."""
        if isinstance(self.layout, TransitionLayout):
            if batch_T not in (None, 1):
                raise ValueError(f"{type(self).__name__} samples single steps; got "
                                 f"batch_T={batch_T!r}.")
            return 1
        if batch_T is None:
            batch_T = self.batch_T
        if batch_T is None:
            raise ValueError(f"{type(self).__name__}.sample_batch needs batch_T: pass it, or set "
                             "batch_T when building the buffer.")
        if int(batch_T) != batch_T or batch_T < 1:
            raise ValueError(f"batch_T={batch_T!r} must be an integer >= 1.")
        if self.sampling.needs_fixed_batch_T and batch_T != self.batch_T:
            raise ValueError(f"{type(self).__name__} samples sequences of the fixed "
                             f"batch_T={self.batch_T}; got batch_T={batch_T}.")
        self.check_batch_T(int(batch_T))
        return int(batch_T)

    def can_sample(self, batch_T: int | None = None) -> bool:
        """Whether :meth:`sample_batch` would find something to draw now."""
        with self.storage.read_access():
            return self.sampling.can_sample(self.resolve_batch_T(batch_T))

    def raise_cannot_sample(self, batch_T: int) -> None:
        """The error for a draw before enough is stored."""
        what = ("needs" if isinstance(self.layout, TransitionLayout)
                else f"sequences of batch_T={batch_T} need")
        raise ValueError(
            f"{type(self).__name__}.sample_batch: the replay holds {self.n_stored} steps per env "
            f"but {what} at least {self.min_steps_to_sample(batch_T)} to sample (the newest "
            f"{self.off_backward} and oldest {self.off_forward} are not sampled, starts at "
            f"multiples of {self.start_interval}); append more samples first.")

    # ------------------------------------------------------------ appending
    def append_samples(self, samples: NamedArrayTuple) -> tuple[int, slice | np.ndarray]:
        """Store a ``[T, B]`` chunk of samples.

        Args:
            samples: namedarraytuple with the example's fields, each ``[T, B, ...]``
                (numpy arrays or CPU torch tensors); with input priorities, a
                namedtuple ``(priorities, samples)`` whose ``priorities`` are
                ``[T // start_interval, B]`` raw priorities.

        Returns:
            ``(T, idxs)``: the chunk length and the rows written.
        """
        priorities = None
        if self.sampling.input_priorities:
            if not hasattr(samples, "priorities") or not hasattr(samples, "samples"):
                raise ValueError("With input_priorities=True, append_samples takes a namedtuple "
                                 "with fields (priorities, samples); got "
                                 f"{getattr(samples, '_fields', type(samples).__name__)}.")
            priorities, samples = samples.priorities, samples.samples
        if getattr(samples, "_fields", None) != self._example_fields:
            raise ValueError(f"append_samples got fields {getattr(samples, '_fields', None)}; "
                             f"this buffer was built for {self._example_fields}.")
        stored = type(self.samples)(*(getattr(samples, f) for f in self._stored_fields))
        storage = self.storage
        with storage.write_access():
            T_new = storage.check_chunk(stored)
            if self.sampling.prioritized:
                self.sampling.check_chunk(T_new)
            t = storage.t
            idxs = storage.write(stored, T_new)
            if self.observations is not None:
                self.observations.write(t, T_new, idxs, samples.observation)
            self.layout.write(t, T_new, samples)
            storage.advance(T_new)
            self.targets.update(T_new)
            self.sampling.on_append(T_new, priorities)
        return T_new, idxs

    # ------------------------------------------------------------- sampling
    def sample_batch(self, batch_B: int, batch_T: int | None = None
                     ) -> SamplesFromReplay | SequenceSamplesFromReplay:
        """Draw ``batch_B`` items (steps, or sequences of ``batch_T``) as torch tensors."""
        batch_T = self.resolve_batch_T(batch_T)
        with self.storage.read_access():
            T_idxs, B_idxs, is_weights = self.sampling.starts(batch_B, batch_T)
            return self.layout.extract_batch(T_idxs, B_idxs, batch_T, is_weights)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray,
                      batch_T: int | None = None
                      ) -> SamplesFromReplay | SequenceSamplesFromReplay:
        """The batch at given start rows ``T_idxs`` of envs ``B_idxs`` (no weights)."""
        return self.layout.extract_batch(T_idxs, B_idxs, self.resolve_batch_T(batch_T), None)

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> ArrayTree:
        """Observations at rows ``T_idxs`` of envs ``B_idxs`` (index arrays of one shape)."""
        if self.observations is not None:
            return self.observations.extract(T_idxs, B_idxs)
        return self.samples.observation[T_idxs, B_idxs]

    # ----------------------------------------------------------- priorities
    @property
    def priority_tree(self) -> SumTree:
        """The :class:`~rlframe.replays.sum_tree.SumTree` of prioritized sampling."""
        return self._prioritized("priority_tree").tree

    @property
    def beta(self) -> float:
        """Importance-sampling exponent of prioritized sampling."""
        return self._prioritized("beta").beta

    def set_beta(self, beta: float) -> None:
        """Set the importance-sampling exponent."""
        self._prioritized("set_beta").beta = beta

    def update_batch_priorities(self, priorities: torch.Tensor | np.ndarray) -> None:
        """New raw priorities ``[batch_B]`` for the items of the last batch."""
        sampling = self._prioritized("update_batch_priorities")
        with self.storage.write_access():
            sampling.update_batch_priorities(priorities)

    def _prioritized(self, what: str) -> PrioritizedSampling:
        if not self.sampling.prioritized:
            raise AttributeError(f"{type(self).__name__} samples uniformly: it has no {what}.")
        return self.sampling

    # ------------------------------------------------- frames and RNN states
    @property
    def n_frames(self) -> int:
        """Frames per observation (frame storage only)."""
        return self._frames("n_frames").n_frames

    @property
    def samples_frames(self) -> np.ndarray:
        """``[T + n_frames - 1, B, *frame_shape]`` stored frames."""
        return self._frames("samples_frames").frames

    @property
    def samples_new_frames(self) -> np.ndarray:
        """``[T, B, *frame_shape]``: the newest frame of each step."""
        return self._frames("samples_new_frames").new_frames

    def _frames(self, what: str) -> FrameStore:
        if self.observations is None:
            raise AttributeError(f"{type(self).__name__} stores whole observations: it has no "
                                 f"{what}.")
        return self.observations

    @property
    def samples_prev_rnn_state(self) -> ArrayTree | None:
        """Stored RNN states of a sequence layout (None without them)."""
        return self.layout.prev_rnn_state


def _stored_type(example: NamedArrayTuple, fields: tuple[str, ...]) -> type[NamedArrayTuple]:
    """The example's namedarraytuple type, or one with only ``fields``."""
    if fields == tuple(example._fields):
        return namedarraytuple_like(example)
    return namedarraytuple(type(example).__name__, fields)
