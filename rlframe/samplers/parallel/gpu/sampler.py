"""GPU-style sampler: workers step envs, the master selects all actions at once."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collections import (  # noqa: F401  (rlpyt's import path)
    StepBuffer, build_step_buffer)
from rlframe.samplers.parallel.base import ParallelSamplerBase
from rlframe.samplers.parallel.gpu.action_server import ActionServer
from rlframe.samplers.parallel.gpu.collectors import GpuEvalCollector, GpuResetCollector

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import EnvSpaces
    from rlframe.samplers.collections import Samples, TrajInfo


class GpuSamplerBase(ParallelSamplerBase):
    """Workers step envs; the master acts on the whole batch (ActionServer).

    The agent lives only in the master (``share_memory=False``), so it can sit
    on a GPU and run one batched forward pass per time step.
    """

    gpu = True

    def __init__(self, *args: Any, CollectorCls: type = GpuResetCollector,
                 eval_CollectorCls: type = GpuEvalCollector, **kwargs: Any):
        super().__init__(*args, CollectorCls=CollectorCls,
                         eval_CollectorCls=eval_CollectorCls, **kwargs)

    def _agent_init(self, agent: BaseAgent, env_spaces: EnvSpaces, global_B: int,
                    env_ranks: list[int]) -> None:
        agent.initialize(env_spaces, share_memory=False, global_B=global_B, env_ranks=env_ranks)
        # The master acts for every env, so the agent sees the whole env layout here.
        agent.collector_initialize(global_B=global_B, env_ranks=env_ranks)
        agent.reset()

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        self.step_buffer_pyt, self.step_buffer_np = build_step_buffer(
            self.examples, self.batch_spec.B)
        self.agent_inputs = AgentInputs(self.step_buffer_pyt.observation,
                                        self.step_buffer_pyt.action,
                                        self.step_buffer_pyt.reward)
        if self.eval_n_envs > 0:
            eval_B = self.eval_n_envs_per * n_worker
            self.eval_step_buffer_pyt, self.eval_step_buffer_np = build_step_buffer(
                self.examples, eval_B)
            self.eval_agent_inputs = AgentInputs(self.eval_step_buffer_pyt.observation,
                                                 self.eval_step_buffer_pyt.action,
                                                 self.eval_step_buffer_pyt.reward)
        self.sync.obs_ready = [self.ctx.Semaphore(0) for _ in range(n_worker)]
        self.sync.act_ready = [self.ctx.Semaphore(0) for _ in range(n_worker)]
        self.sync.eval_obs_ready = [self.ctx.Semaphore(0) for _ in range(n_worker)]
        self.sync.eval_act_ready = [self.ctx.Semaphore(0) for _ in range(n_worker)]
        self.sync.master_pid = self.master_pid

    def _worker_extra_kwargs(self, w: int, slice_B: slice) -> dict:
        extra = dict(step_buffer_np=self.step_buffer_np[slice_B])
        if self.eval_n_envs > 0:
            n = self.eval_n_envs_per
            extra["eval_step_buffer_np"] = self.eval_step_buffer_np[w * n:(w + 1) * n]
        return extra

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        self.agent.sample_mode(itr)
        return super().obtain_samples(itr)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        self.agent.eval_mode(itr)
        return super().evaluate_agent(itr)

    def _release_extra(self) -> None:
        for sems in (self.sync.act_ready, self.sync.eval_act_ready):
            for sem in sems:
                sem.release()


class GpuSampler(ActionServer, GpuSamplerBase):
    """GPU-style parallel sampler (defaults: GpuResetCollector, GpuEvalCollector)."""
