"""Single-step samples with n-step returns and target inputs."""
from __future__ import annotations

from typing import Any

import numpy as np

from rlframe.agents.base import AgentInputs
from rlframe.replays.n_step import BaseNStepReturnBuffer
from rlframe.utils.buffer import torchify_buffer
from rlframe.utils.collections import namedarraytuple

SamplesFromReplay = namedarraytuple("SamplesFromReplay",
                                    ["agent_inputs", "action", "return_", "done", "done_n",
                                     "target_inputs"])


class NStepReturnBuffer(BaseNStepReturnBuffer):
    """Assembles training batches of single steps from the ``[T, B]`` storage.

    A batch drawn at rows ``T_idxs`` of envs ``B_idxs`` (each ``[batch_B]``) is a
    :data:`SamplesFromReplay`:

    * ``agent_inputs``: ``AgentInputs(observation[t], action[t-1], reward[t-1])``,
      the previous action and reward zeroed where ``done[t-1]`` (a new episode);
    * ``action``: ``action[t]``;
    * ``return_``, ``done``, ``done_n``: ``[batch_B]``, see :class:`BaseNStepReturnBuffer`;
    * ``target_inputs``: ``AgentInputs`` at ``t + n_step_return``, for the bootstrap.

    Every field has leading dim ``[batch_B]`` and is a torch tensor.
    """

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Batch at rows ``T_idxs`` [batch_B] of envs ``B_idxs`` [batch_B] (torch)."""
        s = self.samples
        prev_T_idxs = (T_idxs - 1) % self.T
        target_T_idxs = (T_idxs + self.n_step_return) % self.T
        batch = SamplesFromReplay(
            agent_inputs=AgentInputs(
                observation=self.extract_observation(T_idxs, B_idxs),
                prev_action=s.action[prev_T_idxs, B_idxs],
                prev_reward=s.reward[prev_T_idxs, B_idxs],
            ),
            action=s.action[T_idxs, B_idxs],
            return_=self.samples_return_[T_idxs, B_idxs],
            done=s.done[T_idxs, B_idxs],
            done_n=self.samples_done_n[T_idxs, B_idxs],
            target_inputs=AgentInputs(
                observation=self.extract_observation(target_T_idxs, B_idxs),
                prev_action=s.action[(target_T_idxs - 1) % self.T, B_idxs],
                prev_reward=s.reward[(target_T_idxs - 1) % self.T, B_idxs],
            ),
        )
        self.zero_prev_after_done(batch.agent_inputs, prev_T_idxs, B_idxs)
        return torchify_buffer(batch)

    def zero_prev_after_done(self, agent_inputs: Any, prev_T_idxs: np.ndarray,
                             B_idxs: np.ndarray) -> None:
        """Zero ``prev_action``/``prev_reward`` in place where ``done`` at ``prev_T_idxs``."""
        new_episode = np.asarray(self.samples.done[prev_T_idxs, B_idxs], dtype=bool)
        if new_episode.any():
            agent_inputs.prev_action[new_episode] = 0
            agent_inputs.prev_reward[new_episode] = 0

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Observations at rows ``T_idxs`` of envs ``B_idxs`` (index arrays of one shape)."""
        return self.samples.observation[T_idxs, B_idxs]
