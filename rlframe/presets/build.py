"""Build a standard experiment (sampler, agent, algorithm, runner) from a config.

A config is a plain JSON-able dict. Only ``algo`` and ``env_id`` are required;
:func:`build_experiment` fills in everything else and returns the *full*
config, which rebuilds the same stack (what ``params.json`` of a run holds)::

    {
        "algo": "ppo",                 # a name in rlframe.presets.ALGOS
        "env_id": "CartPole-v1",       # gymnasium id, ALE id or Atari game ("pong")
        "sampler": "serial",           # serial | cpu | gpu | alternating
        "n_parallel": null,            # parallel samplers: worker processes
        "torch_threads": null,         # the master's torch threads (null: torch's choice)
        "cuda_idx": null,              # GPU of the model and updates (null: CPU)
        "n_steps": 150000, "log_interval_steps": 10240,
        "batch_T": 128, "batch_B": 8,  # the sampler's batch: T steps of B envs
        "seed": 4821,                  # drawn when null, then recorded
        "stop_at_return": 195.0,       # optional: end at the first evaluation >= this
        "kwargs": {                    # keyword arguments of each component
            "algo": {"learning_rate": 0.001, ...},   # of PPO
            "agent": {"model_kwargs": {...}},        # of CategoricalPgAgent
            "sampler": {"eval_n_envs": 4, ...},      # of SerialSampler
            "runner": {},                            # of MinibatchRlEval
            "env": {}                                # of gymnasium.make / AtariEnv
        }
    }

The runner is a ``MinibatchRlEval``, which evaluates the agent at every log point,
unless the sampler section sets ``eval_n_envs`` to 0: then it is a ``MinibatchRl``,
which logs the training episodes instead (no evaluation envs are built or stepped).
With ``stop_at_return`` the runner gets a ``StopAtReturn`` callback: the run ends at the
first log row (after training began) whose ``ReturnAverage`` reaches it, with its
snapshot, as a finished run.

A ``kwargs`` section given in the config replaces the preset's values key by key
(a nested dict such as ``model_kwargs`` as a whole). Keywords whose name ends
in ``Cls`` or ``nonlinearity`` (at any depth, e.g. ``model_kwargs``'s
``hidden_nonlinearity``) take a dotted import path (``"torch.optim.RMSprop"``,
``"torch.nn.ReLU"``). ``log_dir``, ``run_ID``, ``name`` and ``snapshot_mode`` may sit
in the config for the launcher's use; the builder ignores them.
"""
from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import math
import os
from collections.abc import Callable
from typing import Any

from rlframe.presets.algos import ALGOS, AlgoPreset
from rlframe.presets.envs import EnvTarget, resolve_env
from rlframe.runners.callbacks import StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.checks import as_int, positive_int
from rlframe.utils.launching.affinity import make_affinity, usable_cpus
from rlframe.utils.seed import make_seed

SAMPLERS: dict[str, type] = dict(serial=SerialSampler, cpu=CpuSampler, gpu=GpuSampler,
                                 alternating=AlternatingSampler)
"""Sampler classes by config name."""

SECTIONS = ("algo", "agent", "sampler", "runner", "env")
"""Sections of ``config["kwargs"]`` (and of the command line's ``--config``)."""

RUN_KEYS = ("n_steps", "log_interval_steps", "batch_T", "batch_B")
LAUNCH_KEYS = ("log_dir", "run_ID", "name", "snapshot_mode")  # Kept, not used here.
CONFIG_KEYS = ("algo", "env_id", "sampler", "n_parallel", "torch_threads", "cuda_idx", "seed",
               *RUN_KEYS, "stop_at_return", "kwargs", *LAUNCH_KEYS)
"""Top-level keys of a config."""

# Keywords the builder sets itself, with where a user sets them instead.
_MANAGED = {
    "sampler": dict(EnvCls="env_id", env_kwargs="the 'env' section",
                    eval_env_kwargs="the 'env' section", TrajInfoCls="env_id",
                    batch_T="batch_T (--batch-T)", batch_B="batch_B (--batch-B)"),
    "runner": dict(algo="algo", agent="algo", sampler="sampler (--sampler)",
                   n_steps="n_steps (--n-steps)", seed="seed (--seed)",
                   affinity="n_parallel, torch_threads and cuda_idx (--n-parallel, "
                            "--torch-threads, --cuda-idx)",
                   log_interval_steps="log_interval_steps (--log-interval-steps)",
                   callbacks="a Python script (callbacks are objects; stop_at_return "
                             "(--stop-at-return) adds StopAtReturn)"),
    "env": dict(id="env_id", game="env_id"),
}


def build_experiment(config: dict[str, Any]) -> tuple[MinibatchRl, dict[str, Any]]:
    """Build the runner (with its sampler, agent and algorithm) that ``config`` describes.

    Args:
        config: ``algo`` and ``env_id`` at least; see the module docstring. Not modified.

    Returns:
        ``(runner, full_config)``: a ``MinibatchRlEval``, or a ``MinibatchRl`` where the
        sampler section's ``eval_n_envs`` is 0; ``build_experiment(full_config)``
        builds the same stack again (same classes, keyword arguments and seed).

    Raises:
        ValueError: unknown algorithm, env id, sampler or config key (with close
            names), or an algorithm that does not fit the env's action space.
    """
    config = _check_top_level(copy.deepcopy(config))
    preset = _find_algo(config["algo"])
    user_kwargs = _check_sections(config.get("kwargs") or {})
    _check_env_kwargs(None, user_kwargs["env"])
    target = resolve_env(config["env_id"], user_kwargs["env"])
    settings = _check_fits(preset, target)
    full = {key: config[key] for key in LAUNCH_KEYS if key in config}
    full.update(algo=preset.name, env_id=target.env_id, sampler=_sampler_name(config))
    for key in RUN_KEYS:
        value = config.get(key)
        full[key] = positive_int(key, settings["run"][key] if value is None else value)
    full["cuda_idx"] = None if config.get("cuda_idx") is None else as_int(
        "cuda_idx", config["cuda_idx"], minimum=0)
    full["n_parallel"] = _n_parallel(full, config.get("n_parallel"))
    full["torch_threads"] = None if config.get("torch_threads") is None else positive_int(
        "torch_threads", config["torch_threads"])
    full["seed"] = make_seed() if config.get("seed") is None else as_int(
        "seed", config["seed"], minimum=0)
    stop = _stop_at_return(config.get("stop_at_return"))
    if stop is not None:  # Recorded only when set: other runs' params.json stay as they were.
        full["stop_at_return"] = stop
    full["kwargs"] = {section: {**settings.get(section, {}), **user_kwargs[section]}
                      for section in SECTIONS}
    return _build_runner(preset, target, full), full


def _keyword_parameters(cls: type) -> list[inspect.Parameter]:
    """The keyword parameters ``cls(...)`` takes, following ``**kwargs`` up the class
    hierarchy, the most derived class's first."""
    found: list[inspect.Parameter] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        found.extend(p for p in params if p.name != "self" and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return found


def accepted_kwargs(cls: type) -> list[str]:
    """Keyword names ``cls(...)`` takes, following ``**kwargs`` up the class hierarchy."""
    return sorted({p.name for p in _keyword_parameters(cls)})


def keyword_defaults(callable_: Callable[..., Any] | None) -> dict[str, Any]:
    """The defaults of the keywords ``callable_(...)`` takes: for a class, following
    ``**kwargs`` up its hierarchy (a keyword's most derived definition decides); for a
    function, its signature's; {} for None or a callable without a signature."""
    if isinstance(callable_, type):
        params = _keyword_parameters(callable_)
    else:
        try:
            params = list(inspect.signature(callable_).parameters.values())
        except (TypeError, ValueError):
            return {}
    defaults: dict[str, Any] = {}
    seen: set[str] = set()
    for p in params:
        if p.name not in seen and p.default is not inspect.Parameter.empty:
            defaults[p.name] = p.default
        seen.add(p.name)
    return defaults


def check_kwargs(section: str, cls: type, kwargs: dict[str, Any]) -> None:
    """Raise ValueError for a keyword ``cls`` does not take or the builder sets itself.

    Args:
        section: the config section the keywords come from (``"algo"``, ...).
        cls: the class they are for.
        kwargs: the keywords.
    """
    managed = _MANAGED.get(section, {})
    accepted = [name for name in accepted_kwargs(cls) if name not in managed]
    for key in kwargs:
        if key in managed:
            raise ValueError(f"config section '{section}' ({cls.__name__}): {key!r} is set "
                             f"from {managed[key]}, not in this section.")
        if key not in accepted:
            raise ValueError(f"config section '{section}': {cls.__name__} takes no keyword "
                             f"{key!r}.{_did_you_mean(key, accepted)} Accepted keywords: "
                             f"{', '.join(accepted) or '(none)'}.")


# --- Checking the config ----------------------------------------------------------------------

def _did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _check_top_level(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict, got {type(config).__name__}.")
    for key in config:
        if key not in CONFIG_KEYS:
            raise ValueError(f"Unknown config key {key!r}.{_did_you_mean(key, list(CONFIG_KEYS))}"
                             f" Config keys: {', '.join(CONFIG_KEYS)}.")
    for key in ("algo", "env_id"):
        if key not in config:
            raise ValueError(f"config needs {key!r} (e.g. algo='ppo', env_id='CartPole-v1').")
    return config


def _stop_at_return(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"config 'stop_at_return' must be a number (the run ends at the first "
                         f"evaluation return >= it) or null, got {value!r}.")
    return float(value)


def _find_algo(name: Any) -> AlgoPreset:
    if not isinstance(name, str):
        raise ValueError(f"config 'algo' names the algorithm ({', '.join(ALGOS)}), got "
                         f"{name!r}; its keyword arguments go in config['kwargs']['algo'].")
    if name not in ALGOS:
        hint = _did_you_mean(str(name).lower(), list(ALGOS))
        raise ValueError(f"Unknown algorithm {name!r}.{hint} Algorithms: {', '.join(ALGOS)}.")
    return ALGOS[name]


def _sampler_name(config: dict[str, Any]) -> str:
    name = config.get("sampler") or "serial"
    if not isinstance(name, str):
        raise ValueError(f"config 'sampler' names the sampler ({', '.join(SAMPLERS)}), got "
                         f"{name!r}; its keyword arguments go in config['kwargs']['sampler'].")
    if name not in SAMPLERS:
        raise ValueError(f"Unknown sampler {name!r}.{_did_you_mean(str(name), list(SAMPLERS))}"
                         f" Samplers: {', '.join(SAMPLERS)}.")
    return name


def _check_sections(kwargs: Any) -> dict[str, dict[str, Any]]:
    """The user's kwargs sections, all present, with class paths left as given."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"config 'kwargs' must be a dict of sections ({', '.join(SECTIONS)}), "
                         f"got {type(kwargs).__name__}.")
    for section, values in kwargs.items():
        if section not in SECTIONS:
            raise ValueError(f"Unknown config section {section!r}."
                             f"{_did_you_mean(section, list(SECTIONS))} Sections: "
                             f"{', '.join(SECTIONS)}.")
        if not isinstance(values, dict):
            raise ValueError(f"config section {section!r} must be a dict of keyword "
                             f"arguments, got {type(values).__name__}: {values!r}.")
    return {section: dict(kwargs.get(section) or {}) for section in SECTIONS}


def _check_fits(preset: AlgoPreset, target: EnvTarget) -> dict[str, dict[str, Any]]:
    """The preset's settings for the env's profile, or why the algorithm does not fit."""
    if target.action_kind not in preset.action_kinds or target.profile not in preset.settings:
        fitting = [name for name, p in ALGOS.items()
                   if target.action_kind in p.action_kinds and target.profile in p.settings]
        raise ValueError(
            f"{preset.name} handles {' and '.join(preset.action_kinds)} actions"
            f"{' (not Atari)' if 'atari' not in preset.agents else ''}, but {target.env_id} "
            f"has {target.action_kind} actions ({target.action_space}). Algorithms for "
            f"{target.env_id}: {', '.join(fitting) or 'none'}.")
    return preset.settings[target.profile]


# --- Affinity ---------------------------------------------------------------------------------

def _n_parallel(full: dict[str, Any], n_parallel: Any) -> int | None:
    """Parallel samplers: worker count (default: the most cores that divide batch_B).
    Serial: None, or the cores the run is pinned to."""
    n_cpu = len(usable_cpus() or []) or os.cpu_count() or 1
    per_core = 2 if full["sampler"] == "alternating" else 1  # Two worker groups per core.
    if n_parallel is None:
        if full["sampler"] == "serial":
            return None
        fits = [k for k in range(1, n_cpu + 1) if full["batch_B"] % (k * per_core) == 0]
        if not fits:
            raise ValueError(f"batch_B={full['batch_B']} (--batch-B) must be a multiple of 2 "
                             "for the alternating sampler (two worker groups).")
        return max(fits)
    n_parallel = positive_int("n_parallel", n_parallel)
    if n_parallel > n_cpu:
        raise ValueError(f"n_parallel={n_parallel} (--n-parallel) exceeds the {n_cpu} CPUs "
                         "this process may use.")
    if full["sampler"] != "serial" and full["batch_B"] % (n_parallel * per_core):
        raise ValueError(f"batch_B={full['batch_B']} (--batch-B) must be a multiple of the "
                         f"{n_parallel * per_core} sampler workers (n_parallel={n_parallel}"
                         f"{' x 2 groups' if per_core == 2 else ''}).")
    return n_parallel


def _affinity(full: dict[str, Any]) -> dict[str, Any]:
    """Cores 0..n_parallel-1 (one worker each), the master's torch threads and the GPU,
    as an affinity dict."""
    affinity = _cores(full)
    affinity["cuda_idx"] = full["cuda_idx"]
    if full.get("torch_threads") is not None:
        affinity["master_torch_threads"] = full["torch_threads"]
    return affinity


def _cores(full: dict[str, Any]) -> dict[str, Any]:
    n_parallel = full["n_parallel"]
    if n_parallel is None:
        return {}
    usable = usable_cpus()
    pin = usable is None or set(range(n_parallel)) <= set(usable)  # Else threads only.
    return make_affinity(n_cpu_core=n_parallel, n_gpu=0, cpu_per_run=n_parallel,
                         hyperthread_offset=0, alternating=full["sampler"] == "alternating",
                         set_affinity=pin)


# --- Building ---------------------------------------------------------------------------------

def _is_class_key(key: str) -> bool:
    """Keywords that take a class: ``...Cls`` and the models' ``...nonlinearity``."""
    return key.endswith("Cls") or key.endswith("nonlinearity")


def _resolve_classes(section: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the dotted paths of ``...Cls`` and ``...nonlinearity`` keywords
    imported, in nested dicts (``model_kwargs``) too."""
    resolved = dict(kwargs)
    for key, value in kwargs.items():
        if isinstance(value, dict):
            resolved[key] = _resolve_classes(f"{section}.{key}", value)
        elif _is_class_key(key) and isinstance(value, str):
            module_name, _, attr = value.rpartition(".")
            try:
                resolved[key] = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError, ValueError):
                example = "torch.nn.ReLU" if key.endswith("nonlinearity") else "torch.optim.RMSprop"
                raise ValueError(f"config section '{section}': {key}={value!r} is not an "
                                 f"importable class path (e.g. '{example}').") from None
    return resolved


def _agent_class(preset: AlgoPreset, target: EnvTarget, sampler: str) -> type:
    kind = "atari" if target.profile == "atari" else target.action_kind
    if sampler == "alternating" and kind in preset.alternating_agents:
        return preset.alternating_agents[kind]
    return preset.agents[kind]


def runner_class(config: dict[str, Any]) -> type[MinibatchRl]:
    """The runner a full config builds: ``MinibatchRl`` where its sampler section sets
    ``eval_n_envs`` to 0 (no evaluation), ``MinibatchRlEval`` otherwise."""
    eval_n_envs = config["kwargs"]["sampler"].get("eval_n_envs")
    return MinibatchRl if eval_n_envs == 0 else MinibatchRlEval


def _build_runner(preset: AlgoPreset, target: EnvTarget, full: dict[str, Any]) -> MinibatchRl:
    kwargs = full["kwargs"]
    SamplerCls = SAMPLERS[full["sampler"]]
    AgentCls = _agent_class(preset, target, full["sampler"])
    RunnerCls = runner_class(full)
    for section, cls in (("algo", preset.AlgoCls), ("agent", AgentCls), ("sampler", SamplerCls),
                         ("runner", RunnerCls)):
        check_kwargs(section, cls, kwargs[section])
    _check_env_kwargs(target, kwargs["env"])
    sampler = _construct("sampler", SamplerCls, EnvCls=target.EnvCls,
                         env_kwargs=target.env_kwargs, eval_env_kwargs=dict(target.env_kwargs),
                         TrajInfoCls=target.TrajInfoCls, batch_T=full["batch_T"],
                         batch_B=full["batch_B"], **_resolve_classes("sampler", kwargs["sampler"]))
    algo = _construct("algo", preset.AlgoCls, **_resolve_classes("algo", kwargs["algo"]))
    agent = _construct("agent", AgentCls, **_resolve_classes("agent", kwargs["agent"]))
    stop = full.get("stop_at_return")
    return RunnerCls(algo=algo, agent=agent, sampler=sampler, n_steps=full["n_steps"],
                     seed=full["seed"], affinity=_affinity(full),
                     log_interval_steps=full["log_interval_steps"],
                     callbacks=None if stop is None else [StopAtReturn(stop)],
                     **_resolve_classes("runner", kwargs["runner"]))


def _construct(section: str, cls: type, **kwargs: Any) -> Any:
    """``cls(**kwargs)``, with a rejected argument reported as from config ``section``."""
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise type(error)(f"config section '{section}' ({cls.__name__}): {error}") from None


def _check_env_kwargs(target: EnvTarget | None, env_kwargs: dict[str, Any]) -> None:
    """No env id in the env settings; Atari settings are checked against ``AtariEnv``
    (gymnasium's by ``gymnasium.make``, in :func:`resolve_env`)."""
    for key in env_kwargs:
        if key in _MANAGED["env"]:
            raise ValueError(f"config section 'env': {key!r} is set from env_id, not in "
                             "this section.")
    if target is not None and target.profile == "atari":
        check_kwargs("env", target.EnvCls, env_kwargs)
