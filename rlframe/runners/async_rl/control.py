"""Control objects shared by the processes of one asynchronous run: the flags, counters
and semaphores of :class:`AsyncControl`, and the optimizer ranks' :class:`OptimizerBarrier`.

Every object is built from the children's multiprocessing context, so that the control
pickles into spawn and forkserver children as it is handed to them at their start.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rlframe.samplers.async_.base import N_DOUBLE_BUFFER

if TYPE_CHECKING:
    from ctypes import c_byte, c_double
    from multiprocessing.context import BaseContext
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Semaphore

POLL_S = 0.2  # How often a blocked process checks on the others.


class OptimizerBarrier:
    """Where the optimizer ranks meet before every ``optimize_agent`` call (``ctrl.opt_throttle``).

    Rank 0 waits until ranks 1.. have arrived, then lets them all go. Unlike a
    ``multiprocessing.Barrier``, whose last arrival waits for every waiting party
    to acknowledge its wake-up (forever, for a rank that died waiting), no rank
    here ever waits on another's acknowledgement: every wait polls, can time out
    and check on the others, and :meth:`abort` never blocks.

    Args:
        parties: number of optimizer ranks (at least 2).
        ctx: multiprocessing context of the ranks' processes.
    """

    def __init__(self, parties: int, ctx: BaseContext | None = None):
        if parties < 2:
            raise ValueError(f"parties must be at least 2 optimizer ranks, got {parties!r}.")
        ctx = mp.get_context() if ctx is None else ctx
        self.parties = parties
        self._arrived = ctx.Semaphore(0)
        self._go = [ctx.Semaphore(0) for _ in range(parties - 1)]
        self._broken = ctx.RawValue("b", False)
        self._n_arrived = 0  # Rank 0's count of arrivals at the current meeting.

    @property
    def broken(self) -> bool:
        """Whether :meth:`abort` was called (by any process)."""
        return bool(self._broken.value)

    def wait(self, rank: int, timeout: float | None = None,
             check: Callable[[], None] | None = None) -> bool:
        """Meet the other ranks.

        Args:
            rank: the caller's optimizer rank.
            timeout: seconds to wait at most (None: no limit).
            check: called every POLL_S seconds while waiting (it may raise).

        Returns:
            True once all ranks met, False if ``timeout`` passed first (rank 0 then
            keeps the arrivals for its next call; ranks 1.. must not call again).

        Raises:
            threading.BrokenBarrierError: the barrier was aborted.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if rank == 0:
            while self._n_arrived < self.parties - 1:
                if self._wait_for(self._arrived, deadline, check):
                    self._n_arrived += 1
                elif deadline is not None and time.monotonic() >= deadline:
                    return False
            self._raise_if_broken()
            self._n_arrived = 0
            for go in self._go:
                go.release()
            return True
        self._raise_if_broken()
        self._arrived.release()
        go = self._go[rank - 1]
        while not self._wait_for(go, deadline, check):
            if deadline is not None and time.monotonic() >= deadline:
                return False
        self._raise_if_broken()
        return True

    def _wait_for(self, semaphore: Any, deadline: float | None,
                  check: Callable[[], None] | None) -> bool:
        """One poll: acquire ``semaphore`` within POLL_S (or until ``deadline``)."""
        self._raise_if_broken()
        wait_s = POLL_S if deadline is None else max(0., min(POLL_S, deadline - time.monotonic()))
        if semaphore.acquire(timeout=wait_s):
            self._raise_if_broken()
            return True
        if check is not None:
            check()
        return False

    def _raise_if_broken(self) -> None:
        if self._broken.value:
            raise threading.BrokenBarrierError

    def abort(self) -> None:
        """Break the barrier: every rank waiting on it, now or later, raises
        ``threading.BrokenBarrierError``."""
        self._broken.value = True
        self._arrived.release()
        for go in self._go:
            go.release()




@dataclass(eq=False)
class CopierControl:
    """The part of :class:`AsyncControl` that one memory copier uses: one half of the
    double buffer."""

    quit: Synchronized[int]
    """``AsyncControl.quit``: the copier stops once it is set."""
    sample_ready: Semaphore
    """Released by the sampler when it filled this half; acquired by the copier."""
    sample_copied: Semaphore
    """Released by the copier when it appended this half to the replay; acquired by the
    sampler before it writes the half again."""


@dataclass(eq=False)
class AsyncControl:
    """Shared control of one asynchronous run (from :func:`build_ctrl`).

    Written and read by the master (optimizer rank 0), the sampler process, the two
    memory copiers and the optimizer ranks 1.. (:class:`AsyncOptWorker`).
    """

    quit: Synchronized[int]
    """Set by the sampler after its last batch and by the master at shutdown; every
    child stops once it sees it, and the master's train loop ends."""
    quit_opt: c_byte
    """Set by the master at shutdown; optimizer ranks 1.. stop when they pass the
    barrier with it set."""
    sample_ready: list[Semaphore]
    """``sample_ready[i]``: released by the sampler when half ``i`` of the double buffer
    is full (and at its exit, and by the master at shutdown); acquired by copier ``i``."""
    sample_copied: list[Semaphore]
    """``sample_copied[i]``: released by copier ``i`` once half ``i`` is in the replay
    (and by the master at shutdown); acquired by the sampler before it writes half ``i``."""
    sampler_itr: Synchronized[int]
    """The sampler's last finished iteration: written by the sampler (under its lock,
    after it queued that batch's TrajInfos) and by the master when a run resumes; read
    by the master (throttle, logging) and by the optimizer ranks."""
    opt_throttle: OptimizerBarrier | None
    """Where the optimizer ranks meet before every ``optimize_agent`` call (None: one
    rank); rank 0, the master, aborts it when the run fails."""
    eval_time: Synchronized[float]
    """Seconds the sampler spent evaluating (:class:`AsyncRlEval`): added by the sampler,
    read by the master for its logging."""
    sample_limit_itr: c_double
    """The last iteration the sampler may start (inf: it runs free): written by the
    master as it moves its throttle (``sampler_lead_steps``), read by the sampler."""
    sampler_wait_time: c_double
    """Seconds the sampler waited for ``sample_limit_itr``: added by the sampler, read by
    the master for its ``SamplerThrottle`` column."""

    def copier(self, i: int) -> CopierControl:
        """What memory copier ``i`` (of half ``i`` of the double buffer) needs."""
        return CopierControl(quit=self.quit, sample_ready=self.sample_ready[i],
                             sample_copied=self.sample_copied[i])


def build_ctrl(world_size: int = 1, ctx: BaseContext | None = None) -> AsyncControl:
    """Shared control objects of one asynchronous run.

    Args:
        world_size: optimizer ranks (an :class:`OptimizerBarrier`, ``opt_throttle``,
            joins them when more than one).
        ctx: multiprocessing context of the children (default: the default context).

    Returns:
        an :class:`AsyncControl` with nothing sampled yet: both halves of the double
        buffer free (``sample_copied`` 1, ``sample_ready`` 0), ``sampler_itr`` 0,
        flags unset, ``sample_limit_itr`` inf (the sampler runs free).
    """
    ctx = mp.get_context() if ctx is None else ctx
    return AsyncControl(
        quit=ctx.Value("b", False, lock=True),
        quit_opt=ctx.RawValue("b", False),
        sample_ready=[ctx.Semaphore(0) for _ in range(N_DOUBLE_BUFFER)],
        sample_copied=[ctx.Semaphore(1) for _ in range(N_DOUBLE_BUFFER)],
        sampler_itr=ctx.Value("l", 0, lock=True),
        opt_throttle=OptimizerBarrier(world_size, ctx) if world_size > 1 else None,
        eval_time=ctx.Value("d", 0., lock=True),
        sample_limit_itr=ctx.RawValue("d", math.inf),
        sampler_wait_time=ctx.RawValue("d", 0.),
    )
