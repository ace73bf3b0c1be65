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

The parts: :mod:`.codes` (the three-letter names and the code's grammar),
:mod:`.builders` (the dicts of each kind of run), :mod:`.families` (which
builder each code goes to, and the code names it takes), :mod:`.machine`
(cores, hyperthreads, sockets, GPUs of this machine) and :mod:`.make` (the
entry points above). Validating dicts and pinning processes to them live in
:mod:`rlframe.utils.launching.pinning`. Every name is importable from here,
where rlpyt scripts import them from.
"""
from __future__ import annotations

import psutil  # noqa: F401  (kept importable from here)
import torch  # noqa: F401  (kept importable from here)

from rlframe.utils.checks import as_int  # noqa: F401
from rlframe.utils.collections import AttrDict  # noqa: F401
from rlframe.utils.launching.affinity.builders import (  # noqa: F401  (private ones too)
    Affinity, _check_run_slot, _resolve_hto, _run_cores, _sampler_affinity, _sync_affinity,
    build_async_affinity, build_async_cpu_affinity, build_cpu_affinity, build_gpu_affinity,
    build_multigpu_affinity, get_master_cpus, get_workers_cpus,
)
from rlframe.utils.launching.affinity.codes import (  # noqa: F401  (private ones too)
    _ARG_NAMES, ABBREVS, ALTERNATING, ASYNC_SAMPLE, CONTEXTS_PER_GPU, CPU_PER_RUN,
    CPU_PER_WORKER, CPU_RESERVED, GPU_PER_RUN, HYPERTHREAD_OFFSET, N_CPU_CORE, N_GPU, N_SOCKET,
    OPTIM_SAMPLE_SHARE_GPU, RUN_SLOT, SAMPLE_GPU_PER_RUN, SET_AFFINITY, decode_affinity,
    get_n_run_slots, prepend_run_slot, remove_run_slot,
)
from rlframe.utils.launching.affinity.codes import describe as _arg  # noqa: F401
from rlframe.utils.launching.affinity.machine import get_hyperthread_offset, get_n_socket
from rlframe.utils.launching.affinity.make import (
    affinity_from_code, encode_affinity, make_affinity, make_sync_affinity, quick_affinity_code,
)
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
