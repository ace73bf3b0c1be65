"""gymnasium's vector envs as a :class:`~rlframe.envs.vector.VecEnv`.

The ``"gymnasium"`` (``SyncVectorEnv``) and ``"gymnasium_async"``
(``AsyncVectorEnv``, one worker process per env) backends. Every row behaves
as the :class:`~rlframe.envs.gym.GymEnvWrapper` of the same env would in an
:class:`~rlframe.envs.vector.EnvList`: the same observations (converted by the
env's :class:`~rlframe.spaces.gym_wrapper.GymSpaceWrapper`), float32 rewards,
``done``, and ``env_info`` rows of the wrapper's info schema with its dtype
rules (vector infos' ``_key`` masks mark the rows that reported a key; the
others hold zeros). The vector env is built with
``autoreset_mode=AutoresetMode.DISABLED``: a finished env waits, holding its
last observation, until :meth:`GymVecEnv.reset` names it.

gymnasium steps every env at once, so ``steps_subsets`` is False: collectors
that hold finished envs idle need the ``"plain"`` or ``"envpool"`` backend.

Differences from :class:`~rlframe.envs.vector.EnvList` that a caller can see:
``envs`` is empty (the gymnasium envs live in the vector env, or in worker
processes); a reset of some of the envs passes ``options={}`` to their
``reset`` (gymnasium's ``reset_mask`` path) where the wrapper passes none; and
stepping an env that finished and was not reset raises RuntimeError.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rlframe.envs.base import Env, EnvSpaces
from rlframe.envs.checks import ObservationCheckWrapper, env_name
from rlframe.envs.gym import GymEnvWrapper, done_and_timeout
from rlframe.envs.gym_info import info_leaf, is_storable, warn_dropped_info_keys
from rlframe.envs.vec_env import ActionSampler, VecEnv, VecStep
from rlframe.spaces.gym_wrapper import GymSpaceWrapper, to_identifier
from rlframe.utils.buffer import buffer_from_example
from rlframe.utils.collections import is_namedtuple

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue


class GymVecEnv(VecEnv):
    """A gymnasium vector env seen as rlframe rows (see the module docstring).

    Build it with :meth:`from_env_cls`. ``step`` takes every env at once
    (``idx`` naming a strict subset raises ValueError); envs that finished must
    be reset before it (RuntimeError otherwise).

    Args:
        vector_env: a ``SyncVectorEnv`` or ``AsyncVectorEnv`` made with
            ``autoreset_mode=AutoresetMode.DISABLED``; closed by :meth:`close`.
        spaces: ``EnvSpaces`` of one env, as its ``GymEnvWrapper`` reports them.
        info_example: ``env_info`` of one env (``GymEnvWrapper.info_example``).
        horizon: the time limit of one episode, or None.
    """

    steps_subsets = False

    def __init__(self, vector_env: SyncVectorEnv | AsyncVectorEnv, spaces: EnvSpaces,
                 info_example: tuple, horizon: int | None = None) -> None:
        if vector_env.autoreset_mode != AutoresetMode.DISABLED:
            raise ValueError("GymVecEnv needs a vector env with autoreset_mode="
                             f"AutoresetMode.DISABLED, got {vector_env.autoreset_mode}.")
        self._vector_env = vector_env
        self.num_envs = vector_env.num_envs
        self.spaces = spaces
        self.horizon = horizon
        self.envs = []
        self._action_space: GymSpaceWrapper = spaces.action
        self._observation_space: GymSpaceWrapper = spaces.observation
        self._action_sampler = ActionSampler(spaces.action, self.num_envs)
        self._info_example = info_example
        self._info_buf = buffer_from_example(info_example, self.num_envs)
        self._info_only_timeout = tuple(info_example._fields) == ("timeout",)
        self._next_reset_seeds: list[int | None] = [None] * self.num_envs
        self._finished = np.zeros(self.num_envs, dtype=bool)  # Done and not reset since.
        self._warned_keys: set[str] = set()
        self._closed = False

    @classmethod
    def from_env_cls(cls, EnvCls: Callable[..., Env], env_kwargs: dict, n_envs: int,
                     asynchronous: bool = False, context: str | None = None) -> GymVecEnv:
        """``n_envs`` gymnasium envs, each the one inside ``EnvCls(**env_kwargs)``.

        One ``EnvCls(**env_kwargs)`` is built here for its spaces, info schema
        and horizon; each vector env member is built the same way (in its
        worker process when ``asynchronous``).

        Args:
            EnvCls: a factory returning a ``GymEnvWrapper``, e.g.
                :func:`rlframe.envs.gym.make`.
            env_kwargs: its keyword arguments, e.g. ``dict(id="CartPole-v1")``.
            n_envs: B.
            asynchronous: ``AsyncVectorEnv`` (worker processes) instead of
                ``SyncVectorEnv``.
            context: multiprocessing start method of the workers (None: default).

        Raises:
            TypeError: if ``EnvCls`` does not return a ``GymEnvWrapper``.
        """
        env_backend = "gymnasium_async" if asynchronous else "gymnasium"
        if n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, got n_envs={n_envs}.")
        probe = EnvCls(**env_kwargs)
        try:
            wrapper = _as_gym_env_wrapper(probe, EnvCls, env_backend)
            spaces, info_example, horizon = wrapper.spaces, wrapper.info_example, wrapper.horizon
        finally:
            probe.close()
        env_fns = [functools.partial(_make_gym_env, EnvCls, env_kwargs, env_backend)
                   for _ in range(n_envs)]
        if asynchronous:
            vector_env: SyncVectorEnv | AsyncVectorEnv = _make_async_vector_env(env_fns, context)
        else:
            vector_env = SyncVectorEnv(env_fns, copy=False,
                                       autoreset_mode=AutoresetMode.DISABLED)
        try:
            return cls(vector_env, spaces, info_example, horizon)
        except BaseException:
            _close_vector_env(vector_env)
            raise

    def reset(self, idx: np.ndarray | None = None) -> SpaceValue:
        """Start new episodes in every env (or those in ``idx``).

        Returns:
            observation rows [n], in the order of ``idx``.
        """
        B = self.num_envs
        seeds: list[int | None] = [None] * B
        if idx is None or len(idx) == B:
            seeds, self._next_reset_seeds = self._next_reset_seeds, seeds
            observation, _ = self._vector_env.reset(seed=seeds)
            self._finished[:] = False
            return self._observation_space.convert(observation)
        idx = np.asarray(idx, dtype=np.int64)
        if len(idx) == 0:
            return buffer_from_example(self._observation_space.null_value(), 0)
        reset_mask = np.zeros(B, dtype=bool)
        reset_mask[idx] = True
        for i in idx:
            seeds[i], self._next_reset_seeds[i] = self._next_reset_seeds[i], None
        observation, _ = self._vector_env.reset(seed=seeds, options={"reset_mask": reset_mask})
        self._finished[idx] = False
        return self._observation_space.convert(observation)[idx]

    def step(self, action: SpaceValue, idx: np.ndarray | None = None) -> VecStep:
        """Step every env once.

        Args:
            action: action rows [B].
            idx: None, or all B env indexes (gymnasium steps every env).

        Returns:
            ``VecStep(observation [B], reward float32 [B], done bool [B], env_info [B])``.
        """
        if idx is not None and len(idx) != self.num_envs:
            raise ValueError(
                f"GymVecEnv steps every env (steps_subsets=False); got idx naming {len(idx)} "
                f"of {self.num_envs} envs. Use env_backend='plain' or 'envpool' to step subsets.")
        if self._finished.any():
            raise RuntimeError(f"GymVecEnv: envs {np.flatnonzero(self._finished).tolist()} "
                               "finished their episodes; reset(idx) them before the next step.")
        observation, reward, terminated, truncated, infos = self._vector_env.step(
            self._action_space.revert_rows(action))
        done, timeout = done_and_timeout(terminated, truncated)
        self._finished[:] = done
        return VecStep(self._observation_space.convert(observation),
                       np.asarray(reward, dtype=np.float32), done,
                       self._env_info(infos, timeout))

    def seed(self, seed: int | None) -> None:
        """Env ``b`` starts its next episode from ``seed + b``; its action space is seeded so too.

        ``None`` changes nothing, as for :class:`~rlframe.envs.vector.EnvList`.
        """
        if seed is None:
            return
        self._next_reset_seeds = [seed + b for b in range(self.num_envs)]
        self._action_sampler.seed(seed)
        self._observation_space.seed(seed)

    def sample_actions(self) -> SpaceValue:
        """Random action rows [B], row ``b`` from env ``b``'s action space."""
        return self._action_sampler.sample()

    def close(self) -> None:
        """Close the vector env (and end its worker processes)."""
        if not self._closed:
            self._closed = True
            _close_vector_env(self._vector_env)

    def _env_info(self, infos: Mapping, timeout: np.ndarray) -> Any:
        buf = self._info_buf
        if infos or not self._info_only_timeout:
            dropped: list[str] = []
            _fill_info_rows(buf, self._info_example, infos, self.num_envs, dropped, "")
            if dropped:
                warn_dropped_info_keys("GymVecEnv", dropped, self._warned_keys)
        buf.timeout[:] = timeout  # Set after the infos: an info key "timeout" never wins.
        return buf


def _as_gym_env_wrapper(env: Any, EnvCls: Callable, env_backend: str) -> GymEnvWrapper:
    if not isinstance(env, GymEnvWrapper):
        name = getattr(EnvCls, "__qualname__", repr(EnvCls))
        raise TypeError(
            f"env_backend={env_backend!r} needs an EnvCls that returns a GymEnvWrapper "
            f"(e.g. rlframe.envs.gym.make), but EnvCls={name} returned "
            f"{type(env).__name__}; use env_backend='plain' for other env classes.")
    return env


def _make_gym_env(EnvCls: Callable[..., Env], env_kwargs: dict, env_backend: str) -> gym.Env:
    """The gymnasium env inside ``EnvCls(**env_kwargs)``, its first observations checked
    (:class:`~rlframe.envs.checks.ObservationCheckWrapper`) before the vector env casts them.

    Module level (under ``functools.partial``), so spawned workers can unpickle it.
    """
    wrapper = _as_gym_env_wrapper(EnvCls(**env_kwargs), EnvCls, env_backend)
    return ObservationCheckWrapper(wrapper.env, wrapper.observation_space, env_name(wrapper.env))


def _make_async_vector_env(env_fns: Sequence[Callable[[], gym.Env]],
                           context: str | None) -> AsyncVectorEnv:
    # Made in two steps so that the workers can be ended when __init__ fails
    # after starting them (e.g. an env that fails to build in a worker).
    vector_env = AsyncVectorEnv.__new__(AsyncVectorEnv)
    try:
        vector_env.__init__(env_fns, copy=False, context=context,  # type: ignore[misc]
                            autoreset_mode=AutoresetMode.DISABLED)
    except BaseException:
        _end_workers(vector_env)
        raise
    return vector_env


def _close_vector_env(vector_env: SyncVectorEnv | AsyncVectorEnv) -> None:
    try:
        vector_env.close()
    finally:
        if isinstance(vector_env, AsyncVectorEnv):
            _end_workers(vector_env)


def _end_workers(vector_env: AsyncVectorEnv) -> None:
    """Terminate and join the worker processes that are still running."""
    for pipe in getattr(vector_env, "parent_pipes", []):
        if pipe is not None:
            pipe.close()
    for process in getattr(vector_env, "processes", []):
        if process.is_alive():
            process.terminate()
        process.join()
    vector_env.closed = True  # Nothing left for close() or __del__ to do.


def _is_mask(value: Any, n: int) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.shape == (n,)


def _info_items(infos: Mapping, n: int) -> list[tuple[Any, Any, Any]]:
    """``(key, values, mask)`` of a vector info, skipping the ``_key`` masks themselves."""
    items = []
    for key, value in infos.items():
        mask = infos.get(f"_{key}")
        if _is_mask(mask, n):
            items.append((key, value, mask))
    return items


def _any_storable(value: Any, mask: np.ndarray, n: int) -> bool:
    """Whether a row of a vector info value would be kept by ``GymEnvWrapper``."""
    if isinstance(value, Mapping):
        return any(_any_storable(v, m, n) for _, v, m in _info_items(value, n))
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return True
    return any(is_storable(value[i]) for i in np.flatnonzero(mask))


def _fill_info_rows(buf: Any, example: tuple, infos: Mapping, n: int, dropped: list[str],
                    prefix: str) -> None:
    """Write a gymnasium vector info into info rows, as ``info_to_nt`` would row by row.

    Args:
        buf: info rows [n] of ``example``'s type (namedarraytuple, overwritten).
        example: ``GymEnvWrapper.info_example``.
        infos: the vector info: values [n] (or nested dicts), with ``_key`` masks.
        n: B.
        dropped: receives the (dotted) keys of storable values that were dropped.
        prefix: dotted path of ``infos`` (for ``dropped``).
    """
    given: dict[str, tuple[Any, Any]] = {}
    for key, value, mask in _info_items(infos, n):
        field = to_identifier(key)
        if field in example._fields and field not in given:
            given[field] = (value, mask)
        elif _any_storable(value, mask, n):
            dropped.append(f"{prefix}{key}")
    for field, ex, rows in zip(example._fields, example, buf):
        value, mask = given.get(field, (None, None))
        if is_namedtuple(ex):
            if value is not None and not isinstance(value, Mapping):
                dropped.append(f"{prefix}{field}")
                value = None
            _fill_info_rows(rows, ex, value or {}, n, dropped, f"{prefix}{field}.")
            continue
        rows[...] = 0
        if value is None:
            continue
        if isinstance(value, Mapping):
            dropped.append(f"{prefix}{field}")
        elif value.dtype.kind in "biuf" and value.shape[1:] == np.shape(ex):
            rows[mask] = value[mask]  # Casts to the schema's dtype (float64 -> float32).
        else:  # Objects (np.bool_, lists, ...) or another shape: row by row, like the wrapper.
            for i in np.flatnonzero(mask):
                leaf = info_leaf(value[i])
                if leaf is not None and np.shape(leaf) == np.shape(ex):
                    rows[i] = leaf
                else:
                    dropped.append(f"{prefix}{field}")
