"""Alternating samplers: two worker groups take turns, so that the master's action
selection for one half of the envs overlaps env stepping in the other half."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from rlframe.agents.base import AgentInputs
from rlframe.samplers.parallel.gpu.action_server import (AlternatingActionServer,
                                                        NoOverlapAlternatingActionServer)
from rlframe.samplers.parallel.gpu.sampler import GpuSamplerBase

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import Examples


class AlternatingSamplerBase(GpuSamplerBase):
    """Splits workers (and envs) into two halves served in turn.

    Needs an even number of workers (``affinity['workers_cpus']``, usually made
    with ``make_affinity(..., alternating=True)``, which lists each core twice)
    and ``batch_B`` divisible by it. Recurrent agents must be alternating
    (``AlternatingRecurrentAgentMixin``), keeping one RNN state per half.
    """

    alternating = True

    def initialize(self, agent: BaseAgent, affinity: dict | None = None, seed: int | None = None,
                   bootstrap_value: bool = False, traj_info_kwargs: dict | None = None,
                   world_size: int = 1, rank: int = 0,
                   worker_process: Callable[..., None] | None = None) -> Examples:
        self.check_alternating_agent(agent)
        return super().initialize(agent, affinity=affinity, seed=seed,
                                  bootstrap_value=bootstrap_value,
                                  traj_info_kwargs=traj_info_kwargs, world_size=world_size,
                                  rank=rank, worker_process=worker_process)

    def check_alternating_agent(self, agent: BaseAgent) -> None:
        """Raise TypeError for a recurrent agent that keeps a single RNN state."""
        if agent.recurrent and not agent.alternating:
            raise TypeError(f"{type(self).__name__} needs an alternating recurrent agent "
                            f"(e.g. AlternatingRecurrentCategoricalPgAgent); got "
                            f"{type(agent).__name__}.")

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        super()._build_parallel_ctrl(n_worker)
        half_w, half_B = n_worker // 2, self.batch_spec.B // 2
        self.worker_groups = (list(range(half_w)), list(range(half_w, n_worker)))
        halves = (slice(0, half_B), slice(half_B, None))
        self.step_buffer_halves = tuple(self.step_buffer_np[h] for h in halves)
        self.agent_inputs_halves = tuple(AgentInputs(*(x[h] for x in self.agent_inputs))
                                         for h in halves)


class AlternatingSampler(AlternatingActionServer, AlternatingSamplerBase):
    """Alternating GPU-style sampler (defaults: GpuResetCollector, GpuEvalCollector)."""


class NoOverlapAlternatingSampler(NoOverlapAlternatingActionServer, AlternatingSamplerBase):
    """Alternating sampler in which action selection never overlaps env stepping."""
