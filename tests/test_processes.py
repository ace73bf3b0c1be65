"""The one child supervisor: reports, failure messages, the watchdog, the ordered
stop and the master-alive check."""
import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from rlframe.utils.processes import (ChildReport, ChildSupervisor, describe_exit,
                                     master_alive, report_error, stop_in_order)

CTX = mp.get_context("fork")


def _raises(error_queue):
    try:
        raise ValueError("env exploded")
    except ValueError:
        report_error(error_queue, "rank 1")
        raise SystemExit(1)


def _sleeps():
    time.sleep(60)


def _ignores_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)


@pytest.fixture
def supervisor():
    sup = ChildSupervisor(CTX)
    yield sup
    sup.stop(join_s=0., terminate_s=1.)


def test_a_child_that_raises_is_named_with_its_traceback(supervisor):
    supervisor.add("rank 1", _raises, args=(supervisor.error_queue,))
    supervisor.start()
    pid = supervisor.children["rank 1"].pid
    message = supervisor.find_failure(wait_s=10.)
    assert message.startswith("rank 1 failed:\nTraceback")
    assert "ValueError: env exploded" in message
    report = supervisor.reports["rank 1"]
    assert report == ChildReport("rank 1", pid, report.text, False)
    assert supervisor.find_failure() == message  # Kept for a second look.


def test_a_child_killed_by_sigkill_is_named_with_the_signal():
    sup = ChildSupervisor(CTX, title=lambda name: f"the {name} process")
    try:
        process = sup.add("sampler", _sleeps)
        sup.start()
        os.kill(process.pid, signal.SIGKILL)
        process.join(10.)
        assert sup.find_failure() == f"the sampler process (pid {process.pid}) was killed by signal 9."
    finally:
        sup.stop(join_s=0., terminate_s=1.)


def test_own_errors_come_before_deaths_and_breaks():
    import queue
    sup = ChildSupervisor(CTX, broke_note=" as the group broke", error_queue=queue.Queue())
    sup.error_queue.put(ChildReport("rank 2", 12, "broken pipe", True))
    assert sup.find_failure() == "rank 2 failed as the group broke:\nbroken pipe"
    sup.error_queue.put(ChildReport("rank 3", 13, "ValueError", False))
    assert sup.find_failure() == "rank 3 failed:\nValueError"


def test_a_clean_exit_counts_only_where_it_is_too_early():
    sup = ChildSupervisor(CTX, exit_too_early=lambda name: True)
    try:
        process = sup.add("copier", sys.exit, args=(0,))
        sup.start()
        process.join(10.)
        assert sup.find_failure() == (f"copier (pid {process.pid}) exited (code 0) before the "
                                      "run ended.")
    finally:
        sup.stop(join_s=0., terminate_s=1.)
    assert describe_exit(3) == "exited with code 3"


def test_the_ordered_stop_kills_a_child_that_ignores_sigterm(supervisor):
    process = supervisor.add("stubborn", _ignores_sigterm)
    supervisor.start()
    time.sleep(0.3)  # Its handler is in place.
    pid = process.pid
    start = time.monotonic()
    killed = stop_in_order([process], join_s=0.2, terminate_s=0.5)
    assert killed == [process]
    assert 0.7 <= time.monotonic() - start < 5.
    assert process.exitcode == -signal.SIGKILL
    assert not psutil.pid_exists(pid)


def test_the_ordered_stop_takes_popen_and_psutil_processes():
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    popen = subprocess.Popen([sys.executable, "-c", code])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.5)
    try:
        killed = stop_in_order([popen, psutil.Process(other.pid)], join_s=0., terminate_s=0.5)
        assert killed == [popen]
        assert popen.returncode == -signal.SIGKILL
        assert other.wait(5.) == -signal.SIGTERM
    finally:
        for p in (popen, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_master_alive_on_a_live_a_dead_and_a_zombie_pid():
    assert master_alive(os.getpid())
    assert master_alive(None)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not master_alive(dead.pid)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10.
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        assert psutil.pid_exists(zombie.pid)  # Still there, but ended.
        assert not master_alive(zombie.pid)
    finally:
        zombie.wait()


def test_the_watchdog_fires_after_the_grace_period(supervisor):
    process = supervisor.add("worker", _sleeps)
    supervisor.start()
    found, fired = [], threading.Event()
    grace = 0.5
    supervisor.start_watchdog(lambda: not fired.is_set(), grace_s=grace,
                              on_grace_passed=lambda message: fired.set(),
                              on_failure=lambda message: found.append(time.monotonic()),
                              poll_s=0.02)
    time.sleep(0.2)
    assert not found and not fired.is_set()
    os.kill(process.pid, signal.SIGKILL)
    assert fired.wait(10.)
    assert time.monotonic() - found[0] >= grace - 0.05
    supervisor.watchdog.join(5.)
    assert not supervisor.watchdog.is_alive()


def test_the_watchdog_stays_quiet_when_the_run_stops_in_time(supervisor):
    process = supervisor.add("worker", _sleeps)
    supervisor.start()
    running, fired = [True], []
    supervisor.start_watchdog(lambda: running[0], grace_s=1., on_grace_passed=fired.append,
                              poll_s=0.02)
    os.kill(process.pid, signal.SIGKILL)
    time.sleep(0.5)
    running[0] = False
    supervisor.watchdog.join(5.)
    assert fired == []


_WATCHDOG_IMPORTS = """
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

from rlframe.utils.processes import ChildSupervisor


def sleeps():
    time.sleep(60)


if __name__ == "__main__":
    assert "torch._dynamo" not in sys.modules, "imported before the watchdog: nothing to test"
    supervisor = ChildSupervisor(mp.get_context("fork"))
    process = supervisor.add("worker", sleeps)
    supervisor.start()
    seen = threading.Event()
    supervisor.start_watchdog(
        lambda: not seen.is_set(), grace_s=0., on_grace_passed=lambda message: None,
        on_failure=lambda message: (print("torch._dynamo imported:",
                                          "torch._dynamo" in sys.modules, flush=True),
                                    seen.set()))
    os.kill(process.pid, signal.SIGKILL)
    assert seen.wait(30.)
    process.join(10.)
"""


def test_torch_dynamo_is_imported_before_the_watchdog_can_interrupt(tmp_path):
    """Runners build their first optimizer, which imports torch._dynamo (seconds), after
    their children start. A watchdog interrupt landing in that import would leave the
    module half-imported for the rest of the process (every later optimizer failing), so
    the watchdog imports it before its thread starts: a failure it sees finds it there."""
    script = tmp_path / "watchdog_imports.py"
    script.write_text(_WATCHDOG_IMPORTS)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch._dynamo imported: True" in result.stdout, result.stdout[-3000:]


ORPHAN_SCRIPT = r"""
import multiprocessing as mp
import multiprocessing.util
import os
import signal
import sys
import time

from rlframe.utils.processes import start_child


def raise_exit(signum, frame):  # As a runner's master sets it before forking children.
    raise SystemExit(128 + signum)


def child(exit_when_orphaned):
    start_child(exit_when_orphaned=exit_when_orphaned)
    # An exit that unwinds through Python runs this and hangs, as one waiting for a queue's
    # feeder thread that a signal caught while it started does.
    multiprocessing.util.Finalize(None, time.sleep, args=(120,), exitpriority=5)
    print(f"ready {os.getpid()}", flush=True)
    time.sleep(60)  # Ends by itself, even where the test could not kill it.


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, raise_exit)
    process = mp.get_context("fork").Process(target=child, args=(sys.argv[1] == "1",))
    process.start()
    process.join()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent's death signal "
                    "(prctl) is Linux's")
@pytest.mark.parametrize("exit_when_orphaned", [True, False])
def test_a_child_whose_master_was_killed_exits_at_once(exit_when_orphaned, tmp_path):
    """SIGKILL to the master: its forked child gets SIGTERM (die_with_parent). With
    exit_when_orphaned it exits at once; with the SIGTERM handler it inherited, it unwinds
    through Python and hangs in an exit finalizer, the hazard the option removes."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN_SCRIPT)
    master = subprocess.Popen([sys.executable, str(script), str(int(exit_when_orphaned))],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = None
    try:
        ready, pid = master.stdout.readline().split()
        assert ready == "ready"
        child = psutil.Process(int(pid))
        master.kill()
        master.wait()
        gone, alive = psutil.wait_procs([child], timeout=10. if exit_when_orphaned else 3.)
        assert bool(gone) == exit_when_orphaned
        if exit_when_orphaned:
            assert gone[0].returncode in (128 + signal.SIGTERM, None)  # None: not our child.
    finally:
        master.kill()
        master.wait()
        if child is not None and child.is_running():
            child.kill()
        with contextlib.suppress(ProcessLookupError):  # Its session: a child not yet named.
            os.killpg(master.pid, signal.SIGKILL)
