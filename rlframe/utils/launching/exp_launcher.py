"""Launch a grid of runs, each in its own process, over the run slots of an affinity code.

:func:`run_experiments` starts one process per (variant, run_ID) of a training
script, ``python <script> <slot_affinity_code> <log_dir> <run_ID> *args``,
as many at once as the affinity code has run slots (queueing the rest), each
pinned to its slot's CPUs. :func:`run_experiments_fn` does the same for a
Python function instead of a script. The experiment directory
``<root>/local/<YYYYMMDD>/<HHMMSS>/<experiment_title>`` receives
``experiments_tree.txt`` (what was asked for), ``num_launched.txt`` (progress)
and one directory per variant holding ``variant_config.json``; each run's
output (stdout and stderr) goes to ``<variant dir>/run_<ID>/launch.log``.

A run that fails does not stop the others: it is reported when it ends (its
log path and last lines) and again in the summary when all runs are done, and
the returned :class:`RunResult` list holds every return code. Ctrl-C or
SIGTERM to the launcher stops every run, their own child processes included;
on Linux a run also gets SIGTERM when the launcher dies any other way.

Runs are pinned with ``taskset`` where it exists (as in rlpyt), else with
``os.sched_setaffinity`` in the child before it starts; where the OS has no
CPU affinity (macOS, Windows) they run unpinned after one warning.
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psutil

from rlframe.utils.checks import as_int
from rlframe.utils.launching.affinity import (
    Affinity, affinity_from_code, get_n_run_slots, prepend_run_slot,
)
from rlframe.utils.launching.fn_child import FN_FILE
from rlframe.utils.launching.pinning import usable_cpus
from rlframe.utils.launching.variant import _find_unjsonable, _path_str, save_variant
from rlframe.utils.logging.context import get_log_dir
from rlframe.utils.synchronize import die_with_parent, load_libc

__all__ = ["RunResult", "run_experiments", "run_experiments_fn", "launch_experiment",
           "log_exps_tree", "log_num_launched", "launch_log_path", "LAUNCH_LOG", "FN_FILE"]

LAUNCH_LOG = "launch.log"  # A run's stdout and stderr, in <variant dir>/run_<ID>/.
FN_CHILD_MODULE = "rlframe.utils.launching.fn_child"
POLL_INTERVAL_S = 0.1  # Between checks for finished runs.
STOP_GRACE_S = 5.  # After SIGTERM, before SIGKILL, when the launcher is stopped.
TAIL_LINES = 20  # Lines of a failed run's log shown in reports.

_warned_no_pinning = False


@dataclass(frozen=True)
class RunResult:
    """How one run ended.

    Attributes:
        log_dir: the run's variant directory (absolute; the run logs to ``run_<run_ID>`` in it).
        run_ID: the run's number within its variant.
        run_slot: the run slot it ran in.
        returncode: the process's exit status (negative: killed by that signal).
        launch_log: the file holding its stdout and stderr.
        seconds: wall-clock duration.
    """

    log_dir: str
    run_ID: int
    run_slot: int
    returncode: int
    launch_log: str
    seconds: float

    @property
    def ok(self) -> bool:
        """Whether the run exited with status 0."""
        return self.returncode == 0


# --- Files in the experiment directory ---------------------------------------------------------

def log_exps_tree(exp_dir: str, log_dirs: Sequence[str], runs_per_setting: int) -> None:
    """Write ``exp_dir/experiments_tree.txt``: launcher pid, counts, and every variant dir."""
    os.makedirs(exp_dir, exist_ok=True)
    with open(os.path.join(exp_dir, "experiments_tree.txt"), "w", encoding="utf-8") as f:
        f.write(f"Experiment manager process ID: {os.getpid()}.\n")
        f.write(f"Number of settings (experiments) to run: {len(log_dirs)}  "
                f"({runs_per_setting * len(log_dirs)} runs).\n\n")
        for log_dir in log_dirs:
            f.write(f"{log_dir}\n")


def log_num_launched(exp_dir: str, n: int, total: int) -> None:
    """Write ``exp_dir/num_launched.txt``: runs launched so far out of the total."""
    with open(os.path.join(exp_dir, "num_launched.txt"), "w", encoding="utf-8") as f:
        f.write(f"Experiments launched so far: {n} out of {total}.\n")


def _new_exp_dir(experiment_title: str) -> str:
    """Create the dated experiment directory; a second launch of the same title within
    the same second gets ``<title>-1`` (``-2``, ...) instead of sharing it."""
    base = get_log_dir(experiment_title)
    candidate, k = base, 0
    while True:
        try:
            os.makedirs(candidate)
            return candidate
        except FileExistsError:
            k += 1
            candidate = f"{base}-{k}"


# --- Pinning and process groups ----------------------------------------------------------------

def _slot_cpus(affinity: Affinity) -> list[int] | None:
    """CPUs a run slot's processes may use, or None when it is not to be pinned."""
    dicts = affinity if isinstance(affinity, list) else [affinity]
    if not all(d.get("set_affinity", True) for d in dicts):
        return None
    cpus: list[int] = []
    for d in dicts:
        for c in d.get("all_cpus") or ():
            if c not in cpus:
                cpus.append(int(c))
    return cpus or None


def _slot_cuda_idx(affinity: Affinity) -> int | None:
    first = affinity[0] if isinstance(affinity, list) else affinity
    return first.get("cuda_idx")


def _warn_no_pinning() -> None:
    global _warned_no_pinning
    if not _warned_no_pinning:
        warnings.warn("CPU affinity is not supported on this platform; runs are launched "
                      "without pinning to their slot's CPUs.", stacklevel=3)
        _warned_no_pinning = True


def _pinning(cpus: list[int] | None) -> tuple[list[str], list[int] | None]:
    """How to pin a child to ``cpus``: ``(command prefix, CPUs to set in the child)``.

    ``taskset`` where it exists (as rlpyt; the pinning shows in the printed
    command), else ``os.sched_setaffinity`` in the child before it runs Python
    (Linux without util-linux); where neither exists (macOS, Windows) runs are
    not pinned, with one warning.
    """
    if not cpus:
        return [], None
    if os.name == "posix" and shutil.which("taskset"):
        return ["taskset", "-c", ",".join(str(c) for c in cpus)], None
    if hasattr(os, "sched_setaffinity"):
        return [], cpus
    _warn_no_pinning()
    return [], None


def _pre_exec(cpus: list[int] | None) -> Callable[[], None] | None:
    """What a child does before it runs the command: on Linux, ask for SIGTERM when the
    launcher dies (so that even ``kill -9`` of the launcher leaves no run behind), and
    pin itself to ``cpus`` when given."""
    linux = load_libc() is not None  # Loaded here: a child must not load it before exec.
    if not linux and not cpus:
        return None
    launcher_pid = os.getpid()

    def setup() -> None:
        if linux:
            die_with_parent(launcher_pid)
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


def _group_kwargs() -> dict:
    """Popen arguments that start a child in a process group of its own, so that its
    own children can be signalled with it, and a terminal's Ctrl-C reaches only the
    launcher (which then stops every run)."""
    if os.name == "posix":
        return dict(start_new_session=True)
    return dict(creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to ``proc``'s process group (POSIX) or to ``proc`` (Windows)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.name == "posix":
            os.killpg(proc.pid, sig)
        elif sig == getattr(signal, "SIGKILL", None):
            proc.kill()
        else:
            proc.terminate()


# --- Launching one run -------------------------------------------------------------------------

def launch_log_path(log_dir: str, run_ID: int) -> str:
    """Where a run's stdout and stderr go: ``<log_dir>/run_<run_ID>/launch.log``."""
    return os.path.join(log_dir, f"run_{run_ID}", LAUNCH_LOG)


def _start(command: list[str], run_slot: int, affinity_code: str, log_dir: str, variant: dict,
           run_ID: int, args: Sequence[Any], set_egl_device: bool,
           env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``command + [slot_code, log_dir, run_ID, *args]`` pinned to the slot's CPUs,
    output to its launch log; returns the process and the log's path."""
    slot_code = prepend_run_slot(run_slot, affinity_code)
    affinity = affinity_from_code(slot_code)
    prefix, cpus_in_child = _pinning(_slot_cpus(affinity))
    call_list = prefix + list(command) + [slot_code, log_dir, str(run_ID)]
    call_list += [str(a) for a in args]
    save_variant(variant, log_dir)
    child_env = dict(os.environ if env is None else env)
    cuda_idx = _slot_cuda_idx(affinity)
    if set_egl_device and cuda_idx is not None:
        child_env["EGL_DEVICE_ID"] = str(cuda_idx)
    log_path = launch_log_path(log_dir, run_ID)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    call_string = " ".join(call_list)
    print(f"\ncall string:\n {call_string}\n output: {log_path}", flush=True)
    with open(log_path, "a", encoding="utf-8") as log_file:
        log_file.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {call_string}\n")
        log_file.flush()
        proc = subprocess.Popen(call_list, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, env=child_env,
                                preexec_fn=_pre_exec(cpus_in_child), **_group_kwargs())
    return proc, log_path


def launch_experiment(script: str, run_slot: int, affinity_code: str, log_dir: str,
                      variant: dict, run_ID: int, args: Sequence[Any],
                      python_executable: str | None = None,
                      set_egl_device: bool = False) -> subprocess.Popen:
    """Start one run of ``script`` in its own process, pinned to a run slot's CPUs.

    The process runs ``python <script> <slot_affinity_code> <log_dir> <run_ID> *args``
    in a process group of its own, with stdout and stderr appended to
    ``<log_dir>/run_<run_ID>/launch.log``; ``variant`` is saved to
    ``<log_dir>/variant_config.json`` first.

    Args:
        script: path of the training script.
        run_slot: which slot of ``affinity_code`` the run takes.
        affinity_code: the machine's affinity code (without run slot).
        log_dir: the variant's directory.
        variant: the variant's config changes (JSON values).
        run_ID: the run's number.
        args: further command-line arguments (converted with ``str``).
        python_executable: interpreter to run the script (default: this one).
        set_egl_device: set ``EGL_DEVICE_ID`` to the slot's ``cuda_idx`` (headless rendering).

    Returns:
        The started process.
    """
    python = python_executable or sys.executable
    proc, _ = _start([python, script], run_slot, affinity_code, log_dir, variant, run_ID, args,
                     set_egl_device)
    return proc


# --- Running a grid ----------------------------------------------------------------------------

@dataclass
class _Run:
    log_dir: str
    variant: dict
    run_ID: int
    args: tuple


@dataclass
class _Running:
    run: _Run
    proc: subprocess.Popen
    launch_log: str
    start: float
    index: int  # Launch order.


def _tail(path: str, n_lines: int = TAIL_LINES) -> str:
    """The last lines of a text file (read from its end, so big logs cost little)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except OSError as err:
        return f"(cannot read {path}: {err})"
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n_lines:])


def _describe_failure(result: RunResult) -> str:
    how = (f"was killed by signal {-result.returncode}" if result.returncode < 0
           else f"exited with status {result.returncode}")
    tail = _tail(result.launch_log)
    indented = "\n".join("    " + line for line in tail.splitlines())
    return (f"Run FAILED: {result.log_dir} run_ID={result.run_ID} (slot {result.run_slot}) {how} "
            f"after {result.seconds:.1f} s.\n  log: {result.launch_log}\n"
            f"  last {TAIL_LINES} lines:\n{indented}")


def _check_inputs(affinity_code: str, experiment_title: str, runs_per_setting: int,
                  variants: Sequence[dict], log_dirs: Sequence[str],
                  common_args: Sequence[Any] | None,
                  runs_args: Sequence[Sequence[Any]] | None
                  ) -> tuple[int, int, tuple, list[tuple]]:
    """Validate everything before any run starts; returns ``(n_run_slots,
    runs_per_setting, common_args, runs_args)`` normalized."""
    if not isinstance(experiment_title, str) or not experiment_title.strip():
        raise ValueError(f"experiment_title must be a non-empty string, got "
                         f"{experiment_title!r}.")
    runs_per_setting = as_int("runs_per_setting", runs_per_setting, minimum=1)
    variants, log_dirs = list(variants), list(log_dirs)
    if len(variants) != len(log_dirs):
        raise ValueError(f"variants and log_dirs must have the same length (one log dir per "
                         f"variant), got {len(variants)} variants and {len(log_dirs)} log_dirs.")
    if not variants:
        raise ValueError("variants is empty: nothing to run (make_variants() with no levels "
                         "gives one empty variant, [{}], and log_dirs [''].")
    for i, variant in enumerate(variants):
        if not isinstance(variant, dict):
            raise TypeError(f"variants[{i}] must be a dict, got {type(variant).__name__}.")
        bad = _find_unjsonable(variant)
        if bad is not None:
            raise TypeError(f"variants[{i}] entry {_path_str(bad[0])!r} holds {bad[1]}; "
                            "variants are saved as JSON and may hold JSON values only.")
    normalized = [os.path.normpath(str(d)) for d in log_dirs]
    duplicates = sorted({d for d in normalized if normalized.count(d) > 1})
    if duplicates:
        raise ValueError(f"log_dirs must be unique (runs of different variants would share a "
                         f"directory): {duplicates} appear more than once.")
    for d in log_dirs:
        parts = os.path.normpath(str(d)).split(os.sep)
        if os.path.isabs(str(d)) or parts[0] == os.pardir:
            raise ValueError(f"log_dirs must be relative paths inside the experiment directory, "
                             f"got {d!r}.")
    common = tuple(common_args) if common_args is not None else ()
    if runs_args is None:
        per_run = [()] * len(variants)
    else:
        per_run = [tuple(a) for a in runs_args]
        if len(per_run) != len(variants):
            raise ValueError(f"runs_args must hold one sequence of arguments per variant: got "
                             f"{len(per_run)} for {len(variants)} variants.")
    n_run_slots = get_n_run_slots(affinity_code)
    if n_run_slots < 1:
        raise ValueError(f"affinity code {affinity_code!r} has no run slot: it holds no "
                         "complete run (check n_gpu, gpu_per_run and cpu_per_run).")
    allowed = usable_cpus()
    for slot in range(n_run_slots):
        cpus = _slot_cpus(affinity_from_code(prepend_run_slot(slot, affinity_code)))
        if cpus and allowed is not None and not set(cpus) <= set(allowed):
            raise ValueError(
                f"affinity code {affinity_code!r}: run slot {slot} is pinned to CPUs {cpus}, but "
                f"this process may use only {allowed}. Encode fewer cores, hyperthread_offset=0 "
                "(no hyperthreads), or set_affinity=False (no pinning).")
    return n_run_slots, runs_per_setting, common, per_run


class _Stop(BaseException):
    """SIGTERM to the launcher, raised where it was waiting."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


@contextlib.contextmanager
def _sigterm_raises() -> Any:
    """Within the block, SIGTERM raises :class:`_Stop` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _is_dead(proc: psutil.Process) -> bool:
    """Whether a process has ended; a zombie has (only its parent, which may not be us,
    still has to reap it)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stop_runs(running: list[_Running], grace: float | None = None) -> None:
    """SIGTERM every run, SIGKILL whatever of it (its children too) is left after ``grace``
    seconds (default ``STOP_GRACE_S``)."""
    if not running:
        return
    grace = STOP_GRACE_S if grace is None else grace
    main = threading.current_thread() is threading.main_thread()
    # A second Ctrl-C (or SIGTERM) must not cut the clean-up short and leave orphans.
    previous = ({sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT,
                                                                    signal.SIGTERM)}
                if main else {})
    try:
        print(f"Stopping {len(running)} run(s) (SIGTERM, then SIGKILL after {grace:.0f} s)...",
              flush=True)
        descendants: list[psutil.Process] = []
        for entry in running:
            with contextlib.suppress(psutil.Error):
                descendants += psutil.Process(entry.proc.pid).children(recursive=True)
            with contextlib.suppress(ProcessLookupError):
                entry.proc.terminate()  # The run first: it may stop its own workers cleanly.
        deadline = time.monotonic() + grace
        for entry in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                entry.proc.wait(timeout=max(0., deadline - time.monotonic()))
        for entry in running:
            _signal_group(entry.proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        for proc in descendants:  # Also those that left the run's process group.
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for entry in running:
            entry.proc.wait()
        deadline = time.monotonic() + grace
        while not all(_is_dead(p) for p in descendants) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_grid(command: list[str], affinity_code: str, exp_dir: str, runs_per_setting: int,
              variants: list[dict], log_dirs: list[str], common_args: tuple,
              runs_args: list[tuple], n_run_slots: int, set_egl_device: bool,
              env: dict | None = None) -> list[RunResult]:
    """Run every (run_ID, variant) over the slots; returns results in launch order."""
    log_exps_tree(exp_dir, log_dirs, runs_per_setting)
    queue = collections.deque(
        _Run(os.path.join(exp_dir, log_dir), variant, run_ID, common_args + run_args)
        for run_ID in range(runs_per_setting)
        for variant, log_dir, run_args in zip(variants, log_dirs, runs_args))
    total = len(queue)
    slots: list[_Running | None] = [None] * n_run_slots
    results: dict[int, RunResult] = {}
    n_launched = 0
    log_num_launched(exp_dir, n_launched, total)
    with _sigterm_raises():
        try:
            while queue or any(slots):
                for slot, entry in enumerate(slots):
                    if entry is not None and entry.proc.poll() is not None:
                        result = RunResult(entry.run.log_dir, entry.run.run_ID, slot,
                                           entry.proc.returncode, entry.launch_log,
                                           time.monotonic() - entry.start)
                        results[entry.index] = result
                        if not result.ok:
                            print(_describe_failure(result), flush=True)
                        slots[slot] = entry = None
                    if entry is None and queue:
                        run = queue.popleft()
                        os.makedirs(run.log_dir, exist_ok=True)
                        proc, log_path = _start(command, slot, affinity_code, run.log_dir,
                                                run.variant, run.run_ID, run.args,
                                                set_egl_device, env)
                        slots[slot] = _Running(run, proc, log_path, time.monotonic(),
                                               n_launched)
                        n_launched += 1
                        log_num_launched(exp_dir, n_launched, total)
                if queue or any(slots):
                    time.sleep(POLL_INTERVAL_S)
        except _Stop:
            _stop_runs([e for e in slots if e is not None])
            raise SystemExit(128 + signal.SIGTERM) from None
        except BaseException:  # Ctrl-C, or a run that could not be started.
            _stop_runs([e for e in slots if e is not None])
            raise
    ordered = [results[i] for i in sorted(results)]
    _report(ordered, exp_dir)
    return ordered


def _report(results: list[RunResult], exp_dir: str) -> None:
    failed = [r for r in results if not r.ok]
    print(f"\nAll {len(results)} runs done in {exp_dir}: {len(results) - len(failed)} "
          f"succeeded, {len(failed)} failed.", flush=True)
    if failed:
        print("\n".join(["Failed runs:"] + [_describe_failure(r) for r in failed]), flush=True)


def run_experiments(script: str, affinity_code: str, experiment_title: str,
                    runs_per_setting: int, variants: Sequence[dict], log_dirs: Sequence[str],
                    common_args: Sequence[Any] | None = None,
                    runs_args: Sequence[Sequence[Any]] | None = None,
                    set_egl_device: bool = False) -> list[RunResult]:
    """Run a training script once per (variant, run_ID), each in its own pinned process.

    Runs start in the order ``for run_ID in range(runs_per_setting): for variant in
    variants``, each in the first free run slot of ``affinity_code``; the others
    wait for a slot. Run ``k`` of variant ``i`` is
    ``python <script> <slot_affinity_code> <exp_dir>/<log_dirs[i]> <k> *common_args
    *runs_args[i]``; the script reads its variant with ``load_variant(log_dir)``
    and logs with ``logger_context(log_dir, run_ID, ...)``, which puts its files
    in ``<exp_dir>/<log_dirs[i]>/run_<k>/``. Each run's stdout and stderr go to
    ``launch.log`` there.

    Everything is checked before the first run starts. A failed run (non-zero
    exit status) does not stop the others; it is printed when it ends, with
    its log path and last lines, and again once all runs are done. Ctrl-C
    (KeyboardInterrupt) or SIGTERM stops every run (SIGTERM, then SIGKILL
    after ``STOP_GRACE_S`` seconds, children included) and is raised again
    (SIGTERM as ``SystemExit(143)``). Runs start in process groups of their
    own, so a terminal's Ctrl-C reaches only the launcher, which stops them.

    Args:
        script: path of the training script.
        affinity_code: the machine's affinity code (without run slot), from
            ``encode_affinity``; its run slots say how many runs go at once.
        experiment_title: name of the experiment directory,
            ``<root>/local/<YYYYMMDD>/<HHMMSS>/<experiment_title>``.
        runs_per_setting: runs of each variant (run_IDs ``0..runs_per_setting-1``).
        variants: one config-change dict per setting (from ``make_variants``).
        log_dirs: one relative directory per variant (from ``make_variants``).
        common_args: extra command-line arguments for every run.
        runs_args: extra command-line arguments per variant, after ``common_args``.
        set_egl_device: set ``EGL_DEVICE_ID`` to each slot's ``cuda_idx``.

    Returns:
        One :class:`RunResult` per run, in launch order; ``[r for r in results
        if not r.ok]`` are the failed runs.

    Raises:
        FileNotFoundError: ``script`` does not exist.
        ValueError, TypeError: bad arguments (e.g. ``runs_per_setting < 1``, a
            different number of ``variants``, ``log_dirs`` or ``runs_args``, an
            affinity code whose CPUs this process may not use).
    """
    if not os.path.isfile(script):
        raise FileNotFoundError(f"script {script!r} does not exist (relative to the working "
                                f"directory {os.getcwd()}).")
    n_run_slots, runs_per_setting, common, per_run = _check_inputs(
        affinity_code, experiment_title, runs_per_setting, variants, log_dirs, common_args,
        runs_args)
    exp_dir = _new_exp_dir(experiment_title)
    return _run_grid([sys.executable, os.path.abspath(script)], affinity_code, exp_dir,
                     runs_per_setting, list(variants), list(log_dirs), common, per_run,
                     n_run_slots, set_egl_device)


def _child_env() -> dict:
    """Environment of a function run: this one, with the directory holding ``rlframe``
    first on PYTHONPATH unless it is a site-packages directory (where Python finds it)."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    site_dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    if package_root not in site_dirs:
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if package_root not in paths:
            env["PYTHONPATH"] = os.pathsep.join([package_root] + paths)
    return env


def run_experiments_fn(fn: Callable[..., Any], affinity_code: str, experiment_title: str,
                       runs_per_setting: int, variants: Sequence[dict],
                       log_dirs: Sequence[str], common_args: Sequence[Any] | None = None,
                       runs_args: Sequence[Sequence[Any]] | None = None,
                       set_egl_device: bool = False) -> list[RunResult]:
    """:func:`run_experiments` for a function: one isolated process per (variant, run_ID).

    For an experiment kept in one file: each run is a fresh Python process
    (``python -m rlframe.utils.launching.fn_child``, pinned to its slot like a
    script run) that calls::

        fn(slot_affinity_code: str, log_dir: str, run_ID: int, variant: dict,
           *common_args, *runs_args[i])

    with the variant already loaded and ``run_ID`` an int; the arguments keep
    their Python types. ``fn`` (a module-level function, a closure or a lambda)
    and its arguments are saved with cloudpickle to ``experiment_fn.pkl`` in each
    variant directory; a function defined in the launching script
    (``__main__``) is saved by value, one from an importable module by
    reference, which the child imports with the launcher's ``sys.path``. Guard
    the launching script's own work with ``if __name__ == "__main__":``.

    Everything else (slots, directories, launch logs, failure reports, Ctrl-C
    and SIGTERM, the returned list) is as in :func:`run_experiments`.

    Raises:
        TypeError: ``fn`` is not callable or cannot be pickled; bad variants.
        ValueError: as :func:`run_experiments`.
    """
    import cloudpickle

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}: {fn!r}.")
    n_run_slots, runs_per_setting, common, per_run = _check_inputs(
        affinity_code, experiment_title, runs_per_setting, variants, log_dirs, common_args,
        runs_args)
    launcher_path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    payloads = []
    for run_args in per_run:
        try:
            payloads.append(cloudpickle.dumps(dict(fn=fn, args=common + run_args)))
        except Exception as err:  # noqa: BLE001 - anything unpicklable: say which part.
            raise TypeError(f"run_experiments_fn: cannot pickle fn={fn!r} with its arguments "
                            f"({type(err).__name__}: {err}).") from err
    exp_dir = _new_exp_dir(experiment_title)
    for log_dir, payload in zip(log_dirs, payloads):
        variant_dir = os.path.join(exp_dir, log_dir)
        os.makedirs(variant_dir, exist_ok=True)
        with open(os.path.join(variant_dir, FN_FILE), "wb") as f:
            # The child puts the launcher's sys.path in place before loading fn.
            f.write(cloudpickle.dumps(dict(sys_path=launcher_path, payload=payload)))
    return _run_grid([sys.executable, "-m", FN_CHILD_MODULE], affinity_code, exp_dir,
                     runs_per_setting, list(variants), list(log_dirs), (), [()] * len(per_run),
                     n_run_slots, set_egl_device, env=_child_env())
