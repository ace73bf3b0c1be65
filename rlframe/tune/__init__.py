"""Hyperparameter tuning on Optuna: ``rlframe tune`` and :func:`tune` (the ``tune`` extra).

See :mod:`rlframe.tune.study` for how trials run, survive being killed and share a study
across machines, and :mod:`rlframe.tune.space` for search spaces.
"""
from rlframe.tune.space import DEFAULT_SPACES, SpaceError, default_space, parse_space
from rlframe.tune.settings import TuneError, TuneSettings
from rlframe.tune.study import prepare, tune

__all__ = ["DEFAULT_SPACES", "SpaceError", "TuneError", "TuneSettings", "default_space",
           "parse_space", "prepare", "tune"]
