"""CPU/GPU affinity: affinity codes and the affinity dicts built from them.

An affinity dict says where a run's processes go, e.g.
``dict(master_cpus=[0], master_torch_threads=1, cuda_idx=None)``. Launch scripts
describe the whole machine once as an *affinity code*, a string such as
``"16cpu_8gpu_2gpr_24hto_2skt"``, and each run turns the code plus its run slot
into its own dict::

    machine = dict(n_cpu_core=4, n_gpu=0, hyperthread_offset=0, n_socket=1)
    code = encode_affinity(cpu_per_run=2, **machine)          # "4cpu_0gpu_2cpr_0hto"
    affinity = affinity_from_code(prepend_run_slot(1, code))  # cores 2 and 3
    affinity = make_affinity(run_slot=1, cpu_per_run=2, **machine)  # the same dict

Code tokens are ``<int><abbreviation>``, the abbreviation always three letters
(``cpu``: physical cores in use, ``gpu``: GPUs in use, ``cpr``: cores per run,
``hto``: hyperthread offset, ...; see ``ABBREVS``). Synchronous codes give a dict
with ``master_cpus``, ``workers_cpus``, ``cuda_idx``...; multi-GPU codes a list
of them; asynchronous codes (``_1ass``) a dict with ``optimizer`` (list of
dicts) and ``sampler`` (dict, or a list of dicts with one per sampler GPU).

Validating dicts and pinning processes to them live in
:mod:`rlframe.utils.launching.pinning`; its public names are re-exported here,
where rlpyt scripts import them from.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Union

import psutil
import torch

from rlframe.utils.checks import as_int
from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.pinning import (
    ASYNC_AFFINITY_KEYS, OPTIMIZER_AFFINITY_KEYS, SYNC_AFFINITY_KEYS, check_affinity,
    check_async_affinity, check_cpus, check_workers_cpus, set_cpu_affinity, set_torch_threads,
    usable_cpus,
)

__all__ = [
    # Affinity codes.
    "N_GPU", "CONTEXTS_PER_GPU", "GPU_PER_RUN", "N_CPU_CORE", "HYPERTHREAD_OFFSET", "N_SOCKET",
    "RUN_SLOT", "CPU_PER_WORKER", "CPU_PER_RUN", "CPU_RESERVED", "ASYNC_SAMPLE",
    "SAMPLE_GPU_PER_RUN", "OPTIM_SAMPLE_SHARE_GPU", "ALTERNATING", "SET_AFFINITY", "ABBREVS",
    "Affinity", "encode_affinity", "decode_affinity", "prepend_run_slot", "remove_run_slot",
    "affinity_from_code", "make_affinity", "make_sync_affinity", "quick_affinity_code",
    "get_n_run_slots",
    "get_hyperthread_offset", "get_n_socket",
    # Builders.
    "get_master_cpus", "get_workers_cpus", "build_cpu_affinity", "build_gpu_affinity",
    "build_multigpu_affinity", "build_async_affinity", "build_async_cpu_affinity",
    # Re-exported from rlframe.utils.launching.pinning.
    "SYNC_AFFINITY_KEYS", "ASYNC_AFFINITY_KEYS", "OPTIMIZER_AFFINITY_KEYS", "check_affinity",
    "check_async_affinity", "check_workers_cpus", "check_cpus", "usable_cpus",
    "set_cpu_affinity", "set_torch_threads",
]

# Affinity code abbreviations (rlpyt's names).
N_GPU = "gpu"
CONTEXTS_PER_GPU = "cxg"  # Runs sharing one GPU.
GPU_PER_RUN = "gpr"  # Multi-GPU optimization.
N_CPU_CORE = "cpu"  # Physical cores, hyperthreads not counted.
HYPERTHREAD_OFFSET = "hto"  # Core c's hyperthread is c + hto; 0 turns hyperthreads off.
N_SOCKET = "skt"
RUN_SLOT = "slt"
CPU_PER_WORKER = "cpw"
CPU_PER_RUN = "cpr"  # CPU-only codes.
CPU_RESERVED = "res"  # Cores the master keeps away from the workers.
ASYNC_SAMPLE = "ass"
SAMPLE_GPU_PER_RUN = "sgr"
OPTIM_SAMPLE_SHARE_GPU = "oss"
ALTERNATING = "alt"
SET_AFFINITY = "saf"

ABBREVS = [N_GPU, CONTEXTS_PER_GPU, GPU_PER_RUN, N_CPU_CORE, HYPERTHREAD_OFFSET, N_SOCKET,
           CPU_PER_RUN, CPU_PER_WORKER, CPU_RESERVED, ASYNC_SAMPLE, SAMPLE_GPU_PER_RUN,
           OPTIM_SAMPLE_SHARE_GPU, ALTERNATING, SET_AFFINITY]

# encode_affinity's argument for each abbreviation, for error messages.
_ARG_NAMES = {
    N_GPU: "n_gpu", CONTEXTS_PER_GPU: "contexts_per_gpu", GPU_PER_RUN: "gpu_per_run",
    N_CPU_CORE: "n_cpu_core", HYPERTHREAD_OFFSET: "hyperthread_offset", N_SOCKET: "n_socket",
    RUN_SLOT: "run_slot", CPU_PER_WORKER: "cpu_per_worker", CPU_PER_RUN: "cpu_per_run",
    CPU_RESERVED: "cpu_reserved", ASYNC_SAMPLE: "async_sample",
    SAMPLE_GPU_PER_RUN: "sample_gpu_per_run", OPTIM_SAMPLE_SHARE_GPU: "optim_sample_share_gpu",
    ALTERNATING: "alternating", SET_AFFINITY: "set_affinity",
}

Affinity = Union[AttrDict, list]  # A dict, or a list of dicts for multi-GPU runs.


# --- Affinity codes ----------------------------------------------------------------------------

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
            none; None detects it (:func:`get_hyperthread_offset`).
        n_socket: CPU sockets; None detects it (:func:`get_n_socket`).
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
    hyperthread_offset = (get_hyperthread_offset() if hyperthread_offset is None
                          else as_int("hyperthread_offset", hyperthread_offset, minimum=0))
    n_socket = get_n_socket() if n_socket is None else as_int("n_socket", n_socket, minimum=1)
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


def decode_affinity(affinity_code: str) -> dict[str, int]:
    """Parse an affinity code (without run slot) into ``{abbreviation: int}``.

    Raises:
        ValueError: a token is not ``<int><abbreviation>`` with a known abbreviation.
    """
    if not isinstance(affinity_code, str) or not affinity_code:
        raise ValueError(f"affinity_code must be a non-empty string such as '2cpu_0gpu_1cpr', "
                         f"got {affinity_code!r}.")
    params = {}
    for token in affinity_code.split("_"):
        abbrev, number = token[-3:], token[:-3]
        if abbrev == RUN_SLOT:
            raise ValueError(f"affinity code {affinity_code!r} starts with a run slot "
                             f"({token!r}); split it off with remove_run_slot() first.")
        if abbrev not in ABBREVS:
            raise ValueError(f"Unrecognized affinity code abbreviation {abbrev!r} in token "
                             f"{token!r} of {affinity_code!r}; known abbreviations: {ABBREVS}.")
        if not number.isdigit():
            raise ValueError(f"affinity code token {token!r} of {affinity_code!r} must be a "
                             f"non-negative integer followed by {abbrev!r}.")
        params[abbrev] = int(number)
    return params


def prepend_run_slot(run_slot: int, affinity_code: str) -> str:
    """Return ``"<run_slot>slt_" + affinity_code``."""
    return f"{run_slot}{RUN_SLOT}_" + affinity_code


def remove_run_slot(run_slot_affinity_code: str) -> tuple[int, str]:
    """Split ``"<slot>slt_<code>"`` into ``(slot, code)``.

    Raises:
        ValueError: the code does not start with a run-slot token.
    """
    slot_token, _, code = str(run_slot_affinity_code).partition("_")
    if slot_token[-3:] != RUN_SLOT or not slot_token[:-3].isdigit() or not code:
        raise ValueError(f"affinity code {run_slot_affinity_code!r} must start with a run slot "
                         f"token such as '0slt_' (see prepend_run_slot()).")
    return int(slot_token[:-3]), code


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
    params = decode_affinity(code)
    if N_CPU_CORE not in params:
        raise ValueError(f"affinity code {code!r} must give the number of cores ('<n>cpu').")
    is_async = params.pop(ASYNC_SAMPLE, 0) > 0
    if params.get(N_GPU, 0) > 0:
        if is_async:
            builder: Callable[..., Affinity] = build_async_affinity
        elif params.get(GPU_PER_RUN, 1) > 1:
            builder = build_multigpu_affinity
        else:
            builder = build_gpu_affinity
    else:
        if CPU_PER_RUN not in params:
            raise ValueError(f"CPU-only affinity code {code!r} must give cores per run "
                             f"('<n>cpr').")
        builder = build_async_cpu_affinity if is_async else build_cpu_affinity
    accepted = set(inspect.signature(builder).parameters)
    extra = sorted(set(params) - accepted)
    if extra:
        raise ValueError(f"affinity code {code!r}: entries {extra} "
                         f"({', '.join(_ARG_NAMES[e] for e in extra)}) do not apply to "
                         f"{builder.__name__}.")
    return builder(run_slot, **params)


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
    hto = get_hyperthread_offset() if hyperthread_offset is None else as_int(
        "hyperthread_offset", hyperthread_offset, minimum=0)
    if n_cpu_core is None:
        usable = usable_cpus()
        n_logical = len(usable) if usable is not None else (psutil.cpu_count() or 1)
        n_cpu_core = n_logical // 2 if hto > 0 else n_logical
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
    n_vcpu = psutil.cpu_count() or 1
    # With hyperthreads, half the logical CPUs are cores; without, all of them are.
    n_cpu_core = n_vcpu // 2 if get_hyperthread_offset() > 0 else n_vcpu
    n_gpu = torch.cuda.device_count() if use_gpu else 0
    if n_gpu > 0:
        if n_parallel is not None:
            n_gpu = min(n_parallel, n_gpu)
        n_runs = n_gpu * contexts_per_gpu
        n_cpu_core = (n_cpu_core // n_runs) * n_runs
        if n_cpu_core == 0:
            raise ValueError(f"{n_runs} GPU runs (n_gpu={n_gpu}, contexts_per_gpu="
                             f"{contexts_per_gpu}) need at least one core each; this machine "
                             f"has {n_vcpu} logical CPUs.")
        return encode_affinity(n_cpu_core=n_cpu_core, n_gpu=n_gpu,
                               contexts_per_gpu=contexts_per_gpu)
    if not n_parallel:
        raise ValueError("n_parallel > 0 must be given when use_gpu=False or no GPU is present.")
    n_parallel = min(n_parallel, n_cpu_core)
    n_cpu_core = (n_cpu_core // n_parallel) * n_parallel
    return encode_affinity(n_cpu_core=n_cpu_core, n_gpu=0, cpu_per_run=n_cpu_core // n_parallel)


def get_n_run_slots(affinity_code: str) -> int:
    """Number of runs the code's machine holds at once (code without run slot)."""
    params = decode_affinity(affinity_code)
    gpu = params.get(N_GPU, 0)
    if gpu > 0 and params.get(ASYNC_SAMPLE, 0) > 0:
        oss = params.get(OPTIM_SAMPLE_SHARE_GPU, 0) > 0
        gpu_per_run = params.get(GPU_PER_RUN, 1) + (0 if oss else params.get(SAMPLE_GPU_PER_RUN, 0))
        return gpu // gpu_per_run
    if gpu > 0:
        return (gpu * params.get(CONTEXTS_PER_GPU, 1)) // params.get(GPU_PER_RUN, 1)
    if N_CPU_CORE not in params or CPU_PER_RUN not in params:
        raise ValueError(f"CPU-only affinity code {affinity_code!r} must give 'cpu' and 'cpr'.")
    return params[N_CPU_CORE] // params[CPU_PER_RUN]


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


# --- Building affinity dicts -------------------------------------------------------------------

def get_master_cpus(cores: Iterable[int], hto: int) -> tuple[int, ...]:
    """``cores`` followed by their hyperthreads (``c + hto``) when ``hto > 0``."""
    cores = tuple(cores)
    return cores + (tuple(c + hto for c in cores) if hto > 0 else ())


def get_workers_cpus(cores: Iterable[int], cpw: int, hto: int,
                     alt: int | bool = 0) -> tuple[tuple[int, ...], ...]:
    """Group ``cores`` into workers of ``cpw`` cores (leftover cores unused).

    With ``hto > 0`` each worker also gets its cores' hyperthreads, or, when
    alternating, the hyperthread groups become a second set of workers. With
    ``hto == 0`` an alternating sampler's second set reuses the same cores.
    """
    cores = tuple(cores)
    cores = cores[:(len(cores) // cpw) * cpw]
    groups = tuple(cores[i:i + cpw] for i in range(0, len(cores), cpw))
    if hto > 0:
        hyper_groups = tuple(tuple(c + hto for c in group) for group in groups)
        if alt:
            return groups + hyper_groups
        return tuple(g + h for g, h in zip(groups, hyper_groups))
    return groups + groups if alt else groups


def _arg(abbrev: str) -> str:
    return f"{_ARG_NAMES[abbrev]} ({abbrev})"


def _resolve_hto(hto: int | None, cpu: int) -> int:
    """Default hyperthread offset is the core count; 0 turns hyperthreads off."""
    hto = cpu if hto is None else hto
    if 0 < hto < cpu:
        raise ValueError(f"{_arg(HYPERTHREAD_OFFSET)}={hto} is below {_arg(N_CPU_CORE)}={cpu}, "
                         f"so hyperthread ids would collide with core ids. {_ARG_NAMES['cpu']} "
                         f"counts physical cores; pass hyperthread_offset=0 to use no "
                         f"hyperthreads.")
    return hto


def _check_run_slot(run_slot: int, n_run_slots: int) -> None:
    if not 0 <= run_slot < n_run_slots:
        raise ValueError(f"run_slot={run_slot} is out of range: this configuration has "
                         f"{n_run_slots} run slot(s), numbered 0..{max(n_run_slots - 1, 0)}.")


def _run_cores(slt: int, cpu: int, cpr: int, hto: int, skt: int) -> tuple[int, ...]:
    """The ``cpr`` physical cores of run slot ``slt`` (runs fill one socket, then the next)."""
    if cpu % cpr:
        raise ValueError(f"{_arg(CPU_PER_RUN)}={cpr} must divide {_arg(N_CPU_CORE)}={cpu}.")
    if (hto - cpu) % skt:
        raise ValueError(f"{_arg(N_SOCKET)}={skt} must divide {_arg(HYPERTHREAD_OFFSET)} - "
                         f"{_arg(N_CPU_CORE)} = {hto} - {cpu}.")
    n_run_slots = cpu // cpr
    _check_run_slot(slt, n_run_slots)
    # Socket s starts at core s * cpu_per_skt: with hto > cpu the machine has hto
    # physical cores, of which only the first cpu / skt per socket are used.
    cpu_per_skt = max(cpu, hto) // skt
    if n_run_slots >= skt:
        slt_per_skt = n_run_slots // skt
        first = (slt // slt_per_skt) * cpu_per_skt + (slt % slt_per_skt) * cpr
        return tuple(range(first, first + cpr))
    skt_per_slt = skt // n_run_slots  # One run spans several sockets.
    if skt % n_run_slots or cpr % skt_per_slt:
        raise ValueError(f"a run of {_arg(CPU_PER_RUN)}={cpr} cores cannot split evenly over "
                         f"{_arg(N_SOCKET)}={skt} sockets with {n_run_slots} run slot(s).")
    cores = []
    for s in range(slt * skt_per_slt, (slt + 1) * skt_per_slt):
        cores.extend(range(s * cpu_per_skt, s * cpu_per_skt + cpr // skt_per_slt))
    return tuple(cores)


def _sync_affinity(cores: tuple[int, ...], worker_cores: tuple[int, ...], cpw: int, hto: int,
                   alt: int, saf: int, **cuda_idx: int | None) -> AttrDict:
    """Dict of a master on ``cores`` with workers on ``worker_cores``; ``cuda_idx`` if given."""
    master_cpus = get_master_cpus(cores, hto)
    return AttrDict(
        all_cpus=master_cpus,
        master_cpus=master_cpus,
        workers_cpus=get_workers_cpus(worker_cores, cpw, hto, alt),
        master_torch_threads=len(cores),
        worker_torch_threads=cpw,
        **cuda_idx,
        alternating=bool(alt),
        set_affinity=bool(saf),
    )


def _sampler_affinity(cores: tuple[int, ...], cpw: int, hto: int, alt: int, saf: int,
                      cuda_idx: int | None) -> AttrDict:
    """Dict of an async sampler: master and workers share ``cores``."""
    return _sync_affinity(cores, cores, cpw, hto, alt, saf, cuda_idx=cuda_idx)


def build_cpu_affinity(slt: int, cpu: int, cpr: int, cpw: int = 1, hto: int | None = None,
                       res: int = 0, skt: int = 1, gpu: int = 0, alt: int = 0,
                       saf: int = 1) -> AttrDict:
    """Affinity of CPU run slot ``slt``: ``cpr`` cores, workers on all but the first ``res``.

    Returns:
        AttrDict with ``all_cpus``, ``master_cpus``, ``workers_cpus``,
        ``master_torch_threads``, ``worker_torch_threads``, ``alternating``,
        ``set_affinity``.
    """
    if gpu != 0:
        raise ValueError(f"build_cpu_affinity is for CPU-only runs, got {_arg(N_GPU)}={gpu}.")
    hto = _resolve_hto(hto, cpu)
    cores = _run_cores(slt, cpu, cpr, hto, skt)
    worker_cores = cores[res:]
    if not worker_cores:
        raise ValueError(f"{_arg(CPU_RESERVED)}={res} leaves none of the run's {len(cores)} "
                         f"cores for sampler workers.")
    if len(worker_cores) % cpw:
        raise ValueError(f"{_arg(CPU_PER_WORKER)}={cpw} must divide the run's {len(worker_cores)} "
                         f"worker cores ({len(cores)} cores, {res} reserved).")
    return _sync_affinity(cores, worker_cores, cpw, hto, alt, saf)


def build_gpu_affinity(slt: int, gpu: int, cpu: int, cxg: int = 1, cpw: int = 1,
                       hto: int | None = None, res: int = 0, skt: int = 1, alt: int = 0,
                       saf: int = 1) -> AttrDict:
    """Affinity of GPU run slot ``slt``: the cores are split evenly over the GPU contexts.

    With ``cxg > 1`` consecutive slots go to different GPUs first. Returns
    :func:`build_cpu_affinity`'s dict plus ``cuda_idx``.
    """
    n_ctx = gpu * cxg
    _check_run_slot(slt, n_ctx)
    if cpu % n_ctx:
        raise ValueError(f"{_arg(N_CPU_CORE)}={cpu} must be a multiple of {_arg(N_GPU)} x "
                         f"{_arg(CONTEXTS_PER_GPU)} = {n_ctx} (cores are split evenly).")
    if cxg > 1:
        slt = (slt % gpu) * cxg + slt // gpu
    affinity = build_cpu_affinity(slt, cpu, cpu // n_ctx, cpw=cpw, hto=hto, res=res, skt=skt,
                                  alt=alt, saf=saf)
    affinity["cuda_idx"] = slt // cxg
    return affinity


def build_multigpu_affinity(run_slot: int, gpu: int, cpu: int, gpr: int = 1, cpw: int = 1,
                            hto: int | None = None, res: int = 0, skt: int = 1, alt: int = 0,
                            saf: int = 1) -> list[AttrDict]:
    """Affinities of the ``gpr`` GPUs of multi-GPU run ``run_slot``, one dict per GPU."""
    _check_run_slot(run_slot, gpu // gpr)
    return [build_gpu_affinity(slt, gpu, cpu, cxg=1, cpw=cpw, hto=hto, res=res, skt=skt,
                               alt=alt, saf=saf)
            for slt in range(run_slot * gpr, (run_slot + 1) * gpr)]


def build_async_affinity(run_slot: int, gpu: int, cpu: int, gpr: int = 1, sgr: int = 0,
                         oss: int = 0, cpw: int = 1, hto: int | None = None, res: int = 1,
                         skt: int = 1, alt: int = 0, saf: int = 1) -> AttrDict:
    """Affinity of asynchronous run ``run_slot`` with GPU optimizers.

    Each run has ``gpr`` optimizer GPUs followed by ``sgr`` sampler GPUs (or
    shares the optimizer GPUs when ``oss``). Each optimizer gets ``res`` cores;
    the run's remaining cores go to the sampler, split evenly per sampler GPU,
    or to one CPU sampler (``cuda_idx=None``) when ``sgr == 0``.

    Returns:
        AttrDict(all_cpus, optimizer=[dict(cpus, cuda_idx, torch_threads,
        set_affinity), ...], sampler=AttrDict or [AttrDict, ...], set_affinity).
    """
    oss = bool(oss)
    sgr = gpr if oss else sgr
    gpu_per_run = gpr + (0 if oss else sgr)
    n_run_slots = gpu // gpu_per_run
    if n_run_slots == 0:
        raise ValueError(f"a run needs {gpu_per_run} GPUs ({_arg(GPU_PER_RUN)}={gpr} + "
                         f"{_arg(SAMPLE_GPU_PER_RUN)}={0 if oss else sgr}), but "
                         f"{_arg(N_GPU)}={gpu}.")
    _check_run_slot(run_slot, n_run_slots)
    if res < 1:
        raise ValueError(f"{_arg(CPU_RESERVED)}={res}: each optimizer needs at least one core.")
    if gpu < skt:
        raise ValueError(f"async affinity needs at least one GPU per socket, got "
                         f"{_arg(N_GPU)}={gpu}, {_arg(N_SOCKET)}={skt}; try n_socket=1.")
    hto = _resolve_hto(hto, cpu)
    cpr = cpu // n_run_slots
    smp_cpr = ((cpr - res * gpr) // cpw) * cpw  # Sampler cores of the run, whole workers.
    if smp_cpr <= 0 or smp_cpr // max(1, sgr) < cpw:
        raise ValueError(f"{_arg(N_CPU_CORE)}={cpu} gives each of {n_run_slots} run(s) {cpr} "
                         f"cores; {gpr} optimizer(s) x {_arg(CPU_RESERVED)}={res} leave too "
                         f"few for sampler workers of {_arg(CPU_PER_WORKER)}={cpw}.")
    smp_cpg = smp_cpr // max(1, sgr)
    gpu_per_skt = gpu // skt
    cpu_per_skt = max(cpu, hto) // skt
    # Per socket the run uses: (first core, first GPU, optimizer GPUs, sampler GPUs).
    if gpu_per_run <= gpu_per_skt:
        if n_run_slots % skt:
            raise ValueError(f"{n_run_slots} async runs cannot split evenly over "
                             f"{_arg(N_SOCKET)}={skt} sockets; try n_socket=1.")
        run_per_skt = n_run_slots // skt
        my_skt, run_in_skt = divmod(run_slot, run_per_skt)
        first_gpu = my_skt * gpu_per_skt + run_in_skt * gpu_per_run
        pieces = [(my_skt * cpu_per_skt + run_in_skt * cpr, first_gpu, gpr, sgr)]
    else:  # One run spans several sockets, with its GPUs split evenly over them.
        skt_per_run = skt // n_run_slots
        if gpr % skt_per_run or sgr % skt_per_run:
            raise ValueError(f"a run spanning {skt_per_run} sockets needs {_arg(GPU_PER_RUN)}="
                             f"{gpr} and {_arg(SAMPLE_GPU_PER_RUN)}={sgr} divisible by "
                             f"{skt_per_run}; try n_socket=1.")
        pieces = [(s * cpu_per_skt, s * gpu_per_skt, gpr // skt_per_run, sgr // skt_per_run)
                  for s in range(run_slot * skt_per_run, (run_slot + 1) * skt_per_run)]
    optimizer, all_cpus = [], ()
    for first_core, first_gpu, n_opt, _ in pieces:
        for i in range(n_opt):  # Optimizer i: res cores at the start of its socket's share.
            cores = tuple(range(first_core + i * res, first_core + (i + 1) * res))
            cpus = get_master_cpus(cores, hto)
            optimizer.append(dict(cpus=cpus, cuda_idx=first_gpu + i, torch_threads=len(cores),
                                  set_affinity=bool(saf)))
            all_cpus += cpus
    sampler: AttrDict | list[AttrDict]
    if sgr == 0:  # One CPU sampler on the cores after the optimizers' (in each socket).
        cores = ()
        for first_core, _, n_opt, _ in pieces:
            low = first_core + n_opt * res
            cores += tuple(range(low, low + smp_cpr // len(pieces)))
        sampler = _sampler_affinity(cores, cpw, hto, alt, saf, cuda_idx=None)
        all_cpus += sampler.master_cpus
    else:  # One sampler per sampler GPU, smp_cpg cores each.
        sampler = []
        for first_core, first_gpu, n_opt, n_smp in pieces:
            smp_first_gpu = first_gpu if oss else first_gpu + n_opt
            for j in range(n_smp):
                low = first_core + n_opt * res + j * smp_cpg
                sampler.append(_sampler_affinity(tuple(range(low, low + smp_cpg)), cpw, hto,
                                                 alt, saf, cuda_idx=smp_first_gpu + j))
                all_cpus += sampler[-1].master_cpus
    return AttrDict(all_cpus=all_cpus, optimizer=optimizer, sampler=sampler,
                    set_affinity=bool(saf))


def build_async_cpu_affinity(run_slot: int, cpu: int, cpr: int, cpw: int = 1,
                             hto: int | None = None, res: int = 1, skt: int = 1, gpu: int = 0,
                             alt: int = 0, saf: int = 1) -> AttrDict:
    """Affinity of asynchronous CPU-only run ``run_slot`` (code ``..._0gpu_<n>cpr_..._1ass``).

    The run's first ``res`` cores go to the optimizer (``cuda_idx=None``), the
    rest to the sampler, in the same structure as :func:`build_async_affinity`.
    """
    if gpu != 0:
        raise ValueError(f"build_async_cpu_affinity is for CPU-only runs, got "
                         f"{_arg(N_GPU)}={gpu}.")
    if res < 1:
        raise ValueError(f"{_arg(CPU_RESERVED)}={res}: the optimizer needs at least one core.")
    hto = _resolve_hto(hto, cpu)
    cores = _run_cores(run_slot, cpu, cpr, hto, skt)
    opt_cores = cores[:res]
    smp_cores = cores[res:]
    smp_cores = smp_cores[:(len(smp_cores) // cpw) * cpw]
    if cpu < res + cpw:
        raise ValueError(f"async sampling on CPU needs at least {res + cpw} cores "
                         f"({_arg(CPU_RESERVED)}={res} for the optimizer, {_arg(CPU_PER_WORKER)}="
                         f"{cpw} for a sampler worker), got {_arg(N_CPU_CORE)}={cpu}.")
    if not smp_cores:
        raise ValueError(f"async sampling on CPU needs {_arg(CPU_PER_RUN)}={cpr} larger than "
                         f"{_arg(CPU_RESERVED)}={res} (optimizer cores) by at least "
                         f"{_arg(CPU_PER_WORKER)}={cpw}, e.g. make_affinity(n_cpu_core={cpu}, "
                         f"n_gpu=0, cpu_per_run={cpu}, async_sample=True).")
    opt_cpus = get_master_cpus(opt_cores, hto)
    optimizer = [dict(cpus=opt_cpus, cuda_idx=None, torch_threads=len(opt_cores),
                      set_affinity=bool(saf))]
    sampler = _sampler_affinity(smp_cores, cpw, hto, alt, saf, cuda_idx=None)
    return AttrDict(all_cpus=opt_cpus + sampler.master_cpus, optimizer=optimizer,
                    sampler=sampler, set_affinity=bool(saf))
