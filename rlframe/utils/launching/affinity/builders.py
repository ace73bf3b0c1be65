"""Affinity dicts of each run family, built from the numbers of an affinity code.

The builders take the code's three-letter names as keyword arguments (rlpyt's
``build_cpu_affinity(slt, cpu, cpr, ...)``); :mod:`.families` states which names
each family's builder takes. A run's processes are described by the typed
:class:`ProcessAffinity` and :class:`OptimizerAffinity` first, which give the
dicts runners and samplers read (``affinity["workers_cpus"]``, ...).

Families: CPU-only runs (:func:`build_cpu_affinity`), one GPU context per run
(:func:`build_gpu_affinity`), several GPUs per run (:func:`build_multigpu_affinity`,
one dict per GPU), and asynchronous runs with GPU or CPU optimizers
(:func:`build_async_affinity`, :func:`build_async_cpu_affinity`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.affinity.codes import (
    CODE_NAMES, CONTEXTS_PER_GPU, CPU_PER_RUN, CPU_PER_WORKER, CPU_RESERVED, GPU_PER_RUN,
    HYPERTHREAD_OFFSET, N_CPU_CORE, N_GPU, N_SOCKET, SAMPLE_GPU_PER_RUN, describe,
)

__all__ = ["Affinity", "ProcessAffinity", "OptimizerAffinity", "get_master_cpus",
           "get_workers_cpus", "build_cpu_affinity", "build_gpu_affinity",
           "build_multigpu_affinity", "build_async_affinity", "build_async_cpu_affinity"]

Affinity = Union[AttrDict, list]  # A dict, or a list of dicts for multi-GPU runs.


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


def _resolve_hto(hto: int | None, cpu: int) -> int:
    """Default hyperthread offset is the core count; 0 turns hyperthreads off."""
    hto = cpu if hto is None else hto
    if 0 < hto < cpu:
        raise ValueError(f"{describe(HYPERTHREAD_OFFSET)}={hto} is below "
                         f"{describe(N_CPU_CORE)}={cpu}, so hyperthread ids would collide with "
                         f"core ids. {CODE_NAMES[N_CPU_CORE].keyword} counts physical cores; "
                         f"pass hyperthread_offset=0 to use no hyperthreads.")
    return hto


def _check_run_slot(run_slot: int, n_run_slots: int) -> None:
    if not 0 <= run_slot < n_run_slots:
        raise ValueError(f"run_slot={run_slot} is out of range: this configuration has "
                         f"{n_run_slots} run slot(s), numbered 0..{max(n_run_slots - 1, 0)}.")


def _run_cores(slt: int, cpu: int, cpr: int, hto: int, skt: int) -> tuple[int, ...]:
    """The ``cpr`` physical cores of run slot ``slt`` (runs fill one socket, then the next)."""
    if cpu % cpr:
        raise ValueError(f"{describe(CPU_PER_RUN)}={cpr} must divide {describe(N_CPU_CORE)}={cpu}.")
    if (hto - cpu) % skt:
        raise ValueError(f"{describe(N_SOCKET)}={skt} must divide {describe(HYPERTHREAD_OFFSET)} - "
                         f"{describe(N_CPU_CORE)} = {hto} - {cpu}.")
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
        raise ValueError(f"a run of {describe(CPU_PER_RUN)}={cpr} cores cannot split evenly over "
                         f"{describe(N_SOCKET)}={skt} sockets with {n_run_slots} run slot(s).")
    cores = []
    for s in range(slt * skt_per_slt, (slt + 1) * skt_per_slt):
        cores.extend(range(s * cpu_per_skt, s * cpu_per_skt + cpr // skt_per_slt))
    return tuple(cores)


@dataclass(frozen=True)
class ProcessAffinity:
    """Where a master process and its sampler workers run (a synchronous run, or an
    asynchronous run's sampler); :meth:`as_dict` gives rlpyt's dict of it.

    Attributes:
        master_cpus: the master's cores and their hyperthreads.
        workers_cpus: each worker's CPUs.
        master_torch_threads, worker_torch_threads: torch threads of each.
        alternating: workers for an alternating sampler.
        set_affinity: False leaves processes unpinned.
    """
    master_cpus: tuple[int, ...]
    workers_cpus: tuple[tuple[int, ...], ...]
    master_torch_threads: int
    worker_torch_threads: int
    alternating: bool
    set_affinity: bool

    def as_dict(self, **cuda_idx: int | None) -> AttrDict:
        """``AttrDict(all_cpus, master_cpus, workers_cpus, ...)``, with ``cuda_idx`` if given."""
        return AttrDict(all_cpus=self.master_cpus, master_cpus=self.master_cpus,
                        workers_cpus=self.workers_cpus,
                        master_torch_threads=self.master_torch_threads,
                        worker_torch_threads=self.worker_torch_threads, **cuda_idx,
                        alternating=self.alternating, set_affinity=self.set_affinity)


@dataclass(frozen=True)
class OptimizerAffinity:
    """Where one optimizer process of an asynchronous run runs; :meth:`as_dict` gives
    the dict of ``affinity["optimizer"]``."""
    cpus: tuple[int, ...]
    cuda_idx: int | None
    torch_threads: int
    set_affinity: bool

    def as_dict(self) -> dict:
        """``dict(cpus, cuda_idx, torch_threads, set_affinity)``."""
        return dict(cpus=self.cpus, cuda_idx=self.cuda_idx, torch_threads=self.torch_threads,
                    set_affinity=self.set_affinity)


def _process_affinity(cores: tuple[int, ...], worker_cores: tuple[int, ...], cpw: int,
                      hto: int, alt: int, saf: int) -> ProcessAffinity:
    """A master on ``cores`` (and their hyperthreads) with workers on ``worker_cores``."""
    return ProcessAffinity(
        master_cpus=get_master_cpus(cores, hto),
        workers_cpus=get_workers_cpus(worker_cores, cpw, hto, alt),
        master_torch_threads=len(cores), worker_torch_threads=cpw,
        alternating=bool(alt), set_affinity=bool(saf))


def _sync_affinity(cores: tuple[int, ...], worker_cores: tuple[int, ...], cpw: int, hto: int,
                   alt: int, saf: int, **cuda_idx: int | None) -> AttrDict:
    """Dict of a master on ``cores`` with workers on ``worker_cores``; ``cuda_idx`` if given."""
    return _process_affinity(cores, worker_cores, cpw, hto, alt, saf).as_dict(**cuda_idx)


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
        raise ValueError(f"build_cpu_affinity is for CPU-only runs, got {describe(N_GPU)}={gpu}.")
    hto = _resolve_hto(hto, cpu)
    cores = _run_cores(slt, cpu, cpr, hto, skt)
    worker_cores = cores[res:]
    if not worker_cores:
        raise ValueError(f"{describe(CPU_RESERVED)}={res} leaves none of the run's {len(cores)} "
                         f"cores for sampler workers.")
    if len(worker_cores) % cpw:
        raise ValueError(f"{describe(CPU_PER_WORKER)}={cpw} must divide the run's "
                         f"{len(worker_cores)} worker cores ({len(cores)} cores, {res} reserved).")
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
        raise ValueError(f"{describe(N_CPU_CORE)}={cpu} must be a multiple of {describe(N_GPU)} x "
                         f"{describe(CONTEXTS_PER_GPU)} = {n_ctx} (cores are split evenly).")
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
        raise ValueError(f"a run needs {gpu_per_run} GPUs ({describe(GPU_PER_RUN)}={gpr} + "
                         f"{describe(SAMPLE_GPU_PER_RUN)}={0 if oss else sgr}), but "
                         f"{describe(N_GPU)}={gpu}.")
    _check_run_slot(run_slot, n_run_slots)
    if res < 1:
        raise ValueError(f"{describe(CPU_RESERVED)}={res}: each optimizer needs at least one core.")
    if gpu < skt:
        raise ValueError(f"async affinity needs at least one GPU per socket, got "
                         f"{describe(N_GPU)}={gpu}, {describe(N_SOCKET)}={skt}; try n_socket=1.")
    hto = _resolve_hto(hto, cpu)
    cpr = cpu // n_run_slots
    smp_cpr = ((cpr - res * gpr) // cpw) * cpw  # Sampler cores of the run, whole workers.
    if smp_cpr <= 0 or smp_cpr // max(1, sgr) < cpw:
        raise ValueError(f"{describe(N_CPU_CORE)}={cpu} gives each of {n_run_slots} run(s) {cpr} "
                         f"cores; {gpr} optimizer(s) x {describe(CPU_RESERVED)}={res} leave too "
                         f"few for sampler workers of {describe(CPU_PER_WORKER)}={cpw}.")
    smp_cpg = smp_cpr // max(1, sgr)
    gpu_per_skt = gpu // skt
    cpu_per_skt = max(cpu, hto) // skt
    # Per socket the run uses: (first core, first GPU, optimizer GPUs, sampler GPUs).
    if gpu_per_run <= gpu_per_skt:
        if n_run_slots % skt:
            raise ValueError(f"{n_run_slots} async runs cannot split evenly over "
                             f"{describe(N_SOCKET)}={skt} sockets; try n_socket=1.")
        run_per_skt = n_run_slots // skt
        my_skt, run_in_skt = divmod(run_slot, run_per_skt)
        first_gpu = my_skt * gpu_per_skt + run_in_skt * gpu_per_run
        pieces = [(my_skt * cpu_per_skt + run_in_skt * cpr, first_gpu, gpr, sgr)]
    else:  # One run spans several sockets, with its GPUs split evenly over them.
        skt_per_run = skt // n_run_slots
        if gpr % skt_per_run or sgr % skt_per_run:
            raise ValueError(f"a run spanning {skt_per_run} sockets needs {describe(GPU_PER_RUN)}="
                             f"{gpr} and {describe(SAMPLE_GPU_PER_RUN)}={sgr} divisible by "
                             f"{skt_per_run}; try n_socket=1.")
        pieces = [(s * cpu_per_skt, s * gpu_per_skt, gpr // skt_per_run, sgr // skt_per_run)
                  for s in range(run_slot * skt_per_run, (run_slot + 1) * skt_per_run)]
    optimizer, all_cpus = [], ()
    for first_core, first_gpu, n_opt, _ in pieces:
        for i in range(n_opt):  # Optimizer i: res cores at the start of its socket's share.
            cores = tuple(range(first_core + i * res, first_core + (i + 1) * res))
            cpus = get_master_cpus(cores, hto)
            optimizer.append(OptimizerAffinity(cpus, first_gpu + i, len(cores),
                                               bool(saf)).as_dict())
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
                         f"{describe(N_GPU)}={gpu}.")
    if res < 1:
        raise ValueError(f"{describe(CPU_RESERVED)}={res}: the optimizer needs at least one core.")
    hto = _resolve_hto(hto, cpu)
    cores = _run_cores(run_slot, cpu, cpr, hto, skt)
    opt_cores = cores[:res]
    smp_cores = cores[res:]
    smp_cores = smp_cores[:(len(smp_cores) // cpw) * cpw]
    if cpu < res + cpw:
        raise ValueError(f"async sampling on CPU needs at least {res + cpw} cores "
                         f"({describe(CPU_RESERVED)}={res} for the optimizer, "
                         f"{describe(CPU_PER_WORKER)}={cpw} for a sampler worker), got "
                         f"{describe(N_CPU_CORE)}={cpu}.")
    if not smp_cores:
        raise ValueError(f"async sampling on CPU needs {describe(CPU_PER_RUN)}={cpr} larger than "
                         f"{describe(CPU_RESERVED)}={res} (optimizer cores) by at least "
                         f"{describe(CPU_PER_WORKER)}={cpw}, e.g. make_affinity(n_cpu_core={cpu}, "
                         f"n_gpu=0, cpu_per_run={cpu}, async_sample=True).")
    opt_cpus = get_master_cpus(opt_cores, hto)
    optimizer = [OptimizerAffinity(opt_cpus, None, len(opt_cores), bool(saf)).as_dict()]
    sampler = _sampler_affinity(smp_cores, cpw, hto, alt, saf, cuda_idx=None)
    return AttrDict(all_cpus=opt_cpus + sampler.master_cpus, optimizer=optimizer,
                    sampler=sampler, set_affinity=bool(saf))
