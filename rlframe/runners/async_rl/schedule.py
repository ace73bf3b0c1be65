"""The throttle schedule: when the optimizer of an asynchronous run may train, and how
the sampler and the optimizer wait for each other."""
from __future__ import annotations

import math
import time
from typing import Callable

THROTTLE_WAIT = 0.05  # While the optimizer waits for the sampler: seconds between checks
# on the children.
OPT_POLL_S = 0.001  # How often the waiting optimizer looks at the sampler's iteration.
SAMPLER_WAIT = 0.001  # Seconds the sampler sleeps while it is too far ahead of the optimizer.
# The reached replay ratio is checked against replay_ratio only over at least this many
# optimize_agent calls' worth of sampled steps (one call's lag must not look like a drop).
RATIO_CHECK_CALLS = 4


def async_n_itr(n_steps: int, log_interval_steps: int, sampler_batch_size: int
                ) -> tuple[int, int]:
    """Sampler iterations of an asynchronous run.

    Returns:
        ``(log_interval_itrs, n_itr)`` with ``log_interval_itrs =
        max(log_interval_steps // sampler_batch_size, 1)`` and ``n_itr =
        ceil(n_steps / log_interval_steps) * log_interval_itrs``.
    """
    log_interval_itrs = max(int(log_interval_steps) // int(sampler_batch_size), 1)
    n_itr = math.ceil(n_steps / log_interval_steps) * log_interval_itrs
    return log_interval_itrs, n_itr


def throttle_schedule(min_steps_learn: int, batch_size: int, updates_per_sync: int,
                      sampler_batch_size: int, replay_ratio: float, world_size: int = 1
                      ) -> tuple[int, float]:
    """When the optimizer may make its first and its following ``optimize_agent`` calls.

    Returns:
        ``(throttle_itr, delta_throttle_itr)``: the first call waits until the
        sampler's iteration reaches ``1 + min_steps_learn // sampler_batch_size``;
        each call then moves that mark by ``batch_size * world_size *
        updates_per_sync / (sampler_batch_size * replay_ratio)`` iterations.
    """
    if not replay_ratio > 0:
        raise ValueError(f"replay_ratio must be positive to throttle the optimizer, got "
                         f"{replay_ratio!r}.")
    throttle_itr = 1 + int(min_steps_learn) // int(sampler_batch_size)
    delta_throttle_itr = (batch_size * world_size * updates_per_sync
                          / (sampler_batch_size * replay_ratio))
    return throttle_itr, delta_throttle_itr


def _poll_until(ready: Callable[[], bool], poll_s: float, check_s: float,
                give_up: Callable[[], bool]) -> tuple[bool, float]:
    """Sleep ``poll_s`` at a time until ``ready()``; every ``check_s`` seconds ask
    ``give_up()`` (which may also raise).

    Returns:
        ``(ready, seconds waited)``; ``ready`` is False when ``give_up()`` said so.
    """
    if ready():
        return True, 0.
    start = checked = time.perf_counter()
    while not ready():
        time.sleep(poll_s)
        now = time.perf_counter()
        if now - checked >= check_s:
            checked = now
            if give_up():
                return False, now - start
    return True, time.perf_counter() - start

