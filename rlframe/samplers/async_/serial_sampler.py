"""Asynchronous serial sampler: the sampler process steps every env and the agent itself."""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.samplers.async_.collectors import DbCpuResetCollector
from rlframe.samplers.base import BaseSampler
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.pinning import pin_master
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from rlframe.agents.base import AgentInputs
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import TrajInfo
    from rlframe.samplers.stepping import TrajTracker


class AsyncSerialSampler(AsyncSamplerMixin, BaseSampler):
    """Steps all ``batch_B`` envs in the sampler process, acting with a private copy
    of the agent's model that takes new parameters before every batch.

    Constructor arguments are those of :class:`BaseSampler`; the collector
    defaults to :class:`DbCpuResetCollector` and evaluation to
    :class:`SerialEvalCollector`. Training env ``b`` is seeded ``seed + b``,
    evaluation env ``i`` ``seed + batch_B + i``.
    """

    def __init__(self, *args: Any, CollectorCls: type = DbCpuResetCollector,
                 eval_CollectorCls: type = SerialEvalCollector, **kwargs: Any):
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)
        self.envs: VecEnv | None = None
        self.eval_envs: VecEnv | None = None

    def initialize(self, affinity: dict | None = None) -> None:
        """In the sampler process: pin, seed, build and start envs and collectors.

        Args:
            affinity: the runner's ``affinity["sampler"]``: ``master_cpus``,
                ``set_affinity`` (default True) and ``cuda_idx`` are read.
        """
        affinity = {} if affinity is None else affinity
        pin_master(affinity)
        torch.set_num_threads(1)
        set_seed(self.seed)
        B = self.batch_spec.B
        agent = self.agent
        venv = self.make_vec_env(B)
        self.envs = venv
        venv.seed(self.seed)
        self.sync = AttrDict(db_idx=SimpleNamespace(value=0))
        collector = self.CollectorCls(
            rank=0, envs=venv, samples_np=self.double_buffer, batch_T=self.batch_spec.T,
            TrajInfoCls=self.TrajInfoCls, agent=agent, sync=self.sync, global_B=B,
            env_ranks=list(range(B)), traj_info_kwargs=self.traj_info_kwargs)
        self._build_evaluation(agent, self.seed + B)
        agent.to_device(affinity.get("cuda_idx"))
        agent.async_cpu(share_memory=False)  # Act with a private copy; recv fills it.
        self.agent_inputs: AgentInputs
        self.traj_infos: TrajTracker
        self.agent_inputs, self.traj_infos = collector.start_envs(self.max_decorrelation_steps)
        collector.start_agent()
        self.collector = collector
        logger.log("Async serial sampler initialized.")

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Collect one batch into ``double_buffer[db_idx]`` with the newest parameters.

        Returns:
            the TrajInfos of trajectories completed in this batch.
        """
        self.sync.db_idx.value = self.check_db_idx(db_idx)
        self.agent.recv_shared_memory()
        agent_inputs, traj_infos, completed = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr)
        self.collector.reset_if_needed(agent_inputs)
        self.agent_inputs, self.traj_infos = agent_inputs, traj_infos
        return completed

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation episodes with the newest parameters; returns completed TrajInfos."""
        self.agent.recv_shared_memory()
        return self.eval_collector.collect_evaluation(itr)

    _build_evaluation = SerialSampler._build_evaluation
    shutdown = SerialSampler.shutdown  # Close every env.
