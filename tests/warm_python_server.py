"""A Python interpreter with torch and rlframe imported that forks one process per script.

Started by conftest.py's ``warm_python_interpreter()``. Every line on stdin is a JSON request
``{"id", "path", "args", "cwd", "env", "stdout", "stderr", "new_session"}``; the server
forks and the child runs the script as ``python path *args`` would (``__main__``,
``sys.argv``, ``sys.path``, the environment, a terminal's Ctrl-C, the exit code and
exit handlers). The server answers ``{"id", "pid"}`` once the child runs and
``{"pid", "returncode"}`` once it has ended; several children may run at once.
Importing torch (~1.6 s of CPU) and torch._dynamo (~1.3 s, on a process's first
optimizer) is paid once, not per script. When stdin closes (the test session ended,
or its process died) the server kills the children still running and exits.
"""
import atexit
import importlib
import json
import os
import runpy
import select
import signal
import sys
import threading
import traceback

import psutil

PRELOAD = ["numpy", "torch", "torch._dynamo", "torch.optim", "gymnasium",
           "rlframe.runners.minibatch_rl", "rlframe.runners.sync_rl", "rlframe.runners.async_rl",
           "rlframe.samplers.serial.sampler", "rlframe.samplers.parallel.cpu.sampler",
           "rlframe.samplers.parallel.gpu.sampler", "rlframe.algos.pg.ppo", "rlframe.algos.dqn.dqn",
           "rlframe.algos.qpg.sac", "rlframe.utils.logging.context", "rlframe.envs.atari"]


def open_output(spec: dict) -> int:
    """A write descriptor for ``{"file": path}`` (created or truncated) or ``{"fifo":
    path}`` (whose reader is open already)."""
    if "fifo" in spec:
        return os.open(spec["fifo"], os.O_WRONLY)
    return os.open(spec["file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)


def run(request: dict, out: int, err: int) -> None:
    """In the forked child: become ``python path *args`` and exit with its code."""
    code = 0
    try:
        os.close(ANSWERS)
        if request["new_session"]:
            os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # Not the server's request pipe.
        os.dup2(out, 1)  # Nor its answer pipe.
        os.dup2(err, 2)
        for fd in {null, out, err}:
            os.close(fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if "OMP_NUM_THREADS" in os.environ:  # torch read it at import, in the server.
            import torch
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        path = os.path.abspath(request["path"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:1] = [os.path.dirname(path)] + extra
        sys.argv = [request["path"], *request["args"]]
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # What the interpreter does at exit: join threads, then the exit handlers.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if code == -signal.SIGINT:  # Python ends by SIGINT after an uncaught Ctrl-C.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        os._exit(128 + signal.SIGINT if code == -signal.SIGINT else code)


def answer(message: dict) -> None:
    os.write(ANSWERS, (json.dumps(message) + "\n").encode())


def start(request: dict) -> None:
    out = open_output(request["stdout"])
    err = out if request["stderr"] == "stdout" else open_output(request["stderr"])
    pid = os.fork()
    if pid == 0:
        run(request, out, err)
    for fd in {out, err}:
        os.close(fd)
    answer({"id": request["id"], "pid": pid})


def reap() -> None:
    """Answer for every child that has ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        answer({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def main() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # An optional extra: the script imports it itself, or fails.
            pass
    answer({"ready": True})
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                start(json.loads(line))
        reap()
    # The test session is gone: so are the scripts it started.
    for child in psutil.Process().children():
        try:
            if os.getpgid(child.pid) == child.pid:
                os.killpg(child.pid, signal.SIGKILL)
            else:
                child.kill()
        except (ProcessLookupError, psutil.Error):
            pass


if __name__ == "__main__":
    ANSWERS = os.dup(1)  # Scripts' prints must not reach the answer pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    main()
