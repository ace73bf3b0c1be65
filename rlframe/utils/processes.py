"""Child-process supervision, written once: every runner, sampler and the launcher
start, watch and stop their children with it.

* A child that fails puts a :class:`ChildReport` (its name, pid, traceback and
  whether it only saw a collective break) on its supervisor's error queue with
  :func:`report_error`, then exits.
* A :class:`ChildSupervisor` starts children from one multiprocessing context,
  keeps their reports, names the failure (:meth:`ChildSupervisor.find_failure`),
  runs a watchdog thread and stops the children in order.
* :func:`stop_in_order` is that ordered stop (join up to a deadline, terminate,
  join, kill) for any mix of multiprocessing, ``subprocess.Popen`` and
  ``psutil.Process`` processes.
* :func:`master_alive` is the one check by which a child decides that the
  process it serves is gone (zombies count as gone).
"""
from __future__ import annotations

import _thread
import contextlib
import ctypes
import os
import queue as queue_module
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, Union

import psutil

# A process stop_in_order can stop: multiprocessing's, subprocess's or psutil's.
StoppableProcess = Union[BaseProcess, subprocess.Popen, psutil.Process]

SETTLE_S = 0.2  # A child died without a report: time for its report to leave the pipe.
POLL_S = 0.02  # How often a stop checks whether processes have ended.
KILL_WAIT_S = 10.  # After SIGKILL, the longest wait for a process that is not a child.


class QueueLike(Protocol):
    """The part of a (multiprocessing) queue a supervisor uses."""

    def put(self, item: object) -> None: ...

    def get_nowait(self) -> object: ...


@dataclass(frozen=True)
class ChildReport:
    """What a failed child tells the process that supervises it.

    Attributes:
        name: the child's name in its supervisor (e.g. ``"rank 2"``, ``"sampler"``).
        pid: the child's process id.
        text: the formatted traceback of its error.
        broke: True when the error only says that a collective (a process group,
            a barrier) broke, i.e. another process failed first.
    """

    name: str
    pid: int
    text: str
    broke: bool = False


def report_error(error_queue: QueueLike | None, name: str, broke: bool = False) -> None:
    """Put a :class:`ChildReport` of the exception being handled on ``error_queue``.

    Call it in an ``except`` block of a child. A multiprocessing queue is then
    closed and flushed, so that the report reaches the pipe before the child exits.

    Args:
        error_queue: the supervisor's error queue (None: nothing is sent).
        name: the child's name in its supervisor.
        broke: the error only says that a collective broke.
    """
    if error_queue is None:
        return
    error_queue.put(ChildReport(name, os.getpid(), traceback.format_exc(), broke))
    close = getattr(error_queue, "close", None)
    if close is not None and hasattr(error_queue, "join_thread"):
        close()
        error_queue.join_thread()  # type: ignore[attr-defined]


def master_alive(pid: int | None) -> bool:
    """Whether process ``pid`` (a child's master) still runs; None: not watched, True.

    A zombie counts as gone: it has ended, only its parent has not reaped it yet.
    The pid is looked at itself, not the parent's pid: under forkserver a child's
    parent is the fork server.
    """
    if pid is None or os.getppid() == pid:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe_exit(exitcode: int) -> str:
    """``"was killed by signal 9"``, ``"exited with code 1"`` or, for 0,
    ``"exited (code 0) before the run ended"``."""
    if exitcode < 0:
        return f"was killed by signal {-exitcode}"
    if exitcode:
        return f"exited with code {exitcode}"
    return "exited (code 0) before the run ended"


def interrupt_main_thread(real_signal: bool = True) -> None:
    """KeyboardInterrupt in the main thread, as Ctrl-C gives it.

    With ``real_signal`` (and a Python SIGINT handler in place), a real SIGINT to
    the main thread, which also wakes it from a blocking wait; else only Python's
    flag, which the thread sees once it runs Python code again.
    """
    if (real_signal and hasattr(signal, "pthread_kill")
            and callable(signal.getsignal(signal.SIGINT))):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
    else:
        _thread.interrupt_main()


_PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent exits.
_libc: ctypes.CDLL | bool | None = None


def load_libc() -> ctypes.CDLL | None:
    """The C library on Linux (loaded once, cached), else None. Load it before forking
    when a child will call :func:`die_with_parent` between fork and exec."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = False
    return _libc if isinstance(_libc, ctypes.CDLL) else None


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to send SIGTERM to this process when its parent exits (elsewhere a no-op).

    Args:
        parent_pid: the parent expected; if this process was already handed to another
            parent (the expected one died before the request), exit at once.
    """
    libc = load_libc()
    if libc is None:
        return
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def start_child(ignore_sigint: bool = True, exit_when_orphaned: bool = False) -> None:
    """What a supervised child does first: leave Ctrl-C to its master (which stops it;
    a terminal's Ctrl-C reaches the whole process group) and, on Linux, end with it.

    Args:
        ignore_sigint: leave Ctrl-C to the master.
        exit_when_orphaned: a SIGTERM that comes once the parent has died exits at
            once (``os._exit``) instead of running the SIGTERM handler a forked child
            inherits. Nobody is left to read the child's report then, and unwinding
            may hang the exit: a multiprocessing queue whose feeder thread the signal
            caught while it started waits for that thread forever. For children with
            nothing to save (samplers, copiers, workers); a child that writes a last
            snapshot keeps its handler.
    """
    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if exit_when_orphaned:
        _exit_at_once_when_orphaned()
    die_with_parent()


def _exit_at_once_when_orphaned() -> None:
    """SIGTERM after the parent died: ``os._exit(128 + SIGTERM)``; before, the inherited
    handler (a Python one; the default already ends the process at once)."""
    inherited = signal.getsignal(signal.SIGTERM)
    if not callable(inherited) or threading.current_thread() is not threading.main_thread():
        return
    parent = os.getppid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent:
            os._exit(128 + signum)
        inherited(signum, frame)
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def signals_held(signums: Sequence[int] = (signal.SIGTERM, signal.SIGINT)
                 ) -> Iterator[list[int]]:
    """Hold ``signums`` off while the block runs: one that arrives is recorded in the
    yielded list instead of interrupting the block (e.g. a process ending by an error
    writing its last snapshot while a supervisor, such as torchrun after another rank
    died, sends it SIGTERM). The previous handlers are back after the block; what
    arrived is not delivered again (the process is ending). Only the main thread can set
    handlers; elsewhere the block runs as it would without this."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {signum: signal.signal(signum, lambda signum, _frame: received.append(signum))
                for signum in signums}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# --------------------------------------------------------------------------- ordered stop

def _ended(process: StoppableProcess) -> bool:
    """Whether ``process`` has ended (a multiprocessing or Popen child is reaped on the way)."""
    if isinstance(process, subprocess.Popen):
        return process.poll() is not None
    if isinstance(process, psutil.Process):
        try:  # A zombie has ended; its parent, maybe not this process, reaps it.
            return process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    try:
        return process._popen is None or process.exitcode is not None  # type: ignore[attr-defined]
    except ValueError:  # A closed multiprocessing process.
        return True


def _signal(process: StoppableProcess, kill: bool) -> None:
    with contextlib.suppress(ProcessLookupError, psutil.Error, ValueError):
        if not _ended(process):
            process.kill() if kill else process.terminate()


def _wait_until(processes: Sequence[StoppableProcess], deadline: float,
                drain: Callable[[], None] | None) -> bool:
    """Poll until every process ended or ``deadline`` (time.monotonic) passed."""
    while True:
        if drain is not None:
            drain()
        if all(_ended(p) for p in processes):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def stop_in_order(processes: Iterable[StoppableProcess], join_s: float, terminate_s: float,
                  drain: Callable[[], None] | None = None) -> list[StoppableProcess]:
    """Stop processes politely, then by force: wait up to ``join_s`` seconds for them to
    end by themselves, SIGTERM those left, wait up to ``terminate_s`` seconds, SIGKILL
    those left and wait until they are gone.

    Args:
        processes: multiprocessing processes, ``subprocess.Popen`` objects or
            ``psutil.Process`` objects (which need not be this process's children).
        join_s: seconds to wait before SIGTERM (0: terminate at once).
        terminate_s: seconds between SIGTERM and SIGKILL.
        drain: called while waiting, e.g. to empty queues that a child blocked
            flushing them could not exit without.

    Returns:
        The processes that had to be killed.
    """
    processes = list(processes)
    if not _wait_until(processes, time.monotonic() + join_s, drain):
        for process in processes:
            _signal(process, kill=False)
        _wait_until(processes, time.monotonic() + terminate_s, drain)
    killed = [p for p in processes if not _ended(p)]
    for process in killed:
        _signal(process, kill=True)
    _wait_until(killed, time.monotonic() + KILL_WAIT_S, drain)
    for process in processes:  # Reap them, so that exit codes are known.
        with contextlib.suppress(ValueError, AssertionError):
            if isinstance(process, subprocess.Popen):
                process.wait()
            elif isinstance(process, BaseProcess):
                process.join(0)
    return killed


# --------------------------------------------------------------------------- supervisor

def _drain(error_queue: QueueLike | None) -> list[Any]:
    items: list[Any] = []
    if error_queue is None:
        return items
    while True:
        try:
            items.append(error_queue.get_nowait())
        except (queue_module.Empty, EOFError, OSError, ValueError):
            return items


class ChildSupervisor:
    """Starts children from one multiprocessing context, keeps their reports, names the
    failure, watches them from a thread and stops them in order.

    Args:
        ctx: the multiprocessing context children start from (and the error queue's).
        title: how messages name a child, from its name (default: the name itself).
        broke_note: added after "failed" for a child that only saw a collective
            break, e.g. ``" as the optimizer ranks' process group broke"``.
        exit_too_early: whether a child's clean exit (code 0) counts as a failure
            now (default: never).
        error_queue: an existing queue for reports (default: a new ``ctx.Queue()``).
    """

    def __init__(self, ctx: BaseContext, *, title: Callable[[str], str] = str,
                 broke_note: str = "", exit_too_early: Callable[[str], bool] | None = None,
                 error_queue: QueueLike | None = None):
        self.ctx = ctx
        self.title = title
        self.broke_note = broke_note
        self.exit_too_early = exit_too_early
        self.error_queue: Any = ctx.Queue() if error_queue is None else error_queue
        self.children: dict[str, BaseProcess] = {}
        # Reports taken off the queue, kept: a watchdog thread and the main thread both
        # look for the failure (each dict assignment is atomic; the queue is thread-safe).
        self.reports: dict[str, ChildReport] = {}
        self.stopped: set[str] = set()  # Ended on purpose by the supervising process.
        self._started: set[str] = set()
        self.watchdog: threading.Thread | None = None

    # ---- starting ------------------------------------------------------------------
    def add(self, name: str, target: Callable[..., object], *, args: tuple = (),
            kwargs: dict | None = None, daemon: bool = True,
            process_name: str | None = None) -> BaseProcess:
        """Create (not start) child ``name``; :meth:`start` starts it."""
        if name in self.children:
            raise ValueError(f"a child named {name!r} exists already; names must be unique.")
        process = self.ctx.Process(target=target, args=args, kwargs=kwargs or {},  # type: ignore[attr-defined]
                                   daemon=daemon, name=process_name or name)
        self.children[name] = process
        return process

    def start(self) -> None:
        """Start every child not started yet."""
        for name, process in self.children.items():
            if name not in self._started:
                process.start()
                self._started.add(name)

    # ---- failures ------------------------------------------------------------------
    def collect(self) -> dict[str, ChildReport]:
        """Take the reports off the queue and return every report so far, by name."""
        for report in _drain(self.error_queue):
            if isinstance(report, ChildReport):
                self.reports.setdefault(report.name, report)
        return self.reports

    def dead_unreported(self) -> list[tuple[str, BaseProcess]]:
        """Children that ended in failure without a report: a non-zero exit code, or a
        clean exit that ``exit_too_early`` calls a failure."""
        reported = set(self.reports) | self.stopped
        dead = []
        for name, process in list(self.children.items()):
            try:
                code = process.exitcode
            except ValueError:  # Closed.
                continue
            if name in reported or code is None:
                continue
            if code != 0 or (self.exit_too_early is not None and self.exit_too_early(name)):
                dead.append((name, process))
        return dead

    def _order(self, name: str) -> int:
        names = list(self.children)
        return names.index(name) if name in names else len(names)

    def find_failure(self, wait_s: float = 0.) -> str | None:
        """A message naming the child that failed, if one did; None otherwise.

        A child's own error comes first (with its traceback), then a child that died
        without a report ("(pid N) was killed by signal 9."), then a child that only
        saw a collective break. Waits up to ``wait_s`` seconds for a failure to show.
        """
        deadline = time.monotonic() + wait_s
        while True:
            reports = self.collect()
            dead = self.dead_unreported()
            if dead and not any(not r.broke for r in reports.values()):
                time.sleep(SETTLE_S)  # Its report may still be in the pipe.
                reports = self.collect()
                dead = self.dead_unreported()
            if dead or reports or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        ordered = sorted(reports.values(), key=lambda r: self._order(r.name))
        own = [r for r in ordered if not r.broke]
        if own:
            return f"{self.title(own[0].name)} failed:\n{own[0].text}"
        if dead:
            name, process = min(dead, key=lambda item: self._order(item[0]))
            return (f"{self.title(name)} (pid {process.pid}) "
                    f"{describe_exit(process.exitcode or 0)}.")
        if ordered:
            return f"{self.title(ordered[0].name)} failed{self.broke_note}:\n{ordered[0].text}"
        return None

    def start_watchdog(self, running: Callable[[], bool], grace_s: float,
                       on_grace_passed: Callable[[str], None],
                       on_failure: Callable[[str], None] | None = None,
                       poll_s: float = 0.1, name: str = "rlframe-watchdog") -> threading.Thread:
        """Watch the children from a daemon thread while ``running()`` is true.

        Once a child failed, ``on_failure(message)`` runs at once (if given); if
        ``running()`` still holds ``grace_s`` seconds later (the supervising process
        did not notice by itself, e.g. it is blocked), ``on_grace_passed(message)``
        runs, typically logging and :func:`interrupt_main_thread`. The thread then ends.
        """
        def watch() -> None:
            while running():
                failure = self.find_failure()
                if failure is not None:
                    if on_failure is not None:
                        on_failure(failure)
                    deadline = time.monotonic() + grace_s
                    while running() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if running():
                        on_grace_passed(failure)
                    return
                time.sleep(poll_s)

        # An interrupt that cuts short an import the main thread is making leaves that module
        # half-imported for the rest of the process. Runners build their first torch
        # optimizer, which imports torch._dynamo (seconds), after their children start:
        # import it now, before this thread can interrupt anything.
        import torch._dynamo  # noqa: F401
        self.watchdog = threading.Thread(target=watch, daemon=True, name=name)
        self.watchdog.start()
        return self.watchdog

    # ---- stopping ------------------------------------------------------------------
    def join(self, timeout_s: float, drain: Callable[[], None] | None = None,
             names: Iterable[str] | None = None) -> bool:
        """Wait up to ``timeout_s`` seconds for children (default: all) to end by
        themselves; True if they all did. The error queue is drained meanwhile."""
        chosen = [self.children[n] for n in (self.children if names is None else names)]
        return _wait_until(chosen, time.monotonic() + timeout_s, self._drainer(drain))

    def _drainer(self, drain: Callable[[], None] | None) -> Callable[[], None]:
        """Take reports off the error queue (and call ``drain``) while waiting."""
        def drain_all() -> None:
            self.collect()
            if drain is not None:
                drain()
        return drain_all

    def stop(self, join_s: float, terminate_s: float,
             drain: Callable[[], None] | None = None) -> None:
        """Stop every child (:func:`stop_in_order`), then close the error queue and
        forget the children (their reports stay)."""
        stop_in_order(self.children.values(), join_s, terminate_s, self._drainer(drain))
        self.collect()
        for process in self.children.values():
            with contextlib.suppress(ValueError):
                process.close()
        self.children, self._started = {}, set()
        q = self.error_queue
        if hasattr(q, "close"):  # A multiprocessing queue: flushed and joined.
            q.close()
            q.join_thread()
        if self.watchdog is not None and self.watchdog is not threading.current_thread():
            self.watchdog.join(1.)
        self.watchdog = None
