"""Asynchronous alternating samplers: two worker groups take turns, so that the action
server's action selection for one half of the envs overlaps env stepping in the other.

As :mod:`rlframe.samplers.parallel.gpu.alternating_sampler`, writing into half
``db_idx`` of the double buffer. Every action server (one, or one per entry of
a list affinity) alternates its own two worker groups: give each an even number
of workers (``make_affinity(..., alternating=True)`` lists each core twice).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.samplers.async_.action_server import (AsyncAlternatingActionServer,
                                                   AsyncNoOverlapAlternatingActionServer)
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSamplerBase
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSamplerBase

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import Examples, Samples


class AsyncAlternatingSamplerBase(AsyncGpuSamplerBase, AlternatingSamplerBase):
    """Splits each action server's workers (and envs) into two halves served in turn.

    Recurrent agents must be alternating (``AlternatingRecurrentAgentMixin``),
    keeping one RNN state per half.
    """

    def async_initialize(self, agent: BaseAgent, bootstrap_value: bool = False,
                         traj_info_kwargs: dict | None = None, seed: int | None = None,
                         ctx: BaseContext | None = None
                         ) -> tuple[tuple[Samples, ...], Examples]:
        self.check_alternating_agent(agent)
        return super().async_initialize(agent, bootstrap_value=bootstrap_value,
                                        traj_info_kwargs=traj_info_kwargs, seed=seed, ctx=ctx)


class AsyncAlternatingSampler(AsyncAlternatingActionServer, AsyncAlternatingSamplerBase):
    """Asynchronous alternating sampler (defaults: DbGpuResetCollector, GpuEvalCollector)."""


class AsyncNoOverlapAlternatingSampler(AsyncNoOverlapAlternatingActionServer,
                                       AsyncAlternatingSamplerBase):
    """Asynchronous alternating sampler in which action selection never overlaps env
    stepping."""
