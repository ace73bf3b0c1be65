"""What a run ran on: the machine, the library versions and rlframe's commit.

Benchmark runs keep this next to their results (``system.json``), so a published
number says which CPU, how many cores and which code produced it.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys

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
