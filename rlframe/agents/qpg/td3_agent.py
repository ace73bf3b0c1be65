"""TD3 agent: DDPG's agent with twin critics and a smoothed target action."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Sequence

import torch

from rlframe.agents.base import wrap_ddp
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.distributions.gaussian import DistInfo, Gaussian
from rlframe.models.utils import strip_ddp_state_dict

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree


class Td3Agent(DdpgAgent):
    """Agent for TD3 (Fujimoto et al., 2018).

    Adds a second critic ``q2_model`` (and ``target_q2_model``); the target
    action is the target policy's plus clipped Gaussian noise ("target policy
    smoothing"). Before learning starts (``give_min_itr_learn``) the sampling
    noise is ``pretrain_std`` instead of ``action_std``. Noise parameters are
    fractions of the env's action bound.

    Args:
        pretrain_std: exploration noise std before learning starts.
        target_noise_std: std of the noise added to the target action.
        target_noise_clip: clip of that noise.
        initial_q2_model_state_dict: second critic's parameters to start from.
        **kwargs: :class:`DdpgAgent` arguments.
    """

    def __init__(self, pretrain_std: float = 0.5, target_noise_std: float = 0.2,
                 target_noise_clip: float = 0.5, initial_q2_model_state_dict: dict | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        for name, value in (("pretrain_std", pretrain_std),
                            ("target_noise_std", target_noise_std)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}.")
        if target_noise_clip is not None and not target_noise_clip > 0:
            raise ValueError(f"target_noise_clip must be positive or None, got "
                             f"{target_noise_clip}.")
        self.pretrain_std = pretrain_std
        self.target_noise_std = target_noise_std
        self.target_noise_clip = target_noise_clip
        self.initial_q2_model_state_dict = initial_q2_model_state_dict
        self.q2_model: torch.nn.Module | None = None
        self.target_q2_model: torch.nn.Module | None = None
        self.target_distribution: Gaussian | None = None

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        super().initialize(env_spaces, share_memory, global_B=global_B, env_ranks=env_ranks)
        self.q2_model = self.QModelCls(**self.make_env_to_q_model_kwargs(env_spaces),
                                       **self.q_model_kwargs)
        if self.initial_q2_model_state_dict is not None:
            self.q2_model.load_state_dict(strip_ddp_state_dict(self.initial_q2_model_state_dict))
        self.target_q2_model = copy.deepcopy(self.q2_model)
        self._target_pairs = None
        self.target_distribution = Gaussian(
            dim=env_spaces.action.shape[0],
            std=self.target_noise_std * self.action_bound,
            noise_clip=self._scaled(self.target_noise_clip),
            clip=self.action_bound,
        )

    def _critics(self) -> list[torch.nn.Module]:
        return [self.q_model, self.q2_model]

    def _targets(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return super()._targets() + [(self.target_q2_model, self.q2_model)]

    def data_parallel(self) -> int | None:
        device_id = super().data_parallel()
        self.q2_model = wrap_ddp(self.q2_model, self.device)
        return device_id

    def set_target_noise(self, std: float, noise_clip: float | None = None) -> None:
        """Set the target-smoothing noise (fractions of the action bound)."""
        self.target_noise_std = std
        self.target_noise_clip = noise_clip
        self.target_distribution.set_std(std * self.action_bound)
        self.target_distribution.set_noise_clip(self._scaled(noise_clip))

    def q(self, observation: TensorTree, prev_action: torch.Tensor, prev_reward: torch.Tensor,
          action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both critics' values ``(q1, q2)``, each [*lead], of ``action`` (with grad)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward, action)
        return self.q_model(*inputs), self.q2_model(*inputs)

    @torch.no_grad()
    def target_q_at_mu(self, observation: TensorTree, prev_action: torch.Tensor,
                       prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both target critics' values of the smoothed target action (no grad)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        target_mu = self.target_model(*inputs)
        target_action = self.target_distribution.sample(DistInfo(mean=target_mu))
        return (self.target_q_model(*inputs, target_action),
                self.target_q2_model(*inputs, target_action))

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        std = self.action_std if itr >= self.min_itr_learn else self.pretrain_std
        self.distribution.set_std(std * self.action_bound)

    _STATE_KEYS = DdpgAgent._STATE_KEYS + ("q2_model", "target_q2_model")
