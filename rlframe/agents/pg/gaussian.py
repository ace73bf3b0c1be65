"""Policy-gradient agents for continuous actions (diagonal Gaussian policy + value)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from rlframe.agents.base import (AgentStep, AlternatingRecurrentAgentMixin, BaseAgent,
                                 RecurrentAgentMixin, check_output_count, check_output_size,
                                 check_value_output,
                                 rnn_state_batch_first, step_without_grad,
                                 zeros_like_rnn_state)
from rlframe.agents.pg.base import AgentInfo, AgentInfoRnn
from rlframe.distributions.gaussian import DistInfoStd, Gaussian
from rlframe.utils.checks import check_bool

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree


def check_box_action_space(agent: BaseAgent, env_spaces: EnvSpaces) -> None:
    """Raise unless the action space is a 1-D float box with finite bounds."""
    space = env_spaces.action
    shape = tuple(getattr(space, "shape", ()) or ())
    dtype = np.dtype(getattr(space, "dtype", np.int64))
    if getattr(space, "n", None) is not None or len(shape) != 1 or dtype.kind != "f":
        raise TypeError(f"{type(agent).__name__} needs a 1-D continuous (Box) action space; "
                        f"got env_spaces.action={space!r}. For discrete actions use "
                        "CategoricalPgAgent.")
    low, high = np.asarray(space.low), np.asarray(space.high)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"{type(agent).__name__} needs finite action bounds; got "
                         f"low={low}, high={high}.")


class GaussianPgAgent(BaseAgent):
    """Continuous-action agent for A2C/PPO.

    Model: ``forward(observation, prev_action, prev_reward)`` ->
    ``(mu [*lead, A], log_std [*lead, A], value [*lead])``.

    Args:
        deterministic_eval: evaluation trajectories take the Gaussian's mean instead
            of a sample (SB3's deterministic evaluation); False samples, as in
            training and as rlpyt evaluates.
        *args, **kwargs: ``ModelCls``, ``model_kwargs``, ``initial_model_state_dict``.
    """

    distribution: Gaussian

    def __init__(self, *args: Any, deterministic_eval: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.deterministic_eval = check_bool("deterministic_eval", deterministic_eval)

    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        super().check_env_spaces(env_spaces)
        check_box_action_space(self, env_spaces)

    def check_model_outputs(self, outputs: object, env_spaces: EnvSpaces) -> None:
        """The model must return ``(mu [1, A], log_std [1, A], value [1])``."""
        expected = "(mu [*lead, A], log_std [*lead, A], value [*lead])"
        mu = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        check_output_size(self, mu, int(np.prod(env_spaces.action.shape)), "action means",
                          expected)
        check_value_output(self, check_output_count(self, outputs, 3, expected)[2], expected)

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        super().initialize(env_spaces, share_memory)
        self.distribution = Gaussian(dim=env_spaces.action.shape[0])

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor) -> tuple[DistInfoStd, torch.Tensor]:
        """Returns ``(DistInfoStd(mean, log_std), value)`` with grad, on CPU."""
        model_inputs = self.to_model_device((observation, prev_action, prev_reward))
        mu, log_std, value = self.model(*model_inputs)
        return self.to_cpu((DistInfoStd(mean=mu, log_std=log_std), value))

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        model_inputs = self.to_model_device((observation, prev_action, prev_reward))
        mu, log_std, value = self.model(*model_inputs)
        dist_info = DistInfoStd(mean=mu, log_std=log_std)
        action = self.distribution.sample(dist_info)
        agent_info = AgentInfo(dist_info=dist_info, value=value)
        action, agent_info = self.to_cpu((action, agent_info))
        return AgentStep(action=action, agent_info=agent_info)

    @torch.no_grad()
    def value(self, observation: TensorTree, prev_action: torch.Tensor,
              prev_reward: torch.Tensor) -> torch.Tensor:
        """State value [*lead] for bootstrapping (no grad, CPU)."""
        model_inputs = self.to_model_device((observation, prev_action, prev_reward))
        _mu, _log_std, value = self.model(*model_inputs)
        return value.to("cpu")


class RecurrentGaussianPgAgentBase(GaussianPgAgent):
    """Recurrent continuous-action agent.

    Model: ``forward(observation, prev_action, prev_reward, init_rnn_state)`` ->
    ``(mu, log_std, value, next_rnn_state)`` with states [N, B, H].
    """

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, init_rnn_state: TensorTree | None
                 ) -> tuple[DistInfoStd, torch.Tensor, TensorTree]:
        """Training pass over [T, B] sequences from ``init_rnn_state`` [N, B, H]."""
        model_inputs = self.to_model_device((observation, prev_action, prev_reward,
                                             init_rnn_state))
        mu, log_std, value, next_rnn_state = self.model(*model_inputs)
        dist_info, value = self.to_cpu((DistInfoStd(mean=mu, log_std=log_std), value))
        return dist_info, value, next_rnn_state

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        model_inputs = self.to_model_device((observation, prev_action, prev_reward,
                                             self.prev_rnn_state))
        mu, log_std, value, rnn_state = self.model(*model_inputs)
        dist_info = DistInfoStd(mean=mu, log_std=log_std)
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
        model_inputs = self.to_model_device((observation, prev_action, prev_reward,
                                             self.prev_rnn_state))
        _mu, _log_std, value, _rnn_state = self.model(*model_inputs)
        return value.to("cpu")


class RecurrentGaussianPgAgent(RecurrentAgentMixin, RecurrentGaussianPgAgentBase):
    """Recurrent continuous-action agent for serial and CPU-parallel sampling."""


class AlternatingRecurrentGaussianPgAgent(AlternatingRecurrentAgentMixin,
                                          RecurrentGaussianPgAgentBase):
    """Recurrent continuous-action agent for alternating samplers."""
