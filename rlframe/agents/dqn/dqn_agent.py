"""Q-learning agent: an online and a target Q-model, epsilon-greedy actions."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Sequence

import torch

from rlframe.agents.base import AgentStep, BaseAgent, check_output_size, step_without_grad
from rlframe.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlframe.distributions.epsilon_greedy import EpsilonGreedy
from rlframe.models.dqn.mlp_models import DqnMlpModel
from rlframe.models.utils import strip_ddp_state_dict, update_state_dict
from rlframe.utils.checks import check_bool
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInfo: TypeAlias = NamedArrayTuple
else:
    AgentInfo = namedarraytuple("AgentInfo", ["q"])
    """``q``: [*lead, A] Q-values of the observation the action was chosen for."""


def check_discrete_actions(agent: BaseAgent, env_spaces: EnvSpaces) -> None:
    """Raise TypeError unless ``env_spaces.action`` is discrete (has ``n``, no shape)."""
    action_space = env_spaces.action
    n = getattr(action_space, "n", None)
    if n is None or tuple(getattr(action_space, "shape", ())) != ():
        raise TypeError(f"{type(agent).__name__} needs a discrete action space "
                        f"(gymnasium Discrete / IntBox with n actions), got "
                        f"env_spaces.action={action_space!r}. DQN-family agents pick one of n "
                        "actions; for continuous actions use an actor-critic agent and "
                        "algorithm instead.")


class DqnAgent(EpsilonGreedyAgentMixin, BaseAgent):
    """Agent for DQN: ``model(observation, prev_action, prev_reward)`` -> q [*lead, A].

    ``prev_action`` reaches the model one-hot encoded. The target network
    (``target_model``) has the same architecture and is updated only through
    :meth:`update_target`. Defaults to :class:`DqnMlpModel` (vector
    observations), built with ``observation_shape`` and ``action_size``.

    Args:
        ModelCls: Q-model class.
        model_kwargs: extra model constructor arguments.
        initial_model_state_dict: parameters to start from: this agent's own
            :meth:`state_dict` format ``{"model": ..., "target": ...}`` (target
            optional; the model's are used for both networks if absent), or a
            plain model state dict.
        eps_init, eps_final, eps_final_min, eps_itr_min, eps_itr_max, eps_eval:
            the epsilon schedule, see :class:`EpsilonGreedyAgentMixin`.
        q_when_exploring: run the model also at steps where every env explores.
            By default :meth:`step` draws the exploration first and skips the
            model when no env acts greedily (most steps while epsilon is near 1),
            recording NaN Q-values in ``agent_info`` for those steps. The actions
            are the same either way.
    """

    distribution: EpsilonGreedy

    def __init__(self, ModelCls: type | None = DqnMlpModel, model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, eps_init: float = 1,
                 eps_final: float = 0.01, eps_final_min: float | None = None,
                 eps_itr_min: int = 50, eps_itr_max: int = 1000, eps_eval: float = 0.001,
                 q_when_exploring: bool = False):
        super().__init__(eps_init=eps_init, eps_final=eps_final, eps_final_min=eps_final_min,
                         eps_itr_min=eps_itr_min, eps_itr_max=eps_itr_max, eps_eval=eps_eval,
                         ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.q_when_exploring = check_bool("q_when_exploring", q_when_exploring)
        self.target_model: torch.nn.Module | None = None

    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        super().check_env_spaces(env_spaces)
        check_discrete_actions(self, env_spaces)

    def check_model_outputs(self, outputs: object, env_spaces: EnvSpaces) -> None:
        """The model must return Q-values ``[1, A]`` (or ``[1, A, n_atoms]``
        probabilities) for one observation, first of its outputs if several."""
        q = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        check_output_size(self, q, env_spaces.action.n, "Q-values",
                          "q [*lead, A] (or [*lead, A, n_atoms], then the RNN state if any)")

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.n)

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        """Build the model, the target model and the epsilon-greedy distribution."""
        initial = self.initial_model_state_dict
        self.initial_model_state_dict = None  # Loaded below, in this agent's own format.
        try:
            super().initialize(env_spaces, share_memory, global_B=global_B,
                               env_ranks=env_ranks)
        finally:
            self.initial_model_state_dict = initial
        self.target_model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        self.target_model.load_state_dict(self.model.state_dict())
        if initial is not None:
            self.check_initial_state(self._split_state_dict(initial)[0])
            self.load_state_dict(initial)
        self.distribution = EpsilonGreedy(dim=env_spaces.action.n)

    def to_device(self, cuda_idx: int | None = None) -> None:
        super().to_device(cuda_idx)
        if self.target_model is not None:
            self.target_model.to(self.device)

    def _model_inputs(self, observation: TensorTree, prev_action: torch.Tensor,
                      prev_reward: torch.Tensor) -> tuple:
        return self.to_model_device(
            (observation, self.distribution.to_onehot(prev_action), prev_reward))

    def __call__(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor) -> torch.Tensor:
        """Q-values [*lead, A] of the online model, with grad: on the CPU, or on the
        model's device for inputs already there (replay batches on a GPU)."""
        q = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        return self.to_device_of(q, observation)

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """Epsilon-greedy actions [*lead] (int64) with ``AgentInfo(q)``, on CPU
        (q NaN where the model was skipped, see ``q_when_exploring``)."""
        action, q = self._act(observation, prev_action, prev_reward)
        return AgentStep(action=action, agent_info=AgentInfo(q=q))

    def _act(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action [*lead], model output on the CPU)``; the exploration is drawn
        first, and the output is :meth:`_skipped_output` when no env acts greedily."""
        lead_shape = prev_action.shape
        exploration = self.distribution.draw_exploration(lead_shape)
        if (exploration is not None and not self.q_when_exploring
                and bool(exploration[0].all())):
            return exploration[1].to(self.distribution.dtype), self._skipped_output(lead_shape)
        out = self.to_cpu(self.model(*self._model_inputs(observation, prev_action, prev_reward)))
        return self.distribution.select(out, exploration), out

    def _skipped_output(self, lead_shape: torch.Size) -> torch.Tensor:
        """NaN Q-values [*lead, A] recorded for a step that skipped the model."""
        return torch.full((*lead_shape, self.distribution.dim), float("nan"))

    @torch.no_grad()
    def target(self, observation: TensorTree, prev_action: torch.Tensor,
               prev_reward: torch.Tensor) -> torch.Tensor:
        """Q-values [*lead, A] of the target model (no grad), where ``__call__`` puts them."""
        q = self.target_model(*self._model_inputs(observation, prev_action, prev_reward))
        return self.to_device_of(q, observation)

    def update_target(self, tau: float = 1) -> None:
        """Copy the model into the target (``tau=1``) or blend it in (Polyak, ``0 < tau < 1``)."""
        update_state_dict(self.target_model, self.model.state_dict(), tau)

    def state_dict(self) -> dict:
        """``{"model": ..., "target": ...}`` (without DistributedDataParallel prefixes)."""
        return dict(model=strip_ddp_state_dict(self.model.state_dict()),
                    target=self.target_model.state_dict())

    @staticmethod
    def _split_state_dict(state_dict: Mapping) -> tuple[Mapping, Mapping]:
        """``(online model's, target model's)`` state dicts of :meth:`state_dict` output,
        or twice a plain model state dict."""
        if isinstance(state_dict.get("model"), Mapping):
            model_state = state_dict["model"]
            return model_state, state_dict.get("target") or model_state
        return state_dict, state_dict

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Load :meth:`state_dict` output; a plain model state dict sets both networks."""
        model_state, target_state = self._split_state_dict(state_dict)
        target = self.model.module if self._ddp else self.model
        target.load_state_dict(strip_ddp_state_dict(model_state))
        self.target_model.load_state_dict(strip_ddp_state_dict(target_state))
