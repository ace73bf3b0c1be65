"""B envs stepped as one: the backends, and the factory that picks one.

The interface (:class:`VecEnv`, :class:`VecStep`) and the plain backend
(:class:`EnvList`) live in :mod:`rlframe.envs.vec_env` and are importable from
here too. Backends (the samplers' ``env_backend`` argument):

* ``"plain"`` (:class:`EnvList`): one rlframe env per row, stepped in turn; the
  fastest path for cheap Python envs, and the one every env class supports.
* ``"gymnasium"`` / ``"gymnasium_async"``: gymnasium's ``SyncVectorEnv`` /
  ``AsyncVectorEnv`` (:mod:`rlframe.envs.gym_vector`).
* ``"envpool"``: EnvPool's C++ vector envs (:mod:`rlframe.envs.envpool`,
  the ``envpool`` extra); with ``EnvCls=AtariEnv``, EnvPool's Atari set up from
  the ``AtariEnv`` keywords (:mod:`rlframe.envs.atari.envpool_atari`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from rlframe.envs.vec_env import EnvList, VecEnv, VecStep, as_vec_env  # noqa: F401

if TYPE_CHECKING:
    from rlframe.envs.base import Env

ENV_BACKENDS = ("plain", "gymnasium", "gymnasium_async", "envpool")


def check_env_backend(env_backend: str) -> str:
    """Return ``env_backend`` if it names a backend, else raise ValueError naming the choices."""
    if env_backend not in ENV_BACKENDS:
        raise ValueError(f"env_backend={env_backend!r} is not a vector env backend; "
                         f"choose one of {ENV_BACKENDS}.")
    return env_backend


def make_vec_env(env_backend: str, EnvCls: Callable[..., Env], env_kwargs: dict,
                 n_envs: int) -> VecEnv:
    """Build ``n_envs`` envs of ``EnvCls(**env_kwargs)`` as one :class:`VecEnv`.

    Args:
        env_backend: one of ``ENV_BACKENDS`` (see the module docstring).
        EnvCls: the sampler's env class or factory.
        env_kwargs: its keyword arguments.
        n_envs: B.
    """
    check_env_backend(env_backend)
    if env_backend == "plain":
        return EnvList([EnvCls(**env_kwargs) for _ in range(n_envs)])
    if env_backend in ("gymnasium", "gymnasium_async"):
        from rlframe.envs.gym_vector import GymVecEnv
        return GymVecEnv.from_env_cls(EnvCls, env_kwargs, n_envs,
                                      asynchronous=env_backend == "gymnasium_async")
    from rlframe.envs.atari.atari_env import AtariEnv
    if isinstance(EnvCls, type) and issubclass(EnvCls, AtariEnv):
        from rlframe.envs.atari.envpool_atari import EnvPoolAtariVecEnv
        return EnvPoolAtariVecEnv.from_atari(EnvCls, env_kwargs, n_envs)
    from rlframe.envs.envpool import EnvPoolVecEnv
    return EnvPoolVecEnv.from_env_cls(EnvCls, env_kwargs, n_envs)
