"""CPU/GPU affinity: validating affinity dicts and pinning processes.

An affinity dict says where a runner's processes run, e.g.
``dict(master_cpus=[0], master_torch_threads=1, cuda_idx=None)``.
"""
from __future__ import annotations

import warnings
from typing import Any, Iterable

import psutil
import torch

# Keys consumed by runners and samplers; anything else draws a warning.
SYNC_AFFINITY_KEYS = frozenset({
    "all_cpus", "master_cpus", "workers_cpus", "master_torch_threads",
    "worker_torch_threads", "cuda_idx", "alternating", "set_affinity",
})
ASYNC_AFFINITY_KEYS = frozenset({"all_cpus", "optimizer", "sampler", "set_affinity"})

_warned_no_affinity = False


def check_affinity(affinity: Any, name: str = "affinity") -> dict:
    """Validate a synchronous affinity dict (None means ``{}``).

    Raises:
        TypeError: ``affinity`` is not a dict.
        ValueError: a CPU id is not usable by this process, or a thread count
            is not a positive integer.
    """
    if affinity is None:
        return {}
    if not isinstance(affinity, dict):
        raise TypeError(f"{name} must be a dict (e.g. dict(master_cpus=[0], "
                        f"master_torch_threads=1)), got {type(affinity).__name__}: {affinity!r}.")
    unknown = sorted(set(affinity) - SYNC_AFFINITY_KEYS - ASYNC_AFFINITY_KEYS)
    if unknown:
        warnings.warn(f"{name} has unknown keys {unknown}; known keys are "
                      f"{sorted(SYNC_AFFINITY_KEYS)}. They are ignored.", stacklevel=3)
    for key in ("master_torch_threads", "worker_torch_threads"):
        value = affinity.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name}['{key}'] must be a positive integer, got {value!r}.")
    if affinity.get("master_cpus") is not None:
        check_cpus(affinity["master_cpus"], f"{name}['master_cpus']")
    if affinity.get("workers_cpus") is not None:
        workers_cpus = affinity["workers_cpus"]
        if len(workers_cpus) == 0:
            raise ValueError(f"{name}['workers_cpus'] must list at least one worker, got "
                             f"{workers_cpus!r}.")
        for w, cpus in enumerate(workers_cpus):
            check_cpus(cpus, f"{name}['workers_cpus'][{w}]")
    cuda_idx = affinity.get("cuda_idx")
    if cuda_idx is not None and (isinstance(cuda_idx, bool) or not isinstance(cuda_idx, int)
                                 or cuda_idx < 0):
        raise ValueError(f"{name}['cuda_idx'] must be None or a non-negative int, got "
                         f"{cuda_idx!r}.")
    return affinity


def usable_cpus() -> list[int] | None:
    """CPU ids this process may run on, or None where the OS cannot tell."""
    try:
        return list(psutil.Process().cpu_affinity())
    except (AttributeError, NotImplementedError, OSError):
        return None


def _as_cpu_list(cpus: int | Iterable[int]) -> list[int]:
    return [cpus] if isinstance(cpus, int) else list(cpus)


def check_cpus(cpus: int | Iterable[int], name: str) -> list[int]:
    """Validate CPU ids against those this process may use; returns them as a list."""
    try:
        cpu_list = _as_cpu_list(cpus)
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {cpus!r}.") from None
    if not cpu_list or any(isinstance(c, bool) or not isinstance(c, int) for c in cpu_list):
        raise ValueError(f"{name} must be a non-empty sequence of int CPU ids, got {cpus!r}.")
    allowed = usable_cpus()
    if allowed is not None:
        bad = [c for c in cpu_list if c not in allowed]
        if bad:
            raise ValueError(f"{name}={cpus!r} names CPU ids {bad} that this process may not "
                             f"use; allowed CPU ids: {allowed}.")
    return cpu_list


def set_cpu_affinity(cpus: int | Iterable[int] | None) -> list[int] | None:
    """Pin this process to ``cpus``; returns the new affinity (None if unsupported).

    Where the OS offers no CPU affinity (macOS, some containers) this warns once
    and continues.
    """
    global _warned_no_affinity
    if cpus is None:
        return None
    cpu_list = _as_cpu_list(cpus)
    process = psutil.Process()
    if not hasattr(process, "cpu_affinity"):
        if not _warned_no_affinity:
            warnings.warn("CPU affinity is not supported on this platform; processes are "
                          "not pinned.", stacklevel=2)
            _warned_no_affinity = True
        return None
    process.cpu_affinity(cpu_list)
    return process.cpu_affinity()


def set_torch_threads(n_threads: int | None) -> int:
    """Set torch's intra-op thread count (None: leave it); returns the count in use."""
    if n_threads is not None:
        torch.set_num_threads(int(n_threads))
    return torch.get_num_threads()
