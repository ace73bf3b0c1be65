"""Collector base classes: how envs and the agent fill one [T, B] batch.

Every collector steps its envs through one :class:`~rlframe.samplers.stepping.EnvStepper`
(``self.stepper``), which writes whole rows of the batch, keeps trajectory
statistics and resets finished envs. A collector only says who picks the
actions and when finished envs restart.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from rlframe.agents.base import AgentInputs
from rlframe.samplers.stepping import EnvStepper
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import Samples, StepBuffer, TrajInfo
    from rlframe.samplers.stepping import TrajTracker
    from rlframe.utils.collections import AttrDict


class BaseCollector:
    """Steps ``envs`` (one per column b of the batch) and writes ``samples_np``.

    Args:
        rank: worker rank (0 in serial sampling).
        envs: the B envs this collector steps: a list of rlframe envs, or a
            :class:`~rlframe.envs.vector.VecEnv` (the sampler's ``env_backend``).
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

    def __init__(self, rank: int, envs: VecEnv | Sequence[Env], samples_np: Samples,
                 batch_T: int, TrajInfoCls: type[TrajInfo], agent: BaseAgent | None = None,
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
        self.stepper = EnvStepper(envs, TrajInfoCls, self.traj_info_kwargs, samples_np,
                                  inputs=self._input_buffers(),
                                  mid_batch_reset=self.mid_batch_reset)

    def _input_buffers(self) -> AgentInputs | None:
        """The agent's input rows [B] to step from (None: the stepper allocates them)."""
        return None

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, TrajTracker]:
        """Reset envs (and decorrelate them); returns ``(AgentInputs [B], traj tracker)``.

        The tracker holds the running trajectories; samplers pass both values
        back to :meth:`collect_batch` unchanged.
        """
        if self.rank == 0:
            logger.log(f"Sampler decorrelating envs, max steps: {max_decorrelation_steps}")
        agent_inputs = self.stepper.start(max_decorrelation_steps)
        return agent_inputs, self.stepper.tracker

    def start_agent(self) -> None:
        """Hand the env layout to the agent and reset its state."""
        if self.agent is not None:
            self.agent.collector_initialize(global_B=self.global_B, env_ranks=self.env_ranks)
            self.agent.reset()
            self.agent.sample_mode(itr=0)

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: TrajTracker,
                      itr: int) -> tuple[AgentInputs, TrajTracker, list[TrajInfo]]:
        """Fill the batch; returns ``(agent_inputs, traj_infos, completed_infos)``."""
        raise NotImplementedError

    def reset_if_needed(self, agent_inputs: AgentInputs) -> None:
        """Restart envs between batches where needed (wait-reset collectors)."""


DecorrelatingStartCollector = BaseCollector
"""rlpyt's name for a collector that starts envs a random number of steps in."""


def eval_env_quotas(max_trajectories: int | None, n_envs: int, first: int = 0,
                    count: int | None = None) -> np.ndarray | None:
    """How many trajectories each evaluation env contributes when an evaluation asks
    for ``max_trajectories`` over ``n_envs`` envs: ``max_trajectories`` split as evenly
    as it goes (the first ``max_trajectories % n_envs`` envs one more), so that every
    env's first episodes count and short ones are not over-represented.

    Args:
        max_trajectories: the evaluation's trajectories (None: no quota).
        n_envs: evaluation envs of all workers together.
        first, count: the envs of one collector, ``first`` to ``first + count - 1``
            (default: all).

    Returns:
        ``[count]`` ints, or None without ``max_trajectories``.
    """
    if max_trajectories is None:
        return None
    quotas = np.full(n_envs, max_trajectories // n_envs, dtype=np.int64)
    quotas[:max_trajectories % n_envs] += 1
    return quotas[first:n_envs if count is None else first + count]


class BaseEvalCollector:
    """Runs evaluation episodes; parallel variants report through a queue.

    :meth:`collect_evaluation` is the one evaluation loop: restart the envs, step them
    up to ``max_T`` times, report every completed trajectory, stop early where asked.

    With ``env_quota``, env b's trajectories count only up to ``env_quota[b]`` (its
    first ones in the evaluation; later ones are dropped, not reported): an evaluation
    of N trajectories over E envs is each env's first N / E episodes, not the first N
    to end, which would favour short episodes (an env that fails fast could end
    several before a long episode ends once). The collector's evaluation is done when
    every env has met its quota.
    A collector says only how actions are picked and envs stepped
    (:meth:`_begin_evaluation`, :meth:`_step_envs`, :meth:`_after_step`; by default
    the agent acts here) and what else ends an evaluation (:meth:`_evaluation_done`).

    Args:
        rank: worker rank.
        envs: evaluation envs of this worker (a list, or a VecEnv).
        TrajInfoCls: trajectory statistics class.
        traj_infos_queue: where completed TrajInfos go (then a ``None`` sentinel);
            None: they are only returned (serial evaluation).
        max_T: max time steps per evaluation.
        agent: acting agent (None when the master acts).
        sync: shared control values of parallel samplers.
        step_buffer_np: per-step shared buffer of GPU samplers.
        traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
        env_quota: [B] trajectories each env contributes (:func:`eval_env_quotas`);
            None: every trajectory that ends within ``max_T`` steps counts.
    """

    max_trajectories: int | None = None  # Stop once this many trajectories completed.

    def __init__(self, rank: int, envs: VecEnv | Sequence[Env], TrajInfoCls: type[TrajInfo],
                 traj_infos_queue: Queue | None, max_T: int, agent: BaseAgent | None = None,
                 sync: AttrDict | None = None, step_buffer_np: StepBuffer | None = None,
                 traj_info_kwargs: dict | None = None,
                 env_quota: Sequence[int] | np.ndarray | None = None):
        self.rank = rank
        self.envs = envs
        self.TrajInfoCls = TrajInfoCls
        self.traj_infos_queue = traj_infos_queue
        self.max_T = max_T
        self.agent = agent
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self.traj_info_kwargs = dict(traj_info_kwargs or {})
        self.stepper = EnvStepper(envs, TrajInfoCls, self.traj_info_kwargs,
                                  inputs=self._input_buffers(), null_done_inputs=True)
        self.env_quota: np.ndarray | None = None
        if env_quota is not None:
            self.env_quota = np.asarray(env_quota, dtype=np.int64)
            if self.env_quota.shape != (self.stepper.B,):
                raise ValueError(f"env_quota has {self.env_quota.shape} entries; give one "
                                 f"per evaluation env ({self.stepper.B}).")
        self.taken = np.zeros(self.stepper.B, dtype=np.int64)  # Counted per env, this evaluation.

    def _input_buffers(self) -> AgentInputs | None:
        """The agent's input rows [B] to step from (None: the stepper allocates them)."""
        return None

    def collect_evaluation(self, itr: int) -> list[TrajInfo]:
        """Run one evaluation from fresh episodes.

        Returns:
            the completed trajectories' infos (also put on ``traj_infos_queue``, then
            a ``None`` sentinel, when there is a queue).
        """
        queue, stepper, quota, taken = self.traj_infos_queue, self.stepper, self.env_quota, \
            self.taken
        stepper.start()
        taken[:] = 0
        self._begin_evaluation(itr)
        completed: list[TrajInfo] = []
        with self._step_mode():
            for t in range(self.max_T):
                if not self._step_envs(t):
                    break
                for b, traj_info in stepper.pop_completed_by_env():
                    if quota is not None:
                        if taken[b] >= quota[b]:
                            continue  # Beyond its env's share: dropped.
                        taken[b] += 1
                    completed.append(traj_info)
                    if queue is not None:
                        queue.put(traj_info)
                if self._evaluation_done(completed):
                    break
                self._after_step(t)
            else:
                if queue is None:
                    logger.log(f"Evaluation reached max num time steps ({self.max_T}).")
        if queue is not None:
            queue.put(None)  # End sentinel.
        return completed

    def _begin_evaluation(self, itr: int) -> None:
        """After the envs restarted: reset the agent, in eval mode."""
        agent = self._acting_agent()
        agent.reset()
        agent.eval_mode(itr)

    def _step_mode(self) -> AbstractContextManager:
        """The autograd mode of the evaluation loop (see :func:`agent_step_mode`)."""
        return agent_step_mode(self._acting_agent())

    def _step_envs(self, t: int) -> bool:
        """Step every env once (step ``t``); False ends the evaluation before stepping."""
        step_with_agent(self._acting_agent(), self.stepper, t)
        return True

    def _after_step(self, t: int) -> None:
        """After step ``t``'s trajectories are reported, unless the evaluation ended."""

    def _evaluation_done(self, completed: list[TrajInfo]) -> bool:
        """Whether the evaluation ends after this step: every env's quota met (with
        ``env_quota``), else ``max_trajectories`` reached."""
        if self.env_quota is not None:
            if (self.taken < self.env_quota).any():
                return False
            logger.log(f"Evaluation completed its {int(self.env_quota.sum())} trajectories "
                       "(the first ones of each env).")
            return True
        if self.max_trajectories is None or len(completed) < self.max_trajectories:
            return False
        logger.log(f"Evaluation reached max num trajectories ({self.max_trajectories}).")
        return True

    def _acting_agent(self) -> BaseAgent:
        if self.agent is None:
            raise TypeError(f"{type(self).__name__} has no agent to act with; collectors "
                            "whose actions come from elsewhere override _step_envs.")
        return self.agent


def agent_step_mode(agent: BaseAgent) -> AbstractContextManager:
    """The autograd mode collectors step ``agent`` in: ``torch.inference_mode()``
    where ``agent.step_inference_mode`` (its step outputs are only copied into
    buffers), else ``torch.no_grad()``."""
    return torch.inference_mode() if agent.step_inference_mode else torch.no_grad()


def step_with_agent(agent: BaseAgent, stepper: EnvStepper, t: int) -> None:
    """One step of ``stepper``'s envs with actions ``agent`` picks from its inputs.

    The agent's outputs go to the stepper as they are (it copies them, through
    numpy views of CPU tensors). The agent's state is reset for envs whose
    episode ended (``agent.reset_one``). Collectors call it under
    :func:`agent_step_mode`.
    """
    action, agent_info = agent.step(*stepper.inputs_pyt)
    done = stepper.step(t, action, agent_info)
    if np.count_nonzero(done):
        for b in done.nonzero()[0]:
            agent.reset_one(idx=b)
