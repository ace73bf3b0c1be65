"""What runs inside one Ray actor of :class:`~rlframe.samplers.ray.RaySampler`.

A plain class (the sampler wraps it with ``ray.remote``), so this module never
imports Ray. Each actor steps its slice of the batch's envs with its own CPU
copy of the agent through the project's collectors, and returns its columns
of the ``[T, B]`` batch as numpy arrays.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from rlframe.envs.vector import make_vec_env
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.collections import BatchSpec
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Examples, Samples, TrajInfo


class RaySamplerWorker:
    """Envs, collectors and an agent copy of one sampler worker (a Ray actor).

    Args:
        rank: worker index ``w``; it writes columns ``w * n_envs : (w + 1) * n_envs``.
        agent: the sampler's initialized agent (arrives pickled: a CPU copy).
        EnvCls, env_kwargs, env_backend: how to build the training envs.
        n_envs: envs of this worker (``batch_B / n_workers``).
        batch_T: time steps per batch.
        examples: one step's outputs, which size this worker's [T, n_envs] buffer.
        bootstrap_value: keep ``agent.bootstrap_value`` [1, n_envs].
        CollectorCls, TrajInfoCls, traj_info_kwargs: as the sampler's.
        seed: this worker's RNG seed; env_seed: its first env's seed (env ``b``
            gets ``env_seed + b``, the seed serial sampling gives the same env).
        env_ranks, global_B: global indexes of these envs, and all envs' count.
        max_decorrelation_steps: max random steps of each env at start.
        eval_n_envs, eval_env_kwargs, eval_CollectorCls, eval_max_T,
        eval_max_trajectories, eval_env_seed: this worker's evaluation (0 envs: none).
        eval_env_quota: [eval_n_envs] trajectories each of its evaluation envs contributes
            (its part of the evaluation's split); None: up to ``eval_max_trajectories``.
        torch_threads: torch threads of this worker.
    """

    def __init__(self, rank: int, agent: BaseAgent, EnvCls: Callable[..., Env],
                 env_kwargs: dict, env_backend: str, n_envs: int, batch_T: int,
                 examples: Examples, bootstrap_value: bool, CollectorCls: type,
                 TrajInfoCls: type[TrajInfo], traj_info_kwargs: dict, seed: int,
                 env_seed: int, env_ranks: list[int], global_B: int,
                 max_decorrelation_steps: int, eval_n_envs: int = 0,
                 eval_env_kwargs: dict | None = None, eval_CollectorCls: type | None = None,
                 eval_max_T: int = 0, eval_max_trajectories: int | None = None,
                 eval_env_seed: int = 0, eval_env_quota: Sequence[int] | None = None,
                 torch_threads: int = 1):
        torch.set_num_threads(torch_threads)
        set_seed(seed)
        self.agent = agent
        self.params_version = 0  # The sampler's first published version is 1.
        self.envs = make_vec_env(env_backend, EnvCls, env_kwargs, n_envs)
        self.envs.seed(env_seed)
        _, self.samples_np, _ = build_samples_buffer(
            agent, self.envs, BatchSpec(batch_T, n_envs), bootstrap_value, agent_shared=False,
            env_shared=False, examples=examples)
        self.collector = CollectorCls(
            rank=rank, envs=self.envs, samples_np=self.samples_np, batch_T=batch_T,
            TrajInfoCls=TrajInfoCls, agent=agent, global_B=global_B, env_ranks=env_ranks,
            traj_info_kwargs=traj_info_kwargs)
        self.eval_envs = None
        self.eval_collector = None
        if eval_n_envs > 0:
            self.eval_envs = make_vec_env(env_backend, EnvCls, eval_env_kwargs, eval_n_envs)
            self.eval_envs.seed(eval_env_seed)
            self.eval_collector = eval_CollectorCls(
                envs=self.eval_envs, agent=agent, TrajInfoCls=TrajInfoCls, max_T=eval_max_T,
                max_trajectories=eval_max_trajectories, traj_info_kwargs=traj_info_kwargs,
                env_quota=eval_env_quota)
        self.agent_inputs, self.traj_infos = self.collector.start_envs(max_decorrelation_steps)
        self.collector.start_agent()

    def ready(self) -> bool:
        """Answers once the constructor finished (envs built and decorrelated)."""
        return True

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id); answers once the actor is ready."""
        import ray  # Present: this runs in a Ray actor.
        return ray.get_runtime_context().get_node_id()

    def _load_params(self, version: int, params_ref: list[Any]) -> None:
        """Load the agent's parameters if ``version`` is newer than the loaded one.

        ``params_ref`` is ``[ObjectRef]``: inside a list, Ray does not fetch the
        object before the call, so an unchanged version costs no transfer.
        """
        if version != self.params_version:
            import ray  # Present: this runs in a Ray actor.
            self.agent.load_state_dict(ray.get(params_ref[0]))
            self.params_version = version

    def sample(self, itr: int, version: int,
               params_ref: list[Any]) -> tuple[Samples, list[TrajInfo]]:
        """Collect one batch; returns ``(samples [T, n_envs] numpy, completed TrajInfos)``."""
        self._load_params(version, params_ref)
        self.agent_inputs, self.traj_infos, completed = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr)
        self.collector.reset_if_needed(self.agent_inputs)
        return self.samples_np, completed

    def evaluate(self, itr: int, version: int, params_ref: list[Any]) -> list[TrajInfo]:
        """Run this worker's evaluation; returns its completed TrajInfos."""
        self._load_params(version, params_ref)
        return self.eval_collector.collect_evaluation(itr)

    def close(self) -> None:
        """Close every env."""
        for envs in (self.envs, self.eval_envs):
            if envs is not None:
                envs.close()
