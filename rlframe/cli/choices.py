"""The names the command line offers, without importing the stack behind them (torch),
so that ``rlframe --help`` and usage errors answer at once. A test checks that they are
the names of ``rlframe.presets``' tables and the logger's snapshot modes."""

ALGO_NAMES = ("ppo", "a2c", "dqn", "catdqn", "r2d1", "ddpg", "td3", "sac")
"""Algorithms of ``build_experiment``, by command-line name (``presets.ALGOS``' keys)."""

SAMPLER_NAMES = ("serial", "cpu", "gpu", "alternating")
"""Samplers by config name (``presets.SAMPLERS``' keys)."""

AUTOTUNE_BACKENDS = ("plain", "gymnasium", "envpool")
"""Env backends ``rlframe autotune`` tries (``presets.autotune.BACKEND_CHOICES``)."""

SECTIONS = ("algo", "agent", "sampler", "runner", "env")
"""Sections of ``config["kwargs"]`` (and of the command line's ``--config``)."""

SNAPSHOT_MODES = ("all", "last", "gap", "last+gap", "none")
"""``logger_context``'s snapshot modes (``rlframe.utils.logging.logger.SNAPSHOT_MODES``)."""

TRACKERS = ("mlflow", "wandb")
"""Experiment trackers of ``--track`` (``rlframe.utils.logging.tracking.TRACKERS``)."""
