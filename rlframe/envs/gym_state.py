"""The episode state of gymnasium envs that rebuild themselves when unpickled.

gymnasium's MuJoCo envs and ale-py's ALE envs pickle as their constructor's arguments
(``gymnasium.utils.EzPickle``): unpickled, they are fresh envs, their physics or emulator
at the start, their random generator unseeded, under wrappers (``TimeLimit``) that still
count the steps of the saved episode. A checkpoint that keeps an env mid-episode saves
what such an env holds beside it, and puts it back once the env is rebuilt:

- every such env: its random generator (``np_random``, which draws reset noise);
- MuJoCo (``MujocoEnv``): the whole simulation state (``MjData``: positions, velocities,
  controls, time, the solver's warm start), so the episode goes on step for step;
- ALE (ale-py's ``AtariEnv``): the emulator with its random generator (sticky actions).

Any other env that rebuilds itself has a state this module does not know, and is refused.
"""
from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
from gymnasium.utils import EzPickle


def episode_state(env: gym.Env) -> dict[str, Any] | None:
    """What ``env`` (an unwrapped gymnasium env) loses when pickled, to pickle beside it.

    Returns:
        None for an env that pickles whole (its state in its attributes); else a dict
        for :func:`restore_episode_state`.

    Raises:
        TypeError: ``env`` rebuilds itself when unpickled and is not a MuJoCo or ALE env,
            so its episode cannot be saved.
    """
    if not isinstance(env, EzPickle):
        return None
    state: dict[str, Any] = dict(np_random=env._np_random,
                                 np_random_seed=getattr(env, "_np_random_seed", None))
    if _is_mujoco(env):
        state["mujoco_data"] = env.data  # MjData pickles as a whole copy.
    elif callable(getattr(env, "clone_state", None)) and callable(
            getattr(env, "restore_state", None)):
        state["ale_state"] = env.clone_state(include_rng=True)
    else:
        raise TypeError(f"{type(env).__name__} rebuilds itself from its constructor's "
                        "arguments when unpickled (gymnasium's EzPickle), so its episode "
                        "cannot be saved mid-way")
    return state


def restore_episode_state(env: gym.Env, state: dict[str, Any] | None) -> None:
    """Put :func:`episode_state`'s ``state`` into ``env``, rebuilt by unpickling (None:
    nothing to put back)."""
    if state is None:
        return
    env._np_random = state["np_random"]
    if state["np_random_seed"] is not None:
        env._np_random_seed = state["np_random_seed"]
    if "mujoco_data" in state:
        import mujoco
        mujoco.mj_copyData(env.data, env.model, state["mujoco_data"])
    if "ale_state" in state:
        env.restore_state(state["ale_state"])


def _is_mujoco(env: gym.Env) -> bool:
    # A MuJoCo env was made by its module, which is then loaded (without mujoco, it cannot be).
    module = sys.modules.get("gymnasium.envs.mujoco.mujoco_env")
    return module is not None and isinstance(env, module.MujocoEnv)
