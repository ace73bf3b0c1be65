"""gymnasium wrappers for test and benchmark tasks."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlframe.envs.gym import GymEnvWrapper, check_env_id


class VelocityHiddenCartPole(gym.ObservationWrapper):
    """CartPole observing only cart position and pole angle (no velocities).

    The task becomes partially observable: a policy must infer the velocities
    from the history of observations (and actions), which calls for a
    recurrent model.

    Args:
        env: a CartPole env (observation ``[x, x_dot, theta, theta_dot]``).
    """

    KEPT = (0, 2)  # cart position, pole angle

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (4,):
            raise ValueError(f"VelocityHiddenCartPole wraps CartPole (Box observation of shape "
                             f"(4,)), got observation_space={space!r}.")
        kept = list(self.KEPT)
        self.observation_space = gym.spaces.Box(low=space.low[kept], high=space.high[kept],
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[list(self.KEPT)]


def make_velocity_hidden_cartpole(id: str = "CartPole-v1",  # noqa: A002 (gymnasium's name)
                                  **kwargs: Any) -> GymEnvWrapper:
    """CartPole without velocity observations, as an rlframe env (usable as ``EnvCls``).

    Args:
        id: the CartPole version.
        **kwargs: passed to ``gymnasium.make`` (e.g. ``max_episode_steps``).
    """
    check_env_id(id)
    return GymEnvWrapper(VelocityHiddenCartPole(gym.make(id, **kwargs)))
