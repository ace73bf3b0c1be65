"""Adapter from gymnasium envs to the rlframe :class:`Env` interface.

``GymEnvWrapper`` is the one place where gymnasium's ``(terminated, truncated)``
becomes rlframe's ``done`` plus ``env_info.timeout``, and where free-form info
dicts become a fixed-schema namedtuple (:mod:`rlframe.envs.gym_info`).

``timeout`` (``np.bool_``) is always present: True when the episode was truncated
(time limit) and not terminated, so algorithms bootstrap only through time limits.

The env's contract is checked where it costs nothing per step (see
:mod:`rlframe.envs.checks`): gymnasium's API at construction, and the
observations of construction's reset and step plus those of the first
``CHECKED_OBSERVATIONS`` later resets and steps, whose shape must be the
observation space's and whose values must survive the cast to the space's dtype.
"""
from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence, cast

import gymnasium as gym
import numpy as np

from rlframe.envs.base import Env, EnvStep
from rlframe.envs.checks import (CHECKED_OBSERVATIONS, call_env, check_observation,
                                 check_reset_result, check_step_result, env_name)
# build_info_tuples, info_to_nt: also importable from here, rlpyt's module path.
from rlframe.envs.gym_info import (INFO_NAME, FlatInfoConverter, build_example,  # noqa: F401
                                   build_info_tuples, clean_info, info_to_nt, infill_info,
                                   merge_infos, warn_dropped_info_keys)
from rlframe.envs.gym_state import episode_state, restore_episode_state
from rlframe.spaces.gym_wrapper import GymSpaceWrapper

_FlatInfoConverter = FlatInfoConverter  # The name in checkpoints from before gym_info.

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.buffer import ArrayTree

_INT_ACTIONS = (np.int64, int)  # Handed to Discrete spaces without conversion.


class GymEnvWrapper(Env):
    """A gymnasium env seen as an rlframe :class:`Env`.

    At construction the env is reset and stepped once with a random action to
    learn the info schema (reset info and step info together); the next
    :meth:`reset` starts a fresh episode. Info keys first seen later are
    dropped with a one-time warning: declare them with
    ``make(..., info_example={...})``.

    Construction also checks the env's contract, raising a clear error where it
    breaks: ``reset()`` must return ``(obs, info)`` and ``step()`` five values
    (gymnasium's API, not the old gym one), and observations must have the
    observation space's shape and values that its dtype holds. The observations
    of the first ``CHECKED_OBSERVATIONS`` resets and steps after construction are
    checked too; later ones are not, so the steps cost nothing more.

    Args:
        env: a gymnasium env (already wrapped as wanted, e.g. by ``TimeLimit``).
        act_null_value: null value of the action space.
        obs_null_value: null value of the observation space.
        force_float32: present ``float64`` boxes as ``float32``.
    """

    def __init__(self, env: gym.Env, act_null_value: float | None = 0,
                 obs_null_value: float | None = 0,
                 force_float32: bool = True) -> None:
        self.env: gym.Env = env
        self._action_space: GymSpaceWrapper = GymSpaceWrapper(
            env.action_space, null_value=act_null_value, name="act", force_float32=force_float32)
        self._observation_space: GymSpaceWrapper = GymSpaceWrapper(
            env.observation_space, null_value=obs_null_value, name="obs",
            force_float32=force_float32)
        self._horizon: int | None = _find_horizon(env)
        # Fast paths of step(): int64 or Python ints go to Discrete envs as they are, and
        # observations already of the converted dtype are not converted again.
        self._int_actions: bool = isinstance(env.action_space, gym.spaces.Discrete)
        self._obs_dtype: np.dtype | None = (
            None if self._observation_space.is_composite
            else cast(np.dtype, self._observation_space.dtype))  # Not composite: one dtype.
        self._next_reset_seed: int | None = None
        self._warned_keys: set[str] = set()
        self._env_name: str = env_name(env)

        obs, reset_info = check_reset_result(
            call_env(env.reset, "reset()", self._env_name), self._env_name)
        check_observation(obs, self._observation_space, self._env_name, "reset()")
        obs, *_, step_info = check_step_result(
            call_env(env.step, "step()", self._env_name, env.action_space.sample()),
            self._env_name)
        check_observation(obs, self._observation_space, self._env_name, "step()")
        self._checks_left: int = CHECKED_OBSERVATIONS
        schema = merge_infos(clean_info(reset_info), clean_info(step_info))
        schema.pop("timeout", None)
        schema["timeout"] = np.bool_(False)
        self._info_example: tuple = build_example(schema, INFO_NAME)
        # Steps without info (most envs) reuse one of two prebuilt infos: fields
        # are immutable numpy scalars, so sharing them is safe.
        self._empty_infos = tuple(info_to_nt({"timeout": t}, self._info_example)
                                  for t in (False, True))
        self._flat_info = FlatInfoConverter(self._info_example)

    def step(self, action: SpaceValue) -> EnvStep:
        """Step the gymnasium env.

        Args:
            action: a value of ``action_space`` (namedtuples for ``Dict`` actions).

        Returns:
            ``EnvStep(observation, reward: np.float32, done: bool, env_info)``
            with ``done = terminated or truncated`` and
            ``env_info.timeout = truncated and not terminated``.
        """
        obs, reward, terminated, truncated, info = self.env.step(
            action if self._int_actions and type(action) in _INT_ACTIONS
            else self._action_space.revert(action))
        timeout = bool(truncated) and not bool(terminated)
        env_info = self._empty_infos[timeout] if not info else self._env_info(info, timeout)
        if self._checks_left:
            obs = self._checked(obs, "step()")
        elif type(obs) is not np.ndarray or obs.dtype != self._obs_dtype:
            obs = self._observation_space.convert(obs)
        return EnvStep(obs, np.float32(reward), bool(terminated or truncated), env_info)

    @staticmethod
    def step_rows(envs: Sequence[GymEnvWrapper], action: SpaceValue, observation: ArrayTree,
                  reward: np.ndarray, done: np.ndarray) -> list[tuple]:
        """Step each of ``envs`` once as :meth:`step` does, writing its values into rows.

        The vector form of :meth:`step` for :class:`~rlframe.envs.vector.EnvList`
        (envs whose ``step`` is this class's): the same values, without an
        ``EnvStep`` and a numpy scalar per env.

        Args:
            envs: the n envs.
            action: action rows [n].
            observation, reward, done: row buffers [n] (or longer), written in place.

        Returns:
            the n ``env_info`` namedtuples.
        """
        env_infos = []
        for i, (env, a) in enumerate(zip(envs, action)):
            obs, r, terminated, truncated, info = env.env.step(
                a if env._int_actions and type(a) in _INT_ACTIONS
                else env._action_space.revert(a))
            timeout = bool(truncated) and not bool(terminated)
            env_infos.append(env._empty_infos[timeout] if not info
                             else env._env_info(info, timeout))
            if env._checks_left:
                obs = env._checked(obs, "step()")
            elif type(obs) is not np.ndarray or obs.dtype != env._obs_dtype:
                obs = env._observation_space.convert(obs)
            observation[i] = obs
            reward[i] = r
            done[i] = terminated or truncated
        return env_infos

    def reset(self) -> SpaceValue:
        """Start an episode (seeded if :meth:`seed` was called since); return the observation."""
        seed, self._next_reset_seed = self._next_reset_seed, None
        obs, _ = self.env.reset(seed=seed)
        if self._checks_left:
            return self._checked(obs, "reset()")
        if type(obs) is np.ndarray and obs.dtype == self._obs_dtype:
            return obs  # What convert() returns for it, without its checks.
        return self._observation_space.convert(obs)

    def seed(self, seed: int | None = None) -> None:
        """Seed the next :meth:`reset` (``reset(seed=seed)``) and both spaces."""
        self._next_reset_seed = seed
        self._action_space.seed(seed)
        self._observation_space.seed(seed)

    @property
    def horizon(self) -> int | None:
        """The time limit (``TimeLimit``/``spec.max_episode_steps``), or None."""
        return self._horizon

    @property
    def info_example(self) -> tuple:
        """An ``env_info`` of this env: fixes its fields, dtypes and shapes."""
        return self._info_example

    @property
    def unwrapped(self) -> gym.Env:
        """The innermost gymnasium env."""
        return self.env.unwrapped

    def __getstate__(self) -> dict[str, Any]:
        """For a checkpoint: the env mid-episode; gymnasium's MuJoCo and ALE envs, which
        rebuild themselves fresh when unpickled, with their episode state beside them.

        Raises:
            TypeError: the env rebuilds itself when unpickled and its state is unknown
                (:func:`rlframe.envs.gym_state.episode_state`).
        """
        return dict(self.__dict__, _episode_state=episode_state(self.env.unwrapped))

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        restore_episode_state(self.env.unwrapped, self.__dict__.pop("_episode_state", None))

    def render(self) -> np.ndarray | list[np.ndarray] | str | None:
        """Render through gymnasium (mode fixed by ``render_mode`` at creation)."""
        return self.env.render()

    def close(self) -> None:
        """Close the gymnasium env."""
        self.env.close()

    def _checked(self, obs: Any, where: str) -> Any:
        """``obs`` converted, after :func:`check_observation` (one of the checked ones)."""
        self._checks_left -= 1
        check_observation(obs, self._observation_space, self._env_name, where)
        return self._observation_space.convert(obs)

    def _env_info(self, info: Mapping, timeout: bool) -> tuple:
        """The env_info of a step's non-empty gymnasium ``info``."""
        env_info = self._flat_info.convert(info, timeout)
        if env_info is None:  # Nested, array-valued or unexpected keys: general path.
            dropped: list[str] = []
            env_info = info_to_nt({**info, "timeout": timeout}, self._info_example, dropped)
            if dropped:
                warn_dropped_info_keys("GymEnvWrapper", dropped, self._warned_keys)
        return env_info


class EnvInfoWrapper(gym.Wrapper):
    """gymnasium wrapper adding info keys an env reports only on some steps.

    Args:
        env: the gymnasium env.
        info_example: (nested) dict of default values, used where a step's info
            lacks the key.
    """

    def __init__(self, env: gym.Env, info_example: Mapping) -> None:
        super().__init__(env)
        self._sometimes_info: Mapping = info_example

    def step(self, action: object) -> tuple:
        """gymnasium step whose info is completed from ``info_example``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, infill_info(info, self._sometimes_info)


def done_and_timeout(terminated: np.ndarray, truncated: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``done`` and ``timeout`` from gymnasium's ``(terminated, truncated)``.

    The row form of :meth:`GymEnvWrapper.step`'s rule, for vector envs.

    Args:
        terminated: [n] bool.
        truncated: [n] bool.

    Returns:
        ``done = terminated | truncated`` and ``timeout = truncated & ~terminated``,
        both [n] bool.
    """
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    return terminated | truncated, truncated & ~terminated


def check_env_id(id: str) -> None:  # noqa: A002 (gymnasium's parameter name)
    """Raise ValueError, with close registered ids, if gymnasium cannot find env ``id``.

    ALE ids (``"ALE/Pong-v5"``) are registered first when ale-py is installed.
    Nothing is built.
    """
    if not isinstance(id, str):
        raise TypeError(f"id must be a str env id, got id={id!r}.")
    _register_ale_envs()
    try:
        gym.spec(id)
    except (gym.error.Error, ImportError) as e:
        by_lower = {k.lower(): k for k in gym.registry}
        close = [by_lower[m] for m in difflib.get_close_matches(id.lower(), list(by_lower), n=5,
                                                                 cutoff=0.6)]
        hint = f" Close registered ids: {', '.join(close)}." if close else ""
        raise ValueError(f"Unknown gymnasium env id={id!r} (parameter `id`).{hint} "
                         f"See gymnasium.pprint_registry() for all ids.") from e


def make(*args: Any, info_example: Mapping | None = None, **kwargs: Any) -> GymEnvWrapper:
    """``GymEnvWrapper(gymnasium.make(*args, **kwargs))``.

    Args:
        *args, **kwargs: passed to ``gymnasium.make`` (first: the env ``id``).
        info_example: (nested) dict of info keys the env reports only on some
            steps, with default values; see :class:`EnvInfoWrapper`.
    """
    env_id = args[0] if args else kwargs.get("id")
    if isinstance(env_id, str):
        check_env_id(env_id)
    env = gym.make(*args, **kwargs)
    if info_example is not None:
        env = EnvInfoWrapper(env, info_example)
    return GymEnvWrapper(env)


@functools.cache
def _register_ale_envs() -> None:
    try:
        import ale_py
    except ImportError:
        return
    gym.register_envs(ale_py)


def _find_horizon(env: gym.Env) -> int | None:
    inner: gym.Env = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, gym.wrappers.TimeLimit):
            return int(inner._max_episode_steps)
        inner = inner.env
    spec = env.spec
    return None if spec is None else spec.max_episode_steps
