"""CPU-parallel sampler: each worker acts with its own view of the shared model."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.samplers.parallel.base import ParallelSamplerBase
from rlframe.samplers.parallel.cpu.collectors import CpuEvalCollector, CpuResetCollector

if TYPE_CHECKING:
    from rlframe.samplers.collections import Samples, TrajInfo


class CpuSampler(ParallelSamplerBase):
    """Workers step their envs and select actions with the agent's shared-memory model.

    The agent's parameters live on shared memory; before each batch the master
    copies its trained parameters there (``agent.sync_shared_memory``, a no-op
    when it trains the shared model itself on CPU), so every worker acts with
    the current policy. Arguments are those of :class:`ParallelSamplerBase`.
    """

    def __init__(self, *args: Any, CollectorCls: type = CpuResetCollector,
                 eval_CollectorCls: type = CpuEvalCollector, **kwargs: Any):
        super().__init__(*args, CollectorCls=CollectorCls,
                         eval_CollectorCls=eval_CollectorCls, **kwargs)

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        self.agent.sync_shared_memory()
        return super().obtain_samples(itr)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        self.agent.sync_shared_memory()
        return super().evaluate_agent(itr)
