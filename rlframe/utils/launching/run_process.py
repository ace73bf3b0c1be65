"""Starting one run of a grid: its process, pinned to its run slot's CPUs (``taskset``,
else ``os.sched_setaffinity`` in the child), in a process group of its own, ending
with the launcher on Linux, with stdout and stderr in its launch log."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from typing import Any, Callable, Sequence

from rlframe.utils.launching.affinity import Affinity, affinity_from_code, prepend_run_slot
from rlframe.utils.launching.run_files import launch_log_path
from rlframe.utils.launching.variant import save_variant
from rlframe.utils.processes import die_with_parent, load_libc

_warned_no_pinning = False


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
