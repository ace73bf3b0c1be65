"""Recurrent Q-learning agent for R2D1."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlframe.agents.base import (AgentStep, AlternatingRecurrentAgentMixin,
                                 RecurrentAgentMixin, rnn_state_batch_first,
                                 step_without_grad, zeros_like_rnn_state)
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.models.dqn.mlp_models import R2d1MlpModel
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInfo: TypeAlias = NamedArrayTuple
else:
    AgentInfo = namedarraytuple("AgentInfo", ["q", "prev_rnn_state"])
    """``q``: [*lead, A] Q-values; ``prev_rnn_state``: the state the step started
    from, batch-first ([B, N, H] per field), zeros at episode starts."""


class R2d1AgentBase(DqnAgent):
    """Recurrent DQN agent: ``model(obs, prev_action, prev_reward, init_rnn_state)``
    -> ``(q [*lead, A], next_rnn_state)`` with states [N, B, H] (e.g. LSTM (h, c)).

    Defaults to :class:`R2d1MlpModel` (vector observations). Use
    :class:`R2d1Agent` with serial / CPU samplers and
    :class:`R2d1AlternatingAgent` with alternating samplers.

    Args: as :class:`~rlframe.agents.dqn.dqn_agent.DqnAgent`.
    """

    def __init__(self, ModelCls: type | None = R2d1MlpModel, model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, eps_init: float = 1,
                 eps_final: float = 0.01, eps_final_min: float | None = None,
                 eps_itr_min: int = 50, eps_itr_max: int = 1000, eps_eval: float = 0.001):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict, eps_init=eps_init,
                         eps_final=eps_final, eps_final_min=eps_final_min,
                         eps_itr_min=eps_itr_min, eps_itr_max=eps_itr_max, eps_eval=eps_eval)

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, init_rnn_state: TensorTree | None
                 ) -> tuple[torch.Tensor, TensorTree]:
        """Online Q-values over [T, B] sequences, with grad.

        Returns:
            ``(q [T, B, A], rnn_state after the last step, on the model's device)``; q on
            the CPU, or on the model's device for inputs already there.
        """
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        init_rnn_state = self.to_model_device(init_rnn_state)
        q, rnn_state = self.model(*model_inputs, init_rnn_state)
        return self.to_device_of(q, observation), rnn_state

    @torch.no_grad()
    def target(self, observation: TensorTree, prev_action: torch.Tensor,
               prev_reward: torch.Tensor, init_rnn_state: TensorTree | None
               ) -> tuple[torch.Tensor, TensorTree]:
        """Target-model Q-values over [T, B] sequences (no grad); returns ``(q, rnn_state)``."""
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        init_rnn_state = self.to_model_device(init_rnn_state)
        q, rnn_state = self.target_model(*model_inputs, init_rnn_state)
        return self.to_device_of(q, observation), rnn_state

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """One step from the kept RNN state, which then advances.

        Returns:
            ``AgentStep(action [B], AgentInfo(q [B, A], prev_rnn_state [B, N, H]))`` on CPU.
        """
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        prev_rnn_state = self.to_model_device(self.prev_rnn_state)
        q, rnn_state = self.model(*model_inputs, prev_rnn_state)
        q = self.to_cpu(q)
        action = self.distribution.sample(q)
        if prev_rnn_state is None:
            prev_rnn_state = zeros_like_rnn_state(rnn_state)
        agent_info = AgentInfo(q=q, prev_rnn_state=rnn_state_batch_first(prev_rnn_state))
        self.advance_rnn_state(rnn_state)
        return AgentStep(action=action, agent_info=self.to_cpu(agent_info))


class R2d1Agent(RecurrentAgentMixin, R2d1AgentBase):
    """R2D1 agent for serial and CPU-parallel samplers."""


class R2d1AlternatingAgent(AlternatingRecurrentAgentMixin, R2d1AgentBase):
    """R2D1 agent for alternating samplers (two RNN states, one per env half)."""
