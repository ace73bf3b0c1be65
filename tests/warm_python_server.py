"""A Python interpreter with torch and rlframe imported that forks one process per script.

Started by the ``warm_python`` fixture (conftest.py). Every line on stdin is a JSON
request ``{"path", "args", "cwd", "env", "stdout", "stderr"}``; the server forks, the
child runs the script as ``python path *args`` would (``__main__``, ``sys.argv``,
``sys.path[0]``, the environment, exit code and exit handlers), and the server writes
``{"pid": ...}`` and then ``{"returncode": ...}`` lines. Importing torch (~1.6 s of CPU)
and torch._dynamo (~1.3 s, on a process's first optimizer) is paid once, not per script.
The server ends when stdin closes (the test session ended or its process died).
"""
import atexit
import importlib
import json
import os
import runpy
import sys
import threading
import traceback

PRELOAD = ["numpy", "torch", "torch._dynamo", "torch.optim", "gymnasium",
           "rlframe.runners.minibatch_rl", "rlframe.runners.sync_rl", "rlframe.runners.async_rl",
           "rlframe.samplers.serial.sampler", "rlframe.samplers.parallel.cpu.sampler",
           "rlframe.samplers.parallel.gpu.sampler", "rlframe.algos.pg.ppo", "rlframe.algos.dqn.dqn",
           "rlframe.algos.qpg.sac", "rlframe.utils.logging.context", "rlframe.envs.atari"]


def run(request: dict) -> None:
    """In the forked child: become ``python path *args`` and exit with its code."""
    code = 0
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # Not the server's request pipe.
        sys.stdin = open(0, closefd=False)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.argv = [request["path"], *request["args"]]
        sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))
        runpy.run_path(request["path"], run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # What the interpreter does at exit: join threads, then the exit handlers.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # An optional extra: the script imports it itself, or fails.
            pass
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
