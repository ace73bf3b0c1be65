"""Running a grid of runs over the run slots of an affinity code: the checks made before
the first run starts, the loop that fills free slots, and stopping every run (and its
children) on Ctrl-C, SIGTERM or an error of the launcher."""
from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import psutil

from rlframe.utils.checks import as_int
from rlframe.utils.launching.affinity import (affinity_from_code, encode_affinity,
                                             get_n_run_slots, prepend_run_slot)
from rlframe.utils.launching.pinning import usable_cpus
from rlframe.utils.launching.run_files import (RunResult, _describe_failure, _report,
                                               log_exps_tree, log_num_launched)
from rlframe.utils.launching.run_process import _signal_group, _slot_cpus, _start
from rlframe.utils.launching.variant import _find_unjsonable, _path_str
from rlframe.utils.processes import stop_in_order

POLL_INTERVAL_S = 0.1  # Between checks for finished runs.
STOP_GRACE_S = 5.  # After SIGTERM, before SIGKILL, when the launcher is stopped.


def slot_cores() -> tuple[int, bool]:
    """The cores run slots share: how many this process may use, and whether they are
    CPUs 0..n-1, so that the slots can be pinned to them (where this process may use
    other ids, a container's share of a bigger machine, the runs go unpinned)."""
    usable = usable_cpus()
    cores = len(usable or range(os.cpu_count() or 1))
    return cores, usable is not None and sorted(usable) == list(range(cores))


def slots_affinity_code(n_slots: int, cores: int, pin: bool) -> str:
    """The affinity code of ``n_slots`` run slots of ``cores // n_slots`` cores each on
    one socket, no GPU (pinned when ``pin``), for :func:`run_queue`."""
    return encode_affinity(n_cpu_core=cores, n_gpu=0, cpu_per_run=cores // n_slots,
                           hyperthread_offset=0, n_socket=1, set_affinity=pin)


@dataclass
class Run:
    """One run of :func:`run_queue`: ``run_ID`` of the variant in ``log_dir``, with extra
    command-line ``args``."""
    log_dir: str
    variant: dict
    run_ID: int
    args: tuple


@dataclass
class _Running:
    run: Run
    proc: subprocess.Popen
    launch_log: str
    start: float
    index: int  # Launch order.


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


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`_Stop` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        # The runs first: a run may stop its own workers cleanly.
        stop_in_order([entry.proc for entry in running], join_s=0., terminate_s=grace)
        for entry in running:  # What is left of each run's process group.
            _signal_group(entry.proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        # Also those that left the run's process group.
        stop_in_order(descendants, join_s=0., terminate_s=0.)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_grid(command: list[str], affinity_code: str, exp_dir: str, runs_per_setting: int,
              variants: list[dict], log_dirs: list[str], common_args: tuple,
              runs_args: list[tuple], n_run_slots: int, set_egl_device: bool,
              env: dict | None = None, stop_grace_s: float | None = None) -> list[RunResult]:
    """Run every (run_ID, variant) over the slots; returns results in launch order."""
    log_exps_tree(exp_dir, log_dirs, runs_per_setting)
    runs = [Run(os.path.join(exp_dir, log_dir), variant, run_ID, common_args + run_args)
            for run_ID in range(runs_per_setting)
            for variant, log_dir, run_args in zip(variants, log_dirs, runs_args)]
    return run_queue(command, affinity_code, exp_dir, runs, n_run_slots, set_egl_device, env,
                     stop_grace_s)


def run_queue(command: list[str], affinity_code: str, exp_dir: str, runs: Sequence[Run],
              n_run_slots: int, set_egl_device: bool = False, env: dict | None = None,
              stop_grace_s: float | None = None) -> list[RunResult]:
    """Run ``runs`` in order over the slots (``command + [slot_code, log_dir, run_ID,
    *args]`` each, pinned to its slot, output to ``<log_dir>/run_<run_ID>/launch.log``),
    stopping them all on Ctrl-C, SIGTERM or an error; progress goes to ``exp_dir``'s
    ``num_launched.txt`` and the summary names it. Returns results in launch order."""
    queue = collections.deque(runs)
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
            _stop_runs([e for e in slots if e is not None], stop_grace_s)
            raise SystemExit(128 + signal.SIGTERM) from None
        except BaseException:  # Ctrl-C, or a run that could not be started.
            _stop_runs([e for e in slots if e is not None], stop_grace_s)
            raise
    ordered = [results[i] for i in sorted(results)]
    _report(ordered, exp_dir)
    return ordered
