"""EnvPool's C++ vector envs as a :class:`~rlframe.envs.vector.VecEnv`.

The ``"envpool"`` backend (the ``envpool`` extra: ``pip install -e ".[envpool]"``).
EnvPool implements its own versions of the tasks: CartPole follows gymnasium's
dynamics but draws initial states from its own generator, and its Atari tasks
come preprocessed (84x84 grayscale, 4 stacked frames, frame skip, noops) with
EnvPool's defaults, so ``"Pong-v5"`` is not gymnasium's ``"ALE/Pong-v5"``.

Rows follow the VecEnv semantics:

* ``done = terminated or truncated``, ``env_info.timeout = truncated and not
  terminated``; ``env_info`` also holds EnvPool's per-env scalar infos
  (``elapsed_step``; for Atari ``lives``, the unclipped ``reward`` and
  ``terminated``), float64 stored as float32;
* an episode that terminates on the time limit's step is a termination for
  gymnasium, but EnvPool reports it as truncated only: such a step has
  ``timeout`` True here, unless the task's info has ``terminated`` (Atari),
  which then corrects it;
* EnvPool would reset a finished env on its next step; here only
  :meth:`EnvPoolVecEnv.reset` (``idx``) resets it, and stepping it before that
  raises RuntimeError;
* ``step(action, idx)`` steps only the envs in ``idx`` (``steps_subsets``);
* ``envs`` is empty (EnvPool's envs live in C++).

Of the env's settings only the task id and ``max_episode_steps`` reach EnvPool;
everything else keeps EnvPool's defaults for the task (e.g. Atari's
``episodic_life=False``, whose explicit resets would restart the whole game).

EnvPool seeds env ``b`` with ``seed + b`` only when the pool is built, so
:meth:`EnvPoolVecEnv.seed` rebuilds the pool, at the next :meth:`~EnvPoolVecEnv.reset`
of all envs (every env starts a new episode there anyway).
"""
from __future__ import annotations

import contextlib
import difflib
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from rlframe.envs.base import EnvSpaces
from rlframe.envs.gym import build_info_tuples, done_and_timeout
from rlframe.envs.vec_env import ActionSampler, VecEnv, VecStep
from rlframe.spaces.gym_wrapper import GymSpaceWrapper
from rlframe.utils.buffer import buffer_from_example

if TYPE_CHECKING:
    from types import ModuleType

    from rlframe.envs.base import Env
    from rlframe.spaces.base import SpaceValue

INT32_LIMIT = 2 ** 31
"""EnvPool takes int32 seeds: env ``b``'s ``seed + b`` must stay below this."""


def import_envpool() -> ModuleType:
    """The ``envpool`` module, or an ImportError saying how to install it."""
    try:
        import envpool
    except ImportError as e:
        raise ImportError('env_backend="envpool" needs EnvPool: pip install -e ".[envpool]" '
                          '(or pip install envpool).') from e
    return envpool


def check_envpool_id(task_id: str) -> None:
    """Raise ValueError, with close EnvPool ids, if EnvPool has no task ``task_id``."""
    all_ids = import_envpool().list_all_envs()
    if task_id not in all_ids:
        by_lower = {k.lower(): k for k in all_ids}
        close = [by_lower[m] for m in difflib.get_close_matches(str(task_id).lower(),
                                                                 list(by_lower), n=5, cutoff=0.6)]
        hint = f" Close EnvPool ids: {', '.join(close)}." if close else ""
        raise ValueError(f"env_backend='envpool' has no task id={task_id!r}.{hint} "
                         f"See envpool.list_all_envs() for all ids.")


class EnvPoolVecEnv(VecEnv):
    """B envs of one EnvPool task, in EnvPool's synchronous mode (see the module docstring).

    Args:
        task_id: an EnvPool task id, e.g. ``"CartPole-v1"``.
        num_envs: B.
        max_episode_steps: the time limit (None: the task's default).
        seed: env ``b`` of the first pool starts from ``seed + b`` (None: a random seed).
        envpool_kwargs: further options of ``envpool.make`` for the task (Atari's
            ``stack_num``, ``episodic_life``, ...).
    """

    steps_subsets = True

    def __init__(self, task_id: str, num_envs: int, *, max_episode_steps: int | None = None,
                 seed: int | None = None, envpool_kwargs: dict[str, Any] | None = None) -> None:
        self._envpool = import_envpool()
        check_envpool_id(task_id)
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got num_envs={num_envs}.")
        self.task_id = task_id
        self.num_envs = num_envs
        self._make_kwargs: dict[str, Any] = dict(num_envs=num_envs, **(envpool_kwargs or {}))
        if max_episode_steps is not None:
            self._make_kwargs["max_episode_steps"] = int(max_episode_steps)
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._finished = np.zeros(num_envs, dtype=bool)  # Done and not reset since.
        self._pool_seed = self._random_seed() if seed is None else self._check_seed(seed)
        self._pool: Any = self._make_pool()
        self._rebuild = False
        spec = self._pool.spec
        self.horizon = int(spec.config.max_episode_steps)
        self._observation_space = GymSpaceWrapper(self._pool.observation_space, name="obs")
        self._action_space = GymSpaceWrapper(self._pool.action_space, name="act")
        self.spaces = EnvSpaces(observation=self._observation_space, action=self._action_space)
        self.envs = []
        self._action_sampler = ActionSampler(self._action_space, num_envs)
        self._info_keys = _scalar_info_keys(spec)
        self._has_terminated_info = any(k == "terminated" for k, _ in self._info_keys)
        self._info_example = build_info_tuples(
            {**{k: np.zeros((), dtype) for k, dtype in self._info_keys},
             "timeout": np.bool_(False)})
        self._info_buf = buffer_from_example(self._info_example, num_envs)
        self._info_rows = [getattr(self._info_buf, f) for f in self._info_example._fields]

    @classmethod
    def from_env_cls(cls, EnvCls: Callable[..., Env], env_kwargs: dict,
                     n_envs: int) -> EnvPoolVecEnv:
        """``n_envs`` envs of the EnvPool task named by ``env_kwargs["id"]``.

        Of ``env_kwargs`` only ``id`` and ``max_episode_steps`` are used (others
        are ignored with a warning). Without ``id`` the task id is the spec id of
        the gymnasium env inside ``EnvCls(**env_kwargs)``.

        Raises:
            ValueError: if no task id is found, or EnvPool does not know it.
        """
        task_id = env_kwargs.get("id")
        if task_id is None:
            task_id = _spec_id(EnvCls(**env_kwargs))
        if task_id is None:
            raise ValueError("env_backend='envpool' takes the EnvPool task id from "
                             f"env_kwargs['id'] (or the env's gymnasium spec); got "
                             f"env_kwargs={env_kwargs!r} and an env without a spec id.")
        ignored = sorted(set(env_kwargs) - {"id", "max_episode_steps"})
        if ignored:
            warnings.warn(f"env_backend='envpool' ignores env_kwargs {ignored}: EnvPool's "
                          f"task {task_id!r} is built with its own defaults.", stacklevel=2)
        return cls(task_id, n_envs, max_episode_steps=env_kwargs.get("max_episode_steps"))

    def reset(self, idx: np.ndarray | None = None) -> SpaceValue:
        """Start new episodes in every env (or those in ``idx``).

        After :meth:`seed`, the next reset must name every env (it builds the new pool).

        Returns:
            observation rows [n], in the order of ``idx``.
        """
        some_envs = idx is not None and len(idx) != self.num_envs
        if self._rebuild:
            if idx is not None and some_envs:
                raise ValueError(
                    f"EnvPoolVecEnv: seed() takes effect at the next reset of all envs (EnvPool "
                    f"seeds envs only when it builds them); got reset(idx) of {len(idx)} of "
                    f"{self.num_envs} envs.")
            self._pool.close()
            self._pool = self._make_pool()
            self._rebuild = False
        ids = np.asarray(idx, dtype=np.int32) if some_envs else self._all_ids
        if len(ids) == 0:
            return buffer_from_example(self._observation_space.null_value(), 0)
        observation, info = self._pool.reset(ids)
        self._finished[ids] = False
        (observation,), info = self._in_order(ids, (observation,), info)
        self._after_reset(ids, info)
        return self._observation_space.convert(observation)

    def _after_reset(self, ids: np.ndarray, info: dict) -> None:
        """Subclasses read the reset's scalar ``info`` here (rows in the order of ``ids``)."""

    def step(self, action: SpaceValue, idx: np.ndarray | None = None) -> VecStep:
        """Step every env (or those in ``idx``) once.

        Args:
            action: action rows [n], aligned with ``idx`` when given.
            idx: int array of env indexes, or None for all.

        Returns:
            ``VecStep(observation [n], reward float32 [n], done bool [n], env_info [n])``.
        """
        ids = self._all_ids if idx is None else np.asarray(idx, dtype=np.int32)
        self._check_not_finished(ids)
        observation, reward, terminated, truncated, info = self._pool_step(
            self._action_space.revert_rows(action), ids)
        if self._has_terminated_info:
            # EnvPool reports an episode that terminates on the time limit's step as
            # truncated only; its "terminated" info (Atari) says that it ended.
            terminated = terminated | np.asarray(info["terminated"], dtype=bool)
        done, timeout = done_and_timeout(terminated, truncated)
        self._finished[ids] = done
        n = len(ids)
        for rows, (key, _) in zip(self._info_rows, self._info_keys):
            rows[:n] = info[key]
        self._info_rows[-1][:n] = timeout
        return VecStep(self._observation_space.convert(observation),
                       np.asarray(reward, dtype=np.float32), done, self._info_buf[:n])

    def _pool_step(self, action_rows: Any, ids: np.ndarray) -> tuple:
        """EnvPool's step of the envs ``ids``: ``(observation, reward, terminated,
        truncated, info)``, rows and scalar infos in the order of ``ids``."""
        observation, reward, terminated, truncated, info = self._pool.step(action_rows, ids)
        rows, info = self._in_order(ids, (observation, reward, terminated, truncated), info)
        return (*rows, info)

    def _in_order(self, ids: np.ndarray, rows: tuple, info: dict) -> tuple[tuple, dict]:
        """``rows`` and the scalar infos that EnvPool returned for ``ids``, put in the
        order of ``ids`` (EnvPool may return them in another)."""
        order = _row_order(info["env_id"], ids)
        if order is None:
            return rows, info
        return _take_rows(rows, order), {k: np.asarray(info[k])[order] for k, _ in self._info_keys}

    def _check_not_finished(self, ids: np.ndarray) -> None:
        if self._finished[ids].any():
            # EnvPool would silently start a new episode in place of this step.
            raise RuntimeError(
                f"EnvPoolVecEnv: envs {ids[self._finished[ids]].tolist()} finished their "
                "episodes; reset(idx) them before stepping them again.")

    def seed(self, seed: int | None) -> None:
        """Env ``b`` starts its next episode from ``seed + b``; its action space is seeded so too.

        The pool is rebuilt with ``seed`` at the next :meth:`reset` of all envs.
        ``None`` changes nothing, as for :class:`~rlframe.envs.vector.EnvList`.
        """
        if seed is None:
            return
        self._pool_seed = self._check_seed(seed)
        self._rebuild = True
        self._action_sampler.seed(seed)
        self._observation_space.seed(seed)

    def sample_actions(self) -> SpaceValue:
        """Random action rows [B], row ``b`` from env ``b``'s action space."""
        return self._action_sampler.sample()

    def close(self) -> None:
        """Close the pool."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _make_pool(self) -> Any:
        with _quiet_box_casts():
            pool = self._envpool.make(self.task_id, env_type="gymnasium", seed=self._pool_seed,
                                      **self._make_kwargs)
            # The pool builds its spaces on first use and keeps them: build them quietly.
            self._pool_spaces = (pool.observation_space, pool.action_space)
        return pool

    def _check_seed(self, seed: int) -> int:
        if not 0 <= seed <= INT32_LIMIT - self.num_envs:
            raise ValueError(f"env_backend='envpool' takes seeds in [0, "
                             f"{INT32_LIMIT - self.num_envs}] for num_envs={self.num_envs} "
                             f"(EnvPool seeds are int32), got seed={seed}.")
        return int(seed)

    def _random_seed(self) -> int:
        return int(np.random.default_rng().integers(INT32_LIMIT - self.num_envs))


@contextlib.contextmanager
def _quiet_box_casts() -> Iterator[None]:
    """Silence gymnasium's warning on EnvPool's float64 bounds of float32 boxes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
        yield


def _scalar_info_keys(spec: Any) -> list[tuple[str, np.dtype]]:
    """EnvPool's per-env scalar info keys and their stored dtypes (float64 -> float32).

    ``env_id`` and ``players.*`` are EnvPool's bookkeeping; array infos (Atari's
    ``ram``) are left out.
    """
    keys = []
    for name, array_spec in spec.state_array_spec.items():
        if name.startswith("info:"):
            name = name[len("info:"):]
        elif name != "elapsed_step":
            continue
        if name == "env_id" or "." in name or tuple(array_spec.shape) not in ((), (-1,)):
            continue  # (-1,) is per player: one value per env for single-player tasks.
        dtype = np.dtype(array_spec.dtype)
        keys.append((name, np.dtype(np.float32) if dtype == np.float64 else dtype))
    return keys


def _spec_id(env: Any) -> str | None:
    """The gymnasium spec id of an rlframe env (or of the gymnasium env it wraps)."""
    try:
        spec = getattr(getattr(env, "env", env), "spec", None)
        return getattr(spec, "id", None)
    finally:
        if callable(getattr(env, "close", None)):
            env.close()


def _row_order(env_id: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Positions that put rows returned for ``env_id`` in the order of ``ids`` (None: already)."""
    env_id = np.asarray(env_id)
    if np.array_equal(env_id, ids):
        return None
    position = {int(e): i for i, e in enumerate(env_id)}
    return np.array([position[int(i)] for i in ids])


def _take_rows(value: Any, order: np.ndarray) -> Any:
    if isinstance(value, dict):
        return {k: _take_rows(v, order) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_take_rows(v, order) for v in value)
    return np.asarray(value)[order]
