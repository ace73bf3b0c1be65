"""DDPG agent: a deterministic policy ``mu``, a critic ``q``, and their target copies."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from rlframe.agents.base import AgentStep, BaseAgent, step_without_grad, wrap_ddp
from rlframe.agents.qpg.base import (AgentInfo, LearningStartMixin, TargetPairs, accepts_kwarg,
                                     chain_parameters, check_continuous_action_space, unwrap,
                                     without_weight_grads)
from rlframe.distributions.gaussian import DistInfo, Gaussian
from rlframe.models.qpg.mlp import MuMlpModel, QofMuMlpModel
from rlframe.models.utils import set_training, strip_ddp_state_dict
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree

__all__ = ["AgentInfo", "DdpgAgent"]


class DdpgAgent(LearningStartMixin, BaseAgent):
    """Agent for DDPG: exploration by Gaussian noise around a deterministic action.

    Models (built with ``observation_shape`` and ``action_size``; the policy
    also gets ``output_max`` = the env's action bound when its constructor
    takes it and ``model_kwargs`` does not set it):

    * ``model`` (mu): ``(observation, prev_action, prev_reward)`` -> action [*lead, A];
    * ``q_model``: ``(observation, prev_action, prev_reward, action)`` -> q [*lead];
    * ``target_model``, ``target_q_model``: copies updated by :meth:`update_target`.

    Sampled actions are ``clip(mu + clip(std * N(0, 1), ±noise_clip), ±bound)``.
    Noise parameters are fractions of the env's action bound (see
    :mod:`rlframe.agents.qpg.base`). Training methods (:meth:`q`,
    :meth:`q_at_mu`, :meth:`target_q_at_mu`) return tensors on the agent's device.

    Args:
        ModelCls: policy class.
        QModelCls: critic class.
        model_kwargs: policy arguments (default ``hidden_sizes=[400, 300]``).
        q_model_kwargs: critic arguments (default ``hidden_sizes=[400, 300]``).
        initial_model_state_dict: policy parameters to start from.
        initial_q_model_state_dict: critic parameters to start from.
        action_std: exploration noise std while sampling (0 when evaluating).
        action_noise_clip: clip of the exploration noise (None: no clip).
    """

    distribution: Gaussian

    def __init__(self, ModelCls: type = MuMlpModel, QModelCls: type = QofMuMlpModel,
                 model_kwargs: dict | None = None, q_model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None,
                 initial_q_model_state_dict: dict | None = None, action_std: float = 0.1,
                 action_noise_clip: float | None = None):
        if model_kwargs is None:
            model_kwargs = dict(hidden_sizes=[400, 300])
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self._init_learning_start()
        self.QModelCls = QModelCls
        self.q_model_kwargs = (dict(hidden_sizes=[400, 300]) if q_model_kwargs is None
                               else dict(q_model_kwargs))
        self.initial_q_model_state_dict = initial_q_model_state_dict
        if not action_std >= 0:
            raise ValueError(f"action_std must be >= 0, got {action_std}.")
        if action_noise_clip is not None and not action_noise_clip > 0:
            raise ValueError(f"action_noise_clip must be positive or None, got "
                             f"{action_noise_clip}.")
        self.action_std = action_std
        self.action_noise_clip = action_noise_clip
        self.action_bound: float = 1.
        self.q_model: torch.nn.Module | None = None
        self.target_model: torch.nn.Module | None = None
        self.target_q_model: torch.nn.Module | None = None
        self._target_pairs: TargetPairs | None = None

    # ------------------------------------------------------------------ setup
    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        super().check_env_spaces(env_spaces)
        check_continuous_action_space(self, env_spaces)

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        kwargs = self.make_env_to_q_model_kwargs(env_spaces)
        if "output_max" not in self.model_kwargs and accepts_kwarg(self.ModelCls, "output_max"):
            kwargs["output_max"] = check_continuous_action_space(self, env_spaces)
        return kwargs

    def make_env_to_q_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.shape[0])

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        """Build policy, critic, their targets and the exploration distribution."""
        self.action_bound = check_continuous_action_space(self, env_spaces)
        super().initialize(env_spaces, share_memory)
        self.q_model = self.QModelCls(**self.make_env_to_q_model_kwargs(env_spaces),
                                      **self.q_model_kwargs)
        if self.initial_q_model_state_dict is not None:
            self.q_model.load_state_dict(strip_ddp_state_dict(self.initial_q_model_state_dict))
        self.target_model = copy.deepcopy(self.model)
        self.target_q_model = copy.deepcopy(self.q_model)
        self._target_pairs = None
        self.distribution = Gaussian(
            dim=env_spaces.action.shape[0],
            std=self.action_std * self.action_bound,
            noise_clip=self._scaled(self.action_noise_clip),
            clip=self.action_bound,
        )

    def _scaled(self, value: float | None) -> float | None:
        """A fraction of the action bound in action units."""
        return None if value is None else value * self.action_bound

    def _critics(self) -> list[torch.nn.Module]:
        """Trained critics (TD3 adds its second one)."""
        return [self.q_model]

    def _targets(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """``(target, source)`` pairs updated by :meth:`update_target`."""
        return [(self.target_model, self.model), (self.target_q_model, self.q_model)]

    def _all_models(self) -> list[torch.nn.Module]:
        return [self.model, *self._critics(), *(t for t, _ in self._targets())]

    def to_device(self, cuda_idx: int | None = None) -> None:
        if cuda_idx is None:
            return
        super().to_device(cuda_idx)
        for model in self._all_models():
            model.to(self.device)
        self._target_pairs = None  # The base class may have rebuilt the policy.

    def data_parallel(self) -> int | None:
        """Wrap the policy (base class) and every critic in DistributedDataParallel."""
        device_id = super().data_parallel()
        self.q_model = wrap_ddp(self.q_model, self.device)
        logger.log("Wrapped the critic in DistributedDataParallel too.")
        return device_id

    # ------------------------------------------------------------- sampling
    def _model_inputs(self, *inputs: TensorTree) -> tuple:
        return self.to_model_device(inputs)

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """Noisy actions [*lead, A] and ``AgentInfo(mu)``, on CPU."""
        mu = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        action = self.distribution.sample(DistInfo(mean=mu))
        action, mu = self.to_cpu((action, mu))
        return AgentStep(action=action, agent_info=AgentInfo(mu=mu))

    # ------------------------------------------------------------- training
    def q(self, observation: TensorTree, prev_action: torch.Tensor, prev_reward: torch.Tensor,
          action: torch.Tensor) -> torch.Tensor:
        """Critic value [*lead] of ``action`` (with grad)."""
        return self.q_model(*self._model_inputs(observation, prev_action, prev_reward, action))

    def q_at_mu(self, observation: TensorTree, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Critic value [*lead] of the policy's action, with grad into the policy.

        The critic's weights get no gradient from it (the policy step does not
        use one).
        """
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        mu = self.model(*inputs)
        with without_weight_grads(self.q_model) as (q_model,):
            return q_model(*inputs, mu)

    @torch.no_grad()
    def target_q_at_mu(self, observation: TensorTree, prev_action: torch.Tensor,
                       prev_reward: torch.Tensor) -> torch.Tensor:
        """Target critic value [*lead] of the target policy's action (no grad)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.target_q_model(*inputs, self.target_model(*inputs))

    def update_target(self, tau: float = 1) -> None:
        """Copy (``tau=1``) or Polyak-blend the policy and critic into their targets."""
        if self._target_pairs is None:
            self._target_pairs = TargetPairs(self._targets())
        self._target_pairs.update(tau)

    def q_parameters(self) -> Iterator[torch.nn.Parameter]:
        """Parameters of the critic(s)."""
        return chain_parameters(*self._critics())

    def mu_parameters(self) -> Iterator[torch.nn.Parameter]:
        """Parameters of the policy."""
        return self.model.parameters()

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Every trained parameter: policy, then critic(s)."""
        return chain_parameters(self.model, *self._critics())

    # ---------------------------------------------------------------- modes
    def train_mode(self, itr: int) -> None:
        super().train_mode(itr)
        set_training(True, *self._critics())

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        set_training(False, *self._critics())
        self.distribution.set_std(self.action_std * self.action_bound)

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        set_training(False, *self._critics())
        self.distribution.set_std(0.)

    # ----------------------------------------------------------- state dict
    _STATE_KEYS = ("model", "q_model", "target_model", "target_q_model")

    def state_dict(self) -> dict:
        """``{"model", "q_model", "target_model", "target_q_model"}`` (no DDP prefixes)."""
        return {key: strip_ddp_state_dict(getattr(self, key).state_dict())
                for key in self._STATE_KEYS}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Load :meth:`state_dict` output (keys missing from it are left as they are)."""
        unknown = set(state_dict) - set(self._STATE_KEYS)
        if unknown:
            raise KeyError(f"{type(self).__name__}.load_state_dict: unknown keys "
                           f"{sorted(unknown)}; expected {list(self._STATE_KEYS)}.")
        for key, value in state_dict.items():
            unwrap(getattr(self, key)).load_state_dict(strip_ddp_state_dict(value))
