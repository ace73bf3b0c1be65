"""Collector base classes: how envs and the agent fill one [T, B] batch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlframe.agents.base import AgentInputs
from rlframe.utils.buffer import buffer_from_example
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Samples, TrajInfo
    from rlframe.samplers.parallel.gpu.sampler import StepBuffer
    from rlframe.utils.collections import AttrDict, NamedArrayTuple


class BaseCollector:
    """Steps ``envs`` (one per column b of the batch) and writes ``samples_np``.

    Args:
        rank: worker rank (0 in serial sampling).
        envs: the B envs this collector steps.
        samples_np: numpy ``Samples`` buffer [T, B] (this collector's columns).
        batch_T: time steps per batch.
        TrajInfoCls: trajectory statistics class.
        agent: acting agent (None when the master acts, e.g. GPU samplers).
        sync: shared control values of parallel samplers.
        step_buffer_np: per-step shared buffer of GPU samplers.
        global_B: total envs across all workers and ranks.
        env_ranks: global indexes of this collector's envs.
        traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
    """

    mid_batch_reset: bool = True

    def __init__(self, rank: int, envs: Sequence[Env], samples_np: Samples, batch_T: int,
                 TrajInfoCls: type[TrajInfo], agent: BaseAgent | None = None,
                 sync: AttrDict | None = None, step_buffer_np: StepBuffer | None = None,
                 global_B: int = 1, env_ranks: Sequence[int] | None = None,
                 traj_info_kwargs: dict | None = None):
        self.rank = rank
        self.envs = envs
        self.samples_np = samples_np
        self.batch_T = batch_T
        self.TrajInfoCls = TrajInfoCls
        self.agent = agent
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self.global_B = global_B
        self.env_ranks = env_ranks
        self.traj_info_kwargs = dict(traj_info_kwargs or {})

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, list[TrajInfo]]:
        """Reset envs; returns ``(AgentInputs [B], traj_infos)``."""
        raise NotImplementedError

    def start_agent(self) -> None:
        """Hand the env layout to the agent and reset its state."""
        if self.agent is not None:
            self.agent.collector_initialize(global_B=self.global_B, env_ranks=self.env_ranks)
            self.agent.reset()
            self.agent.sample_mode(itr=0)

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list[TrajInfo],
                      itr: int) -> tuple[AgentInputs, list[TrajInfo], list[TrajInfo]]:
        """Fill the batch; returns ``(agent_inputs, traj_infos, completed_infos)``."""
        raise NotImplementedError

    def reset_if_needed(self, agent_inputs: AgentInputs) -> None:
        """Reset envs between batches where needed (wait-reset collectors)."""


class BaseEvalCollector:
    """Runs evaluation episodes; parallel variants report through a queue.

    Args:
        rank: worker rank.
        envs: evaluation envs of this worker.
        TrajInfoCls: trajectory statistics class.
        traj_infos_queue: where completed TrajInfos go (then a ``None`` sentinel).
        max_T: max time steps per evaluation.
        agent: acting agent (None when the master acts).
        sync: shared control values of parallel samplers.
        step_buffer_np: per-step shared buffer of GPU samplers.
        traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
    """

    def __init__(self, rank: int, envs: Sequence[Env], TrajInfoCls: type[TrajInfo],
                 traj_infos_queue: Queue, max_T: int, agent: BaseAgent | None = None,
                 sync: AttrDict | None = None, step_buffer_np: StepBuffer | None = None,
                 traj_info_kwargs: dict | None = None):
        self.rank = rank
        self.envs = envs
        self.TrajInfoCls = TrajInfoCls
        self.traj_infos_queue = traj_infos_queue
        self.max_T = max_T
        self.agent = agent
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self.traj_info_kwargs = dict(traj_info_kwargs or {})

    def collect_evaluation(self, itr: int) -> None:
        raise NotImplementedError


def reset_envs(envs: Sequence[Env]) -> tuple[Any, np.ndarray, np.ndarray]:
    """Reset every env; returns ``(observation [B], null prev_action [B], zero prev_reward [B])``."""
    observations = [env.reset() for env in envs]
    observation = buffer_from_example(observations[0], len(envs))
    for b, obs in enumerate(observations):
        observation[b] = obs
    null_action = envs[0].action_space.null_value()
    prev_action = buffer_from_example(null_action, len(envs))
    for b in range(len(envs)):
        prev_action[b] = null_action
    prev_reward = np.zeros(len(envs), dtype="float32")
    return observation, prev_action, prev_reward


class DecorrelatingStartCollector(BaseCollector):
    """Starts each env a random number of random-action steps into an episode.

    Without this, all B envs of a batch start episodes in lockstep.
    """

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, list[TrajInfo]]:
        traj_infos = [self.TrajInfoCls(**self.traj_info_kwargs) for _ in range(len(self.envs))]
        observation, prev_action, prev_reward = reset_envs(self.envs)
        if self.rank == 0:
            logger.log(f"Sampler decorrelating envs, max steps: {max_decorrelation_steps}")
        if max_decorrelation_steps != 0:
            for b, env in enumerate(self.envs):
                null_action = env.action_space.null_value()
                n_steps = 1 + int(np.random.rand() * max_decorrelation_steps)
                for _ in range(n_steps):
                    a = env.action_space.sample()
                    o, r, d, info = env.step(a)
                    traj_infos[b].step(o, a, r, d, None, info)
                    if getattr(info, "traj_done", d):
                        o = env.reset()
                        traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    if d:
                        a = null_action
                        r = 0
                observation[b] = o
                prev_action[b] = a
                prev_reward[b] = r
        return AgentInputs(observation, prev_action, prev_reward), traj_infos



def step_eval_envs(envs: Sequence[Env], agent: BaseAgent, TrajInfoCls: type[TrajInfo],
                   traj_infos: list[TrajInfo], observation: Any, action: np.ndarray,
                   reward: np.ndarray, agent_info: NamedArrayTuple,
                   traj_info_kwargs: dict | None = None) -> list[TrajInfo]:
    """Step every evaluation env once with ``action`` [B], updating inputs in place.

    Envs whose trajectory ended are reset (with a new ``TrajInfoCls(**traj_info_kwargs)``);
    the agent's state is reset where ``done``, with a null action and zero reward
    as the next inputs.

    Returns:
        the TrajInfos completed on this step.
    """
    completed = []
    for b, env in enumerate(envs):
        o, r, d, env_info = env.step(action[b])
        traj_infos[b].step(observation[b], action[b], r, d, agent_info[b], env_info)
        if getattr(env_info, "traj_done", d):
            completed.append(traj_infos[b].terminate(o))
            traj_infos[b] = TrajInfoCls(**(traj_info_kwargs or {}))
            o = env.reset()
        if d:
            action[b] = 0
            r = 0
            agent.reset_one(idx=b)
        observation[b] = o
        reward[b] = r
    return completed
