"""Inter-process synchronisation helpers: a readers-writer lock, queue draining, ports,
start methods."""
from __future__ import annotations

import multiprocessing as mp
import operator
import os
import queue
import socket
import time
import warnings
from typing import TYPE_CHECKING, Any, Sequence

# Kept importable here; they live with the rest of child-process supervision.
from rlframe.utils.processes import die_with_parent, load_libc  # noqa: F401

if TYPE_CHECKING:
    import multiprocessing.queues
    from multiprocessing.context import BaseContext

FIRST_PORT = 29500
PORT_STRIDE = 100


class _WriteSide:
    """The writer's side of :class:`RWLock`: a lock-like object (``acquire``,
    ``release``, context manager). A waiting writer holds the turnstile, so readers
    arriving after it wait behind it instead of starving it."""

    def __init__(self, turnstile: Any, room: Any) -> None:
        self._turnstile = turnstile
        self._room = room

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take the lock once no reader or writer holds it; False if ``timeout``
        (seconds) passed first, or at once with ``block=False``."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.)
        if not self._turnstile.acquire(block, timeout):
            return False
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.)
        if not self._room.acquire(block, remaining):
            self._turnstile.release()
            return False
        return True

    def release(self) -> None:
        self._turnstile.release()
        self._room.release()

    def __enter__(self) -> "_WriteSide":
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class RWLock:
    """Readers-writer lock shared by processes (many readers or one writer).

    Readers share the lock: the first reader in locks out writers and the last
    reader out lets them back in, so a reader may release the lock another
    process's reader took. A writer that is waiting stops new readers from
    coming in (it is not starved by readers that keep overlapping). Using the
    object as a context manager takes the read lock. Pass it to child processes
    at creation.

    Args:
        ctx: multiprocessing context to create the primitives in (default: the
            current default context); use the children's context under spawn.

    Attributes:
        write_lock: the writer's lock (``acquire``/``release``, or ``with``).
    """

    def __init__(self, ctx: BaseContext | None = None) -> None:
        ctx = mp.get_context() if ctx is None else ctx
        self._turnstile = ctx.Lock()
        self._room = ctx.Lock()  # Held by a writer, or by the readers as a group.
        self.write_lock = _WriteSide(self._turnstile, self._room)
        self._count_lock = ctx.Lock()
        self._n_readers = ctx.RawValue("i", 0)

    def acquire_write(self) -> None:
        """Block until no reader or writer holds the lock, then hold it."""
        self.write_lock.acquire()

    def release_write(self) -> None:
        """Release the write lock."""
        self.write_lock.release()

    def acquire_read(self) -> None:
        """Block while a writer holds or waits for the lock, then join the readers."""
        with self._turnstile:  # Pass through: closed while a writer waits.
            pass
        with self._count_lock:
            self._n_readers.value += 1
            if self._n_readers.value == 1:
                self._room.acquire()

    def release_read(self) -> None:
        """Leave the readers; the last one out unblocks writers."""
        with self._count_lock:
            if self._n_readers.value <= 0:
                raise RuntimeError("release_read called without a matching acquire_read.")
            self._n_readers.value -= 1
            if self._n_readers.value == 0:
                self._room.release()

    def __enter__(self) -> "RWLock":
        self.acquire_read()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release_read()


def drain_queue(queue_obj: queue.Queue | multiprocessing.queues.Queue, n_sentinel: int = 0,
                guard_sentinel: bool = False) -> list:
    """Take everything currently in a queue; ``None`` items act as sentinels.

    Args:
        queue_obj: a ``queue.Queue`` or ``multiprocessing.Queue``.
        n_sentinel: if positive, block until this many ``None`` items have been
            taken (other items are collected meanwhile) and return then.
        guard_sentinel: in non-blocking mode, stop at the first ``None`` and put
            it back so that other consumers see it too.

    Returns:
        The non-``None`` items in the order they were taken.
    """
    if n_sentinel < 0:
        raise ValueError(f"n_sentinel must be >= 0, got {n_sentinel!r}.")
    contents = []
    if n_sentinel > 0:
        n_seen = 0
        while n_seen < n_sentinel:
            item = queue_obj.get()
            if item is None:
                n_seen += 1
            else:
                contents.append(item)
        return contents
    while True:
        try:
            item = queue_obj.get(block=False)
        except queue.Empty:
            return contents
        if item is not None:
            contents.append(item)
        elif guard_sentinel:
            queue_obj.put(None)
            return contents


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option a listening server sets, so ports in TIME_WAIT count as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_port(offset: int) -> int:
    """A free local TCP port for a ``torch.distributed`` master.

    Tries ``29500 + offset``, then steps of 100, so runs that use different
    offsets (e.g. their first master CPU) do not collide.

    Args:
        offset: integer in ``[0, 100)``.

    Returns:
        The first port that could be bound on 127.0.0.1.
    """
    try:
        offset_int = None if isinstance(offset, bool) else operator.index(offset)
    except TypeError:
        offset_int = None
    if offset_int is None or not 0 <= offset_int < PORT_STRIDE:
        raise ValueError(f"offset must be an integer in [0, {PORT_STRIDE}), got {offset!r}.")
    offset = offset_int
    for port in range(FIRST_PORT + offset, 65536, PORT_STRIDE):
        if _port_is_free(port):
            return port
    raise RuntimeError(f"find_port(offset={offset}): no free port among "
                       f"{FIRST_PORT + offset}, {FIRST_PORT + offset + PORT_STRIDE}, ... 65535.")


# What a forkserver imports once, before it forks children: each child then starts
# with torch and rlframe's child entry points already imported (importing them costs
# a child 1.5-3 s of CPU otherwise). A forkserver started earlier keeps its own list.
FORKSERVER_PRELOAD = ("torch", "rlframe.samplers.parallel.worker", "rlframe.runners.sync_rl.rank",
                      "rlframe.runners.async_rl.children", "rlframe.runners.async_rl.optimizer")


_SAID: set[str] = set()  # The TMPDIRs whose fallback to spawn was logged.

# The longest path a Unix socket may bind to: sun_path's 108 bytes, less the NUL.
UNIX_SOCKET_PATH_MAX = 107


def process_context(start_method: str | None, preload: Sequence[str] = ()) -> BaseContext:
    """``multiprocessing.get_context(start_method)``, where a forkserver preloads
    :data:`FORKSERVER_PRELOAD` and ``preload`` besides what it preloads already
    (``__main__``).

    A forkserver listens on a Unix socket in this process's multiprocessing folder
    (under ``TMPDIR``); where that path would be too long for a socket
    (:func:`forkserver_socket_problem`), the children are spawned instead (logged),
    which asks the same of them (everything they get must pickle).

    Args:
        start_method: ``"fork"``, ``"spawn"``, ``"forkserver"`` or None (the default).
        preload: further modules for a forkserver to import before it forks.
    """
    ctx = mp.get_context(start_method)
    if ctx.get_start_method() != "forkserver":
        return ctx
    why = forkserver_socket_problem()
    if why is not None:
        import tempfile
        tmpdir = tempfile.gettempdir()
        if tmpdir not in _SAID:  # Once: autotune starts a child a measurement.
            _SAID.add(tmpdir)
            from rlframe.utils.logging import logger
            logger.log(f"Starting child processes with start_method='spawn' instead of "
                       f"'forkserver': {why}. Set TMPDIR to a shorter directory to keep the "
                       "forkserver.")
        return mp.get_context("spawn")
    from multiprocessing import forkserver
    # The list the next forkserver start uses (multiprocessing offers no getter).
    modules = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    ctx.set_forkserver_preload(modules + [m for m in (*FORKSERVER_PRELOAD, *preload)
                                          if m not in modules])
    return ctx


def forkserver_socket_problem() -> str | None:
    """Why a forkserver could not start here, or None (also when one already runs).

    Its socket is ``<multiprocessing folder>/listener-XXXXXXXX``, the folder being
    ``$TMPDIR/pymp-XXXXXXXX``; a path longer than :data:`UNIX_SOCKET_PATH_MAX` bytes
    fails with "AF_UNIX path too long" once children start.
    """
    from multiprocessing import forkserver
    if getattr(forkserver._forkserver, "_forkserver_address", None) is not None:
        return None  # Its socket is bound already.
    folder = process_temp_dir()
    length = len(os.fsencode(os.path.join(folder, "listener-XXXXXXXX")))
    if length <= UNIX_SOCKET_PATH_MAX:
        return None
    return (f"the forkserver's socket would be {folder}/listener-XXXXXXXX, {length} bytes, "
            f"over the {UNIX_SOCKET_PATH_MAX} a Unix socket's path may have "
            f"(TMPDIR={os.environ.get('TMPDIR', '')!r})")


def process_temp_dir() -> str:
    """This process's multiprocessing folder, as it is or would be made: the one in use,
    else ``pymp-XXXXXXXX`` (8 characters) under :func:`tempfile.gettempdir`."""
    import tempfile
    from multiprocessing import process
    folder = process.current_process()._config.get("tempdir")
    return folder if folder is not None else os.path.join(tempfile.gettempdir(), "pymp-XXXXXXXX")


def check_start_method(start_method: str | None) -> str | None:
    """``start_method`` if this platform's multiprocessing has it (or None: the default).

    Raises:
        ValueError: naming the methods this platform offers.
    """
    allowed = mp.get_all_start_methods()
    if start_method is not None and start_method not in allowed:
        raise ValueError(f"start_method must be one of {allowed} or None, got "
                         f"{start_method!r}.")
    return start_method


def start_method_without_fork(start_method: str | None, owner: str, why: str | None
                              ) -> str | None:
    """The start method for child processes when forking this process may not work.

    Args:
        start_method: what the user asked for (None: the platform's default).
        owner: who starts the children, for the messages (e.g. ``"AsyncRl"``).
        why: why a forked child would fail (e.g. this process initialized CUDA and a
            child uses it), or None when forking is fine.

    Returns:
        ``start_method``, or ``"forkserver"`` in place of a default fork (logged).

    Raises:
        RuntimeError: ``start_method="fork"`` was asked for although ``why``.
    """
    if why is None:
        return start_method
    if start_method == "fork":
        raise RuntimeError(f"{owner}: start_method='fork' cannot work here: {why}. Pass "
                           "start_method='forkserver' or 'spawn', or None (then forkserver "
                           "is chosen).")
    default = mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]
    if start_method is None and default == "fork":
        from rlframe.utils.logging import logger
        logger.log(f"{owner}: starting the child processes with start_method='forkserver' "
                   f"instead of the default 'fork': {why}.")
        return "forkserver"
    return start_method


def cuda_fork_problem(child_cuda_idxs: list[int | None]) -> str | None:
    """Why forked children could not use CUDA, or None.

    CUDA cannot be initialized in a process forked from one that initialized it (a
    notebook or script that used the GPU before the runner started), nor from one that
    only asked the CUDA runtime how many GPUs there are: ``torch.cuda.is_available()``
    does (unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``), and torch then marks every
    forked child unable to use CUDA. The second is seen only from a child, so a
    process whose torch has CUDA forks one that reports it and exits at once.
    """
    import torch
    if not any(idx is not None for idx in child_cuda_idxs):
        return None
    if torch.cuda.is_initialized():
        return (f"this process (pid {os.getpid()}) has initialized CUDA, and a child that "
                "uses a GPU cannot initialize it again in a forked process")
    if torch.cuda._is_compiled() and forked_child_in_bad_cuda_fork():
        return (f"this process (pid {os.getpid()}) has asked the CUDA runtime for its "
                "devices (torch.cuda.is_available() does), after which torch refuses CUDA "
                "in processes forked from it")
    return None


def forked_child_in_bad_cuda_fork() -> bool:
    """Whether torch marks a child forked from this process unable to use CUDA.

    Forks a child that only reads that mark and exits with it (no Python runs there
    beyond the call); False where ``os.fork`` does not exist.
    """
    import torch
    if not hasattr(os, "fork"):
        return False
    with warnings.catch_warnings():  # Python 3.12+ warns of forking with threads running.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # The child: report and leave without running exit handlers.
        code = 2
        try:
            code = int(torch.cuda._is_in_bad_fork())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 1


def autograd_thread_names() -> list[str]:
    """Names of this process's autograd device threads (``pt_autograd_<device>``).

    torch starts them at the first backward pass in a process whose torch sees a
    GPU, even for a backward on the CPU; Linux only (``/proc``), else ``[]``."""
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return names
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:  # The thread ended meanwhile.
            continue
        if name.startswith("pt_autograd_"):
            names.append(name)
    return sorted(names)


def autograd_fork_problem() -> str | None:
    """Why forked children could not run a backward pass, or None: torch refuses
    autograd in a process forked from one whose autograd device threads run (which
    a backward pass starts when torch sees a GPU, e.g. a run earlier in the script)."""
    threads = autograd_thread_names()
    if not threads:
        return None
    return (f"this process (pid {os.getpid()}) has run a backward pass with a GPU visible "
            f"(its autograd threads {', '.join(threads)} run), and torch refuses autograd "
            "in a process forked from it")
