"""Last-resort clean-up of the local Ray an :class:`AsyncRaySampler` starts in the
runner's sampler process.

Ray's processes form a tree that changes while it runs: the raylet starts its
agents and the actors' workers late (later still on a loaded machine), and a
process whose parent is killed is handed to init, out of reach of a walk down
the sampler process's tree. So the sampler process first makes itself the
leader of a new session (:func:`isolate_session`): every process of the Ray it
then starts, and every process those start, is in that session, whoever its
parent is now. A tiny watchdog process (this file, run as a script; it imports
only psutil) is started in the same session and waits. When the sampler
process closes the watchdog's stdin (its shutdown) or dies, or when the
master dies, the watchdog kills every other process of the session until none
has been seen for ``QUIET_S``, then exits.

Run: ``python reaper.py MASTER_PID`` with a pipe on stdin (:func:`start_reaper`).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import psutil

POLL_S = 0.2  # How often the watchdog looks at the master while it waits.
QUIET_S = 1.  # A sweep ends once no process of the session was seen for this long...
SWEEP_S = 30.  # ...or after this long.
REAPER_EXIT_S = 5.  # A clean shutdown waits this long for the watchdog's last sweep.


def isolate_session() -> bool:
    """Make this process the leader of a new session (its children, and theirs, join
    it); False where that is not possible (not on POSIX, or a process group leader)."""
    if not hasattr(os, "setsid"):
        return False
    try:
        os.setsid()
    except OSError:
        return False
    return True


def session_processes(sid: int, exclude: set[int]) -> list[psutil.Process]:
    """Live (non-zombie) processes of session ``sid``, except the pids in ``exclude``."""
    found = []
    for pid in psutil.pids():
        if pid in exclude:
            continue
        try:
            if os.getsid(pid) != sid:
                continue
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):  # Gone meanwhile, or not ours to look at.
            continue
    return found


def kill_session(sid: int, exclude: set[int]) -> int:
    """SIGKILL every process of session ``sid`` but ``exclude``; returns how many."""
    processes = session_processes(sid, exclude)
    for process in processes:
        try:
            process.kill()  # Checks the pid was not reused.
        except psutil.Error:
            pass
    return len(processes)


def sweep(sid: int, exclude: set[int], quiet_s: float = QUIET_S,
          timeout: float = SWEEP_S) -> None:
    """Kill the session's processes, again and again (the raylet may still be starting
    some), until none was seen for ``quiet_s`` seconds or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if kill_session(sid, exclude):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.05)


def start_reaper(master_pid: int | None) -> subprocess.Popen:
    """Start the watchdog of this process's session (call after :func:`isolate_session`).

    Args:
        master_pid: the runner's main process; once it is gone the watchdog kills
            this process too.

    Returns:
        the watchdog; :func:`stop_reaper` ends it.
    """
    args = [sys.executable, "-I", os.path.abspath(__file__), str(master_pid or 0)]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            close_fds=True)


def stop_reaper(reaper: subprocess.Popen, timeout: float = REAPER_EXIT_S) -> None:
    """Close the watchdog's stdin (it sweeps the session but this process, then exits)
    and wait for it up to ``timeout`` seconds."""
    try:
        if reaper.stdin is not None:
            reaper.stdin.close()
        reaper.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _gone(process: psutil.Process | None) -> bool:
    if process is None:
        return False
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def main(master_pid: int) -> None:
    """Wait until stdin closes (the owner's shutdown, or its death) or the master is
    gone, then sweep the session: all but the owner in the first case, all in the other."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    owner, me = os.getppid(), os.getpid()
    sid = os.getsid(0)
    try:
        master = psutil.Process(master_pid) if master_pid > 0 else None
    except psutil.Error:
        master = None
        sweep(sid, {me})
        return
    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([stdin], [], [], POLL_S)
        if readable and not os.read(stdin, 4096):
            sweep(sid, {me, owner})  # The owner is ending (os._exit, or its shutdown).
            return
        if _gone(master):
            sweep(sid, {me})
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
