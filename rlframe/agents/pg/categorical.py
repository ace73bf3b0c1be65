"""Policy-gradient agents for discrete actions (Categorical policy + value)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from rlframe.agents.base import (AgentStep, AlternatingRecurrentAgentMixin, BaseAgent,
                                 RecurrentAgentMixin, check_output_count, check_output_size,
                                 check_probabilities, check_value_output,
                                 rnn_state_batch_first, step_without_grad,
                                 zeros_like_rnn_state)
from rlframe.agents.pg.base import AgentInfo, AgentInfoRnn
from rlframe.distributions.categorical import Categorical, DistInfo
from rlframe.models.pg.mlp_models import CategoricalPgLstmModel, CategoricalPgMlpModel
from rlframe.utils.checks import check_bool

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree


def check_discrete_action_space(agent: BaseAgent, env_spaces: EnvSpaces) -> None:
    """Raise TypeError unless the action space is discrete (has ``n``, no shape)."""
    action_space = env_spaces.action
    n = getattr(action_space, "n", None)
    if n is None or tuple(getattr(action_space, "shape", ())) != ():
        raise TypeError(f"{type(agent).__name__} needs a discrete action space "
                        f"(gymnasium Discrete / IntBox with n actions); got "
                        f"env_spaces.action={action_space!r}. For continuous actions use "
                        "GaussianPgAgent or MujocoFfAgent.")


class CategoricalPgAgent(BaseAgent):
    """Discrete-action agent for A2C/PPO.

    The model's ``forward(observation, prev_action, prev_reward)`` gets
    ``prev_action`` one-hot encoded and returns ``(pi, value)``:
    pi [*lead, A] probabilities, value [*lead].
    Defaults to :class:`CategoricalPgMlpModel` (vector observations).
    ``deterministic_eval=True`` evaluates with the most probable action; by default
    evaluation samples, as training does and as rlpyt evaluates.
    """

    distribution: Categorical

    def __init__(self, ModelCls: type | None = CategoricalPgMlpModel,
                 model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None,
                 deterministic_eval: bool = False):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.deterministic_eval = check_bool("deterministic_eval", deterministic_eval)

    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        super().check_env_spaces(env_spaces)
        check_discrete_action_space(self, env_spaces)

    def check_model_outputs(self, outputs: object, env_spaces: EnvSpaces) -> None:
        """The model must return ``(pi [1, A], value [1])`` for one observation, ``pi``
        probabilities (softmax applied)."""
        expected = "(pi [*lead, A] probabilities, value [*lead])"
        pi = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        check_output_size(self, pi, env_spaces.action.n, "action probabilities", expected)
        pi, value = check_output_count(self, outputs, 2, expected)[:2]
        check_probabilities(self, pi, "pi", expected)
        check_value_output(self, value, expected)

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.n)

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        super().initialize(env_spaces, share_memory)
        self.distribution = Categorical(dim=env_spaces.action.n)

    def _model_inputs(self, observation: TensorTree, prev_action: torch.Tensor,
                      prev_reward: torch.Tensor) -> tuple:
        prev_action = self.distribution.to_onehot(prev_action)
        return self.to_model_device((observation, prev_action, prev_reward))

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor) -> tuple[DistInfo, torch.Tensor]:
        """Returns ``(DistInfo(prob) [*lead, A], value [*lead])`` with grad, on CPU."""
        pi, value = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        return self.to_cpu((DistInfo(prob=pi), value))

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        pi, value = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        dist_info = DistInfo(prob=pi)
        action = self.distribution.sample(dist_info)
        agent_info = AgentInfo(dist_info=dist_info, value=value)
        action, agent_info = self.to_cpu((action, agent_info))
        return AgentStep(action=action, agent_info=agent_info)

    @torch.no_grad()
    def value(self, observation: TensorTree, prev_action: torch.Tensor,
              prev_reward: torch.Tensor) -> torch.Tensor:
        """State value [*lead] for bootstrapping (no grad, CPU)."""
        _pi, value = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        return value.to("cpu")


class RecurrentCategoricalPgAgentBase(CategoricalPgAgent):
    """Recurrent discrete-action agent: the model also takes and returns an RNN state.

    Model: ``forward(observation, prev_action, prev_reward, init_rnn_state)`` ->
    ``(pi, value, next_rnn_state)`` with states [N, B, H].
    """

    def __init__(self, ModelCls: type | None = CategoricalPgLstmModel,
                 model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None,
                 deterministic_eval: bool = False):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict,
                         deterministic_eval=deterministic_eval)

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, init_rnn_state: TensorTree | None
                 ) -> tuple[DistInfo, torch.Tensor, TensorTree]:
        """Training pass over [T, B] sequences from ``init_rnn_state`` [N, B, H]."""
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        init_rnn_state = self.to_model_device(init_rnn_state)
        pi, value, next_rnn_state = self.model(*model_inputs, init_rnn_state)
        dist_info, value = self.to_cpu((DistInfo(prob=pi), value))
        return dist_info, value, next_rnn_state

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        rnn_state = self.to_model_device(self.prev_rnn_state)
        pi, value, rnn_state = self.model(*model_inputs, rnn_state)
        dist_info = DistInfo(prob=pi)
        action = self.distribution.sample(dist_info)
        prev_rnn_state = self.prev_rnn_state
        if prev_rnn_state is None:
            prev_rnn_state = zeros_like_rnn_state(rnn_state)
        agent_info = AgentInfoRnn(dist_info=dist_info, value=value,
                                  prev_rnn_state=rnn_state_batch_first(prev_rnn_state))
        action, agent_info = self.to_cpu((action, agent_info))
        self.advance_rnn_state(rnn_state)
        return AgentStep(action=action, agent_info=agent_info)

    @torch.no_grad()
    def value(self, observation: TensorTree, prev_action: torch.Tensor,
              prev_reward: torch.Tensor) -> torch.Tensor:
        """Bootstrap value [B] from the current RNN state (the state is not advanced)."""
        model_inputs = self._model_inputs(observation, prev_action, prev_reward)
        rnn_state = self.to_model_device(self.prev_rnn_state)
        _pi, value, _rnn_state = self.model(*model_inputs, rnn_state)
        return value.to("cpu")


class RecurrentCategoricalPgAgent(RecurrentAgentMixin, RecurrentCategoricalPgAgentBase):
    """Recurrent discrete-action agent for serial and CPU-parallel sampling."""


class AlternatingRecurrentCategoricalPgAgent(AlternatingRecurrentAgentMixin,
                                             RecurrentCategoricalPgAgentBase):
    """Recurrent discrete-action agent for alternating samplers."""
