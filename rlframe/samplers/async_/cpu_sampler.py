"""Asynchronous CPU sampler: the sampler process drives parallel worker processes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.samplers.async_.base import AsyncParallelSamplerMixin
from rlframe.samplers.async_.collectors import DbCpuResetCollector
from rlframe.samplers.parallel.base import ParallelSamplerBase
from rlframe.samplers.parallel.cpu.collectors import CpuEvalCollector

if TYPE_CHECKING:
    from rlframe.samplers.collections import TrajInfo


class AsyncCpuSampler(AsyncParallelSamplerMixin, ParallelSamplerBase):
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
        workers_cpus = self._prepare_sampler_process(affinity)
        self.agent.async_cpu(share_memory=True)  # Workers read this process's copy.
        self._start_async_workers(affinity, workers_cpus)

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Run one batch in the workers into ``double_buffer[db_idx]`` with the newest
        parameters.

        Returns:
            the TrajInfos of trajectories completed in this batch.
        """
        self.agent.recv_shared_memory()
        return super().obtain_samples(itr, db_idx)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers with the newest parameters."""
        self.agent.recv_shared_memory()
        return super().evaluate_agent(itr)
