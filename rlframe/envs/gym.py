"""Adapter from gymnasium envs to the rlframe :class:`Env` interface.

``GymEnvWrapper`` is the one place where gymnasium's ``(terminated, truncated)``
becomes rlframe's ``done`` plus ``env_info.timeout``, and where free-form info
dicts become a fixed-schema namedtuple.

Info values are stored with stable dtypes, so a buffer built from one example
fits every later step:

* python ``bool`` -> ``np.bool_``; python ``int`` -> ``np.int64``;
  python ``float`` -> ``np.float32``;
* numpy scalars and arrays keep their dtype, except ``float64`` -> ``float32``;
  lists/tuples of numbers become arrays by the same rules;
* strings, ``None``, objects and ragged or complex values are dropped.

Scalars are numpy scalars, arrays are copied. ``timeout`` (``np.bool_``) is
always present: True when the episode was truncated (time limit) and not
terminated, so algorithms bootstrap only through time limits.

The env's contract is checked where it costs nothing per step (see
:mod:`rlframe.envs.checks`): gymnasium's API at construction, and the
observations of construction's reset and step plus those of the first
``CHECKED_OBSERVATIONS`` later resets and steps, whose shape must be the
observation space's and whose values must survive the cast to the space's dtype.
"""
from __future__ import annotations

import difflib
import functools
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence, cast

import gymnasium as gym
import numpy as np

from rlframe.envs.base import Env, EnvStep
from rlframe.envs.checks import (CHECKED_OBSERVATIONS, call_env, check_observation,
                                 check_reset_result, check_step_result, env_name)
from rlframe.spaces.gym_wrapper import GymSpaceWrapper, to_identifier
from rlframe.utils.collections import is_namedtuple, namedtuple_cls

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.buffer import ArrayTree

INFO_NAME = "info"
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
        schema = _merge(_clean_info(reset_info), _clean_info(step_info))
        schema.pop("timeout", None)
        schema["timeout"] = np.bool_(False)
        self._info_example: tuple = _build_example(schema, INFO_NAME)
        # Steps without info (most envs) reuse one of two prebuilt infos: fields
        # are immutable numpy scalars, so sharing them is safe.
        self._empty_infos = tuple(info_to_nt({"timeout": t}, self._info_example)
                                  for t in (False, True))
        self._flat_info = _FlatInfoConverter(self._info_example)

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


def warn_dropped_info_keys(owner: str, keys: list[str], warned: set[str]) -> None:
    """Warn, once per key and owner, that env info ``keys`` outside the info schema were
    dropped; ``warned`` (the owner's set) remembers the keys already named."""
    new = sorted(set(keys) - warned)
    if new:
        warned.update(new)
        warnings.warn(
            f"{owner}: env info key(s) {new} were not in the info schema learned at "
            "construction (or no longer fit its type/shape) and are dropped; declare them "
            "with make(..., info_example={...}).", stacklevel=4)


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


def infill_info(info: Mapping, sometimes_info: Mapping) -> dict:
    """A copy of ``info`` with keys missing from it taken from ``sometimes_info`` (recursively)."""
    out = dict(info)
    for key, default in sometimes_info.items():
        if key not in out:
            out[key] = default
        elif isinstance(default, Mapping) and isinstance(out[key], Mapping):
            out[key] = infill_info(out[key], default)
    return out


def build_info_tuples(info: Mapping, name: str = INFO_NAME) -> tuple:
    """An env_info example from a raw info dict.

    Keys become identifiers (:func:`~rlframe.spaces.gym_wrapper.to_identifier`),
    values are kept or dropped as described in the module docstring, nested
    dicts become namedtuples named ``<name>_<key>``. Classes are made with
    ``namedtuple_cls``, so instances pickle into spawned workers.

    Returns:
        a namedtuple instance whose leaves fix each field's dtype and shape.
    """
    return _build_example(_clean_info(info), name)


def info_to_nt(value: Mapping, example: tuple, dropped: list[str] | None = None) -> tuple:
    """Convert a raw info dict to the type of ``example``.

    Args:
        value: the info dict of one step.
        example: from :func:`build_info_tuples`; fixes fields, dtypes, shapes.
        dropped: if given, receives the (dotted) keys with storable values that
            were dropped because they are not in ``example`` or do not fit its
            type/shape (values of unstorable types are dropped silently).

    Returns:
        an instance of ``type(example)``; fields missing from ``value`` hold zeros.
    """
    return _to_nt(value, example, dropped, "")


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


class _FlatInfoConverter:
    """Fast conversion of info dicts whose values are all scalars (most envs).

    Gives the same result as :func:`info_to_nt` when every key of the info is
    in the schema with a scalar value; returns None otherwise, so the caller
    falls back to the general conversion (which also reports dropped keys).
    """

    _SCALARS = (bool, int, float, np.generic)

    def __init__(self, example: tuple):
        self.cls = type(example)
        self.fields = {f: i for i, f in enumerate(example._fields)}
        self.types = [type(v) for v in example]
        self.zeros = [_zeros_like(v) if not is_namedtuple(v) else None for v in example]
        self.usable = all(not is_namedtuple(v) and np.ndim(v) == 0 for v in example)
        self.timeout_idx = self.fields["timeout"]
        self.index: dict = {}  # raw info key -> field position (None: not in schema)

    def convert(self, info: Mapping, timeout: bool) -> tuple | None:
        if not self.usable:
            return None
        out = list(self.zeros)
        for key, value in info.items():
            i = self.index.get(key, -1)
            if i == -1:
                i = self.index[key] = self.fields.get(to_identifier(key))
            if i is None or not isinstance(value, self._SCALARS):
                return None
            out[i] = self.types[i](value)
        out[self.timeout_idx] = np.bool_(timeout)
        return tuple.__new__(self.cls, out)


def _info_leaf(value: object) -> np.generic | np.ndarray | None:
    """The stored form of one info value, or None to drop it."""
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value) if -2 ** 63 <= value < 2 ** 63 else None
    if isinstance(value, float):
        return np.float32(value)
    if not isinstance(value, (np.generic, np.ndarray, list, tuple)):
        return None
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists
        return None
    if a.dtype.kind not in "biuf":
        return None
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return a[()] if a.ndim == 0 else a


def _storable(value: object) -> bool:
    """Whether a value would be kept (values of other types are dropped silently)."""
    if isinstance(value, Mapping):
        return bool(_clean_info(value))
    return _info_leaf(value) is not None


def _clean_info(info: Mapping) -> dict:
    """Identifier keys and stored values; empty nested dicts and dropped values removed."""
    out: dict = {}
    for key, value in info.items():
        field = to_identifier(key)
        if field in out:
            continue
        if isinstance(value, Mapping):
            sub = _clean_info(value)
            if sub:
                out[field] = sub
        else:
            leaf = _info_leaf(value)
            if leaf is not None:
                out[field] = leaf
    return out


def _merge(first: dict, second: dict) -> dict:
    """Union of two cleaned infos; ``first`` wins where both have a key."""
    out = dict(first)
    for key, value in second.items():
        if key not in out:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge(out[key], value)
    return out


def _build_example(clean: dict, name: str) -> tuple:
    cls = namedtuple_cls(name, list(clean), module=__name__)
    return cls(*(_build_example(v, f"{name}_{k}") if isinstance(v, dict) else np.array(v)[()]
                 for k, v in clean.items()))


def _zeros_like(leaf: Any) -> Any:
    return np.zeros(np.shape(leaf), dtype=leaf.dtype)[()]


def _to_nt(value: Mapping, example: tuple, dropped: list[str] | None, prefix: str) -> tuple:
    given: dict = {}
    for key, v in value.items():
        field = to_identifier(key)
        if field in example._fields and field not in given:
            given[field] = v
        elif dropped is not None and _storable(v):
            dropped.append(f"{prefix}{key}")
    out = []
    for field, ex in zip(example._fields, example):
        v = given.get(field)
        if is_namedtuple(ex):
            if v is not None and not isinstance(v, Mapping) and dropped is not None:
                dropped.append(f"{prefix}{field}")
            out.append(_to_nt(v if isinstance(v, Mapping) else {}, ex, dropped,
                              f"{prefix}{field}."))
            continue
        leaf = None if v is None else _info_leaf(v)
        if leaf is not None and np.shape(leaf) == np.shape(ex):
            out.append(np.array(leaf, dtype=ex.dtype)[()])
        else:
            if v is not None and dropped is not None:
                dropped.append(f"{prefix}{field}")
            out.append(_zeros_like(ex))
    return type(example)(*out)
