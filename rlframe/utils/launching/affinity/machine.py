"""What this machine has: physical cores, hyperthreads, sockets and GPUs.

Affinity codes describe a machine explicitly; these probes give the defaults
when a launch script leaves a fact out. Every probe answers on any platform
(no ``/proc`` on macOS or Windows: one socket).
"""
from __future__ import annotations

import psutil
import torch

from rlframe.utils.launching.pinning import usable_cpus

__all__ = ["get_hyperthread_offset", "get_n_socket", "count_cpu_cores", "count_usable_cores",
           "count_gpus"]


def get_hyperthread_offset() -> int:
    """Guess the id offset from a core to its hyperthread: half the logical CPUs, or 0 if none."""
    n_vcpu = psutil.cpu_count()
    n_core = psutil.cpu_count(logical=False)
    if n_vcpu and n_core and n_vcpu != n_core and n_vcpu % 2 == 0:
        return n_vcpu // 2
    return 0


def get_n_socket() -> int:
    """Number of CPU sockets: distinct "physical id" entries of /proc/cpuinfo, else 1."""
    try:
        with open("/proc/cpuinfo") as f:
            ids = {line.split(":", 1)[1].strip() for line in f
                   if line.startswith("physical id") and ":" in line}
    except OSError:  # No /proc (macOS, Windows).
        return 1
    return max(1, len(ids))


def count_cpu_cores() -> int:
    """Physical cores of the machine: with hyperthreads half the logical CPUs, else all."""
    n_vcpu = psutil.cpu_count() or 1
    return n_vcpu // 2 if get_hyperthread_offset() > 0 else n_vcpu


def count_usable_cores(hyperthread_offset: int) -> int:
    """Physical cores this process may run on (its CPU affinity, else the machine's).

    Args:
        hyperthread_offset: > 0 when every core comes with a hyperthread, so
            half the usable logical CPUs are cores.
    """
    usable = usable_cpus()
    n_logical = len(usable) if usable is not None else (psutil.cpu_count() or 1)
    return n_logical // 2 if hyperthread_offset > 0 else n_logical


def count_gpus() -> int:
    """CUDA devices torch sees."""
    return torch.cuda.device_count()
