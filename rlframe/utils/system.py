"""What a run ran on: the machine, the library versions and rlframe's commit.

Benchmark runs keep this next to their results (``system.json``), so a published
number says which CPU, how many cores and which code produced it.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import psutil

SYSTEM_FILE = "system.json"  # A run's records, one per start (rlframe benchmark writes it).
# Distributions whose versions change results; those not installed are left out.
_PACKAGES = ("torch", "numpy", "gymnasium", "ale-py", "atari-py", "mujoco", "envpool", "ray")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(path: str | None = None) -> str | None:
    """The commit of the git checkout holding ``path`` (rlframe's own source by
    default), with ``-dirty`` when tracked files differ from it; None outside a checkout
    or without git."""
    folder = path or os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                                text=True, timeout=10)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = status.returncode == 0 and status.stdout.strip() != ""
    return commit.stdout.strip() + ("-dirty" if dirty else "")


def system_record() -> dict:
    """The machine and software of this process, as a JSON-ready dict.

    Keys: ``hostname``, ``platform``, ``cpu``, ``logical_cpus``, ``physical_cores``,
    ``usable_cpus`` (this process's affinity, or None where unsupported),
    ``memory_gib``, ``gpus`` (how many CUDA devices torch sees), ``python``,
    ``rlframe`` (version), ``commit`` (:func:`git_commit`) and ``packages`` (versions).
    """
    import torch

    from rlframe import __version__
    try:
        usable = sorted(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error):  # No affinity on macOS.
        usable = None
    packages = {}
    for name in _PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    # The count only: naming the devices would initialize CUDA in a process that may
    # fork workers after this.
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return dict(hostname=socket.gethostname(), platform=platform.platform(), cpu=cpu_model(),
                logical_cpus=psutil.cpu_count(), physical_cores=psutil.cpu_count(logical=False),
                usable_cpus=usable, memory_gib=round(psutil.virtual_memory().total / 2 ** 30, 1),
                gpus=gpus, python=sys.version.split()[0], rlframe=__version__,
                commit=git_commit(), packages=packages)


@dataclasses.dataclass
class OtherProcess:
    """A process outside this one's tree that used CPU time while the load was measured.

    Attributes:
        pid: its process ID.
        command: its command line, shortened.
        percent: CPU used, in percent of one core (above 100 for several threads).
        cpus: the CPUs it may run on (None where unknown).
    """
    pid: int
    command: str
    percent: float
    cpus: list[int] | None


@dataclasses.dataclass
class CpuLoad:
    """How busy some CPUs were over a short interval, and with which other processes.

    Attributes:
        percent: CPU -> percent of the interval it was busy (all processes, this one too).
        others: processes outside this one's tree that used at least ``min_percent`` of a
            core and may run on those CPUs, busiest first.
    """
    percent: dict[int, float]
    others: list[OtherProcess]

    def busy(self, threshold: float = 50.) -> dict[int, float]:
        """The CPUs at least ``threshold`` percent busy, with their load."""
        return {cpu: load for cpu, load in self.percent.items() if load >= threshold}

    def warning(self, what: str, threshold: float = 50.) -> str | None:
        """A warning naming the busy CPUs and the processes on them, or None if none is.

        Args:
            what: what will run on the CPUs, e.g. ``"this run"``.
            threshold: percent busy from which a CPU counts as busy.
        """
        busy = self.busy(threshold)
        if not busy:
            return None
        named = list(busy.items())[:8]
        cpus = ", ".join(f"{cpu} ({load:.0f}%)" for cpu, load in named) + (
            f" and {len(busy) - len(named)} more" if len(busy) > len(named) else "")
        if self.others:
            by = "; ".join(f"pid {p.pid} {p.command!r} ({p.percent:.0f}% of a core"
                           + ("" if p.cpus is None else f", CPUs {_cpu_ranges(p.cpus)}") + ")"
                           for p in self.others[:3])
        else:
            by = "processes this system does not show (another container or machine?)"
        return (f"CPU(s) {cpus} of the {len(self.percent)} that {what} uses were already "
                f"busy, with {by}. Sharing them, {what} runs slower than on idle CPUs, and "
                "speeds measured meanwhile understate this machine.")


def measure_cpu_load(cpus: Sequence[int] | None = None, interval: float = 1.0,
                     min_percent: float = 10.) -> CpuLoad:
    """Measure over ``interval`` seconds how busy ``cpus`` are (this process's usable
    CPUs by default), and which processes outside this one's tree keep them busy.

    Args:
        cpus: the CPUs to measure.
        interval: seconds to measure over (this process sleeps meanwhile).
        min_percent: the least CPU, in percent of one core, of a process named in
            ``others``.

    Returns:
        The :class:`CpuLoad`.
    """
    if cpus is None:
        cpus = usable_cpu_list()
    own = _own_tree()
    processes = {}
    for process in psutil.process_iter():
        if process.pid in own:
            continue
        try:
            processes[process] = _cpu_seconds(process)
        except psutil.Error:
            continue
    before = psutil.cpu_times(percpu=True)
    start = time.monotonic()
    time.sleep(interval)
    after = psutil.cpu_times(percpu=True)
    elapsed = time.monotonic() - start
    percent = {}
    for cpu in cpus:
        if cpu < len(before) and cpu < len(after):
            total = sum(after[cpu]) - sum(before[cpu])
            idle = _idle(after[cpu]) - _idle(before[cpu])
            percent[cpu] = 0. if total <= 0 else max(0., min(100., 100. * (1 - idle / total)))
    wanted, others = set(cpus), []
    for process, seconds in processes.items():
        try:
            used = 100. * (_cpu_seconds(process) - seconds) / elapsed
            if used < min_percent:
                continue
            allowed = sorted(process.cpu_affinity()) if hasattr(process, "cpu_affinity") else None
            if allowed is not None and not wanted.intersection(allowed):
                continue
            command = " ".join(process.cmdline()) or process.name()
        except psutil.Error:
            continue
        others.append(OtherProcess(process.pid, command[:80], round(used, 1), allowed))
    others.sort(key=lambda p: -p.percent)
    return CpuLoad({cpu: round(load, 1) for cpu, load in percent.items()}, others)


def warn_if_cpus_busy(what: str, cpus: Sequence[int] | None = None,
                      interval: float = 1.0) -> CpuLoad:
    """Measure how busy ``cpus`` are (:func:`measure_cpu_load`) and print
    ``CpuLoad.warning(what)`` to stderr when some are.

    Args:
        what: what will run on them, e.g. ``"this benchmark"``.
        cpus: the CPUs (this process's usable CPUs by default).
        interval: seconds to measure over.

    Returns:
        The measured :class:`CpuLoad`.
    """
    load = measure_cpu_load(cpus, interval)
    warning = load.warning(what)
    if warning is not None:
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)
    return load


def usable_cpu_list() -> list[int]:
    """The CPUs this process may run on (all of them where affinity is not supported)."""
    try:
        return sorted(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error):
        return list(range(psutil.cpu_count() or 1))


def _own_tree() -> set[int]:
    """This process, its ancestors (a launcher waiting on it) and its descendants."""
    me = psutil.Process()
    family = [me] + me.parents() + me.children(recursive=True)
    return {p.pid for p in family}


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _idle(times) -> float:
    return times.idle + getattr(times, "iowait", 0.)


def _cpu_ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts, start = [], None
    for i, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            parts.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(parts)
