"""Serial sampler: envs and agent step in the runner's process."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.samplers.base import BaseSampler
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import Examples, Samples, TrajInfo


class SerialSampler(BaseSampler):
    """Steps all ``batch_B`` envs in this process; the agent acts on the whole batch.

    Constructor arguments are those of :class:`BaseSampler`; the collector
    defaults to :class:`CpuResetCollector` and evaluation to
    :class:`SerialEvalCollector`.
    """

    def __init__(self, *args: Any, CollectorCls: type = CpuResetCollector,
                 eval_CollectorCls: type = SerialEvalCollector, **kwargs: Any):
        super().__init__(*args, CollectorCls=CollectorCls,
                         eval_CollectorCls=eval_CollectorCls, **kwargs)
        self.envs: VecEnv | None = None
        self.eval_envs: VecEnv | None = None

    def initialize(self, agent: BaseAgent, affinity: dict | None = None, seed: int | None = None,
                   bootstrap_value: bool = False, traj_info_kwargs: dict | None = None,
                   rank: int = 0, world_size: int = 1) -> Examples:
        """Build envs, initialize the agent and allocate the sample buffer.

        Args:
            agent: the agent (initialized here with the env spaces).
            affinity: ignored (serial sampling runs in the caller's process).
            seed: envs are seeded ``seed + i`` (eval envs likewise).
            bootstrap_value: store the value of the state after each batch.
            traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
            rank, world_size: position among synchronous runners.

        Returns:
            examples dict (one step's outputs) used by algorithms to size replay.
        """
        self._set_traj_info_kwargs(traj_info_kwargs)
        B = self.batch_spec.B
        venv = self.make_vec_env(B)
        venv.seed(seed)
        global_B = B * world_size
        env_ranks = list(range(rank * B, (rank + 1) * B))
        agent.initialize(venv.spaces, share_memory=False, global_B=global_B,
                         env_ranks=env_ranks)
        samples_pyt, samples_np, examples = build_samples_buffer(
            agent, venv, self.batch_spec, bootstrap_value, agent_shared=False,
            env_shared=False, subprocess=False)
        collector = self.CollectorCls(
            rank=0, envs=venv, samples_np=samples_np, batch_T=self.batch_spec.T,
            TrajInfoCls=self.TrajInfoCls, agent=agent, global_B=global_B, env_ranks=env_ranks,
            traj_info_kwargs=self.traj_info_kwargs)
        self._build_evaluation(agent, seed)
        # Envs were stepped for the examples: start them afresh (seeded again).
        venv.seed(seed)
        agent_inputs, traj_infos = collector.start_envs(self.max_decorrelation_steps)
        collector.start_agent()

        self.agent = agent
        self.envs = venv
        self.samples_pyt = samples_pyt
        self.samples_np = samples_np
        self.collector = collector
        self.agent_inputs = agent_inputs
        self.traj_infos = traj_infos
        logger.log("Serial Sampler initialized.")
        return examples

    def _build_evaluation(self, agent: BaseAgent, seed: int | None) -> None:
        """With ``eval_n_envs > 0``: the evaluation envs (seeded from ``seed``) and their
        collector (``eval_envs``, ``eval_collector``)."""
        if self.eval_n_envs > 0:
            self.eval_envs = self.make_vec_env(self.eval_n_envs, eval=True)
            self.eval_envs.seed(seed)
            self.eval_collector = self.eval_CollectorCls(
                envs=self.eval_envs, agent=agent, TrajInfoCls=self.TrajInfoCls,
                max_T=self.eval_max_steps // self.eval_n_envs,
                max_trajectories=self.eval_max_trajectories,
                traj_info_kwargs=self.traj_info_kwargs)

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        """Collect one batch; returns ``(samples [T, B] torch, completed TrajInfos)``.

        The same buffer object is returned every call and overwritten.
        """
        agent_inputs, traj_infos, completed_infos = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr)
        self.collector.reset_if_needed(agent_inputs)
        self.agent_inputs = agent_inputs
        self.traj_infos = traj_infos
        return self.samples_pyt, completed_infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation episodes; returns completed TrajInfos."""
        return self.eval_collector.collect_evaluation(itr)

    def shutdown(self) -> None:
        """Close every env."""
        for venv in (self.envs, self.eval_envs):
            if venv is not None:
                venv.close()
        self.envs, self.eval_envs = None, None
