"""Environments: the rlframe env interface, the gymnasium adapter and Atari."""
from rlframe.envs.base import Env, EnvInfo, EnvSpaces, EnvStep

__all__ = ["Env", "EnvInfo", "EnvSpaces", "EnvStep"]
