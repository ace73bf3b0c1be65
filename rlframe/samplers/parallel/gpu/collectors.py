"""Collectors of GPU-style samplers: workers step envs, the master picks actions.

A worker and the master meet through a shared step buffer (observation,
action, reward, done, agent_info of the worker's envs) and two semaphores per
worker: the worker releases ``obs_ready`` once observations are written and
waits on ``act_ready`` for the master's actions. The step buffer's
observation, action and reward rows are the stepper's agent inputs, so the
master reads them in place.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collectors import BaseCollector, BaseEvalCollector
from rlframe.samplers.parallel.worker import wait_for

if TYPE_CHECKING:
    from rlframe.samplers.collections import StepBuffer, TrajInfo
    from rlframe.samplers.stepping import TrajTracker
    from rlframe.utils.collections import AttrDict


class GpuResetCollector(BaseCollector):
    """Resets envs mid-batch (``mid_batch_reset=True``); actions come from the master."""

    step_buffer_np: StepBuffer  # Written here, read by the master, which acts.
    sync: AttrDict
    mid_batch_reset = True

    def _input_buffers(self) -> AgentInputs:
        step_np = self.step_buffer_np
        return AgentInputs(step_np.observation, step_np.action, step_np.reward)

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, TrajTracker]:
        agent_inputs, traj_infos = super().start_envs(max_decorrelation_steps)
        self.step_buffer_np.done[:] = False
        return agent_inputs, traj_infos

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: TrajTracker,
                      itr: int) -> tuple[AgentInputs, TrajTracker, list[TrajInfo]]:
        stepper, step_np = self.stepper, self.step_buffer_np
        obs_ready = self.sync.obs_ready[self.rank]
        act_ready, master_pid = self.sync.act_ready[self.rank], self.sync.master_pid
        self._before_batch()
        stepper.begin_batch()
        obs_ready.release()
        for t in range(self.batch_T):
            wait_for(act_ready, master_pid)
            step_np.done[:] = stepper.step(t, step_np.action, step_np.agent_info)
            obs_ready.release()
        return stepper.inputs, stepper.tracker, stepper.pop_completed()

    def _before_batch(self) -> None:
        """Work between the master's last read of the previous batch and this one."""


class GpuWaitResetCollector(GpuResetCollector):
    """Holds finished envs idle until the batch ends (``mid_batch_reset=False``)."""

    mid_batch_reset = False

    def _before_batch(self) -> None:
        # Restart envs that finished in the last batch now, not between batches:
        # until now the master may still read the step buffer for the last
        # batch's bootstrap value. Their step_buffer.done stays True, so the
        # master resets the agent's state for them.
        self.stepper.release_held()


class GpuEvalCollector(BaseEvalCollector):
    """Evaluation in a worker with actions from the master (eval step buffer).

    Puts completed TrajInfos on ``traj_infos_queue`` and a final ``None``.
    """

    step_buffer_np: StepBuffer  # Written here, read by the master, which acts.
    sync: AttrDict

    def _input_buffers(self) -> AgentInputs:
        step_np = self.step_buffer_np
        return AgentInputs(step_np.observation, step_np.action, step_np.reward)

    def _begin_evaluation(self, itr: int) -> None:
        self.step_buffer_np.done[:] = False
        self.sync.eval_obs_ready[self.rank].release()

    def _step_mode(self) -> AbstractContextManager:
        return nullcontext()  # The master acts.

    def _step_envs(self, t: int) -> bool:
        """Wait for the master's actions; a stop it set with them ends the evaluation."""
        wait_for(self.sync.eval_act_ready[self.rank], self.sync.master_pid)
        if self.sync.stop_eval.value:
            return False
        step_np = self.step_buffer_np
        step_np.done[:] = self.stepper.step(t, step_np.action, step_np.agent_info)
        return True

    def _after_step(self, t: int) -> None:
        if t < self.max_T - 1:
            self.sync.eval_obs_ready[self.rank].release()  # Observations for step t + 1.

    def _evaluation_done(self, completed: list[TrajInfo]) -> bool:
        return False  # The master's stop comes with its next actions (see _step_envs).
