"""Evaluation collector of the serial sampler."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collectors import reset_envs, step_eval_envs
from rlframe.utils.buffer import numpify_buffer, torchify_buffer
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import TrajInfo


class SerialEvalCollector:
    """Runs the agent in eval mode on ``envs`` and returns completed TrajInfos.

    Args:
        envs: evaluation envs, stepped together.
        agent: the agent (``eval_mode`` is set here).
        TrajInfoCls: trajectory statistics class.
        max_T: max time steps (each step advances every env).
        max_trajectories: stop early once this many trajectories completed.
        traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
    """

    def __init__(self, envs: Sequence[Env], agent: BaseAgent, TrajInfoCls: type[TrajInfo],
                 max_T: int, max_trajectories: int | None = None,
                 traj_info_kwargs: dict | None = None):
        self.envs = envs
        self.agent = agent
        self.TrajInfoCls = TrajInfoCls
        self.max_T = max_T
        self.max_trajectories = max_trajectories
        self.traj_info_kwargs = dict(traj_info_kwargs or {})

    def collect_evaluation(self, itr: int) -> list[TrajInfo]:
        traj_infos = [self.TrajInfoCls(**self.traj_info_kwargs) for _ in range(len(self.envs))]
        completed_traj_infos = []
        observation, action, reward = reset_envs(self.envs)
        obs_pyt, act_pyt, rew_pyt = torchify_buffer(AgentInputs(observation, action, reward))
        self.agent.reset()
        self.agent.eval_mode(itr)
        for t in range(self.max_T):
            act_pyt, agent_info = self.agent.step(obs_pyt, act_pyt, rew_pyt)
            completed_traj_infos.extend(step_eval_envs(
                self.envs, self.agent, self.TrajInfoCls, traj_infos, observation,
                numpify_buffer(act_pyt), reward, agent_info, self.traj_info_kwargs))
            if (self.max_trajectories is not None
                    and len(completed_traj_infos) >= self.max_trajectories):
                logger.log("Evaluation reached max num trajectories "
                           f"({self.max_trajectories}).")
                break
        else:
            logger.log(f"Evaluation reached max num time steps ({self.max_T}).")
        return completed_traj_infos
