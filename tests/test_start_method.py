"""Children's start method where forking this process would break them: a default
fork becomes forkserver (logged); an explicit fork is refused with the reason."""
import ctypes
import shutil
import multiprocessing as mp
import os
import threading
import time

import pytest
import torch

from rlframe.utils import synchronize
from rlframe.utils.synchronize import (autograd_fork_problem, autograd_thread_names,
                                      cuda_fork_problem, start_method_without_fork)


def test_no_problem_keeps_what_was_asked():
    for method in (None, "fork", "spawn"):
        assert start_method_without_fork(method, "AsyncRl", None) == method


def test_a_default_fork_becomes_forkserver_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(mp, "get_start_method", lambda allow_none=False: "fork")
    assert start_method_without_fork(None, "SyncRl", "the reason") == "forkserver"
    assert ("SyncRl: starting the child processes with start_method='forkserver' instead of "
            "the default 'fork': the reason.") in capsys.readouterr().out
    assert start_method_without_fork("spawn", "SyncRl", "the reason") == "spawn"


def test_an_explicit_fork_is_refused_naming_the_reason():
    with pytest.raises(RuntimeError, match=r"AsyncRl: start_method='fork' cannot work here: "
                                           r"the reason\. Pass start_method='forkserver'"):
        start_method_without_fork("fork", "AsyncRl", "the reason")


def test_cuda_is_a_problem_only_for_children_on_a_gpu_after_cuda_was_initialized(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert cuda_fork_problem([None, None]) is None
    assert "has initialized CUDA" in cuda_fork_problem([None, 0])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert cuda_fork_problem([0, 1]) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_cuda_is_a_problem_when_forked_children_would_be_refused_cuda(monkeypatch):
    """torch.cuda.is_available() leaves CUDA initialized nowhere, yet torch refuses CUDA
    in children forked afterwards: a forked probe reads the mark torch gives them."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    assert synchronize.forked_child_in_bad_cuda_fork() is False  # torch marks none here.
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # Read in the child.
    assert synchronize.forked_child_in_bad_cuda_fork() is True
    assert "asked the CUDA runtime for its devices" in cuda_fork_problem([None, 0])
    assert cuda_fork_problem([None, None]) is None
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    assert cuda_fork_problem([0]) is None


def _thread_named(name, stop):
    """A thread whose OS name (what /proc/self/task/<tid>/comm shows) is ``name``."""
    libc = ctypes.CDLL(None)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    stop.wait(30)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_autograd_device_threads_are_found_by_their_os_name():
    assert autograd_fork_problem() is None  # CPU-only torch starts no device threads.
    stop = threading.Event()
    thread = threading.Thread(target=_thread_named, args=("pt_autograd_7", stop))
    thread.start()
    try:
        deadline = time.time() + 5
        while "pt_autograd_7" not in autograd_thread_names() and time.time() < deadline:
            time.sleep(0.01)
        assert autograd_thread_names() == ["pt_autograd_7"]
        why = autograd_fork_problem()
        assert f"this process (pid {os.getpid()}) has run a backward pass" in why
        assert "pt_autograd_7" in why and "torch refuses autograd" in why
    finally:
        stop.set()
        thread.join()
    # join() returns once Python is done with the thread, a moment before the OS thread
    # (and its /proc entry) is gone.
    deadline = time.time() + 5
    while autograd_thread_names() and time.time() < deadline:
        time.sleep(0.01)
    assert autograd_thread_names() == []


def _tiny_runner(runner_cls, **kwargs):
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.algos.pg.a2c import A2C
    from rlframe.envs.gym import make as gym_make
    from rlframe.samplers.serial.sampler import SerialSampler
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0)
    return runner_cls(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=64,
                      **kwargs)


def test_sync_ranks_avoid_fork_after_autograd_threads_started(monkeypatch, capsys):
    from rlframe.runners.sync_rl import SyncRl
    import rlframe.runners.sync_rl.launch as launch
    runner = _tiny_runner(SyncRl, affinity=[dict(workers_cpus=[0]), dict(workers_cpus=[1])])
    monkeypatch.setattr(mp, "get_start_method", lambda allow_none=False: "fork")
    assert runner._ranks_start_method() is None  # No problem: the default fork.
    monkeypatch.setattr(launch, "autograd_fork_problem", lambda: "autograd threads run")
    assert runner._ranks_start_method() == "forkserver"
    assert "instead of the default 'fork': autograd threads run." in capsys.readouterr().out
    runner.start_method = "fork"
    with pytest.raises(RuntimeError, match="SyncRl: start_method='fork' cannot work here: "
                                           "autograd threads run"):
        runner._ranks_start_method()


PRELOAD_SCRIPT = '''
import sys
from rlframe.utils.synchronize import process_context


def report(queue):
    queue.put(sorted(m for m in ("torch", "rlframe.samplers.parallel.worker") if m in sys.modules))


if __name__ == "__main__":
    ctx = process_context("forkserver")
    queue = ctx.Queue()
    child = ctx.Process(target=report, args=(queue,))
    child.start()
    print("child had", queue.get(timeout=60), "parent has torch:", "torch" in sys.modules)
    child.join()
'''


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver")
def test_forkserver_children_start_with_torch_already_imported(tmp_path):
    """process_context's forkserver imports torch and the children's entry points once,
    so that a child does not spend seconds of CPU importing them again."""
    import subprocess
    import sys
    script = tmp_path / "preload.py"
    script.write_text(PRELOAD_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("child had ['rlframe.samplers.parallel.worker', 'torch'] parent has torch: False"
            in result.stdout), result.stdout + result.stderr[-3000:]


LONG_TMPDIR_SCRIPT = '''
import multiprocessing as mp
import sys

from rlframe.utils.synchronize import process_context


def child(queue):
    queue.put("child ran")


if __name__ == "__main__":
    ctx = mp.get_context("forkserver") if sys.argv[1] == "plain" else process_context("forkserver")
    print("method", ctx.get_start_method(), flush=True)
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    try:
        process.start()
    except OSError as error:
        print("start failed:", error)
        sys.exit(0)
    print(queue.get(timeout=60))
    process.join()
'''


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver")
def test_a_tmpdir_too_long_for_the_forkserver_socket_spawns_instead(tmp_path):
    """The forkserver's socket lies in $TMPDIR/pymp-XXXXXXXX/; where its path would pass
    the 107 bytes a Unix socket allows, process_context spawns the children (saying why)
    instead of failing as multiprocessing does; a TMPDIR short enough keeps it."""
    import subprocess
    import sys
    import tempfile
    script = tmp_path / "long_tmpdir.py"
    script.write_text(LONG_TMPDIR_SCRIPT)
    base = tempfile.mkdtemp(prefix="rlf")  # Short, whatever pytest's tmp_path is.
    try:
        # 80 bytes: the socket's path (this + /pymp-XXXXXXXX/listener-XXXXXXXX) is 112.
        long_dir = os.path.join(base, "d" * (80 - len(base) - 1))
        short_dir = os.path.join(base, "s")
        for folder in (long_dir, short_dir):
            os.makedirs(folder)
        assert len(long_dir) == 80

        def run(tmpdir, how):
            result = subprocess.run([sys.executable, str(script), how], capture_output=True,
                                    text=True, timeout=120, env=dict(os.environ, TMPDIR=tmpdir))
            assert result.returncode == 0, result.stderr[-3000:]
            return result.stdout

        # What multiprocessing itself does with that TMPDIR.
        assert "start failed: AF_UNIX path too long" in run(long_dir, "plain")
        out = run(long_dir, "rlframe")
        assert "method spawn" in out and "child ran" in out, out
        assert ("instead of 'forkserver': the forkserver's socket would be "
                f"{long_dir}/pymp-") in out, out
        assert f"112 bytes, over the 107 a Unix socket's path may have (TMPDIR='{long_dir}')" in out
        out = run(short_dir, "rlframe")
        assert "method forkserver" in out and "child ran" in out, out
        assert not [name for folder in (long_dir, short_dir) for name in os.listdir(folder)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
