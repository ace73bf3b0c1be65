import contextlib
import csv
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:
    # pytest -n N: N workers share the machine's cores. One OpenMP thread per process
    # (inherited by the scripts and workers a test starts), so that torch's threads do
    # not spin waiting for cores that another worker's test is using.
    # Where a test asks for more threads (an affinity's torch threads), the waiting ones
    # sleep instead of spinning.
    for _name, _value in (("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                          ("OMP_WAIT_POLICY", "PASSIVE")):
        os.environ.setdefault(_name, _value)

_INDUCTOR_CACHE = pytest.StashKey[str]()
_RAY_TMPDIR = pytest.StashKey[str]()


def pytest_configure(config):
    """The test session's processes (xdist workers, scripts, children) share one
    torch.compile cache and one Ray folder of their own, removed at the end: a graph that
    one test compiled (e.g. the check that torch.compile works here) is not compiled again
    by the next, and nothing is left in the machine's cache. Inductor compiles in the
    compiling process, without a pool of compile workers that would import torch
    again on cores the tests are using."""
    if "PYTEST_XDIST_WORKER" in os.environ:  # A worker inherits the controller's.
        return
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        config.stash[_INDUCTOR_CACHE] = tempfile.mkdtemp(prefix="rlframe_tests_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config.stash[_INDUCTOR_CACHE]
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # Ray keeps every local session's logs in $RAY_TMPDIR/ray (default /tmp/ray): the
    # session's go to a folder of its own, removed at the end. Its path is short, as
    # Ray's sockets are in it.
    if "RAY_TMPDIR" not in os.environ:
        config.stash[_RAY_TMPDIR] = tempfile.mkdtemp(prefix="rlft_ray_", dir="/tmp")
        os.environ["RAY_TMPDIR"] = config.stash[_RAY_TMPDIR]


def pytest_unconfigure(config):
    for key in (_INDUCTOR_CACHE, _RAY_TMPDIR):
        path = config.stash.get(key, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def in_tmp_cwd(tmp_path, monkeypatch):
    """Run the test in an empty working directory, logging under its ./data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLFRAME_DATA_DIR", raising=False)
    return tmp_path


def run_dirs(root):
    """All run_<ID> directories written under root/data/local."""
    found = []
    for dirpath, dirnames, _ in os.walk(os.path.join(root, "data", "local")):
        found.extend(os.path.join(dirpath, d) for d in dirnames if d.startswith("run_"))
    return found


def read_csv(path):
    """``(header, rows)`` of a CSV file such as progress.csv."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def _restore_default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def running_script(script, *args, cwd):
    """Run ``python script *args`` with output piped; kill it if it still runs on exit.

    A process started in the background (``cmd &``, as some CI runners do) inherits
    SIGINT ignored; the script gets a terminal's disposition, so that Ctrl-C reaches
    Python's KeyboardInterrupt handler as it would for a user. The script runs in a
    process forked from the warm interpreter (:class:`WarmPython`).
    """
    proc = warm_python_interpreter().start(script, args, cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_script(args, cwd, env=None):
    """Start ``args`` (e.g. ``[sys.executable, script, ...]``) in a session of its own,
    output piped, this repository first on PYTHONPATH, and SIGINT taken as a terminal
    delivers it (a test may then signal the whole process group, as Ctrl-C does).
    A Python script runs in a process forked from the warm interpreter
    (:class:`WarmPython`)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    if len(args) > 1 and args[0] == sys.executable and str(args[1]).endswith(".py"):
        return warm_python_interpreter().start(args[1], args[2:], cwd, env, new_session=True)
    return subprocess.Popen(args, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_restore_default_sigint)


def wait_for_line(process, text, timeout=90.):
    """Read the process's output until a line holds ``text``; returns all lines read."""
    lines = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"no line with {text!r} in:\n{''.join(lines[-30:])}")


class WarmProcess:
    """A script started by :class:`WarmPython`: the part of ``subprocess.Popen`` the
    tests use (``pid``, ``stdout``, ``poll``, ``wait``, ``communicate``, signals)."""

    def __init__(self, warm, args, pid, stdout):
        self.warm, self.args, self.pid, self.stdout = warm, args, pid, stdout
        self.stderr = None
        self.returncode = None
        self._output = []
        self._reader = None

    def poll(self):
        if self.returncode is None:
            self.warm.pump(0.)
            self.returncode = self.warm.exited.get(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.time()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.warm.pump(0.1 if left is None else min(0.1, left))
        return self.returncode

    def communicate(self, timeout=None):
        """``(all output, None)`` once the script has ended and its output is closed."""
        deadline = None if timeout is None else time.time() + timeout
        if self._reader is None:
            self._reader = threading.Thread(target=lambda: self._output.append(
                self.stdout.read()), daemon=True)
            self._reader.start()
        self._reader.join(None if deadline is None else max(0., deadline - time.time()))
        if self._reader.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0., deadline - time.time()))
        self.stdout.close()
        return self._output[0], None

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class WarmPython:
    """Runs scripts as ``python script *args`` would, each in a process forked from one
    interpreter that has torch and rlframe imported already (warm_python_server.py);
    several may run at once."""

    def __init__(self):
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "tests", "warm_python_server.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, start_new_session=True)
        self.pending = b""
        self.started = {}  # request id -> pid
        self.exited = {}  # pid -> return code
        self.fifos = tempfile.mkdtemp(prefix="rlframe-warm-")
        self.count = 0
        self.ready = False
        while not self.ready:
            if not self.pump(120.):
                raise RuntimeError("the warm interpreter did not start")

    def pump(self, timeout):
        """Read the server's answers that arrive within ``timeout`` s; False if none."""
        ready, _, _ = select.select([self.server.stdout], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self.server.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError("the warm interpreter ended")
        self.pending += chunk
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            answer = json.loads(line)
            if "ready" in answer:
                self.ready = True
            elif "returncode" in answer:
                self.exited[answer["pid"]] = answer["returncode"]
            else:
                self.started[answer["id"]] = answer["pid"]
        return True

    def _request(self, script, args, cwd, env, stdout, stderr, new_session):
        self.count += 1
        request = dict(id=self.count, path=str(script), args=[str(a) for a in args],
                       cwd=str(cwd), env=dict(os.environ if env is None else env),
                       stdout=stdout, stderr=stderr, new_session=new_session)
        self.server.stdin.write((json.dumps(request) + "\n").encode())
        self.server.stdin.flush()
        deadline = time.time() + 60.
        while self.count not in self.started:
            if time.time() > deadline:
                raise RuntimeError(f"the warm interpreter did not start {script}")
            self.pump(1.)
        return self.started.pop(self.count)

    def start(self, script, args, cwd, env=None, new_session=False):
        """``subprocess.Popen([sys.executable, script, *args], cwd=cwd, env=env, text=True,
        stdout=PIPE, stderr=STDOUT, start_new_session=new_session)``, with a terminal's
        Ctrl-C (KeyboardInterrupt)."""
        fifo = os.path.join(self.fifos, f"out{self.count + 1}")
        os.mkfifo(fifo)
        read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # The writer may open now.
        try:
            pid = self._request(script, args, cwd, env, dict(fifo=fifo), "stdout", new_session)
        finally:
            os.remove(fifo)
        os.set_blocking(read_end, True)
        return WarmProcess(self, [sys.executable, str(script), *args], pid,
                           open(read_end, errors="replace"))

    def run(self, script, args, cwd, env=None, timeout=300.):
        """``subprocess.run([sys.executable, script, *args], ..., capture_output=True,
        text=True)``; the script is killed and AssertionError raised after ``timeout``."""
        out, err = os.path.join(cwd, ".warm_stdout"), os.path.join(cwd, ".warm_stderr")
        pid = self._request(script, args, cwd, env, dict(file=out), dict(file=err), False)
        process = WarmProcess(self, [sys.executable, str(script), *args], pid, None)
        timed_out = False
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill()
            process.wait()
        with open(out) as f_out, open(err) as f_err:
            stdout, stderr = f_out.read(), f_err.read()
        os.remove(out)
        os.remove(err)
        if timed_out:
            raise AssertionError(f"{script} ran over {timeout} s:\n{stdout[-3000:]}"
                                 f"{stderr[-3000:]}")
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def close(self):
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self.server.stdout.close()
        os.rmdir(self.fifos)


_WARM = []


def warm_python_interpreter():
    """The session's :class:`WarmPython`, started on first use."""
    if not _WARM:
        _WARM.append(WarmPython())
    return _WARM[0]


def long_lived_helper(process):
    """Whether a psutil.Process serves the test process for its whole life rather than
    one test: multiprocessing's resource tracker or forkserver, or the warm interpreter
    (told by its pid: the scripts it forks share its command line)."""
    if any(warm.server.pid == process.pid for warm in _WARM):
        return True
    cmd = " ".join(process.cmdline())  # psutil.Error where it has ended meanwhile.
    return "resource_tracker" in cmd or "forkserver" in cmd


def pytest_sessionfinish(session, exitstatus):
    while _WARM:
        _WARM.pop().close()


@pytest.fixture
def warm_python():
    """Runs example, benchmark and helper scripts without each importing torch anew."""
    return warm_python_interpreter()
