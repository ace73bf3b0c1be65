"""Ring storage of ``[T, B]`` samples with n-step returns.

The buffer holds ``T = ceil(size / B)`` time steps for each of ``B`` envs. A
cursor ``t`` marks the next row to write; once the buffer is full, new chunks
overwrite the oldest rows. Positions are described by *age*: the newest stored
step has age 0, the one before it age 1, and so on up to ``n_stored - 1``.

A step can be trained on only when what it needs is stored:

* its n-step return needs the ``n_step_return - 1`` steps after it, and the
  target observation ``n_step_return`` steps after it, so the newest
  ``off_backward = n_step_return`` steps are not sampled;
* its previous action and reward (and, for frame buffers, its older frames)
  come from the steps before it, so the oldest ``off_forward`` steps are not
  sampled (``off_forward = 1``; frame buffers ``max(1, n_frames - 1)``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlframe.replays.base import BaseReplayBuffer
from rlframe.utils.buffer import buffer_from_example, get_leading_dims


class BaseNStepReturnBuffer(BaseReplayBuffer):
    """Preallocated ``[T, B]`` storage with n-step discounted returns.

    After each append, the return of every step whose next ``n_step_return``
    rewards are now stored is computed::

        return_[t] = sum_{k < n} discount^k * reward[t + k]   (stops after a done)
        done_n[t]  = any(done[t : t + n])

    so an algorithm's target is ``return_ + (1 - done_n) * discount^n * Q(s_{t+n})``.
    With ``n_step_return=1`` they are the stored ``reward`` and ``done`` arrays.

    Args:
        example: namedtuple of one step's values, e.g.
            ``SamplesToBuffer(observation, action, reward, done)``; must have
            ``reward`` and ``done`` fields.
        size: total capacity in transitions (floats such as ``1e6`` accepted).
        B: number of envs (columns) appended together.
        discount: discount factor inside the n-step return.
        n_step_return: number of rewards summed (>= 1).

    Attributes:
        T: time steps stored per env.
        size: ``T * B``, the capacity actually allocated.
        t: cursor, the row the next appended step goes to.
        samples: namedarraytuple of ``[T, B, ...]`` arrays.
        samples_return_: ``[T, B]`` n-step returns (``samples.reward`` when n = 1).
        samples_done_n: ``[T, B]`` n-step done flags (``samples.done`` when n = 1).
        off_backward, off_forward: steps not sampled at the newest / oldest end.
    """

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        for field in ("reward", "done"):
            if not hasattr(example, field):
                raise ValueError(f"Replay example must be a namedtuple with a '{field}' field; "
                                 f"got {type(example).__name__} with fields "
                                 f"{getattr(example, '_fields', None)}.")
        B = int(B)
        if B < 1:
            raise ValueError(f"B={B} must be >= 1 (number of envs appended together).")
        if int(n_step_return) != n_step_return or n_step_return < 1:
            raise ValueError(f"n_step_return={n_step_return!r} must be an integer >= 1.")
        if not 0 <= discount <= 1:
            raise ValueError(f"discount={discount} must be within [0, 1].")
        if size < B:
            raise ValueError(f"Replay size={size} is smaller than B={B}: the buffer must hold "
                             "at least one time step per env.")
        self.T: int = int(math.ceil(size / B))
        self.B: int = B
        self.size: int = self.T * B
        self.discount: float = discount
        self.n_step_return: int = int(n_step_return)
        self.t: int = 0
        self._buffer_full: bool = False
        self.off_backward: int = self.n_step_return
        self.off_forward: int = 1
        self.samples: Any = buffer_from_example(example, (self.T, B), share_memory=self.async_)
        if self.n_step_return > 1:
            self.samples_return_: np.ndarray = buffer_from_example(
                example.reward, (self.T, B), share_memory=self.async_)
            self.samples_done_n: np.ndarray = buffer_from_example(
                example.done, (self.T, B), share_memory=self.async_)
        else:
            self.samples_return_ = self.samples.reward
            self.samples_done_n = self.samples.done
        self.validate_capacity()

    def _check_capacity(self, needed_T: int, what: str) -> None:
        """Raise if ``T`` cannot hold ``needed_T`` steps per env (for ``what``)."""
        if self.T < needed_T:
            raise ValueError(
                f"Replay size={self.size} with B={self.B} holds T={self.T} steps per env, but "
                f"{what} needs at least {needed_T} steps per env (size >= {needed_T * self.B}).")

    def validate_capacity(self) -> None:
        """Raise if, even when full, no step could be sampled (called again by mixins
        that widen the invalid zone)."""
        self._check_capacity(self.off_backward + self.off_forward + 1,
                             f"n_step_return={self.n_step_return} (off_backward="
                             f"{self.off_backward}, off_forward={self.off_forward})")

    @property
    def n_stored(self) -> int:
        """Time steps per env currently stored (``T`` once the buffer has wrapped)."""
        return self.T if self._buffer_full else self.t

    def rows_of_ages(self, ages: np.ndarray | int) -> np.ndarray | int:
        """Row index of the step ``ages`` steps older than the newest one."""
        return (self.t - 1 - ages) % self.T

    def append_samples(self, samples: Any) -> tuple[int, slice | np.ndarray]:
        """Write a ``[T_new, B]`` chunk at the cursor, wrapping, and update returns.

        Args:
            samples: namedarraytuple with the example's fields, each
                ``[T_new, B, ...]`` (numpy arrays or CPU torch tensors).

        Returns:
            ``(T_new, idxs)``: the chunk length and the rows written (a slice, or
            an index array when the chunk wrapped).
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
        t = self.t
        if t + T_new <= self.T:
            idxs: slice | np.ndarray = slice(t, t + T_new)
        else:
            idxs = np.arange(t, t + T_new) % self.T
        self.samples[idxs] = samples
        self._buffer_full = self._buffer_full or t + T_new >= self.T
        self.t = (t + T_new) % self.T
        self.compute_returns(T_new)
        return T_new, idxs

    def n_step_window(self, T_new: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Rows whose n-step return became computable with the last ``T_new`` steps.

        Returns:
            ``(rows [M], window [M + n - 1])``, both in time order: ``rows`` are the
            steps to compute and ``window`` the rows their rewards come from
            (``window[k : k + n]`` for ``rows[k]``); None when there are none.
        """
        n = self.n_step_return
        # Newly complete steps have ages n-1 .. n-2+T_new; only stored steps count.
        oldest_age = min(n - 2 + T_new, self.n_stored - 1)
        M = oldest_age - (n - 1) + 1
        if M <= 0:
            return None
        first = self.rows_of_ages(oldest_age)
        window = (first + np.arange(M + n - 1)) % self.T
        return window[:M], window

    def compute_returns(self, T_new: int) -> None:
        """Fill ``samples_return_`` and ``samples_done_n`` for newly complete steps."""
        if self.n_step_return == 1:
            return  # aliases of reward and done
        found = self.n_step_window(T_new)
        if found is None:
            return
        rows, window = found
        reward = self.samples.reward[window]
        done = self.samples.done[window].astype(bool)
        return_, done_n = n_step_sums(reward, done, self.n_step_return, self.discount)
        self.samples_return_[rows] = return_
        self.samples_done_n[rows] = done_n


def n_step_sums(reward: np.ndarray, done: np.ndarray, n_step: int,
                discount: float) -> tuple[np.ndarray, np.ndarray]:
    """Discounted n-step reward sums and done flags over a time-ordered window.

    Args:
        reward: [M + n - 1, B] rewards in time order.
        done: [M + n - 1, B] bool.
        n_step: n.
        discount: discount factor.

    Returns:
        ``(return_ [M, B], done_n [M, B] bool)`` for the first M steps.
    """
    M = reward.shape[0] - (n_step - 1)
    return_ = reward[:M].copy()
    done_n = done[:M].copy()
    for k in range(1, n_step):
        # Step k counts only if no episode ended in steps 0 .. k-1.
        return_ += (discount ** k) * reward[k:k + M] * ~_expand(done_n, reward)
        done_n |= done[k:k + M]
    return return_, done_n


def _expand(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``mask`` with trailing singleton dims to broadcast against ``like``."""
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))
