"""Affinity codes and dicts from a launch script's arguments: the user's entry points.

:func:`encode_affinity` describes the machine as a code (checking that every
run slot of it can be built), :func:`affinity_from_code` turns one run's code
into its dict, :func:`make_affinity` does both; :func:`make_sync_affinity`
gives ``SyncRl``'s per-rank list, :func:`quick_affinity_code` a code for this
machine.
"""
from __future__ import annotations

from typing import Any

from rlframe.utils.checks import as_int
from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.affinity import machine
from rlframe.utils.launching.affinity.builders import Affinity, build_cpu_affinity
from rlframe.utils.launching.affinity.families import build_from_code_params
from rlframe.utils.launching.affinity.codes import (
    ALTERNATING, ASYNC_SAMPLE, CONTEXTS_PER_GPU, CPU_PER_RUN, CPU_PER_WORKER, CPU_RESERVED,
    GPU_PER_RUN, HYPERTHREAD_OFFSET, N_CPU_CORE, N_GPU, N_SOCKET, OPTIM_SAMPLE_SHARE_GPU,
    SAMPLE_GPU_PER_RUN, SET_AFFINITY, decode_affinity, get_n_run_slots, prepend_run_slot,
    remove_run_slot,
)

__all__ = ["encode_affinity", "affinity_from_code", "make_affinity", "make_sync_affinity",
           "quick_affinity_code"]


def encode_affinity(n_cpu_core: int = 1, n_gpu: int = 0, contexts_per_gpu: int = 1,
                    gpu_per_run: int = 1, cpu_per_run: int | None = None,
                    cpu_per_worker: int = 1,
                    cpu_reserved: int = 0, hyperthread_offset: int | None = None,
                    n_socket: int | None = None, run_slot: int | None = None,
                    async_sample: bool = False, sample_gpu_per_run: int = 0,
                    optim_sample_share_gpu: bool = False, alternating: bool = False,
                    set_affinity: bool = True) -> str:
    """Describe the machine (and how to split it into runs) as an affinity code.

    Args:
        n_cpu_core: physical cores to use, hyperthreads not counted.
        n_gpu: GPUs to use (0: CPU-only runs of ``cpu_per_run`` cores each).
        contexts_per_gpu: runs sharing each GPU.
        gpu_per_run: GPUs per run (multi-GPU optimization, or async optimizer GPUs).
        cpu_per_run: cores per run when ``n_gpu == 0`` (default 1; with
            ``async_sample`` all ``n_cpu_core``: one asynchronous run, its
            optimizer on the first core and its sampler on the others).
        cpu_per_worker: cores per sampler worker.
        cpu_reserved: cores per run kept for the master (async: per optimizer GPU).
        hyperthread_offset: id distance from a core to its hyperthread, 0 for
            none; None detects it (:func:`~.machine.get_hyperthread_offset`).
        n_socket: CPU sockets; None detects it (:func:`~.machine.get_n_socket`).
        run_slot: prefix the code with this run slot.
        async_sample: asynchronous sampling and optimization (works with n_gpu=0).
        sample_gpu_per_run: async: GPUs for action selection per run.
        optim_sample_share_gpu: async: the sampler uses the optimizer's GPUs.
        alternating: workers for an alternating sampler.
        set_affinity: False leaves processes unpinned (thread counts still apply).

    Returns:
        e.g. ``"16cpu_8gpu_2gpr_24hto_2skt"``.

    Raises:
        ValueError: an argument is out of range or the combination cannot be
            built into an affinity (the message names the argument and value).
    """
    n_cpu_core = as_int("n_cpu_core", n_cpu_core, minimum=1)
    n_gpu = as_int("n_gpu", n_gpu, minimum=0)
    contexts_per_gpu = as_int("contexts_per_gpu", contexts_per_gpu, minimum=1)
    gpu_per_run = as_int("gpu_per_run", gpu_per_run, minimum=1)
    if cpu_per_run is None:
        cpu_per_run = n_cpu_core if async_sample and n_gpu == 0 else 1
    cpu_per_run = as_int("cpu_per_run", cpu_per_run, minimum=1)
    cpu_per_worker = as_int("cpu_per_worker", cpu_per_worker, minimum=1)
    cpu_reserved = as_int("cpu_reserved", cpu_reserved, minimum=0)
    sample_gpu_per_run = as_int("sample_gpu_per_run", sample_gpu_per_run, minimum=0)
    hyperthread_offset = (machine.get_hyperthread_offset() if hyperthread_offset is None
                          else as_int("hyperthread_offset", hyperthread_offset, minimum=0))
    n_socket = (machine.get_n_socket() if n_socket is None
                else as_int("n_socket", n_socket, minimum=1))
    if n_gpu == 0:
        gpu_only = dict(contexts_per_gpu=(contexts_per_gpu, 1), gpu_per_run=(gpu_per_run, 1),
                        sample_gpu_per_run=(sample_gpu_per_run, 0),
                        optim_sample_share_gpu=(bool(optim_sample_share_gpu), False))
        for arg, (value, default) in gpu_only.items():
            if value != default:
                raise ValueError(f"{arg}={value!r} needs n_gpu > 0, got n_gpu=0.")
        if n_cpu_core % cpu_per_run:
            raise ValueError(f"cpu_per_run={cpu_per_run} must divide n_cpu_core={n_cpu_core} "
                             f"(every run gets the same cores).")
    if not async_sample:
        for arg, value in (("sample_gpu_per_run", sample_gpu_per_run),
                           ("optim_sample_share_gpu", bool(optim_sample_share_gpu))):
            if value:
                raise ValueError(f"{arg}={value!r} needs async_sample=True.")
    code = f"{n_cpu_core}{N_CPU_CORE}_{n_gpu}{N_GPU}"
    if contexts_per_gpu > 1:
        code += f"_{contexts_per_gpu}{CONTEXTS_PER_GPU}"
    if gpu_per_run > 1:
        code += f"_{gpu_per_run}{GPU_PER_RUN}"
    if n_gpu == 0:
        code += f"_{cpu_per_run}{CPU_PER_RUN}"
    if cpu_per_worker > 1:
        code += f"_{cpu_per_worker}{CPU_PER_WORKER}"
    if hyperthread_offset != n_cpu_core:
        code += f"_{hyperthread_offset}{HYPERTHREAD_OFFSET}"
    if n_socket > 1:
        code += f"_{n_socket}{N_SOCKET}"
    if cpu_reserved > 0:
        code += f"_{cpu_reserved}{CPU_RESERVED}"
    if async_sample:
        code += f"_1{ASYNC_SAMPLE}"
    if sample_gpu_per_run > 0:
        code += f"_{sample_gpu_per_run}{SAMPLE_GPU_PER_RUN}"
    if optim_sample_share_gpu:
        code += f"_1{OPTIM_SAMPLE_SHARE_GPU}"
    if alternating:
        code += f"_1{ALTERNATING}"
    if not set_affinity:
        code += f"_0{SET_AFFINITY}"
    if run_slot is not None:
        run_slot = as_int("run_slot", run_slot, minimum=0)
        n_run_slots = get_n_run_slots(code)
        if run_slot >= n_run_slots:
            raise ValueError(f"run_slot={run_slot} is out of range: this configuration has "
                             f"{n_run_slots} run slot(s), numbered 0..{n_run_slots - 1}.")
    # Build one slot now so that a bad combination fails here, not in every run.
    affinity_from_code(prepend_run_slot(0 if run_slot is None else run_slot, code))
    return code if run_slot is None else prepend_run_slot(run_slot, code)


def affinity_from_code(run_slot_affinity_code: str) -> Affinity:
    """Build the affinity of one run from ``"<slot>slt_<code>"``.

    Returns:
        An AttrDict for single-GPU and CPU runs, a list of AttrDicts for
        multi-GPU runs (``gpr`` > 1), or an async AttrDict with ``optimizer``
        and ``sampler`` for ``_1ass`` codes (GPU or CPU-only).

    Raises:
        ValueError: the code is malformed, has entries that do not apply to its
            kind of run, or does not fit the machine it describes.
    """
    run_slot, code = remove_run_slot(run_slot_affinity_code)
    return build_from_code_params(run_slot, decode_affinity(code), code)


def make_affinity(run_slot: int = 0, **kwargs: Any) -> Affinity:
    """``affinity_from_code(encode_affinity(run_slot=run_slot, **kwargs))``."""
    return affinity_from_code(encode_affinity(run_slot=run_slot, **kwargs))


def make_sync_affinity(n_rank: int, n_cpu_core: int | None = None,
                       cpu_per_rank: int | None = None, cpu_per_worker: int = 1,
                       hyperthread_offset: int | None = None, run_slot: int = 0,
                       set_affinity: bool = True) -> list[AttrDict]:
    """The per-rank affinity list of a ``SyncRl`` run on a CPU-only machine.

    Rank ``r`` gets its own ``cpu_per_rank`` cores (and their hyperthreads): its
    runner pins itself there, and a ``CpuSampler`` in that rank starts one worker
    per ``cpu_per_worker`` of them. On GPU machines use
    ``make_affinity(n_gpu=..., gpu_per_run=...)``, which gives one dict per GPU.
    ::

        affinity = make_sync_affinity(n_rank=2)  # 2 cores: rank 0 on core 0, rank 1 on core 1
        runner = SyncRl(algo=algo, agent=agent, sampler=sampler, n_steps=1e6,
                        affinity=affinity)

    Args:
        n_rank: number of ranks (processes); the list's length.
        n_cpu_core: physical cores to use (default: all this process may use,
            hyperthreads not counted).
        cpu_per_rank: cores per rank (default: ``n_cpu_core // n_rank``).
        cpu_per_worker: cores per sampler worker inside a rank.
        hyperthread_offset: id offset from a core to its hyperthread (default:
            guessed from this machine; 0: no hyperthreads).
        run_slot: which group of ``n_rank * cpu_per_rank`` cores this run takes,
            for several runs side by side.
        set_affinity: pin processes (False: only thread counts are set).

    Returns:
        One AttrDict per rank with ``master_cpus``, ``workers_cpus``,
        ``master_torch_threads``, ``worker_torch_threads``, ``set_affinity``, ...
    """
    n_rank = as_int("n_rank", n_rank, minimum=1)
    hto = machine.get_hyperthread_offset() if hyperthread_offset is None else as_int(
        "hyperthread_offset", hyperthread_offset, minimum=0)
    if n_cpu_core is None:
        n_cpu_core = machine.count_usable_cores(hto)
    n_cpu_core = as_int("n_cpu_core", n_cpu_core, minimum=1)
    if cpu_per_rank is None:
        if n_cpu_core < n_rank:
            raise ValueError(f"n_rank={n_rank} ranks need at least one core each, but "
                             f"n_cpu_core={n_cpu_core}; lower n_rank or pass cpu_per_rank "
                             "and n_cpu_core explicitly.")
        cpu_per_rank = n_cpu_core // n_rank
    cpu_per_rank = as_int("cpu_per_rank", cpu_per_rank, minimum=1)
    n_run_slots = n_cpu_core // (cpu_per_rank * n_rank)
    if not 0 <= run_slot < n_run_slots:
        raise ValueError(f"run_slot={run_slot} is not available: n_cpu_core={n_cpu_core} "
                         f"holds {n_run_slots} run(s) of n_rank={n_rank} x "
                         f"cpu_per_rank={cpu_per_rank} cores.")
    return [build_cpu_affinity(run_slot * n_rank + rank, n_cpu_core, cpu_per_rank,
                               cpw=as_int("cpu_per_worker", cpu_per_worker, minimum=1),
                               hto=hto, saf=int(bool(set_affinity)))
            for rank in range(n_rank)]


def quick_affinity_code(n_parallel: int | None = None, use_gpu: bool = True,
                        contexts_per_gpu: int = 1) -> str:
    """An affinity code for this machine, splitting it into equal runs.

    With GPUs (``use_gpu`` and any present): one run per GPU context, at most
    ``n_parallel`` GPUs. Otherwise ``n_parallel`` CPU runs (capped at the core count).

    Raises:
        ValueError: neither ``use_gpu`` nor ``n_parallel`` is given, or CPU-only
            runs are needed and ``n_parallel`` is missing.
    """
    if not (use_gpu or n_parallel):
        raise ValueError(f"quick_affinity_code needs use_gpu=True or n_parallel > 0, got "
                         f"use_gpu={use_gpu!r}, n_parallel={n_parallel!r}.")
    if n_parallel is not None:
        n_parallel = as_int("n_parallel", n_parallel, minimum=1)
    contexts_per_gpu = as_int("contexts_per_gpu", contexts_per_gpu, minimum=1)
    n_cpu_core = machine.count_cpu_cores()
    n_gpu = machine.count_gpus() if use_gpu else 0
    if n_gpu > 0:
        if n_parallel is not None:
            n_gpu = min(n_parallel, n_gpu)
        n_runs = n_gpu * contexts_per_gpu
        n_cpu_core = (n_cpu_core // n_runs) * n_runs
        if n_cpu_core == 0:
            raise ValueError(f"{n_runs} GPU runs (n_gpu={n_gpu}, contexts_per_gpu="
                             f"{contexts_per_gpu}) need at least one core each; this machine "
                             f"has {machine.count_cpu_cores()} cores.")
        return encode_affinity(n_cpu_core=n_cpu_core, n_gpu=n_gpu,
                               contexts_per_gpu=contexts_per_gpu)
    if not n_parallel:
        raise ValueError("n_parallel > 0 must be given when use_gpu=False or no GPU is present.")
    n_parallel = min(n_parallel, n_cpu_core)
    n_cpu_core = (n_cpu_core // n_parallel) * n_parallel
    return encode_affinity(n_cpu_core=n_cpu_core, n_gpu=0, cpu_per_run=n_cpu_core // n_parallel)
