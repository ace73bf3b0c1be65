"""What a tuning directory runs: its settings (``tune.json``) and the names they take."""
from __future__ import annotations

import dataclasses
from typing import Any

from rlframe.tune.space import Dist, parse_space

TUNE_FILE = "tune.json"
OBJECTIVES = ("iqm", "mean")
PRUNERS = ("median", "halving", "none")
SAMPLERS = ("tpe", "random")


class TuneError(ValueError):
    """A tuning set-up that cannot run: the message names the setting."""


@dataclasses.dataclass
class TuneSettings:
    """What a tuning directory runs (``tune.json``)."""

    algo: str
    env_id: str
    n_steps: int
    trials: int
    seeds: list[int]
    objective: str
    space: dict[str, Any]
    config: dict[str, Any]
    storage: str
    study_name: str
    pruner: str
    sampler: str
    slots: int
    track: list[str] | None = None

    def dists(self) -> dict[str, Dist]:
        """The search space, parsed."""
        return parse_space(self.space)
