"""Master-side action selection of GPU-style samplers.

Workers only step envs. For every time step the master waits until each
worker's observations are in the step buffer, runs the agent once on the whole
batch (one batched forward pass, on the GPU when the agent is there), writes
the actions back and releases the workers.
"""
from __future__ import annotations


import numpy as np


class ActionServer:
    """Serves actions for all ``batch_B`` envs at once (mixed into GpuSamplerBase)."""

    def serve_actions(self, itr: int) -> None:
        obs_ready, act_ready = self.sync.obs_ready, self.sync.act_ready
        step_np, agent_inputs = self.step_buffer_np, self.agent_inputs
        for _t in range(self.batch_spec.T):
            for sem in obs_ready:
                self.acquire(sem)
            self._reset_done_agent_states(step_np.done)
            action, agent_info = self.agent.step(*agent_inputs)
            step_np.action[:] = action
            if step_np.agent_info:
                step_np.agent_info[:] = agent_info
            for sem in act_ready:
                sem.release()
        for sem in obs_ready:
            self.acquire(sem)  # Observations after the last step.
        if "bootstrap_value" in self.samples_np.agent:
            self.samples_np.agent.bootstrap_value[:] = self.agent.value(*agent_inputs)

    def serve_actions_evaluation(self, itr: int) -> None:
        obs_ready, act_ready = self.sync.eval_obs_ready, self.sync.eval_act_ready
        step_np, agent_inputs = self.eval_step_buffer_np, self.eval_agent_inputs
        self.agent.reset()
        self.agent.eval_mode(itr)
        for t in range(self.eval_max_T):
            for sem in obs_ready:
                self.acquire(sem)
            self._reset_done_agent_states(step_np.done)
            action, agent_info = self.agent.step(*agent_inputs)
            if self.agent.alternating:
                self.agent.toggle_alt()  # One batch, one RNN state slot.
            step_np.action[:] = action
            if step_np.agent_info:
                step_np.agent_info[:] = agent_info
            if t % 20 == 0:
                self.poll_eval_queue()  # May set stop_eval for the workers.
            stop = bool(self.sync.stop_eval.value)
            for sem in act_ready:
                sem.release()
            if stop:
                break

    def _reset_done_agent_states(self, done: np.ndarray) -> None:
        for b in np.flatnonzero(done):
            self.agent.reset_one(idx=b)


class AlternatingActionServer:
    """Serves the two halves of the envs in turn, so that action selection for
    one half overlaps env stepping of the other (mixed into AlternatingSamplerBase).

    Half ``alt`` is the envs of workers ``alt * n/2 ... (alt + 1) * n/2 - 1``.
    Recurrent agents keep one RNN state per half (AlternatingRecurrentAgentMixin).
    """

    overlap = True

    def serve_actions(self, itr: int) -> None:
        obs_ready, act_ready = self.sync.obs_ready, self.sync.act_ready
        step_h, inputs_h = self.step_buffer_halves, self.agent_inputs_halves
        groups = self.worker_groups
        for _t in range(self.batch_spec.T):
            for alt in (0, 1):
                if self.overlap or _t == 0:
                    for w in groups[alt]:
                        self.acquire(obs_ready[w])
                self._reset_done_agent_states(step_h[alt].done)
                action, agent_info = self.agent.step(*inputs_h[alt])
                step_h[alt].action[:] = action
                if step_h[alt].agent_info:
                    step_h[alt].agent_info[:] = agent_info
                for w in groups[alt]:
                    act_ready[w].release()
                if not self.overlap:
                    for w in groups[alt]:
                        self.acquire(obs_ready[w])  # This half stepped before the other.
        if self.overlap:
            for w in range(self.n_worker):
                self.acquire(obs_ready[w])
        if "bootstrap_value" in self.samples_np.agent:
            half = self.batch_spec.B // 2
            for alt in (0, 1):
                value = self.agent.value(*inputs_h[alt])
                self.samples_np.agent.bootstrap_value[:, alt * half:(alt + 1) * half] = value
                self.agent.toggle_alt()  # value() does not advance the RNN state.

    def serve_actions_evaluation(self, itr: int) -> None:
        # Evaluation is not alternated: one batched pass over all eval envs.
        ActionServer.serve_actions_evaluation(self, itr)

    _reset_done_agent_states = ActionServer._reset_done_agent_states


class NoOverlapAlternatingActionServer(AlternatingActionServer):
    """Alternates halves without overlap: one half steps only after the other
    finished, so action selection never runs while envs step (for comparison)."""

    overlap = False


