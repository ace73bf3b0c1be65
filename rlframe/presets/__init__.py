"""Standard experiments: each algorithm with its agent, sampler, evaluating runner and
default hyperparameters per kind of env, built from a plain JSON-able config.

    runner, config = build_experiment(dict(algo="ppo", env_id="CartPole-v1"))

``config`` is the full config (defaults filled in, seed drawn): saved as a run's
``params.json``, ``build_experiment(config)`` rebuilds the same stack.
"""
from rlframe.presets.algos import ALGOS, PROFILES, AlgoPreset
from rlframe.presets.build import (CONFIG_KEYS, SAMPLERS, SECTIONS, accepted_kwargs,
                                   build_experiment, check_kwargs)
from rlframe.presets.envs import EnvTarget, atari_game, resolve_env

__all__ = ["ALGOS", "PROFILES", "AlgoPreset", "CONFIG_KEYS", "SAMPLERS", "SECTIONS",
           "accepted_kwargs", "build_experiment", "check_kwargs", "EnvTarget", "atari_game",
           "resolve_env"]
