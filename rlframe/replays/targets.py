"""Return targets of stored steps: n-step discounted returns, done and time-limit flags.

After each append, the targets of every step whose next ``n_step_return``
rewards are now stored are computed::

    return_[t]   = sum_{k < n} discount^k * reward[t + k]     (stops after a done)
    done_n[t]    = any(done[t : t + n])
    timeout_n[t] = the first done in t .. t+n-1 came with timeout   (time-limit targets)

so an algorithm's target is ``return_ + (1 - done_n) * discount^n * Q(s_{t+n})``,
and a sample with ``timeout_n`` has no correct target (the state after the time
limit was never stored). With ``n_step_return=1`` the arrays are the stored
``reward``, ``done`` and ``timeout`` themselves.
"""
from __future__ import annotations


import numpy as np

from rlframe.replays.storage import RingStorage


class NStepTargets:
    """n-step returns (and, with ``time_limit``, ``timeout_n``) over a ring storage.

    Args:
        discount: discount factor inside the n-step return, in [0, 1].
        n_step_return: rewards summed (>= 1).
        time_limit: keep the ``timeout`` field and compute ``timeout_n``.

    Attributes:
        return_, done_n: ``[T, B]`` arrays (aliases of reward/done when n = 1).
        timeout_n: ``[T, B]`` bool, or None without ``time_limit``.
        off_backward: newest steps never sampled: their return is not complete.
    """

    def __init__(self, discount: float = 1, n_step_return: int = 1, time_limit: bool = False):
        if int(n_step_return) != n_step_return or n_step_return < 1:
            raise ValueError(f"n_step_return={n_step_return!r} must be an integer >= 1.")
        if not 0 <= discount <= 1:
            raise ValueError(f"discount={discount} must be within [0, 1].")
        self.discount: float = discount
        self.n_step_return: int = int(n_step_return)
        self.time_limit: bool = time_limit
        self.off_backward: int = self.n_step_return
        self.return_: np.ndarray | None = None
        self.done_n: np.ndarray | None = None
        self.timeout_n: np.ndarray | None = None
        self._storage: RingStorage | None = None

    def required_fields(self) -> tuple[str, ...]:
        """Fields the stored example must have."""
        return ("reward", "done", "timeout") if self.time_limit else ("reward", "done")

    def build(self, storage: RingStorage) -> None:
        """Allocate the target arrays beside ``storage``'s."""
        self._storage = s = storage
        samples = s.samples
        if self.n_step_return == 1:
            self.return_, self.done_n = samples.reward, samples.done
            self.timeout_n = samples.timeout if self.time_limit else None
            return
        lead = (s.T, s.B)
        self.return_ = s.allocate(samples.reward[0, 0], lead)
        self.done_n = s.allocate(samples.done[0, 0], lead)
        if self.time_limit:
            self.timeout_n = s.allocate(samples.timeout[0, 0], lead)

    def window(self, T_new: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Rows whose targets became computable with the last ``T_new`` steps.

        Returns:
            ``(rows [M], window [M + n - 1])``, both in time order: ``rows`` are the
            steps to compute and ``window`` the rows their rewards come from
            (``window[k : k + n]`` for ``rows[k]``); None when there are none.
        """
        s, n = self._storage, self.n_step_return
        # Newly complete steps have ages n-1 .. n-2+T_new; only stored steps count.
        oldest_age = min(n - 2 + T_new, s.n_stored - 1)
        M = oldest_age - (n - 1) + 1
        if M <= 0:
            return None
        first = s.rows_of_ages(oldest_age)
        window = (first + np.arange(M + n - 1)) % s.T
        return window[:M], window

    def update(self, T_new: int) -> None:
        """Compute the targets of the steps the last ``T_new`` appended rows completed."""
        if self.n_step_return == 1:
            return  # Aliases of the stored arrays.
        found = self.window(T_new)
        if found is None:
            return
        rows, window = found
        samples = self._storage.samples
        done = samples.done[window].astype(bool)
        return_, done_n = n_step_sums(samples.reward[window], done, self.n_step_return,
                                      self.discount)
        self.return_[rows] = return_
        self.done_n[rows] = done_n
        if self.time_limit:
            self.timeout_n[rows] = n_step_timeouts(done, samples.timeout[window].astype(bool),
                                                   self.n_step_return)

    def at(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> dict[str, np.ndarray]:
        """``return_``, ``done_n`` (and ``timeout``, ``timeout_n``) at rows ``T_idxs`` of
        envs ``B_idxs`` (each [n])."""
        flat = T_idxs * self._storage.B + B_idxs  # Gathers on flat views: one index each.
        out = dict(return_=self.return_.reshape(-1)[flat], done_n=self.done_n.reshape(-1)[flat])
        if self.time_limit:
            out["timeout"] = self._storage.samples.timeout.reshape(-1)[flat]
            out["timeout_n"] = self.timeout_n.reshape(-1)[flat]
        return out


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
        not_ended = ~done_n.reshape(done_n.shape + (1,) * (reward.ndim - done_n.ndim))
        return_ += (discount ** k) * reward[k:k + M] * not_ended
        done_n |= done[k:k + M]
    return return_, done_n


def n_step_timeouts(done: np.ndarray, timeout: np.ndarray, n_step: int) -> np.ndarray:
    """Whether a time limit ended each step's n-step window (before any termination).

    Args:
        done, timeout: [M + n - 1, B] bool, in time order.
        n_step: n.

    Returns:
        timeout_n [M, B] bool.
    """
    M = done.shape[0] - (n_step - 1)
    timeout_n = timeout[:M].copy()
    ended = done[:M].copy()
    for k in range(1, n_step):
        timeout_n |= timeout[k:k + M] & ~ended
        ended |= done[k:k + M]
    return timeout_n
