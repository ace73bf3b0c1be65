"""Which /dev/shm entries a test left behind, while other tests run beside it.

/dev/shm is machine-wide: under ``pytest -n`` the other workers' tests create and
remove entries (named semaphores, shared arrays) while a test runs. An entry of
another test is mapped or open in one of that test's processes for as long as it
exists, but for a moment at its end (a finished process's resource tracker unlinks
its semaphores asynchronously). An entry this test leaked stays, held by no process
or only by this process and its descendants. So a new entry counts as leaked when
no process outside this process tree holds it, and it stays so for a while.
"""
import os
import time

import psutil

SHM = "/dev/shm"


def shm_entries() -> set:
    """The names in /dev/shm (an empty set where there is no /dev/shm)."""
    return set(os.listdir(SHM)) if os.path.isdir(SHM) else set()


def _inode(name):
    try:
        return os.stat(os.path.join(SHM, name)).st_ino
    except OSError:  # Removed meanwhile.
        return None


def mapped_inodes(pid) -> set:
    """Inodes of the /dev/shm files that process ``pid`` has mapped (a named semaphore is
    mapped under a temporary name, so the name cannot be compared); empty once it ended.
    """
    try:
        with open(f"/proc/{pid}/maps") as f:
            return {int(line.split()[4]) for line in f if f" {SHM}/" in line}
    except (OSError, ValueError, IndexError):  # Ended meanwhile, or not ours to read.
        return set()


def _held_inodes(pid):
    """Inodes of the /dev/shm files that process ``pid`` has mapped or open."""
    inodes = mapped_inodes(pid)
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            path = f"/proc/{pid}/fd/{fd}"
            if os.readlink(path).startswith(SHM + "/"):
                inodes.add(os.stat(path).st_ino)
    except (OSError, ValueError, IndexError):  # Ended meanwhile, or not ours to read.
        pass
    return inodes


def _foreign_inodes():
    """/dev/shm inodes held by processes outside this process and its descendants."""
    me = psutil.Process()
    ours = {me.pid} | {p.pid for p in me.children(recursive=True)}
    held = set()
    for pid in psutil.pids():
        if pid not in ours:
            held |= _held_inodes(pid)
    return held


def _unclaimed(before):
    """New entries (name -> inode) that no process of another test holds."""
    foreign = _foreign_inodes()
    new = {name: _inode(name) for name in shm_entries() - before}
    return {name: ino for name, ino in new.items() if ino is not None and ino not in foreign}


def leaked_shm(before: set, timeout: float = 5., settle: float = 1.5) -> set:
    """The /dev/shm entries created since ``before`` that this test left behind.

    Waits up to ``timeout`` seconds for new entries to be removed or claimed by another
    test's process; an entry counts only if it then stays unclaimed for ``settle``
    seconds more (another test's entry is unclaimed only in the moment before its
    removal)."""
    deadline = time.time() + timeout
    while (suspects := _unclaimed(before)) and time.time() < deadline:
        time.sleep(0.2)
    settled = time.time() + settle
    while suspects and time.time() < settled:
        time.sleep(0.2)
        now = _unclaimed(before)
        suspects = {name: ino for name, ino in suspects.items() if now.get(name) == ino}
    return set(suspects)


def assert_no_new_shm(before: set, timeout: float = 5., context: str = "") -> None:
    """No /dev/shm entry created since ``before`` is left by this test (see
    :func:`leaked_shm`)."""
    left = leaked_shm(before, timeout)
    assert not left, (sorted(left), context)
