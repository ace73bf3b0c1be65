"""Benchmark suites as data: which algorithm on which env, for how many steps and seeds,
with which settings, and against which published score.

A suite is a JSON file (see ``benchmarks/suite/``)::

    {
      "name": "mujoco-1m",
      "description": "...",                      # optional
      "runs": [
        {"algo": "ppo", "env_id": "HalfCheetah-v5", "n_steps": 1000000, "seeds": 3,
         "config": {"kwargs": {"algo": {"learning_rate": 3e-4}}},   # optional
         "reference": {"score": 2906, "steps": 1000000,              # optional
                       "source": "CleanRL, ppo_continuous_action, HalfCheetah-v4",
                       "key": "ReturnAverage"},                       # optional
         "label": "ppo_halfcheetah",                                  # optional
         "notes": "where the settings come from"}                     # optional
      ]
    }

``seeds`` is a count (seeds 0 .. n-1) or a list of distinct seeds; ``config`` holds any
other keys of a :func:`~rlframe.presets.build_experiment` config (``kwargs``,
``sampler``, ``batch_B``, ``log_interval_steps``, ...). A run of an entry is the
experiment ``build_experiment`` builds from ``config`` with the entry's ``algo``,
``env_id``, ``n_steps`` and the seed; it lives in ``<out>/<label>/run_<seed>``
(``label`` defaults to ``<algo>_<env_id>``). A reference's ``key`` is the progress.csv
column its score compares with (default ``ReturnAverage``; Atari's published scores are
game scores, ``GameScoreAverage``). Off-policy runs save their replay buffer
with each snapshot (``checkpoint_replay=True``, unless the entry's
``config.kwargs.algo`` says otherwise), so that a run stopped and resumed learns as one
that was never stopped. ``notes`` is free text for readers (where
the settings come from). :func:`load_suite` checks the whole file,
each entry's experiment included (:func:`check_experiment`), before anything runs;
``rlframe benchmark --only`` builds the experiments of the entries it runs only.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from typing import TYPE_CHECKING, Any

from rlframe.presets.algos import ALGOS
from rlframe.presets.build import CONFIG_KEYS, _did_you_mean, build_experiment
from rlframe.utils.report.runs import Reference

if TYPE_CHECKING:
    from rlframe.runners.minibatch_rl import MinibatchRl

SUITE_KEYS = ("name", "description", "runs")
ENTRY_KEYS = ("algo", "env_id", "n_steps", "seeds", "config", "reference", "label", "notes")
REFERENCE_KEYS = ("score", "steps", "source", "key")
# Keys an entry sets itself, so its config may not.
_ENTRY_SET = ("algo", "env_id", "n_steps", "seed", "run_ID", "log_dir", "name",
              "snapshot_mode")


class SuiteError(ValueError):
    """A suite file that cannot run as written: the message names the entry and key."""


@dataclasses.dataclass(frozen=True)
class SuiteEntry:
    """One algorithm on one env: ``seeds`` runs of ``n_steps`` env steps each."""

    algo: str
    env_id: str
    n_steps: int
    seeds: tuple[int, ...]
    config: dict[str, Any]
    reference: Reference | None
    label: str
    notes: str = ""

    def train_config(self, seed: int) -> dict[str, Any]:
        """The ``build_experiment`` config of the run with ``seed``."""
        config = {**json.loads(json.dumps(self.config)), "algo": self.algo,
                  "env_id": self.env_id, "n_steps": self.n_steps, "seed": seed}
        if _keeps_replay(self.algo):
            kwargs = config.setdefault("kwargs", {})
            if isinstance(kwargs, dict) and isinstance(kwargs.setdefault("algo", {}), dict):
                kwargs["algo"].setdefault("checkpoint_replay", True)
        return config

    def run_dir(self, out_dir: str, seed: int) -> str:
        """Where the run with ``seed`` lives under ``out_dir``."""
        return os.path.join(out_dir, self.label, f"run_{seed}")


@dataclasses.dataclass(frozen=True)
class Suite:
    """A checked suite file."""

    name: str
    description: str
    entries: tuple[SuiteEntry, ...]


def load_suite(source: str | dict[str, Any], check_experiments: bool = True) -> Suite:
    """Read and check a suite.

    Args:
        source: a suite file's path, or its parsed JSON object.
        check_experiments: build each entry's experiment once (no env is stepped), so
            that an unknown env or config key is reported before anything runs.

    Raises:
        SuiteError: the first problem found, naming the entry and the key.
    """
    if isinstance(source, str):
        if not os.path.isfile(source):
            raise SuiteError(f"no suite file at {source!r}.")
        with open(source) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise SuiteError(f"{source} is not valid JSON: {e}") from None
    else:
        data = source
    if not isinstance(data, dict):
        raise SuiteError(f"a suite is a JSON object with keys {SUITE_KEYS}, got "
                         f"{type(data).__name__}.")
    _unknown_keys(data, SUITE_KEYS, "the suite")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise SuiteError(f"the suite needs a 'name' (a non-empty string), got {name!r}.")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        raise SuiteError(f"the suite needs 'runs', a non-empty list of entries, got {runs!r}.")
    entries = tuple(_entry(i, raw, check_experiments) for i, raw in enumerate(runs))
    labels = [entry.label for entry in entries]
    for label in labels:
        if labels.count(label) > 1:
            raise SuiteError(f"two entries have the label {label!r}: give them different "
                             "'label's (each names the entry's folder).")
    return Suite(name, str(data.get("description", "")), entries)


def _unknown_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise SuiteError(f"{where}: unknown key {key!r}."
                             f"{_did_you_mean(str(key), list(allowed))} Keys: "
                             f"{', '.join(allowed)}.")


def _entry(index: int, raw: Any, check_experiments: bool) -> SuiteEntry:
    where = f"runs[{index}]"
    if not isinstance(raw, dict):
        raise SuiteError(f"{where} must be an object with keys {ENTRY_KEYS}, got {raw!r}.")
    _unknown_keys(raw, ENTRY_KEYS, where)
    for key in ("algo", "env_id", "n_steps", "seeds"):
        if key not in raw:
            raise SuiteError(f"{where} needs {key!r}.")
    algo, env_id = raw["algo"], raw["env_id"]
    where = entry_where(index, algo, env_id)
    n_steps = _positive_int(raw["n_steps"], f"{where}: n_steps")
    seeds = _seeds(raw["seeds"], where)
    config = raw.get("config", {})
    if not isinstance(config, dict):
        raise SuiteError(f"{where}: config must be an object of build_experiment keys, got "
                         f"{config!r}.")
    for key in config:
        if key in _ENTRY_SET:
            raise SuiteError(f"{where}: config sets {key!r}, which the suite sets itself "
                             f"({', '.join(_ENTRY_SET[:3])} are entry keys; seeds come from "
                             "'seeds'; run directories and snapshots from the suite's "
                             "runner).")
        if key not in CONFIG_KEYS:
            raise SuiteError(f"{where}: unknown config key {key!r}."
                             f"{_did_you_mean(str(key), list(CONFIG_KEYS))} Config keys: "
                             f"{', '.join(k for k in CONFIG_KEYS if k not in _ENTRY_SET)}.")
    label = raw.get("label", f"{algo}_{str(env_id).replace('/', '-')}")
    if not isinstance(label, str) or not label or os.sep in label or label.startswith("."):
        raise SuiteError(f"{where}: label must be a plain folder name, got {label!r}.")
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise SuiteError(f"{where}: notes must be a string, got {notes!r}.")
    entry = SuiteEntry(str(algo), str(env_id), n_steps, seeds, config,
                       _reference(raw.get("reference"), where), label, notes)
    if check_experiments:
        check_experiment(entry, where)
    return entry


def entry_where(index: int, algo: Any, env_id: Any) -> str:
    """How messages name the suite's entry ``index``: ``runs[1] (dqn on pong)``."""
    return f"runs[{index}] ({algo} on {env_id})"


def check_experiment(entry: SuiteEntry, where: str) -> tuple[MinibatchRl, dict[str, Any]]:
    """Build ``entry``'s experiment once (no env is stepped), so that an unknown env or
    config key, or more sampler workers than this process's CPUs, is reported before
    anything runs.

    Returns:
        ``build_experiment``'s ``(runner, full_config)`` for the entry's first seed.

    Raises:
        SuiteError: naming ``where`` and the problem.
    """
    try:
        return build_experiment(entry.train_config(entry.seeds[0]))
    except (ValueError, TypeError) as error:
        raise SuiteError(f"{where}: {' '.join(str(error).split())}") from None


def _keeps_replay(algo: str) -> bool:
    """Whether the preset algorithm ``algo`` has a replay buffer it can snapshot."""
    preset = ALGOS.get(algo)
    return preset is not None and "checkpoint_replay" in inspect.signature(
        preset.AlgoCls.__init__).parameters


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 1e6 in JSON.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SuiteError(f"{what} must be a positive whole number, got {value!r}.")
    return value


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, list):
        if not value or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                            for s in value) or len(set(value)) != len(value):
            raise SuiteError(f"{where}: seeds must be a count or a list of distinct "
                             f"non-negative ints, got {value!r}.")
        return tuple(value)
    return tuple(range(_positive_int(value, f"{where}: seeds")))


def _reference(raw: Any, where: str) -> Reference | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: reference must be an object with keys {REFERENCE_KEYS}, "
                         f"got {raw!r}.")
    _unknown_keys(raw, REFERENCE_KEYS, f"{where}: reference")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SuiteError(f"{where}: the reference score {raw.get('score')!r} has no 'source': "
                         "say where it was published (paper, documentation, table).")
    score = raw.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise SuiteError(f"{where}: reference score must be a finite number, got {score!r}.")
    steps = _positive_int(raw.get("steps"), f"{where}: reference steps")
    key = raw.get("key", "ReturnAverage")
    if not isinstance(key, str) or not key.strip():
        raise SuiteError(f"{where}: reference key must name the progress.csv column the score "
                         f"compares with (e.g. 'GameScoreAverage'), got {key!r}.")
    return Reference(float(score), steps, source.strip(), key.strip())
