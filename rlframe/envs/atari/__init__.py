"""Atari 2600 games on the Arcade Learning Environment (ale-py)."""
from rlframe.envs.atari.atari_env import (
    ACTION_INDEX,
    ACTION_MEANING,
    AtariEnv,
    AtariTrajInfo,
    EnvInfo,
    game_names,
)

__all__ = ["ACTION_INDEX", "ACTION_MEANING", "AtariEnv", "AtariTrajInfo", "EnvInfo", "game_names"]
