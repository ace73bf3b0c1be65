"""Search spaces of ``rlframe tune``: a distribution per config key, and their defaults.

A space is a dict (a JSON or YAML file for ``--space``) from config keys to
distributions::

    {"kwargs.algo.learning_rate": {"low": 1e-5, "high": 1e-2, "log": true},
     "algo.epochs": {"low": 1, "high": 20},                       # int: both bounds ints
     "batch_T": {"choices": [64, 128, 256]},
     "agent.model_kwargs.hidden_sizes": {"choices": [[64, 64], [256, 256]]}}

Keys are ``build_experiment`` config keys: a run setting (``batch_T``, ``batch_B``,
``n_steps``, ``log_interval_steps``) or a keyword of a section, written
``kwargs.<section>.<keyword>[.<nested keyword>]`` or just ``<section>.<keyword>...``
(sections: algo, agent, sampler, runner, env). A distribution is ``{"choices": [...]}``
(any JSON values: lists too), or ``{"low": a, "high": b}`` with optional ``"log": true``
and ``"step"``; it draws ints when both bounds are ints (``"type": "float"`` says
otherwise). Values drawn are written into the trial's config, so a trial is an
ordinary run whose ``params.json`` holds them.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from typing import TYPE_CHECKING, Any, Union

from rlframe.presets.build import RUN_KEYS, SECTIONS, _did_you_mean

if TYPE_CHECKING:
    import optuna

JSONValue = Union[None, bool, int, float, str, list, dict]
"""A value a space file can hold, and so a value a trial can draw."""

_DIST_KEYS = ("low", "high", "log", "step", "choices", "type")


class SpaceError(ValueError):
    """A search space that cannot be used: the message names the key and what is wrong."""


@dataclasses.dataclass(frozen=True)
class Dist:
    """One key's distribution: ``choices`` (categorical) or ``low``..``high``."""

    key: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    integer: bool = False

    def suggest(self, trial: optuna.trial.Trial) -> JSONValue:
        """Draw this key's value from an Optuna trial (categorical choices that are
        not plain values go through Optuna as their JSON text)."""
        if self.choices is not None:
            if all(_plain(c) for c in self.choices):
                return trial.suggest_categorical(self.key, list(self.choices))
            text = trial.suggest_categorical(self.key, [json.dumps(c) for c in self.choices])
            return json.loads(text)
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)

    def decode(self, value: JSONValue) -> JSONValue:
        """A value as Optuna stored it, as it goes into the config."""
        if self.choices is not None and not all(_plain(c) for c in self.choices):
            return json.loads(value)
        return value

    def middle(self) -> JSONValue:
        """A value inside the distribution (for checking the space)."""
        if self.choices is not None:
            return copy.deepcopy(self.choices[0])
        value = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        return int(round(value)) if self.integer else float(value)

    def to_json(self) -> dict[str, Any]:
        """The distribution as a space file writes it."""
        if self.choices is not None:
            return dict(choices=list(self.choices))
        out: dict[str, Any] = dict(low=self.low, high=self.high)
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = self.step
        if not self.integer and isinstance(self.low, int) and isinstance(self.high, int):
            out["type"] = "float"
        return out


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def canonical_key(key: str) -> str:
    """``key`` with its section under ``kwargs`` (``algo.x`` -> ``kwargs.algo.x``)."""
    head = key.split(".", 1)[0]
    if head in SECTIONS and "." in key:
        return "kwargs." + key
    return key


def parse_space(raw: dict[str, dict[str, Any]], where: str = "the search space"
                ) -> dict[str, Dist]:
    """Check a space (a dict of key -> distribution) and return it by canonical key.

    Raises:
        SpaceError: naming the key: an unknown key (close names suggested), or a
            distribution with bad bounds, an empty ``choices``, an unknown field.
    """
    if not isinstance(raw, dict) or not raw:
        raise SpaceError(f"{where} must be a non-empty object of config key -> "
                         f"distribution, got {raw!r}.")
    space: dict[str, Dist] = {}
    for key, spec in raw.items():
        if not isinstance(key, str) or not key:
            raise SpaceError(f"{where}: a key must be a config key, got {key!r}.")
        name = canonical_key(key)
        _check_key(name, key, where)
        if name in space:
            raise SpaceError(f"{where}: {key!r} and another key name the same setting "
                             f"{name!r}.")
        space[name] = _dist(name, spec, where)
    return space


def _check_key(name: str, key: str, where: str) -> None:
    parts = name.split(".")
    if parts[0] == "kwargs":
        if len(parts) < 3 or parts[1] not in SECTIONS:
            section = parts[1] if len(parts) > 1 else ""
            raise SpaceError(f"{where}: unknown key {key!r}: a keyword is written "
                             f"<section>.<keyword> with a section of {', '.join(SECTIONS)}."
                             f"{_did_you_mean(section, list(SECTIONS)) if section else ''}")
        return  # The keyword itself is checked by building a trial's experiment.
    if len(parts) > 1 or name not in RUN_KEYS:
        close = _did_you_mean(parts[0], [*RUN_KEYS, *SECTIONS])
        raise SpaceError(f"{where}: unknown key {key!r}.{close} Keys are run settings "
                         f"({', '.join(RUN_KEYS)}) or <section>.<keyword> with a section "
                         f"of {', '.join(SECTIONS)}.")


def _dist(name: str, spec: Any, where: str) -> Dist:
    what = f"{where}: {name}"
    if not isinstance(spec, dict):
        raise SpaceError(f"{what} must be a distribution ({{\"low\": .., \"high\": ..}} or "
                         f"{{\"choices\": [..]}}), got {spec!r}.")
    for field in spec:
        if field not in _DIST_KEYS:
            raise SpaceError(f"{what}: unknown field {field!r}."
                             f"{_did_you_mean(str(field), list(_DIST_KEYS))} Fields: "
                             f"{', '.join(_DIST_KEYS)}.")
    kind = spec.get("type")
    if kind not in (None, "float", "int", "categorical"):
        raise SpaceError(f"{what}: type must be float, int or categorical, got {kind!r}.")
    if "choices" in spec or kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{what}: choices must be a non-empty list, got {choices!r}.")
        extra = [f for f in ("low", "high", "log", "step") if f in spec]
        if extra:
            raise SpaceError(f"{what}: choices cannot go with {', '.join(extra)}.")
        return Dist(name, choices=tuple(choices))
    low, high = spec.get("low"), spec.get("high")
    for bound, value in (("low", low), ("high", high)):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value)):
            raise SpaceError(f"{what}: {bound} must be a finite number, got {value!r}.")
    integer = kind == "int" or (kind is None and isinstance(low, int) and isinstance(high, int))
    if integer and not (float(low).is_integer() and float(high).is_integer()):
        raise SpaceError(f"{what}: an int distribution needs whole bounds, got low={low!r}, "
                         f"high={high!r}.")
    if not low < high:
        raise SpaceError(f"{what}: low must be below high, got low={low!r}, high={high!r}.")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise SpaceError(f"{what}: log must be true or false, got {log!r}.")
    if log and low <= 0:
        raise SpaceError(f"{what}: a log distribution needs low > 0, got low={low!r}.")
    step = spec.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
            raise SpaceError(f"{what}: step must be a positive number, got {step!r}.")
        if log:
            raise SpaceError(f"{what}: step cannot go with log (Optuna draws either).")
    return Dist(name, low=low, high=high, log=log, step=step, integer=integer)


def load_space(path: str) -> dict[str, Dist]:
    """Read and check a space file (JSON, or YAML with PyYAML installed)."""
    if not os.path.isfile(path):
        raise SpaceError(f"--space {path!r}: no such file.")
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        import yaml
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise SpaceError(f"--space {path}: not valid YAML: {error}") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise SpaceError(f"--space {path}: not valid JSON: {error}") from None
    return parse_space(raw, where=path)


def apply(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with ``values`` (canonical key -> value) written in."""
    out = copy.deepcopy(config)
    for key, value in values.items():
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return out


def space_to_json(space: dict[str, Dist]) -> dict[str, Any]:
    """A space as a space file writes it (and as the study records it)."""
    return {key: dist.to_json() for key, dist in space.items()}


# --- Default spaces -------------------------------------------------------------------------

_DISCOUNT = {"choices": [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]}
_LAMBDA = {"choices": [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0]}
_GRAD_NORM = {"choices": [0.3, 0.5, 1.0, 2.0, 5.0]}
_HIDDEN = {"choices": [[64, 64], [128, 128], [256, 256]]}
_DQN = {
    "algo.learning_rate": {"low": 1e-5, "high": 1e-2, "log": True},
    "algo.discount": _DISCOUNT,
    "algo.batch_size": {"choices": [32, 64, 128, 256]},
    "algo.n_step_return": {"choices": [1, 3, 5]},
    "algo.target_update_interval": {"choices": [10, 50, 100, 300, 1000]},
}
_QPG = {
    "algo.discount": _DISCOUNT,
    "algo.batch_size": {"choices": [64, 128, 256, 512]},
    "algo.target_update_tau": {"choices": [0.001, 0.005, 0.01, 0.02, 0.05]},
}
_PG = {  # What PPO and A2C share.
    "algo.discount": _DISCOUNT,
    "algo.gae_lambda": _LAMBDA,
    "algo.entropy_loss_coeff": {"low": 1e-8, "high": 0.1, "log": True},
    "algo.clip_grad_norm": _GRAD_NORM,
    "agent.model_kwargs.hidden_sizes": _HIDDEN,
}
DEFAULT_SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "ppo": dict(_PG, **{"algo.learning_rate": {"low": 1e-5, "high": 3e-3, "log": True},
                        "algo.ratio_clip": {"choices": [0.1, 0.2, 0.3]},
                        "algo.epochs": {"choices": [1, 4, 8, 10, 20]}}),
    "a2c": dict(_PG, **{"algo.learning_rate": {"low": 1e-5, "high": 1e-2, "log": True},
                        "algo.value_loss_coeff": {"choices": [0.25, 0.5, 1.0]}}),
    "dqn": dict(_DQN, **{"agent.model_kwargs.hidden_sizes": _HIDDEN}),
    "catdqn": dict(_DQN, **{"agent.model_kwargs.hidden_sizes": _HIDDEN}),
    "r2d1": {key: _DQN[key] for key in ("algo.learning_rate", "algo.discount",
                                        "algo.n_step_return")},
    "sac": dict(_QPG, **{"algo.learning_rate": {"low": 1e-5, "high": 3e-3, "log": True},
                         "agent.model_kwargs.hidden_sizes": _HIDDEN,
                         "agent.q_model_kwargs.hidden_sizes": _HIDDEN}),
    "td3": dict(_QPG, **{"algo.mu_learning_rate": {"low": 1e-5, "high": 3e-3, "log": True},
                         "algo.q_learning_rate": {"low": 1e-5, "high": 3e-3, "log": True}}),
    "ddpg": dict(_QPG, **{"algo.learning_rate": {"low": 1e-5, "high": 3e-3, "log": True},
                          "algo.q_learning_rate": {"low": 1e-5, "high": 3e-3, "log": True}}),
}
"""Each algorithm's default space (keys as in a space file). On Atari the network keys
(``hidden_sizes``) are left out: the conv nets keep the preset's. PPO and A2C also draw
``batch_T`` (:func:`default_space`)."""


BATCH_T_CHOICES: dict[str, dict[str, list[int]]] = {
    "ppo": dict(discrete=[32, 64, 128, 256], continuous=[512, 1024, 2048],
                mujoco=[512, 1024, 2048], atari=[64, 128, 256]),
    "a2c": dict(discrete=[5, 8, 16, 32], continuous=[5, 8, 16, 32], mujoco=[5, 8, 16, 32],
                atari=[5, 8, 16]),
}
"""On-policy batch sizes in the default spaces: time steps per env per iteration, by
kind of env (``batch_B`` stays the preset's)."""


def default_space(algo: str, profile: str) -> dict[str, Dist]:
    """The default space of ``algo`` for an env of ``profile`` (see ``presets``): on-policy
    algorithms also draw ``batch_T`` from :data:`BATCH_T_CHOICES`."""
    raw = {key: spec for key, spec in DEFAULT_SPACES[algo].items()
           if not (profile == "atari" and key.endswith("hidden_sizes"))}
    if algo in BATCH_T_CHOICES:
        raw["batch_T"] = {"choices": BATCH_T_CHOICES[algo][profile]}
    return parse_space(raw, where=f"the default space of {algo}")
