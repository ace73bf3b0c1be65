"""Pinning processes and validating affinity dicts.

Runners and sampler workers call :func:`set_cpu_affinity` and
:func:`set_torch_threads` with the entries of their affinity dict;
:func:`check_affinity` (and :func:`check_workers_cpus` for parallel samplers)
validate a dict first, with errors that name the offending key. Where the OS
offers no CPU affinity (macOS, Windows) pinning is skipped with one warning.
Building affinity dicts from affinity codes is in
:mod:`rlframe.utils.launching.affinity`.
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
OPTIMIZER_AFFINITY_KEYS = frozenset({"cpus", "cuda_idx", "torch_threads", "set_affinity"})

_warned_no_affinity = False  # set_cpu_affinity warns once per process.


# --- Validating affinity dicts -----------------------------------------------------------------

def check_affinity(affinity: object, name: str = "affinity") -> dict:
    """Validate a synchronous affinity dict (None means ``{}``).

    Asynchronous dicts (with ``optimizer`` / ``sampler``) are checked with
    :func:`check_async_affinity`. CPU ids are checked against :func:`usable_cpus`
    unless the dict says ``set_affinity=False`` (nothing is pinned then).

    Args:
        affinity: the dict (or None); unknown keys draw a warning.
        name: how to refer to ``affinity`` in errors.

    Returns:
        ``affinity`` itself, or ``{}`` for None.

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
    if "optimizer" in affinity or "sampler" in affinity:
        return check_async_affinity(affinity, name)
    for key in ("master_torch_threads", "worker_torch_threads"):
        _check_threads(affinity.get(key), f"{name}['{key}']")
    pinned = bool(affinity.get("set_affinity", True))
    for key in ("all_cpus", "master_cpus"):
        if affinity.get(key) is not None:
            check_cpus(affinity[key], f"{name}['{key}']", check_usable=pinned)
    if affinity.get("workers_cpus") is not None:
        check_workers_cpus(affinity, name=name)
    _check_cuda_idx(affinity.get("cuda_idx"), f"{name}['cuda_idx']")
    return affinity


def check_async_affinity(affinity: object, name: str = "affinity") -> dict:
    """Validate an asynchronous affinity dict: ``optimizer`` and ``sampler`` entries.

    ``optimizer`` is a list of dicts with ``cpus``, ``cuda_idx``, ``torch_threads``
    and ``set_affinity``; ``sampler`` is one synchronous-style dict or a list of
    them (one per sampler GPU).

    Args:
        affinity: the dict, as built by ``make_affinity(..., async_sample=True)``.
        name: how to refer to ``affinity`` in errors.

    Returns:
        ``affinity`` itself.

    Raises:
        TypeError: an entry has the wrong type.
        ValueError: an entry is missing or empty, or names CPU ids this process
            may not use.
    """
    if not isinstance(affinity, dict):
        raise TypeError(f"{name} must be a dict with 'optimizer' and 'sampler' entries, got "
                        f"{type(affinity).__name__}: {affinity!r}.")
    pinned = bool(affinity.get("set_affinity", True))
    optimizer = affinity.get("optimizer")
    if not isinstance(optimizer, (list, tuple)) or len(optimizer) == 0:
        raise ValueError(f"{name}['optimizer'] must be a non-empty list of dicts (one per "
                         f"optimizer process), got {optimizer!r}.")
    for rank, opt in enumerate(optimizer):
        opt_name = f"{name}['optimizer'][{rank}]"
        if not isinstance(opt, dict):
            raise TypeError(f"{opt_name} must be a dict with keys "
                            f"{sorted(OPTIMIZER_AFFINITY_KEYS)}, got {opt!r}.")
        unknown = sorted(set(opt) - OPTIMIZER_AFFINITY_KEYS)
        if unknown:
            warnings.warn(f"{opt_name} has unknown keys {unknown}; known keys are "
                          f"{sorted(OPTIMIZER_AFFINITY_KEYS)}. They are ignored.", stacklevel=3)
        if opt.get("cpus") is None:
            raise ValueError(f"{opt_name}['cpus'] is required, got {opt!r}.")
        check_cpus(opt["cpus"], f"{opt_name}['cpus']",
                   check_usable=pinned and bool(opt.get("set_affinity", True)))
        _check_threads(opt.get("torch_threads"), f"{opt_name}['torch_threads']")
        _check_cuda_idx(opt.get("cuda_idx"), f"{opt_name}['cuda_idx']")
    sampler = affinity.get("sampler")
    if isinstance(sampler, dict):
        samplers = [(sampler, f"{name}['sampler']")]
    elif isinstance(sampler, (list, tuple)) and len(sampler) > 0:
        samplers = [(s, f"{name}['sampler'][{i}]") for i, s in enumerate(sampler)]
    else:
        raise ValueError(f"{name}['sampler'] must be a dict or a non-empty list of dicts, "
                         f"got {sampler!r}.")
    for smp, smp_name in samplers:
        if isinstance(smp, dict) and ("optimizer" in smp or "sampler" in smp):
            raise ValueError(f"{smp_name} must be a sampler dict, not a nested async dict.")
        if isinstance(smp, dict) and not pinned:
            smp = {**smp, "set_affinity": False}
        check_affinity(smp, smp_name)
    if affinity.get("all_cpus") is not None:
        check_cpus(affinity["all_cpus"], f"{name}['all_cpus']", check_usable=pinned)
    return affinity


def check_workers_cpus(affinity: object, alternating: bool = False,
                       name: str = "affinity") -> list[tuple[int, ...]]:
    """Validate ``affinity['workers_cpus']``; returns one tuple of CPU ids per worker.

    Entries may be ints or sequences of ints (ints become 1-tuples). Ids are
    checked against :func:`usable_cpus` unless ``set_affinity`` is False.

    Args:
        affinity: dict with ``workers_cpus`` (its length is the number of workers).
        alternating: the sampler alternates two worker groups, so the number of
            workers must be even (also required when ``affinity['alternating']``).
        name: how to refer to ``affinity`` in errors.

    Raises:
        TypeError: ``affinity`` is not a dict.
        ValueError: ``workers_cpus`` is missing or empty, names unusable CPU ids,
            or has odd length when alternating.
    """
    if not isinstance(affinity, dict):
        raise TypeError(f"{name} must be a dict with 'workers_cpus' (e.g. "
                        f"dict(workers_cpus=[0, 1])), got {type(affinity).__name__}: "
                        f"{affinity!r}.")
    key = f"{name}['workers_cpus']"
    workers_cpus = affinity.get("workers_cpus")
    if workers_cpus is None:
        raise ValueError(f"{key} is required by parallel samplers (one entry per worker, "
                         f"e.g. workers_cpus=[0, 1]); got {affinity!r}.")
    if isinstance(workers_cpus, (int, str)) or not isinstance(workers_cpus, Iterable):
        raise ValueError(f"{key} must be a list with one entry (int or tuple of ints) per "
                         f"worker, got {workers_cpus!r}.")
    workers_cpus = list(workers_cpus)
    if len(workers_cpus) == 0:
        raise ValueError(f"{key} must list at least one worker, got {workers_cpus!r}.")
    if (alternating or affinity.get("alternating", False)) and len(workers_cpus) % 2:
        raise ValueError(f"{key} must have an even number of entries for an alternating "
                         f"sampler (two groups of workers), got {len(workers_cpus)}: "
                         f"{workers_cpus!r}.")
    pinned = bool(affinity.get("set_affinity", True))
    return [tuple(check_cpus(cpus, f"{key}[{w}]", check_usable=pinned))
            for w, cpus in enumerate(workers_cpus)]


def _check_threads(value: Any, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def _check_cuda_idx(value: Any, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be None or a non-negative int, got {value!r}.")


def check_cuda_device(cuda_idx: object, name: str = "affinity['cuda_idx']") -> None:
    """Raise unless GPU ``cuda_idx`` (None: the CPU) can be used by this process's torch.

    Called where the affinity is about to be used (the runner), so that a CPU-only
    torch or a missing GPU is reported before a run directory exists.
    """
    _check_cuda_idx(cuda_idx, name)
    if cuda_idx is None:
        return
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ValueError(f"{name}={cuda_idx} asks for a GPU, but torch {torch.__version__} "
                         f"({build}) finds none; use cuda_idx=None to train on the CPU.")
    n = torch.cuda.device_count()
    if cuda_idx >= n:
        raise ValueError(f"{name}={cuda_idx}, but this process sees {n} GPU(s) "
                         f"(cuda_idx 0..{n - 1}); check CUDA_VISIBLE_DEVICES.")


def usable_cpus() -> list[int] | None:
    """CPU ids this process may run on, or None where the OS cannot tell."""
    try:
        return list(psutil.Process().cpu_affinity())
    except (AttributeError, NotImplementedError, OSError):
        return None


def _as_cpu_list(cpus: int | Iterable[int]) -> list[int]:
    return [cpus] if isinstance(cpus, int) else list(cpus)


def check_cpus(cpus: int | Iterable[int], name: str, check_usable: bool = True) -> list[int]:
    """Validate CPU ids against those this process may use; returns them as a list.

    Args:
        cpus: one CPU id or a sequence of them.
        name: how to refer to ``cpus`` in errors.
        check_usable: also require every id to be in :func:`usable_cpus`.
    """
    try:
        cpu_list = _as_cpu_list(cpus)
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {cpus!r}.") from None
    if not cpu_list or any(isinstance(c, bool) or not isinstance(c, int) for c in cpu_list):
        raise ValueError(f"{name} must be a non-empty sequence of int CPU ids, got {cpus!r}.")
    allowed = usable_cpus() if check_usable else None
    if allowed is not None:
        bad = [c for c in cpu_list if c not in allowed]
        if bad:
            raise ValueError(f"{name}={cpus!r} names CPU ids {bad} that this process may not "
                             f"use; allowed CPU ids: {allowed} (set_affinity=False skips "
                             f"pinning and this check).")
    return cpu_list


# --- Pinning -----------------------------------------------------------------------------------

def set_cpu_affinity(cpus: int | Iterable[int] | None) -> list[int] | None:
    """Pin this process to ``cpus``; returns the new affinity (None if unsupported).

    Where the OS offers no CPU affinity (macOS, some containers) this warns once
    and continues.

    Args:
        cpus: one CPU id, a sequence of them, or None to leave the process as is.
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


def pin_master(affinity: dict) -> None:
    """Pin this process to ``affinity["master_cpus"]``, unless the dict has none or
    says ``set_affinity=False``."""
    if affinity.get("set_affinity", True) and affinity.get("master_cpus") is not None:
        set_cpu_affinity(affinity["master_cpus"])


def set_torch_threads(n_threads: int | None, name: str | None = None) -> int:
    """Set torch's intra-op thread count; returns the count in use.

    Args:
        n_threads: thread count, or None to leave it as is.
        name: the affinity key ``n_threads`` came from. With a name, a count above the
            CPUs this process may run on draws a warning that names the key: threads that
            take turns on one core make every matrix operation slower, not faster.
    """
    if n_threads is not None:
        torch.set_num_threads(int(n_threads))
        allowed = usable_cpus()
        if name is not None and allowed is not None and int(n_threads) > len(allowed):
            warnings.warn(f"{name}={n_threads} torch threads, but this process may run on "
                          f"{len(allowed)} CPU(s) {allowed}: the threads would take turns "
                          f"on the same cores. Set {name} to at most {len(allowed)}, or give "
                          "the process more CPUs.", stacklevel=2)
    return torch.get_num_threads()
