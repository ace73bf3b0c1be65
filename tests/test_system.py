"""rlframe.utils.system: the machine and commit a benchmark run records."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from rlframe.utils.system import (CpuLoad, OtherProcess, cpu_model, git_commit,
                                  measure_cpu_load, system_record, usable_cpu_list)

# Busy for at most 30 s, so that it ends by itself even if the test is killed.
BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


def test_the_record_names_the_cpu_cores_and_versions():
    record = system_record()
    json.dumps(record)  # JSON-ready.
    assert record["cpu"] == cpu_model() and record["cpu"]
    assert record["logical_cpus"] >= 1 and record["memory_gib"] > 0
    assert record["packages"]["torch"].split("+")[0].count(".") >= 1
    assert "ray-nonexistent" not in record["packages"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_of_a_checkout_and_of_a_plain_folder(tmp_path):
    assert git_commit(str(tmp_path)) is None  # Not a checkout.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("1")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "a.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    commit = git_commit(str(tmp_path))
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    (tmp_path / "a.txt").write_text("2")
    assert git_commit(str(tmp_path)) == commit + "-dirty"
    (tmp_path / "a.txt").write_text("1")
    (tmp_path / "b.txt").write_text("untracked files do not count")
    assert git_commit(str(tmp_path)) == commit


@pytest.fixture
def busy_stranger():
    """A busy-looping process pinned to this process's last usable CPU that is not a
    descendant of this process (started through a shell that exits): ``(pid, cpu)``."""
    if not hasattr(psutil.Process(), "cpu_affinity") or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs CPU affinity")
    if shutil.which("taskset") is None:
        pytest.skip("needs taskset")
    cpu = usable_cpu_list()[-1]
    shell = subprocess.run(["sh", "-c", f'taskset -c {cpu} "$0" -c "$1" >/dev/null 2>&1 & '
                                        'echo $!', sys.executable, BUSY],
                           capture_output=True, text=True, timeout=30)
    assert shell.returncode == 0, shell.stderr
    pid = int(shell.stdout.split()[-1])
    try:
        yield pid, cpu
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_load_names_a_busy_process_on_the_measured_cpu(busy_stranger):
    pid, cpu = busy_stranger
    assert pid not in {p.pid for p in psutil.Process().children(recursive=True)}
    load = measure_cpu_load([cpu], interval=1.0)
    assert list(load.percent) == [cpu] and load.percent[cpu] >= 50
    stranger, = [p for p in load.others if p.pid == pid]
    assert stranger.cpus == [cpu] and stranger.percent >= 10 and "time.time()" in stranger.command
    warning = load.warning("this run")
    assert warning.startswith(f"CPU(s) {cpu} (") and f"pid {pid} " in warning
    assert f"CPUs {cpu})" in warning and "Sharing them, this run runs slower" in warning
    others = [c for c in usable_cpu_list() if c != cpu]
    if others:  # Pinned elsewhere, it is not named for the other CPUs.
        assert pid not in {p.pid for p in measure_cpu_load(others[:1], interval=0.5).others}


def test_the_load_leaves_out_this_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", BUSY.replace("30", "5")])
    try:
        load = measure_cpu_load(interval=0.5)
        assert {os.getpid(), child.pid}.isdisjoint(p.pid for p in load.others)
        assert sorted(load.percent) == usable_cpu_list()
        assert all(0 <= v <= 100 for v in load.percent.values())
    finally:
        child.kill()
        child.wait()


def test_the_warning_names_idle_cpus_nowhere_and_unseen_processes():
    idle = CpuLoad({0: 12.0, 1: 3.0}, [])
    assert idle.busy() == {} and idle.warning("this run") is None
    unseen = CpuLoad({0: 99.0, 1: 60.0, 2: 10.0}, [])
    assert unseen.busy() == {0: 99.0, 1: 60.0} and unseen.busy(threshold=95) == {0: 99.0}
    assert unseen.warning("rlframe autotune").startswith(
        "CPU(s) 0 (99%), 1 (60%) of the 3 that rlframe autotune uses were already busy, with "
        "processes this system does not show")
    many = CpuLoad({cpu: 90.0 for cpu in range(64)}, []).warning("x")
    assert many.startswith("CPU(s) 0 (90%), 1 (90%), 2 (90%), 3 (90%), 4 (90%), 5 (90%), "
                           "6 (90%), 7 (90%) and 56 more of the 64 that x uses")
    named = CpuLoad({4: 90.0}, [OtherProcess(7, "python train.py", 180.0, [2, 3, 4, 6])])
    assert "pid 7 'python train.py' (180% of a core, CPUs 2-4,6)" in named.warning("x")
