"""Distributional (C51) Q-learning agent."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from rlframe.agents.base import AgentStep, check_probabilities, step_without_grad
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.distributions.epsilon_greedy import CategoricalEpsilonGreedy
from rlframe.models.dqn.mlp_models import CatDqnMlpModel
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
    AgentInfo = namedarraytuple("AgentInfo", ["p"])
    """``p``: [*lead, A, n_atoms] return-distribution probabilities."""


class CatDqnAgent(DqnAgent):
    """Agent for categorical DQN: the model returns probabilities [*lead, A, n_atoms].

    Actions are epsilon-greedy in the expected return ``sum_i p_i z_i`` over the
    support ``z = linspace(V_min, V_max, n_atoms)``, which the algorithm sets
    with :meth:`give_V_min_max`. ``n_atoms`` is passed to the model.
    Defaults to :class:`CatDqnMlpModel` (vector observations).

    Args:
        n_atoms: atoms per return distribution.
        ModelCls, model_kwargs, initial_model_state_dict, eps_*, q_when_exploring: see
            :class:`~rlframe.agents.dqn.dqn_agent.DqnAgent`.
    """

    distribution: CategoricalEpsilonGreedy

    def __init__(self, n_atoms: int = 51, ModelCls: type | None = CatDqnMlpModel,
                 model_kwargs: dict | None = None, initial_model_state_dict: dict | None = None,
                 eps_init: float = 1, eps_final: float = 0.01,
                 eps_final_min: float | None = None, eps_itr_min: int = 50,
                 eps_itr_max: int = 1000, eps_eval: float = 0.001,
                 q_when_exploring: bool = False):
        if int(n_atoms) != n_atoms or n_atoms < 2:
            raise ValueError(f"n_atoms must be an integer >= 2, got {n_atoms!r}.")
        model_kwargs = dict() if model_kwargs is None else dict(model_kwargs)
        if model_kwargs.get("n_atoms", n_atoms) != n_atoms:
            raise ValueError(f"model_kwargs n_atoms={model_kwargs['n_atoms']} contradicts "
                             f"the agent's n_atoms={n_atoms}; pass it to the agent only.")
        model_kwargs["n_atoms"] = int(n_atoms)
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict, eps_init=eps_init,
                         eps_final=eps_final, eps_final_min=eps_final_min,
                         eps_itr_min=eps_itr_min, eps_itr_max=eps_itr_max, eps_eval=eps_eval,
                         q_when_exploring=q_when_exploring)
        self.n_atoms = int(n_atoms)
        self.V_min: float | None = None
        self.V_max: float | None = None

    def check_model_outputs(self, outputs: object, env_spaces: EnvSpaces) -> None:
        """The model must return probabilities ``p [1, A, n_atoms]`` (softmax over atoms)."""
        super().check_model_outputs(outputs, env_spaces)
        p = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        check_probabilities(self, p, "p", "p [*lead, A, n_atoms] probabilities over the atoms")

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        # The greedy action is the same for any increasing affine support (the
        # probabilities sum to 1), so this placeholder acts exactly like the
        # algorithm's support, also in sampler workers started before it is set.
        z = torch.linspace(-1, 1, self.n_atoms)
        if self.V_min is not None:
            z = torch.linspace(self.V_min, self.V_max, self.n_atoms)
        self.distribution = CategoricalEpsilonGreedy(z=z, dim=env_spaces.action.n)

    def give_V_min_max(self, V_min: float, V_max: float) -> None:
        """Set the support ``linspace(V_min, V_max, n_atoms)``."""
        if not V_min < V_max:
            raise ValueError(f"V_min must be below V_max, got V_min={V_min}, V_max={V_max}.")
        self.V_min, self.V_max = float(V_min), float(V_max)
        if self.distribution is not None:
            self.distribution.set_z(torch.linspace(self.V_min, self.V_max, self.n_atoms))

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """Epsilon-greedy actions [*lead] (int64) with ``AgentInfo(p)``, on CPU
        (p NaN where the model was skipped, see ``q_when_exploring``)."""
        action, p = self._act(observation, prev_action, prev_reward)
        return AgentStep(action=action, agent_info=AgentInfo(p=p))

    def _skipped_output(self, lead_shape: torch.Size) -> torch.Tensor:
        """NaN probabilities [*lead, A, n_atoms] recorded for a step that skipped the model."""
        return torch.full((*lead_shape, self.distribution.dim, self.n_atoms), float("nan"))
