"""Sequences of steps with n-step returns and stored RNN states (R2D1)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlframe.replays.base import without_field
from rlframe.replays.n_step import BaseNStepReturnBuffer
from rlframe.utils.buffer import buffer_from_example, buffer_func, torchify_buffer
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.misc import extract_sequences

SamplesFromReplay = namedarraytuple("SamplesFromReplay",
                                    ["all_observation", "all_action", "all_reward", "return_",
                                     "done", "done_n", "init_rnn_state"])


class SequenceNStepReturnBuffer(BaseNStepReturnBuffer):
    """n-step storage sampled as ``[batch_T, batch_B]`` sequences.

    The agent's recurrent state before each step (``prev_rnn_state`` in the
    example) is kept only every ``rnn_state_interval`` steps, at rows that are
    multiples of it, and sequences start only at those rows so training can
    begin from a recorded state. ``T`` is rounded up to a multiple of the
    interval.

    A batch of ``batch_B`` sequences of length ``L = batch_T`` starting at rows
    ``t`` is a :data:`SamplesFromReplay` (torch tensors):

    * ``all_observation``: ``[L + n, batch_B, ...]``, observations ``t .. t+L+n-1``
      (the agent's inputs, then those of the n-step targets);
    * ``all_action``, ``all_reward``: ``[L + n, batch_B, ...]``, steps
      ``t-1 .. t+L+n-2``, i.e. the previous action/reward of each observation;
      entry 0 is zeroed where ``done[t-1]``;
    * ``return_``, ``done``, ``done_n``: ``[L, batch_B]``;
    * ``init_rnn_state``: ``[batch_B, ...]``, the stored state before step ``t``
      (None when ``rnn_state_interval == 0``).

    Args:
        example: namedtuple of one step; with ``rnn_state_interval > 0`` it needs a
            ``prev_rnn_state`` field (``[...]`` per env, e.g. an ``RnnState`` of arrays).
        size: capacity in transitions.
        B: envs appended together.
        rnn_state_interval: store the RNN state every this many steps (0: never,
            1: every step).
        batch_T: default sequence length (required by prioritized buffers).
        discount, n_step_return: see :class:`BaseNStepReturnBuffer`.

    Attributes:
        samples_prev_rnn_state: ``[T // rnn_state_interval, B, ...]`` stored states
            (for intervals above 1; with interval 1 they are ``samples.prev_rnn_state``).
        rnn_T: rows of stored states per env.
    """

    def __init__(self, example: Any, size: int | float, B: int, rnn_state_interval: int,
                 batch_T: int | None = None, discount: float = 1, n_step_return: int = 1):
        if int(rnn_state_interval) != rnn_state_interval or rnn_state_interval < 0:
            raise ValueError(f"rnn_state_interval={rnn_state_interval!r} must be an integer >= 0 "
                             "(0: no RNN state stored, 1: every step).")
        if batch_T is not None and (int(batch_T) != batch_T or batch_T < 1):
            raise ValueError(f"batch_T={batch_T!r} must be None or an integer >= 1.")
        rnn_state_interval = int(rnn_state_interval)
        has_state = hasattr(example, "prev_rnn_state")
        if rnn_state_interval > 0 and not has_state:
            raise ValueError(f"rnn_state_interval={rnn_state_interval} stores RNN states, but the "
                             f"example has no 'prev_rnn_state' field (fields: "
                             f"{getattr(example, '_fields', None)}); use rnn_state_interval=0.")
        self.rnn_state_interval: int = rnn_state_interval
        self.batch_T: int | None = None if batch_T is None else int(batch_T)
        if size < B:
            raise ValueError(f"Replay size={size} is smaller than B={B}: the buffer must hold "
                             "at least one time step per env.")
        # Sequence starts (and stored states) fall on multiples of this.
        self.start_interval: int = max(1, rnn_state_interval)
        buffer_example = example
        if rnn_state_interval != 1 and has_state:
            buffer_example = without_field(example, "prev_rnn_state")
        if rnn_state_interval > 1:
            size = B * rnn_state_interval * math.ceil(math.ceil(size / B) / rnn_state_interval)
        super().__init__(example=buffer_example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return)
        self.rnn_T: int = self.T // self.start_interval
        self.samples_prev_rnn_state: Any = None
        if rnn_state_interval > 1:
            self.samples_prev_rnn_state = buffer_from_example(
                example.prev_rnn_state, (self.rnn_T, self.B), share_memory=self.async_)
        elif rnn_state_interval == 1:
            self.samples_prev_rnn_state = self.samples.prev_rnn_state

    def validate_capacity(self) -> None:
        """Also check that sequences of the default ``batch_T`` fit."""
        super().validate_capacity()
        if self.batch_T is not None:
            self.check_batch_T(self.batch_T)

    def min_steps_to_sample(self, batch_T: int) -> int:
        """Steps per env the replay must hold (from the start) to sample ``batch_T`` sequences.

        The oldest ``off_forward`` steps cannot start a sequence, so the first
        start is the first aligned row at or after them.
        """
        u = self.start_interval
        first_start = u * math.ceil(self.off_forward / u)
        return first_start + batch_T + self.n_step_return

    def check_batch_T(self, batch_T: int) -> None:
        """Raise if ``batch_T`` sequences can never be sampled from this replay."""
        u = self.start_interval
        # Once full, the valid starts span T - n - f - batch_T + 1 rows; they must
        # include an aligned row wherever the cursor is.
        needed_T = batch_T + self.n_step_return + self.off_forward + u - 1
        if self.T < needed_T:
            raise ValueError(
                f"batch_T={batch_T} is longer than the replay holds: T={self.T} steps per env "
                f"(size={self.size}, B={self.B}) fits sequences of at most "
                f"{self.T - self.n_step_return - self.off_forward - u + 1} steps with "
                f"n_step_return={self.n_step_return}, off_forward={self.off_forward}, "
                f"rnn_state_interval={self.rnn_state_interval}; need size >= "
                f"{needed_T * self.B}.")

    def resolve_batch_T(self, batch_T: int | None) -> int:
        """``batch_T``, or the buffer's default, validated."""
        if batch_T is None:
            batch_T = self.batch_T
        if batch_T is None:
            raise ValueError(f"{type(self).__name__}.sample_batch needs batch_T: pass it, or set "
                             "batch_T when building the buffer.")
        if int(batch_T) != batch_T or batch_T < 1:
            raise ValueError(f"batch_T={batch_T!r} must be an integer >= 1.")
        batch_T = int(batch_T)
        self.check_batch_T(batch_T)
        return batch_T

    def append_samples(self, samples: Any) -> tuple[int, Any]:
        """Store a ``[T, B]`` chunk; RNN states are kept at rows that are multiples of
        ``rnn_state_interval``.

        Args:
            samples: namedarraytuple with the example's fields.
        """
        rsi = self.rnn_state_interval
        t = self.t
        state = None
        if rsi > 1 and not hasattr(samples, "prev_rnn_state"):
            raise ValueError(f"append_samples needs a 'prev_rnn_state' field with "
                             f"rnn_state_interval={rsi}; got fields "
                             f"{getattr(samples, '_fields', None)}.")
        if rsi != 1 and hasattr(samples, "prev_rnn_state"):
            state = samples.prev_rnn_state
            samples = without_field(samples, "prev_rnn_state")
        T, idxs = super().append_samples(samples)
        if rsi > 1:
            # Chunk offsets whose row is a multiple of the interval.
            offsets = np.arange((-t) % rsi, T, rsi)
            if len(offsets) > 0:
                rows = ((t + offsets) % self.T) // rsi
                self.samples_prev_rnn_state[rows] = state[offsets]
        return T, idxs

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray, T: int) -> Any:
        """Sequences of length ``T`` starting at rows ``T_idxs`` [batch_B] of envs ``B_idxs``."""
        s = self.samples
        n = self.n_step_return
        rows = (np.asarray(T_idxs)[None, :] + np.arange(T + n)[:, None]) % self.T
        B_rows = np.broadcast_to(np.asarray(B_idxs)[None, :], rows.shape)
        prev_T_idxs = (T_idxs - 1) % self.T
        batch = SamplesFromReplay(
            all_observation=self.extract_observation(rows, B_rows),
            all_action=buffer_func(s.action, extract_sequences, prev_T_idxs, B_idxs, T + n),
            all_reward=extract_sequences(s.reward, prev_T_idxs, B_idxs, T + n),
            return_=extract_sequences(self.samples_return_, T_idxs, B_idxs, T),
            done=extract_sequences(s.done, T_idxs, B_idxs, T),
            done_n=extract_sequences(self.samples_done_n, T_idxs, B_idxs, T),
            init_rnn_state=self.extract_rnn_state(T_idxs, B_idxs),
        )
        new_episode = np.asarray(s.done[prev_T_idxs, B_idxs], dtype=bool)
        if new_episode.any():
            batch.all_action[0, new_episode] = 0
            batch.all_reward[0, new_episode] = 0
        return torchify_buffer(batch)

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Observations at rows ``T_idxs`` of envs ``B_idxs`` (index arrays of one shape)."""
        return self.samples.observation[T_idxs, B_idxs]

    def extract_rnn_state(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Stored RNN states before steps ``T_idxs`` (multiples of the interval), [batch_B, ...]."""
        if self.samples_prev_rnn_state is None:
            return None
        return self.samples_prev_rnn_state[T_idxs // self.start_interval, B_idxs]
