import contextlib
import csv
import json
import os
import select
import signal
import subprocess
import sys
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


def pytest_collection_modifyitems(config, items):
    """The heaviest modules first, each module's tests kept together (its module fixtures
    start once). A module weighs the sum of its ``slow`` tests' timeouts (60 s where a
    test sets none). Under ``pytest -n`` the long tests then start early and the short
    ones fill in at the end, instead of one worker finishing a long test alone."""
    weight = {}
    for item in items:
        module = getattr(item, "module", None)
        timeout = item.get_closest_marker("timeout")
        slow = item.get_closest_marker("slow") is not None
        weight[module] = weight.get(module, 0) + (
            (timeout.args[0] if timeout and timeout.args else 60) if slow else 0)
    first_seen = {module: i for i, module in enumerate(weight)}
    items.sort(key=lambda item: (-weight[getattr(item, "module", None)],
                                 first_seen[getattr(item, "module", None)]))


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
    Python's KeyboardInterrupt handler as it would for a user.
    """
    proc = subprocess.Popen([sys.executable, str(script), *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_restore_default_sigint)
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
    delivers it (a test may then signal the whole process group, as Ctrl-C does)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
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


class WarmPython:
    """Runs scripts as ``python script *args`` would, each in a process forked from one
    interpreter that has torch and rlframe imported already (warm_python_server.py)."""

    def __init__(self):
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "tests", "warm_python_server.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, cwd=REPO)
        self.pending = b""
        assert self._reply(120.) == {"ready": True}

    def _reply(self, timeout):
        """The server's next JSON line, or None if none comes within ``timeout`` s."""
        deadline = time.time() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.server.stdout], [], [],
                                        max(0., deadline - time.time()))
            chunk = os.read(self.server.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, script, args, cwd, env=None, timeout=300.):
        """``subprocess.run([sys.executable, script, *args], ..., capture_output=True,
        text=True)``; the script is killed and AssertionError raised after ``timeout``."""
        out, err = os.path.join(cwd, ".warm_stdout"), os.path.join(cwd, ".warm_stderr")
        request = dict(path=str(script), args=[str(a) for a in args], cwd=str(cwd),
                       env=dict(os.environ if env is None else env), stdout=out, stderr=err)
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        pid = self._reply(30.)["pid"]
        reply = self._reply(timeout)
        if reply is None:
            os.kill(pid, signal.SIGKILL)
            self._reply(30.)
        with open(out) as f_out, open(err) as f_err:
            stdout, stderr = f_out.read(), f_err.read()
        os.remove(out)
        os.remove(err)
        if reply is None:
            raise AssertionError(f"{script} ran over {timeout} s:\n{stdout[-3000:]}"
                                 f"{stderr[-3000:]}")
        return subprocess.CompletedProcess([sys.executable, str(script), *args],
                                           reply["returncode"], stdout, stderr)

    def close(self):
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self.server.stdout.close()


@pytest.fixture(scope="session")
def warm_python():
    """Runs example and benchmark scripts without each importing torch anew."""
    warm = WarmPython()
    yield warm
    warm.close()
