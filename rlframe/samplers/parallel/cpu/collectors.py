"""Collectors in which the agent acts in the same process as the envs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.samplers.collectors import (BaseCollector, BaseEvalCollector, agent_step_mode,
                                         step_with_agent)

if TYPE_CHECKING:
    from rlframe.agents.base import AgentInputs, BaseAgent
    from rlframe.samplers.collections import TrajInfo
    from rlframe.samplers.stepping import TrajTracker
    from rlframe.utils.collections import AttrDict


class CpuResetCollector(BaseCollector):
    """Resets an env as soon as its trajectory ends, mid-batch (``mid_batch_reset=True``).

    The batch then holds the start of the next episode after a ``done``.
    """

    agent: BaseAgent  # These collectors act themselves.
    mid_batch_reset = True

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: TrajTracker,
                      itr: int) -> tuple[AgentInputs, TrajTracker, list[TrajInfo]]:
        stepper, agent = self.stepper, self.agent
        stepper.begin_batch()
        agent.sample_mode(itr)
        agent_buf = self.samples_np.agent
        with agent_step_mode(agent):
            for t in range(self.batch_T):
                step_with_agent(agent, stepper, t)
            if "bootstrap_value" in agent_buf:
                # Value of the observation after the last step (for returns/GAE).
                agent_buf.bootstrap_value[:] = agent.value(*stepper.inputs_pyt)
        return stepper.inputs, stepper.tracker, stepper.pop_completed()


class CpuWaitResetCollector(CpuResetCollector):
    """Holds a finished env idle until the batch ends (``mid_batch_reset=False``).

    After ``done`` an env records zeros (``done`` stays True) for the rest of the
    batch; it is restarted in :meth:`reset_if_needed` between batches. Each batch
    column is then at most one episode tail, which recurrent training and
    algorithms without mid-batch resets rely on.
    """

    mid_batch_reset = False

    def reset_if_needed(self, agent_inputs: AgentInputs) -> None:
        for b in self.stepper.release_held():
            self.agent.reset_one(idx=b)


class CpuEvalCollector(BaseEvalCollector):
    """Evaluation in a worker: completed TrajInfos go on ``traj_infos_queue``.

    Stops after ``max_T`` steps or when ``sync.stop_eval`` is set, then puts a
    ``None`` sentinel.
    """

    agent: BaseAgent
    sync: AttrDict

    def _evaluation_done(self, completed: list[TrajInfo]) -> bool:
        return bool(self.sync.stop_eval.value)  # The master has enough trajectories.
