"""From an env id to the env class, its keyword arguments and its profile.

Atari games run on rlframe's :class:`~rlframe.envs.atari.atari_env.AtariEnv`
with rlpyt's preprocessing (4 frames skipped, 104x80 grayscale, 4 stacked,
episodic lives, clipped rewards, no sticky actions). An Atari game is named
either by its rlpyt name (``"pong"``, ``"space_invaders"``) or by any ALE id
gymnasium knows (``"ALE/Pong-v5"``, ``"PongNoFrameskip-v4"``): such an id only
picks the game; the id's own settings (e.g. v5's sticky actions) are not used,
``AtariEnv`` keywords set them (``repeat_action_probability=0.25``). Any other id
is a gymnasium id, built by :func:`rlframe.envs.gym.make`.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

import gymnasium as gym

from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo, game_names
from rlframe.envs.gym import check_env_id
from rlframe.envs.gym import make as gym_make
from rlframe.envs.traj_info import TrajInfo

_ALE_ENTRY_POINT = "ale_py.env:AtariEnv"
_MUJOCO_ENTRY_POINT = "gymnasium.envs.mujoco"


@dataclasses.dataclass(frozen=True)
class EnvTarget:
    """How to build the env a run names.

    Args:
        env_id: the id as given.
        EnvCls: env class or factory for the sampler.
        env_kwargs: its keyword arguments (``id=`` or ``game=`` plus extras).
        TrajInfoCls: trajectory statistics class (Atari adds ``GameScore``).
        action_kind: ``"discrete"``, ``"continuous"`` or ``"other"``.
        profile: one of :data:`rlframe.presets.algos.PROFILES`.
        action_space: the action space, as text for error messages.
    """

    env_id: str
    EnvCls: Callable[..., Any]
    env_kwargs: dict[str, Any]
    TrajInfoCls: type[TrajInfo]
    action_kind: str
    profile: str
    action_space: str


def resolve_env(env_id: str, extra_kwargs: dict[str, Any] | None = None) -> EnvTarget:
    """Find what ``env_id`` names and how to build it.

    Args:
        env_id: an Atari game name, an ALE id or a gymnasium id.
        extra_kwargs: keyword arguments of ``AtariEnv`` or of ``gymnasium.make``.

    Raises:
        ValueError: unknown id (naming close ids and games).
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string, got {env_id!r}.")
    extra = dict(extra_kwargs or {})
    game = atari_game(env_id)
    if game is not None:
        return EnvTarget(env_id, AtariEnv, dict(game=game, **extra), AtariTrajInfo,
                         action_kind="discrete", profile="atari", action_space="Atari actions")
    try:
        env = gym.make(env_id, **extra)
    except TypeError as error:
        raise ValueError(f"env {env_id!r} does not take the env settings {extra} "
                         f"(config section 'env'): {error}") from None
    try:
        space = env.action_space
    finally:
        env.close()
    action_kind = ("discrete" if isinstance(space, gym.spaces.Discrete) else
                   "continuous" if isinstance(space, gym.spaces.Box) else "other")
    entry_point = str(gym.spec(env_id).entry_point)
    profile = "mujoco" if entry_point.startswith(_MUJOCO_ENTRY_POINT) else action_kind
    return EnvTarget(env_id, gym_make, dict(id=env_id, **extra), TrajInfo, action_kind,
                     profile, action_space=str(space))


def atari_game(env_id: str) -> str | None:
    """The rlpyt game name ``env_id`` names, or None for a gymnasium id.

    Raises:
        ValueError: ``env_id`` is neither a game nor a registered gymnasium id.
    """
    games = game_names()
    if env_id in games:
        return env_id
    try:
        check_env_id(env_id)  # Registers the ALE ids too.
    except ValueError:
        raise ValueError(_unknown_env_message(env_id, games)) from None
    spec = gym.spec(env_id)
    if str(spec.entry_point) == _ALE_ENTRY_POINT:
        return str(spec.kwargs["game"])
    return None


def _unknown_env_message(env_id: str, games: list[str]) -> str:
    by_lower = {name.lower(): name for name in [*gym.registry, *games]}
    close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(by_lower[c] for c in close)}?" if close else ""
    return (f"Unknown env id {env_id!r}: neither a gymnasium id nor an Atari game.{hint} "
            "See gymnasium.pprint_registry() for gymnasium ids and "
            "rlframe.envs.atari.atari_env.game_names() for Atari games.")
