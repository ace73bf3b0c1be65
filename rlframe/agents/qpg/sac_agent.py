"""SAC agent: a tanh-squashed Gaussian policy and twin critics with target copies."""
from __future__ import annotations

import copy
import math
from collections import namedtuple
from collections.abc import Mapping
from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from rlframe.agents.base import AgentStep, BaseAgent, step_without_grad, wrap_ddp
from rlframe.agents.qpg.base import (LearningStartMixin, TargetPairs, chain_parameters,
                                     check_continuous_action_space, unwrap,
                                     without_weight_grads)
from rlframe.distributions.gaussian import DistInfoStd, Gaussian
from rlframe.models.qpg.mlp import PiMlpModel, QofMuMlpModel
from rlframe.models.utils import set_training, strip_ddp_state_dict
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

MIN_LOG_STD = -20
MAX_LOG_STD = 2

if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInfo: TypeAlias = NamedArrayTuple
else:
    AgentInfo = namedarraytuple("AgentInfo", ["dist_info"])
    """``dist_info``: ``DistInfoStd(mean, log_std)`` [*lead, A] of the policy, before squashing."""
Models = namedtuple("Models", ["pi", "q1", "q2"])
"""The trained networks of a :class:`SacAgent`."""


class SacAgent(LearningStartMixin, BaseAgent):
    """Agent for SAC (Haarnoja et al., 2018): ``action = squash * tanh(u)``, ``u ~ N(mu, std)``.

    Models (built with ``observation_shape`` and ``action_size``):

    * ``model`` (pi): ``(observation, prev_action, prev_reward)`` -> ``(mu, log_std)``;
    * ``q1_model``, ``q2_model``: ``(observation, prev_action, prev_reward, action)`` -> q;
    * ``target_q1_model``, ``target_q2_model``: copies updated by :meth:`update_target`.

    The squash scale is ``action_squash`` times the env's action bound (see
    :mod:`rlframe.agents.qpg.base`), so with the default of 1 actions span the
    env's action range. The learned std is bounded to ``[e^-20, e^2]``.

    Sampling uses a fixed pre-squash std ``pretrain_std`` until the iteration
    given by :meth:`give_min_itr_learn`, then the policy's own std; evaluation
    is deterministic (``squash * tanh(mu)``). Training methods (:meth:`pi`,
    :meth:`q`, :meth:`target_q`) return tensors on the agent's device.

    Args:
        ModelCls: policy class.
        QModelCls: critic class (used for both critics).
        model_kwargs: policy arguments (default ``hidden_sizes=[256, 256]``).
        q_model_kwargs: critic arguments (default ``hidden_sizes=[256, 256]``).
        v_model_kwargs: accepted for rlpyt compatibility; unused (no value network).
        initial_model_state_dict: a full :meth:`state_dict` of this agent to start
            from (a plain policy state dict also works).
        action_squash: squash scale, as a fraction of the env's action bound.
        pretrain_std: pre-squash std of the actions sampled before learning starts.
    """

    distribution: Gaussian

    def __init__(self, ModelCls: type = PiMlpModel, QModelCls: type = QofMuMlpModel,
                 model_kwargs: dict | None = None, q_model_kwargs: dict | None = None,
                 v_model_kwargs: dict | None = None, initial_model_state_dict: dict | None = None,
                 action_squash: float = 1., pretrain_std: float = 0.75):
        if model_kwargs is None:
            model_kwargs = dict(hidden_sizes=[256, 256])
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.QModelCls = QModelCls
        self.q_model_kwargs = (dict(hidden_sizes=[256, 256]) if q_model_kwargs is None
                               else dict(q_model_kwargs))
        self.v_model_kwargs = (dict(hidden_sizes=[256, 256]) if v_model_kwargs is None
                               else dict(v_model_kwargs))
        if not action_squash > 0:
            raise ValueError(f"action_squash must be positive (a fraction of the env's action "
                             f"bound), got {action_squash}.")
        if not pretrain_std >= 0:
            raise ValueError(f"pretrain_std must be >= 0, got {pretrain_std}.")
        self.action_squash = action_squash
        self.pretrain_std = pretrain_std
        self._init_learning_start()
        self.action_bound: float = 1.
        self.q1_model: torch.nn.Module | None = None
        self.q2_model: torch.nn.Module | None = None
        self.target_q1_model: torch.nn.Module | None = None
        self.target_q2_model: torch.nn.Module | None = None
        self._pi_distribution: Gaussian | None = None
        self._target_pairs: TargetPairs | None = None

    # ------------------------------------------------------------------ setup
    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        super().check_env_spaces(env_spaces)
        check_continuous_action_space(self, env_spaces)

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.shape[0])

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        """Build the policy, both critics, their targets and the squashed Gaussian."""
        self.action_bound = check_continuous_action_space(self, env_spaces)
        initial = self.initial_model_state_dict
        self.initial_model_state_dict = None  # Loaded below, in this agent's own format.
        try:
            super().initialize(env_spaces, share_memory)
        finally:
            self.initial_model_state_dict = initial
        q_kwargs = dict(**self.make_env_to_model_kwargs(env_spaces), **self.q_model_kwargs)
        self.q1_model = self.QModelCls(**q_kwargs)
        self.q2_model = self.QModelCls(**q_kwargs)
        self.target_q1_model = copy.deepcopy(self.q1_model)
        self.target_q2_model = copy.deepcopy(self.q2_model)
        self._target_pairs = None
        if initial is not None:
            self.load_state_dict(initial)
        dist_kwargs = dict(dim=env_spaces.action.shape[0],
                           squash=self.action_squash * self.action_bound,
                           min_std=math.exp(MIN_LOG_STD), max_std=math.exp(MAX_LOG_STD))
        self.distribution = Gaussian(**dist_kwargs)
        # Training always uses the learned std, whatever mode the sampler left set.
        self._pi_distribution = Gaussian(**dist_kwargs)

    @property
    def models(self) -> Models:
        """``Models(pi, q1, q2)``: the trained networks."""
        return Models(pi=self.model, q1=self.q1_model, q2=self.q2_model)

    def _targets(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(self.target_q1_model, self.q1_model), (self.target_q2_model, self.q2_model)]

    def to_device(self, cuda_idx: int | None = None) -> None:
        if cuda_idx is None:
            return
        super().to_device(cuda_idx)
        for model in (self.q1_model, self.q2_model, self.target_q1_model,
                      self.target_q2_model):
            model.to(self.device)
        self._target_pairs = None

    def data_parallel(self) -> int | None:
        """Wrap the policy (base class) and both critics in DistributedDataParallel."""
        device_id = super().data_parallel()
        self.q1_model = wrap_ddp(self.q1_model, self.device)
        self.q2_model = wrap_ddp(self.q2_model, self.device)
        return device_id

    # ------------------------------------------------------------- sampling
    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """Squashed actions [*lead, A] and ``AgentInfo(dist_info)``, on CPU."""
        model_inputs = self.to_model_device((observation, prev_action, prev_reward))
        mean, log_std = self.model(*model_inputs)
        dist_info = DistInfoStd(mean=mean, log_std=log_std)
        action = self.distribution.sample(dist_info)
        action, dist_info = self.to_cpu((action, dist_info))
        return AgentStep(action=action, agent_info=AgentInfo(dist_info=dist_info))

    # ------------------------------------------------------------- training
    def pi(self, observation: TensorTree, prev_action: torch.Tensor,
           prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, DistInfoStd]:
        """Reparameterised policy sample, with grad.

        Returns:
            ``(action [*lead, A], log_pi [*lead], dist_info)``: the squashed
            action, its log-density (tanh correction included) and the
            pre-squash ``DistInfoStd(mean, log_std)``.
        """
        model_inputs = self.to_model_device((observation, prev_action, prev_reward))
        mean, log_std = self.model(*model_inputs)
        dist_info = DistInfoStd(mean=mean, log_std=log_std)
        action, log_pi = self._pi_distribution.sample_loglikelihood(dist_info)
        return action, log_pi, dist_info

    def q(self, observation: TensorTree, prev_action: torch.Tensor, prev_reward: torch.Tensor,
          action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q1, q2)``, each [*lead], of ``action`` (with grad)."""
        inputs = self.to_model_device((observation, prev_action, prev_reward, action))
        return self.q1_model(*inputs), self.q2_model(*inputs)

    def q_for_pi(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, action: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q1, q2)``, each [*lead], of the policy's ``action``, for the policy loss.

        Gradients reach ``action`` (and through it the policy) but not the
        critics' weights, which the policy step does not use.
        """
        inputs = self.to_model_device((observation, prev_action, prev_reward, action))
        with without_weight_grads(self.q1_model, self.q2_model) as (q1_model, q2_model):
            return q1_model(*inputs), q2_model(*inputs)

    @torch.no_grad()
    def target_q(self, observation: TensorTree, prev_action: torch.Tensor,
                 prev_reward: torch.Tensor, action: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Target critics' ``(q1, q2)`` of ``action`` (no grad)."""
        inputs = self.to_model_device((observation, prev_action, prev_reward, action))
        return self.target_q1_model(*inputs), self.target_q2_model(*inputs)

    def update_target(self, tau: float = 1) -> None:
        """Copy (``tau=1``) or Polyak-blend both critics into their targets."""
        if self._target_pairs is None:
            self._target_pairs = TargetPairs(self._targets())
        self._target_pairs.update(tau)

    def pi_parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.model.parameters()

    def q1_parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.q1_model.parameters()

    def q2_parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.q2_model.parameters()

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Every trained parameter: policy, then both critics."""
        return chain_parameters(*self.models)

    # ---------------------------------------------------------------- modes
    def train_mode(self, itr: int) -> None:
        super().train_mode(itr)
        set_training(True, self.q1_model, self.q2_model)

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        set_training(False, self.q1_model, self.q2_model)
        self.distribution.set_std(None if itr >= self.min_itr_learn else self.pretrain_std)

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        set_training(False, self.q1_model, self.q2_model)
        self.distribution.set_std(0.)

    # ----------------------------------------------------------- state dict
    _STATE_KEYS = ("model", "q1_model", "q2_model", "target_q1_model", "target_q2_model")

    def state_dict(self) -> dict:
        """``{"model", "q1_model", "q2_model", "target_q1_model", "target_q2_model"}``."""
        return {key: strip_ddp_state_dict(getattr(self, key).state_dict())
                for key in self._STATE_KEYS}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Load :meth:`state_dict` output; a plain policy state dict sets the policy only."""
        if not isinstance(state_dict.get("model"), Mapping):
            state_dict = dict(model=state_dict)
        unknown = set(state_dict) - set(self._STATE_KEYS)
        if unknown:
            raise KeyError(f"SacAgent.load_state_dict: unknown keys {sorted(unknown)}; "
                           f"expected {list(self._STATE_KEYS)}.")
        for key, value in state_dict.items():
            unwrap(getattr(self, key)).load_state_dict(strip_ddp_state_dict(value))
