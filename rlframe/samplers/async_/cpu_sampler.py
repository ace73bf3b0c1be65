"""Asynchronous CPU sampler: the sampler process drives parallel worker processes."""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import TYPE_CHECKING, Any

import torch

from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.samplers.async_.collectors import DbCpuResetCollector
from rlframe.samplers.parallel.base import ParallelSamplerBase
from rlframe.samplers.parallel.cpu.collectors import CpuEvalCollector
from rlframe.utils.launching.pinning import check_workers_cpus, set_cpu_affinity
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from rlframe.samplers.collections import Samples, TrajInfo


class AsyncCpuSampler(AsyncSamplerMixin, ParallelSamplerBase):
    """Worker processes (started by the sampler process) step slices of the envs and act
    with the sampler's copy of the model, kept on shared memory; before every batch
    the sampler process copies new parameters into it.

    Constructor arguments are those of :class:`ParallelSamplerBase`; the collector
    defaults to :class:`DbCpuResetCollector` and evaluation to
    :class:`CpuEvalCollector`. Worker ``w`` is seeded ``seed + w``; env ``b``
    of the batch ``seed + b``.
    """

    def __init__(self, *args: Any, CollectorCls: type = DbCpuResetCollector,
                 eval_CollectorCls: type = CpuEvalCollector, **kwargs: Any):
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)

    def initialize(self, affinity: dict | None = None) -> None:  # type: ignore[override]
        """In the sampler process: pin, start the workers and wait until they are ready.

        Args:
            affinity: the runner's ``affinity["sampler"]``: ``master_cpus`` (this
                process), ``workers_cpus`` (one entry per worker),
                ``worker_torch_threads``, ``set_affinity`` are read.
        """
        affinity = {} if affinity is None else affinity
        if affinity.get("set_affinity", True) and affinity.get("master_cpus") is not None:
            set_cpu_affinity(affinity["master_cpus"])
        torch.set_num_threads(1)
        set_seed(self.seed)
        workers_cpus = check_workers_cpus(affinity, alternating=self.alternating)
        n_worker = len(workers_cpus)
        B = self.batch_spec.B
        if B % n_worker != 0:
            raise ValueError(f"batch_B={B} must be a multiple of the number of workers "
                             f"(len(affinity['sampler']['workers_cpus'])={n_worker}).")
        self.n_worker = n_worker
        self.B_per_worker = B // n_worker
        self.world_size, self.rank, self.global_B = 1, 0, B
        self.ctx = mp.get_context(self.start_method)
        self.master_pid = os.getpid()
        self.agent.async_cpu(share_memory=True)  # Workers read this process's copy.
        self.samples_np = self.double_buffer[0]
        self.samples_pyt = self.double_buffer_pyt[0]
        self._start_workers(affinity, workers_cpus, self.seed, env_rank_offset=0)

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        self.sync.db_idx = self.ctx.RawValue("i", 0)

    def _worker_samples(self, slice_B: slice) -> tuple[Samples, ...]:
        return tuple(buffer[:, slice_B] for buffer in self.double_buffer)

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Run one batch in the workers into ``double_buffer[db_idx]``.

        Returns:
            the TrajInfos of trajectories completed in this batch.
        """
        self.sync.db_idx.value = self.check_db_idx(db_idx)
        self.agent.recv_shared_memory()
        _, traj_infos = super().obtain_samples(itr)
        return traj_infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers with the newest parameters."""
        self.agent.recv_shared_memory()
        return super().evaluate_agent(itr)
