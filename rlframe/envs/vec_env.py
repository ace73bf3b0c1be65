"""B envs stepped as one: the interface the samplers' stepping core drives.

A :class:`VecEnv` takes and returns whole rows: actions ``[n]`` in, and
``VecStep(observation [n], reward [n], done [n], env_info [n])`` out, where
``n`` is ``num_envs`` or the number of envs named by ``idx``. Semantics are
those of one rlframe :class:`~rlframe.envs.base.Env` per row:

* ``done`` is ``terminated or truncated``; ``env_info.timeout`` is True when
  the episode was truncated (time limit) and not terminated;
* after ``done`` the observation is the episode's last one; nothing resets by
  itself: the caller resets finished envs with :meth:`VecEnv.reset` (``idx``);
* :meth:`VecEnv.seed` makes env ``b`` start its next episode from ``seed + b``.

This module holds the interface, the plain backend (:class:`EnvList`) and the
row helpers every backend shares; the backends' factory is
:func:`rlframe.envs.vector.make_vec_env` (where these names are importable too).
"""
from __future__ import annotations

import copy
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlframe.utils.buffer import buffer_from_example
from rlframe.utils.collections import is_namedtuple

if TYPE_CHECKING:
    from rlframe.envs.base import Env, EnvSpaces
    from rlframe.spaces.base import SpaceValue
    from rlframe.spaces.gym_wrapper import GymSpaceWrapper

VecStep = namedtuple("VecStep", ["observation", "reward", "done", "env_info"])
"""Rows returned by :meth:`VecEnv.step` (numpy; ``reward`` float32, ``done`` bool)."""


class VecEnv:
    """``num_envs`` envs stepped together; rows are numpy with a leading [n] dim.

    Returned rows may be views of the backend's own buffers, valid until its
    next ``step`` or ``reset``: callers copy what they keep.

    Attributes:
        num_envs: B, the number of envs.
        spaces: ``EnvSpaces`` of one env (rlframe spaces).
        horizon: the time limit of one episode, or None.
        steps_subsets: whether ``step(action, idx)`` may name a subset of envs
            (needed to hold finished envs idle, e.g. ``CpuWaitResetCollector``).
        envs: the per-env rlframe envs where the backend has them (else ``[]``).
    """

    num_envs: int
    spaces: EnvSpaces
    horizon: int | None = None
    steps_subsets: bool = True
    envs: Sequence[Env] = ()

    def reset(self, idx: np.ndarray | None = None) -> SpaceValue:
        """Start new episodes in every env (or those in ``idx``).

        Returns:
            observation rows [n] (an array, or a namedarraytuple of arrays).
        """
        raise NotImplementedError

    def step(self, action: SpaceValue, idx: np.ndarray | None = None) -> VecStep:
        """Step every env (or those in ``idx``) once.

        Args:
            action: action rows [n], aligned with ``idx`` when given.
            idx: int array of env indexes (sorted, unique), or None for all.

        Returns:
            ``VecStep(observation [n], reward float32 [n], done bool [n],
            env_info [n])``; ``env_info`` is a namedarraytuple with at least a
            bool ``timeout`` field (plus ``traj_done`` for envs whose ``done``
            does not end the trajectory, e.g. Atari's episodic lives).
        """
        raise NotImplementedError

    def seed(self, seed: int | None) -> None:
        """Env ``b`` starts its next episode from ``seed + b`` (``None``: unseeded).

        Seeds each env's spaces too, where the backend has them.
        """
        raise NotImplementedError

    def sample_actions(self) -> SpaceValue:
        """Random action rows [B], from each env's action space."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the envs."""


class EnvList(VecEnv):
    """The plain backend: one rlframe :class:`~rlframe.envs.base.Env` per row.

    Envs whose ``step`` is :class:`~rlframe.envs.gym.GymEnvWrapper`'s are stepped
    through :meth:`~rlframe.envs.gym.GymEnvWrapper.step_rows`, which writes their
    values straight into the row buffers; other envs through their own ``step``.

    Args:
        envs: the B envs; every env must have the same spaces and info fields.
    """

    def __init__(self, envs: Sequence[Env]):
        if len(envs) == 0:
            raise ValueError("EnvList needs at least one env, got envs=[].")
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        env = self.envs[0]
        self.spaces = env.spaces
        self.horizon = env.horizon
        self._obs_buf: Any = None  # Row buffers, allocated from the first step.
        self._info_buf: Any = None
        self._info_leaves: list[np.ndarray] | None = None
        self._reward = np.zeros(self.num_envs, dtype=np.float32)
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._scalar_action = False
        # Envs that step as plain GymEnvWrappers write their rows directly (step_rows);
        # not those whose step is replaced on the instance (e.g. wrapped to add a delay).
        from rlframe.envs.gym import GymEnvWrapper
        self._step_rows = (GymEnvWrapper.step_rows if all(
            type(env).step is GymEnvWrapper.step and "step" not in getattr(env, "__dict__", {})
            for env in self.envs) else None)

    def reset(self, idx: np.ndarray | None = None) -> SpaceValue:
        envs = self.envs if idx is None else [self.envs[i] for i in idx]
        observations = [env.reset() for env in envs]
        if self._obs_buf is None:
            self._obs_buf = buffer_from_example(observations[0], self.num_envs)
        return _fill_rows(self._obs_buf, observations)

    def step(self, action: SpaceValue, idx: np.ndarray | None = None) -> VecStep:
        if idx is None and self._step_rows is not None and self._info_buf is not None:
            infos = self._step_rows(self.envs, action, self._obs_buf, self._reward, self._done)
            return VecStep(self._obs_buf, self._reward, self._done, self._fill_infos(infos))
        envs = self.envs if idx is None else [self.envs[i] for i in idx]
        n = len(envs)
        steps = [env.step(a) for env, a in zip(envs, action)]
        if self._obs_buf is None:
            self._obs_buf = buffer_from_example(steps[0][0], self.num_envs)
        if self._info_buf is None:
            self._allocate_info(steps[0][3])
        observations, rewards, dones, infos = zip(*steps)
        whole = n == self.num_envs  # Whole buffers, not views of their first n rows.
        observation = _fill_rows(self._obs_buf, observations, whole)
        reward, done = (self._reward, self._done) if whole else (self._reward[:n], self._done[:n])
        reward[:] = rewards
        done[:] = dones
        return VecStep(observation, reward, done, self._fill_infos(infos))

    def seed(self, seed: int | None) -> None:
        from rlframe.utils.seed import set_envs_seeds
        set_envs_seeds(self.envs, seed)

    def sample_actions(self) -> SpaceValue:
        actions = [env.action_space.sample() for env in self.envs]
        return _fill_rows(buffer_from_example(actions[0], self.num_envs), actions)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _fill_infos(self, infos: Sequence) -> Any:
        """Write env_infos into the first rows of the info buffer; return those rows."""
        n = len(infos)
        whole = n == self.num_envs
        if self._info_leaves is not None:  # Flat info: one assignment per field.
            for j, leaf in enumerate(self._info_leaves):
                leaf[:n] = [info[j] for info in infos]
            return self._info_buf if whole else self._info_buf[:n]
        return _fill_rows(self._info_buf, infos, whole)

    def _allocate_info(self, info_example: Any) -> None:
        self._info_buf = buffer_from_example(info_example, self.num_envs)
        if is_namedtuple(info_example) and not any(is_namedtuple(v) for v in info_example):
            self._info_leaves = list(self._info_buf)


def _fill_rows(buf: Any, rows: Sequence, whole: bool = False) -> Any:
    """Write ``rows`` into the first ``len(rows)`` rows of ``buf``; return that view
    (``buf`` itself where ``whole``: the rows fill it)."""
    n = len(rows)
    if isinstance(buf, np.ndarray):
        buf[:n] = rows
        return buf if whole else buf[:n]
    for i, row in enumerate(rows):
        buf[i] = row
    return buf if whole else buf[:n]


def as_vec_env(envs: VecEnv | Sequence[Env]) -> VecEnv:
    """A :class:`VecEnv` as it is, or a list of envs as an :class:`EnvList`."""
    return envs if isinstance(envs, VecEnv) else EnvList(envs)


class ActionSampler:
    """Random action rows from one action space per env, the one of env ``b`` seeded ``seed + b``.

    Args:
        space: the action space of one env; copied for the others.
        n_envs: B.
    """

    def __init__(self, space: GymSpaceWrapper, n_envs: int) -> None:
        self.spaces = [space] + [copy.deepcopy(space) for _ in range(n_envs - 1)]
        for space_copy in self.spaces[1:]:
            space_copy.seed(None)  # A copy starts with the original's generator state.

    def seed(self, seed: int) -> None:
        """Seed the space of env ``b`` with ``seed + b``."""
        for b, space in enumerate(self.spaces):
            space.seed(seed + b)

    def sample(self) -> SpaceValue:
        """Action rows [B] (a namedarraytuple of rows for ``Dict`` spaces)."""
        actions = [space.sample() for space in self.spaces]
        return _fill_rows(buffer_from_example(actions[0], len(actions)), actions)
