"""Checks of a gymnasium env's contract, for :class:`~rlframe.envs.gym.GymEnvWrapper`.

Contract violations that would otherwise train on wrong data, or fail deep
inside a sampler, raise here with the env's name: the old gym API (``reset()``
returning only the observation, ``step()`` returning four values), and
observations whose shape is not the observation space's or whose values do not
survive the cast to its dtype (floats in a ``uint8`` space become 0, 300
becomes 44). Observations are checked at construction and on the first
``CHECKED_OBSERVATIONS`` resets and steps only, so stepping costs nothing more.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, TypeVar

import gymnasium as gym
import numpy as np

from rlframe.spaces.gym_wrapper import GymSpaceWrapper

ResultT = TypeVar("ResultT")

CHECKED_OBSERVATIONS = 8
"""Observations (of resets and steps) each env has checked after construction's two."""

_GYMNASIUM_API = ("rlframe steps gymnasium envs: reset() returns (obs, info) with info a "
                  "dict, and step() returns five values (obs, reward, terminated, truncated, "
                  "info).")


def env_name(env: object) -> str:
    """How messages name a gymnasium env: ``env id='CartPole-v1'``, or its class."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return f"env id={spec.id!r}"
    return f"env {type(getattr(env, 'unwrapped', env)).__name__}"


def call_env(method: Callable[..., ResultT], what: str, name: str, *args: object) -> ResultT:
    """``method(*args)``, e.g. ``env.step(action)``, naming the old gym API when it fails.

    A gymnasium wrapper (``TimeLimit``, the passive checker of ``gymnasium.make``)
    that cannot unpack what an old gym API env returned raises ValueError; it is
    raised again as TypeError saying what is wanted.

    Args:
        method: the env's ``reset`` or ``step``.
        what: ``"reset()"`` or ``"step()"``, for the message.
        name: the env, for the message (:func:`env_name`).
        *args: passed to ``method``.
    """
    try:
        return method(*args)
    except ValueError as e:
        if "values to unpack" not in str(e):
            raise
        raise TypeError(f"{name}: {what} failed inside a gymnasium wrapper unpacking what the "
                        f"env returned ({e}); is it an env of the old gym API? "
                        f"{_GYMNASIUM_API} Port the env to gymnasium's API.") from e


def check_reset_result(result: object, name: str) -> tuple[Any, Mapping]:
    """Return ``(obs, info)`` from ``env.reset()``'s ``result``, or raise TypeError.

    The old gym API's ``reset()`` returns only the observation.

    Args:
        result: what ``env.reset()`` returned.
        name: the env, for the message (:func:`env_name`).
    """
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping):
        return result
    if isinstance(result, tuple) and len(result) == 2:
        got = f"(obs, {type(result[1]).__name__}) whose second value is not an info dict"
    else:
        got = _describe(result) + " (the old gym API returns only the observation)"
    raise TypeError(f"{name}: reset() returned {got}. {_GYMNASIUM_API} Port the env to "
                    "gymnasium's API.")


def check_step_result(result: object, name: str) -> tuple:
    """Return ``env.step()``'s ``result`` if it has gymnasium's five values, or raise TypeError.

    The old gym API's ``step()`` returns four: ``(obs, reward, done, info)``.

    Args:
        result: what ``env.step(action)`` returned.
        name: the env, for the message (:func:`env_name`).
    """
    if isinstance(result, tuple) and len(result) == 5:
        return result
    old = (" (obs, reward, done, info): the old gym API"
           if isinstance(result, tuple) and len(result) == 4 else "")
    raise TypeError(f"{name}: step() returned {_describe(result)}{old}. {_GYMNASIUM_API} "
                    "Port the env to gymnasium's API: split done into terminated (the task "
                    "ended) and truncated (a time limit).")


def check_observation(obs: object, space: GymSpaceWrapper, name: str, where: str) -> None:
    """Raise ValueError unless ``obs`` fits ``space``: its shape, and values its dtype holds.

    Values must survive the cast to the space's dtype: exactly for integer and
    bool dtypes (no float truncation, no wrap-around), within float rounding for
    float dtypes (``float64`` values in a ``float32`` space are fine, values
    beyond its range are not). Bounds are not checked. Called on the first
    observations of an env only (see :class:`~rlframe.envs.gym.GymEnvWrapper`).

    Args:
        obs: an observation, as the gymnasium env returned it (a dict for ``Dict`` spaces).
        space: the wrapper's observation space.
        name: the env, for the message (:func:`env_name`).
        where: ``"reset()"`` or ``"step()"``, for the message.
    """
    if space.is_composite:
        keys, subs = space._keys, space.space._spaces
        if not isinstance(obs, Mapping) or any(k not in obs for k in keys):
            got = sorted(map(str, obs)) if isinstance(obs, Mapping) else _describe(obs)
            raise ValueError(f"{name}: the observation from {where} should be a dict with the "
                             f"keys {list(keys)} of the Dict observation space, got {got}.")
        for key, sub in zip(keys, subs):
            check_observation(obs[key], sub, name, f"{where}[{key!r}]")
        return
    gym_space = space.space
    try:
        value = np.asarray(obs)
    except (ValueError, TypeError):  # Ragged sequences.
        value = np.asarray(obs, dtype=object)
    shape, dtype = tuple(space.shape), space.dtype
    if value.shape != shape:
        raise ValueError(
            f"{name}: the observation from {where} has shape {value.shape}, but the "
            f"observation space {gym_space} has shape {shape}. Return observations of the "
            f"space's shape, or declare the space with the shape the env returns.")
    if value.dtype == dtype:
        return
    changed = _cast_changes(value, dtype)
    if changed is None:
        return
    before, after = (_number(v) for v in changed)
    values = (f" (values in [{_number(value.min())}, {_number(value.max())}])"
              if value.dtype.kind in "biuf" and value.size else "")
    raise ValueError(
        f"{name}: the observation from {where} has dtype {value.dtype}{values}, but the "
        f"observation space {gym_space} has dtype {dtype} and shape {shape}; the cast to "
        f"{dtype} changes its values (e.g. {before} -> {after}), so training would see "
        f"wrong observations. Return observations of dtype {dtype}, or declare the space "
        f"with the dtype the env returns (e.g. Box(low, high, {shape}, np.{value.dtype})).")


def _cast_changes(value: np.ndarray, dtype: np.dtype) -> tuple[Any, Any] | None:
    """``(a value, its cast)`` where casting ``value`` to ``dtype`` changes it, else None."""
    if value.dtype.kind not in "biuf":  # Objects, strings, complex numbers.
        return (value.flat[0] if value.size else value.dtype), dtype
    with np.errstate(all="ignore"):
        cast = value.astype(dtype)
        if dtype.kind == "f":
            kept = np.isclose(cast, value, rtol=1e-6, atol=float(np.finfo(dtype).tiny),
                              equal_nan=True)
        else:
            kept = cast == value
    if np.all(kept):
        return None
    i = int(np.flatnonzero(~np.asarray(kept))[0])
    return value.flat[i].item(), cast.flat[i].item()


def _number(value: Any) -> str:
    """A value for messages: floats to 6 significant digits."""
    if isinstance(value, np.generic):
        value = value.item()
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def _describe(value: Any) -> str:
    """A short description of a returned value, for messages."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values"
    if isinstance(value, np.ndarray):
        return f"an ndarray of shape {value.shape}"
    return f"a {type(value).__name__}"


class ObservationCheckWrapper(gym.Wrapper):
    """gymnasium wrapper checking the observations of the first ``checks`` resets and steps.

    For envs stepped outside :class:`~rlframe.envs.gym.GymEnvWrapper` (members of gymnasium vector
    envs, whose stacking casts observations to the space's dtype): each
    observation goes through :func:`check_observation`. Once the checks are
    spent, ``step`` and ``reset`` are the inner env's own (set on the instance),
    so later steps cost nothing more.

    Args:
        env: the gymnasium env.
        observation_space: its observation space, as its ``GymEnvWrapper`` has it.
        name: the env, for messages (:func:`env_name`).
        checks: how many observations to check.
    """

    def __init__(self, env: gym.Env, observation_space: GymSpaceWrapper, name: str,
                 checks: int = CHECKED_OBSERVATIONS) -> None:
        super().__init__(env)
        self._checked_space = observation_space
        self._env_name = name
        self._checks_left = checks

    def step(self, action: object) -> tuple:
        """The inner env's step, its observation checked."""
        result = self.env.step(action)
        self._check(result[0], "step()")
        return result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple:
        """The inner env's reset, its observation checked."""
        result = self.env.reset(seed=seed, options=options)
        self._check(result[0], "reset()")
        return result

    def _check(self, obs: Any, where: str) -> None:
        check_observation(obs, self._checked_space, self._env_name, where)
        self._checks_left -= 1
        if self._checks_left <= 0:  # Step and reset straight through from now on.
            self.step = self.env.step  # type: ignore[method-assign]
            self.reset = self.env.reset  # type: ignore[method-assign]
