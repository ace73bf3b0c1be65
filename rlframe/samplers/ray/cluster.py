"""The connection to Ray: importing it, starting a local Ray or joining a cluster, and
stopping every process of a local Ray this process started.

Ray keeps process-wide state: a process forked from one that used Ray cannot start
Ray (its gRPC threads do not survive the fork). :func:`note_ray_in_use` and
:func:`ray_used_here` record and answer that for the runners, which choose how to
start their processes from it.
"""
from __future__ import annotations

import logging
import math
import os
import re
import signal
import socket
import sys
import threading
from types import FrameType, ModuleType
from typing import Callable

import psutil

from rlframe.samplers.ray.reaper import kill_session

__all__ = ["INSTALL_HINT", "CONNECT_TIMEOUT_S", "STOP_TIMEOUT_S", "import_ray",
           "note_ray_in_use", "ray_used_here", "check_reachable", "connect", "error_text",
           "error_summary", "with_descendants", "stop_processes", "stop_ray_on_sigterm"]

CONNECT_TIMEOUT_S = 10.  # To reach a cluster's address before ray.init is tried.
STOP_TIMEOUT_S = 3.  # A local Ray's process left after ray.shutdown(): SIGTERM, then SIGKILL.
INSTALL_HINT = 'RaySampler needs Ray: pip install "rlframe[ray]"'
_RAY_USED_BY_PID: int | None = None  # The process that connected to Ray (forks inherit it).


def import_ray() -> ModuleType:
    """Import Ray, or raise ImportError saying how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error}).") from error
    return ray


def note_ray_in_use() -> None:
    """Record this process as one that uses Ray, if it is connected to one (Ray is not
    imported here when nothing imported it): processes forked from it cannot start Ray."""
    global _RAY_USED_BY_PID
    if _RAY_USED_BY_PID is not None:
        return  # Known already, or a fork of a process that used Ray: no Ray call here.
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        _RAY_USED_BY_PID = os.getpid()


def ray_used_here() -> bool:
    """Whether this process used Ray (it is connected to one, or a Ray sampler connected
    it before): a process forked from it cannot start Ray."""
    note_ray_in_use()
    return _RAY_USED_BY_PID == os.getpid()


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ConnectionError unless something listens at ``address`` ("host:port")."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ray_address={address!r} must be None, 'auto' or 'host:port'.")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ConnectionError(
            f"No Ray cluster reachable at ray_address={address!r} ({error}). Start one with "
            "`ray start --head` and pass the address it prints, or ray_address=None for "
            "a local Ray.") from None


def connect(ray: ModuleType, ray_address: str | None, num_cpus: float, num_gpus: float,
            owner: str) -> bool:
    """Start a local Ray (``ray_address=None``) or join the cluster at ``ray_address``.

    Args:
        ray: the ``ray`` module (:func:`import_ray`).
        ray_address: None: a new local Ray, or the one this process already uses;
            ``"auto"`` or ``"host:port"``: a running cluster.
        num_cpus, num_gpus: resources a new local Ray offers (all the workers').
        owner: who connects, for messages.

    Returns:
        True if a local Ray was started here: the caller stops it (``ray.shutdown()``).
    """
    global _RAY_USED_BY_PID
    if _RAY_USED_BY_PID not in (None, os.getpid()):
        # Ray's client state (gRPC threads) does not survive a fork: a process forked
        # from one that used Ray hangs in ray.init.
        raise RuntimeError(
            f"{owner}: this process was forked from one (pid "
            f"{_RAY_USED_BY_PID}) that had used Ray, and Ray cannot start in such a "
            "process. Start the runner's processes with start_method='forkserver' or "
            "'spawn', or build the Ray samplers before anything uses Ray.")
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    _RAY_USED_BY_PID = os.getpid()
    if ray_address is None:
        if ray.is_initialized():
            return False  # The caller's Ray: use it, leave it running.
        # "local": a new Ray, never one found through RAY_ADDRESS or the machine's
        # last started cluster (someone else's, on a shared machine).
        ray.init(address="local", num_cpus=max(1, math.ceil(num_cpus)),
                 num_gpus=math.ceil(num_gpus) or None, **quiet)
        return True
    if ray.is_initialized():
        raise RuntimeError(f"ray_address={ray_address!r}: this process is already "
                           "connected to a Ray; pass ray_address=None to use it.")
    if ray_address != "auto":
        check_reachable(ray_address)
    try:
        ray.init(address=ray_address, **quiet)
    except ConnectionError as error:
        raise ConnectionError(f"Could not join the Ray cluster at ray_address="
                              f"{ray_address!r}: {error}") from None
    return False


def error_text(error: BaseException) -> str:
    """A Ray error's message (a worker's traceback) without terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(error))


def error_summary(error: BaseException) -> str:
    """One line saying what failed: the exception raised in the worker's code, else
    the first line of the Ray error."""
    cause = getattr(error, "cause", None)  # Set on RayTaskError: the worker's exception.
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {error_text(cause)}".splitlines()[0]
    lines = [line.strip() for line in error_text(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


# --- Stopping a local Ray's processes ----------------------------------------------------------

def stop_ray_on_sigterm(ray_processes: Callable[[], list[psutil.Process]],
                        known: Callable[[], list[psutil.Process]],
                        reaper_pid: int | None) -> None:
    """On SIGTERM, kill a local Ray's processes, then exit at once.

    The runner's sampler process gets SIGTERM when the main process dies (or stops it
    by force). The signal may arrive inside a Ray call, where unwinding through
    Python is not dependable and a later Ray call may wait on the processes just
    stopped; so the handler calls no Ray API. This process may itself be killed
    moments later (Ray's processes fate-share with one another), and the raylet's
    agents outlive a killed raylet. With a watchdog (``reaper_pid``: this process
    leads a session of its own, see :mod:`~rlframe.samplers.ray.reaper`) every other
    process of the session is killed with one signal each, and the watchdog, once
    this process is gone, kills any the raylet started meanwhile. Without one, the
    processes ``known()`` lists (recorded once the workers were ready) are killed
    first, before ``ray_processes()`` walks the process tree for any others. Actors
    on a cluster end with this process, their owner.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            if reaper_pid is not None:
                kill_session(os.getpid(), {os.getpid(), reaper_pid})
                return
            for process in known():
                try:
                    process.kill()  # Checks the pid was not reused.
                except psutil.Error:
                    pass
            stop_processes(ray_processes())
        finally:
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def with_descendants(processes: list[psutil.Process]) -> list[psutil.Process]:
    """``processes`` still running, and their descendants."""
    found = []
    for process in processes:
        try:
            found += [process] + process.children(recursive=True)
        except psutil.Error:  # Gone already.
            continue
    return found


def stop_processes(processes: list[psutil.Process], timeout: float = STOP_TIMEOUT_S) -> None:
    """Terminate ``processes`` still running; kill those left after ``timeout`` seconds."""
    for process in processes:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)
