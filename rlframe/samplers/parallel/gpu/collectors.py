"""Collectors of GPU-style samplers: workers step envs, the master picks actions.

A worker and the master meet through a shared step buffer (observation,
action, reward, done, agent_info of the worker's envs) and two semaphores per
worker: the worker releases ``obs_ready`` once observations are written and
waits on ``act_ready`` for the master's actions.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collectors import BaseEvalCollector, DecorrelatingStartCollector
from rlframe.samplers.parallel.worker import wait_for
from rlframe.utils.buffer import buffer_from_example

if TYPE_CHECKING:
    from rlframe.samplers.collections import TrajInfo
    from rlframe.samplers.parallel.gpu.sampler import StepBuffer
    from rlframe.utils.collections import AttrDict


class GpuCollectorMixin:
    """Shares the env state with the master through the step buffer."""

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, list[TrajInfo]]:
        agent_inputs, traj_infos = super().start_envs(max_decorrelation_steps)
        step_np = self.step_buffer_np
        step_np.observation[:] = agent_inputs.observation
        step_np.action[:] = agent_inputs.prev_action
        step_np.reward[:] = agent_inputs.prev_reward
        step_np.done[:] = False
        return agent_inputs, traj_infos

    def _wait_actions(self) -> None:
        wait_for(self.sync.act_ready[self.rank], self.sync.master_pid)

    def _obs_ready(self) -> None:
        self.sync.obs_ready[self.rank].release()


class GpuResetCollector(GpuCollectorMixin, DecorrelatingStartCollector):
    """Resets envs mid-batch (``mid_batch_reset=True``); actions come from the master."""

    step_buffer_np: StepBuffer  # Written here, read by the master, which acts.
    sync: AttrDict
    mid_batch_reset = True

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list[TrajInfo],
                      itr: int) -> tuple[AgentInputs, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        step_np = self.step_buffer_np
        completed_infos = []
        agent_buf.prev_action[0] = step_np.action
        env_buf.prev_reward[0] = step_np.reward
        self._obs_ready()
        for t in range(self.batch_T):
            env_buf.observation[t] = step_np.observation
            self._wait_actions()
            for b, env in enumerate(self.envs):
                o, r, d, env_info = env.step(step_np.action[b])
                traj_infos[b].step(step_np.observation[b], step_np.action[b], r, d,
                                   step_np.agent_info[b], env_info)
                if getattr(env_info, "traj_done", d):
                    completed_infos.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    o = env.reset()
                step_np.observation[b] = o
                step_np.reward[b] = r
                step_np.done[b] = d
                if env_info:
                    env_buf.env_info[t, b] = env_info
            agent_buf.action[t] = step_np.action
            env_buf.reward[t] = step_np.reward
            env_buf.done[t] = step_np.done
            if step_np.agent_info:
                agent_buf.agent_info[t] = step_np.agent_info
            self._obs_ready()
        return agent_inputs, traj_infos, completed_infos


class GpuWaitResetCollector(GpuCollectorMixin, DecorrelatingStartCollector):
    """Holds finished envs idle until the batch ends (``mid_batch_reset=False``)."""

    step_buffer_np: StepBuffer
    sync: AttrDict
    mid_batch_reset = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        B = len(self.envs)
        self.need_reset = np.zeros(B, dtype=bool)
        self.done = np.zeros(B, dtype=bool)
        self.temp_observation = buffer_from_example(self.step_buffer_np.observation[0], B)

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list[TrajInfo],
                      itr: int) -> tuple[AgentInputs, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        step_np = self.step_buffer_np
        completed_infos = []
        self._reset_done_envs()
        agent_buf.prev_action[0] = step_np.action
        env_buf.prev_reward[0] = step_np.reward
        self._obs_ready()
        for t in range(self.batch_T):
            env_buf.observation[t] = step_np.observation
            self._wait_actions()
            for b, env in enumerate(self.envs):
                if self.done[b]:
                    step_np.action[b] = 0  # Record blank.
                    step_np.reward[b] = 0
                    if step_np.agent_info:
                        step_np.agent_info[b] = 0
                    continue
                o, r, d, env_info = env.step(step_np.action[b])
                traj_infos[b].step(step_np.observation[b], step_np.action[b], r, d,
                                   step_np.agent_info[b], env_info)
                if getattr(env_info, "traj_done", d):
                    completed_infos.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    self.need_reset[b] = True
                if d:
                    self.temp_observation[b] = o
                    o = 0
                step_np.observation[b] = o
                step_np.reward[b] = r
                step_np.done[b] = d
                self.done[b] = d
                if env_info:
                    env_buf.env_info[t, b] = env_info
            agent_buf.action[t] = step_np.action
            env_buf.reward[t] = step_np.reward
            env_buf.done[t] = self.done
            if step_np.agent_info:
                agent_buf.agent_info[t] = step_np.agent_info
            self._obs_ready()
        return agent_inputs, traj_infos, completed_infos

    def _reset_done_envs(self) -> None:
        """Restart envs that finished in the last batch.

        Runs at the start of the next batch, not between batches: until then the
        master may still read the step buffer for the last batch's bootstrap value.
        """
        step_np = self.step_buffer_np
        for b in np.where(self.done)[0]:
            if self.need_reset[b]:
                step_np.observation[b] = self.envs[b].reset()
            else:
                step_np.observation[b] = self.temp_observation[b]
            step_np.action[b] = self.envs[b].action_space.null_value()
            step_np.reward[b] = 0
            # step_np.done[b] stays True: the master resets the agent's state for b.
        self.need_reset[:] = False
        self.done[:] = False


class GpuEvalCollector(BaseEvalCollector):
    """Evaluation in a worker with actions from the master (eval step buffer).

    Puts completed TrajInfos on ``traj_infos_queue`` and a final ``None``.
    """

    step_buffer_np: StepBuffer
    sync: AttrDict

    def collect_evaluation(self, itr: int) -> None:
        step_np = self.step_buffer_np
        traj_infos = [self.TrajInfoCls(**self.traj_info_kwargs) for _ in range(len(self.envs))]
        for b, env in enumerate(self.envs):
            step_np.observation[b] = env.reset()
            step_np.action[b] = env.action_space.null_value()
        step_np.reward[:] = 0
        step_np.done[:] = False
        obs_ready = self.sync.eval_obs_ready[self.rank]
        act_ready = self.sync.eval_act_ready[self.rank]
        obs_ready.release()
        for t in range(self.max_T):
            wait_for(act_ready, self.sync.master_pid)
            if self.sync.stop_eval.value:
                break
            for b, env in enumerate(self.envs):
                o, r, d, env_info = env.step(step_np.action[b])
                traj_infos[b].step(step_np.observation[b], step_np.action[b], r, d,
                                   step_np.agent_info[b], env_info)
                if getattr(env_info, "traj_done", d):
                    self.traj_infos_queue.put(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    o = env.reset()
                if d:
                    step_np.action[b] = 0
                    r = 0
                step_np.observation[b] = o
                step_np.reward[b] = r
                step_np.done[b] = d
            if t < self.max_T - 1:
                obs_ready.release()
        self.traj_infos_queue.put(None)  # End sentinel.
