"""The /dev/shm leak check tells this test's leftovers from other tests' live entries."""
import os
import subprocess
import sys
import time

import pytest
from shm_helpers import SHM, leaked_shm, shm_entries

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm here")

HOLD = """
import os, sys, time
if {detach} and os.fork():
    os._exit(0)  # The holder is reparented: not a descendant of the test any more.
f = open({path!r}, "w")
print(os.getpid(), flush=True)
time.sleep(60)
"""


def holder(path, detach):
    """A process holding ``path`` open; returns its pid once the file exists."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(path=path, detach=detach)],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


@pytest.fixture
def entry():
    path = os.path.join(SHM, f"rlframe-test-{os.getpid()}-{time.time_ns()}")
    yield path
    if os.path.exists(path):
        os.remove(path)


def test_an_entry_nobody_holds_is_leaked(entry):
    before = shm_entries()
    open(entry, "w").close()
    assert leaked_shm(before, timeout=0.5, settle=0.5) == {os.path.basename(entry)}


def test_an_entry_removed_in_time_is_not_leaked(entry):
    before = shm_entries()
    open(entry, "w").close()
    remover = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(0.5); "
                                                      f"os.remove({entry!r})"])
    assert leaked_shm(before, timeout=5., settle=0.5) == set()
    remover.wait()


@pytest.mark.parametrize("detach, leaked", [(True, False), (False, True)])
def test_an_entry_held_elsewhere_is_another_tests(entry, detach, leaked):
    """Held by a process outside this test's tree: another test's, not leaked. Held by
    a descendant of this test (a child left running): leaked."""
    before = shm_entries()
    proc, pid = holder(entry, detach)
    try:
        assert leaked_shm(before, timeout=0.5, settle=0.5) == (
            {os.path.basename(entry)} if leaked else set())
    finally:
        os.kill(pid, 9)
        proc.wait()
