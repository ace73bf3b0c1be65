"""Evaluation collector of the serial sampler."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from rlframe.samplers.collectors import BaseEvalCollector, eval_env_quotas

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import TrajInfo


class SerialEvalCollector(BaseEvalCollector):
    """Runs the agent in eval mode on ``envs`` and returns completed TrajInfos.

    Args:
        envs: evaluation envs, stepped together (a list, or a VecEnv).
        agent: the agent (``eval_mode`` is set here).
        TrajInfoCls: trajectory statistics class.
        max_T: max time steps (each step advances every env).
        max_trajectories: trajectories to evaluate: each env's first ones, split evenly
            over the envs (:func:`~rlframe.samplers.collectors.eval_env_quotas`); the
            evaluation stops once they ended (or after ``max_T`` steps).
        traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
        env_quota: [B] trajectories of each env, when these envs are a part of the
            evaluation's (a Ray worker's); replaces the split of ``max_trajectories``.
    """

    agent: BaseAgent

    def __init__(self, envs: VecEnv | Sequence[Env], agent: BaseAgent,
                 TrajInfoCls: type[TrajInfo], max_T: int, max_trajectories: int | None = None,
                 traj_info_kwargs: dict | None = None,
                 env_quota: Sequence[int] | np.ndarray | None = None):
        super().__init__(rank=0, envs=envs, TrajInfoCls=TrajInfoCls, traj_infos_queue=None,
                         max_T=max_T, agent=agent, traj_info_kwargs=traj_info_kwargs,
                         env_quota=env_quota)
        self.max_trajectories = max_trajectories
        if env_quota is None:
            self.env_quota = eval_env_quotas(max_trajectories, self.stepper.B)
