"""The env interface every rlframe sampler steps."""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlframe.spaces.base import Space, SpaceValue

EnvStep = namedtuple("EnvStep", ["observation", "reward", "done", "env_info"])
"""What ``Env.step`` returns; collectors unpack ``o, r, d, info = env.step(a)``."""

EnvInfo = namedtuple("EnvInfo", [])
"""Placeholder; each env defines its own info namedtuple with fixed fields."""

EnvSpaces = namedtuple("EnvSpaces", ["observation", "action"])
"""The spaces an agent is initialized with."""


class Env:
    """Base env: ``step`` returns an :data:`EnvStep`, ``reset`` the first observation.

    Subclasses set ``_action_space`` and ``_observation_space``. ``env_info``
    must have identical fields, shapes and dtypes at every step, because
    samplers pre-allocate ``[T, B]`` buffers from one example.
    """

    _action_space: Space
    _observation_space: Space

    def step(self, action: SpaceValue) -> EnvStep:
        """Advance one step.

        Args:
            action: a value of ``action_space``.

        Returns:
            ``EnvStep(observation, reward, done, env_info)``.
        """
        raise NotImplementedError

    def reset(self) -> SpaceValue:
        """Start a new episode and return its first observation."""
        raise NotImplementedError

    @property
    def action_space(self) -> Space:
        """Space of actions."""
        return self._action_space

    @property
    def observation_space(self) -> Space:
        """Space of observations."""
        return self._observation_space

    @property
    def spaces(self) -> EnvSpaces:
        """``EnvSpaces(observation, action)``."""
        return EnvSpaces(observation=self.observation_space, action=self.action_space)

    def close(self) -> None:
        """Release resources (windows, emulators, ...)."""

    @property
    def horizon(self) -> int | None:
        """Maximum episode length, or None if unbounded."""
        return None
