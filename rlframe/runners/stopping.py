"""Stopping at the end of an iteration: Ctrl-C or SIGTERM during an iteration's sampling
and update lets that iteration end (for a few seconds at most) before the run stops, so
that its final snapshot holds a whole iteration and a resumed run continues exactly as
an uninterrupted one would. A second signal, or the time running out, stops at once."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import FrameType
from typing import Callable, Iterator

_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def stop_error(signum: int) -> BaseException:
    """What the signal raises where it is not held back: KeyboardInterrupt for Ctrl-C,
    ``SystemExit(128 + signum)`` for SIGTERM (the exit status a shell reports)."""
    return KeyboardInterrupt() if signum == signal.SIGINT else SystemExit(128 + signum)


class IterationStop:
    """Within :meth:`iteration`, hold the first Ctrl-C or SIGTERM back until the block
    ends, then raise it; outside, raise at once. Use as a context manager around the
    training loop (it sets the handlers there and puts the previous ones back after).

    Args:
        wait_s: the longest a held signal waits for the block to end (0: never held).
        log: where the stop is told, once the block has ended (e.g. ``logger.log``).

    Handlers are set only in the main thread, and Ctrl-C is held only where Python's
    default Ctrl-C handler was in place (a program's own handler is left alone).
    """

    def __init__(self, wait_s: float, log: Callable[[str], None]):
        self.wait_s = float(wait_s)
        self.log = log
        self.note: str | None = None  # Why the run stopped inside an iteration, if it did.
        self._pending: int | None = None
        self._expired = False
        self._since = 0.
        self._in_iteration = False
        self._timer: threading.Timer | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> IterationStop:
        if self.wait_s <= 0 or threading.current_thread() is not threading.main_thread():
            return self
        for signum in (signal.SIGINT, signal.SIGTERM):
            if (signum == signal.SIGINT
                    and signal.getsignal(signum) is not signal.default_int_handler):
                continue
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._cancel_timer()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def iteration(self, itr: int) -> Iterator[None]:
        """The block of iteration ``itr`` whose end a stop waits for."""
        self._in_iteration = True
        try:
            yield
        finally:
            self._in_iteration = False
            self._cancel_timer()
        if self._pending is not None:
            signum, self._pending = self._pending, None
            self.log(f"{_NAMES[signum]} arrived during iteration {itr}, which was finished "
                     f"({time.monotonic() - self._since:.1f} s) before stopping.")
            raise stop_error(signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._pending is None and self._in_iteration:
            self._pending, self._since = signum, time.monotonic()
            # Written directly: the main thread may be inside a print of its own.
            os.write(2, (f"\n{_NAMES[signum]}: stopping when this iteration ends (at most "
                         f"{self.wait_s:g} s); {_NAMES[signum]} again stops now.\n").encode())
            self._timer = threading.Timer(self.wait_s, self._expire, args=(signum,))
            self._timer.daemon = True
            self._timer.start()
            return
        if self._pending is not None:
            first = _NAMES[self._pending]
            why = (f"which did not end within {self.wait_s:g} s" if self._expired else
                   f"then {_NAMES[signum]} {time.monotonic() - self._since:.1f} s later")
            self.note = (f"{first} arrived during an iteration, {why}: stopped inside it (the "
                         "final snapshot, of the iteration before, holds its updates so far).")
            signum, self._pending = self._pending, None
        raise stop_error(signum)

    def _expire(self, signum: int) -> None:
        """The timer's thread: the iteration took too long; stop the main thread now."""
        if self._pending is None:
            return
        self._expired = True
        if hasattr(signal, "pthread_kill"):
            signal.pthread_kill(threading.main_thread().ident, signum)  # type: ignore[arg-type]
        else:
            import _thread
            _thread.interrupt_main(signum)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
