"""Rebuild a trained agent from its run directory.

Every snapshot holds an ``agent_spec`` (see :func:`agent_spec`): how to rebuild
the agent and its env, as importable names and plain values, so the snapshot
still loads with ``torch.load(path, weights_only=True)``. Two lines give an agent
ready to act::

    agent = load_agent("data/local/20240101/120000/my_exp/run_0")
    action = agent.act(observation)  # numpy in, numpy out; greedy by default

:func:`load_run` also returns the spec and builds the run's (evaluation) env.
Classes and functions are recorded by name and imported again on loading, so a
class defined in the training script itself (``__main__``) must move into a
module to be loaded elsewhere.

Rebuilding an agent uses agents, envs and samplers, so this lives in the
runners' layer; ``rlframe.utils.loading`` is its public path too (a re-export).
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlframe.utils import checkpoint

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.base import BaseSampler

SPEC_VERSION = 1
# Markers of the values that are not plain in a spec.
_OBJECT = "__object__"  # {_OBJECT: "module.qualname"}: a class or function, by name.
_ARRAY = "__ndarray__"  # {_ARRAY: nested lists, "dtype": "<f4"}: a numpy array.
_UNRECORDED = "__unrecorded__"  # {_UNRECORDED: repr, "reason": why}: fails at load time.
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class AgentLoadError(RuntimeError):
    """A snapshot's agent cannot be rebuilt (no spec, an unrecorded value, an
    unimportable class)."""


# Raised (a ValueError) for a file that is not a readable snapshot, or whose model does
# not fit the agent; importable from here beside AgentLoadError.
SnapshotError = checkpoint.SnapshotError


# ------------------------------------------------------------------ recording
def agent_spec(agent: BaseAgent, sampler: BaseSampler) -> dict:
    """How to rebuild ``agent`` and its env, as plain values for a snapshot.

    Records the agent's class and the arguments it was constructed with (see
    :attr:`BaseAgent.constructor_args`; ``initial_*state_dict`` arguments are left
    out: the snapshot's weights replace them), and the sampler's ``EnvCls``,
    ``env_kwargs`` and ``eval_env_kwargs``. Never raises for a value it cannot
    record (a lambda, an object of a local class): it marks it, and loading names it.

    Returns:
        ``dict(version, agent_class, agent_kwargs, EnvCls, env_kwargs, eval_env_kwargs)``.
    """
    return dict(
        version=SPEC_VERSION,
        agent_class=_name_or_marker(type(agent)),
        agent_kwargs=_agent_kwargs(agent),
        EnvCls=_name_or_marker(sampler.EnvCls),
        env_kwargs=encode_value(sampler.env_kwargs),
        eval_env_kwargs=encode_value(sampler.eval_env_kwargs),
    )


def _agent_kwargs(agent: BaseAgent) -> dict:
    """The agent's constructor arguments by name, encoded (a marker if unknown)."""
    args = agent.constructor_args
    if args is None:
        return _unrecorded(agent, f"{type(agent).__name__} did not keep its constructor "
                                  "arguments (a __new__ that skips BaseAgent.__new__?)")
    positional, kwargs = args
    named = dict(kwargs)
    if positional:
        named = _bind_positional(type(agent), positional, kwargs)
    return {name: encode_value(value) for name, value in named.items()
            if not (name.startswith("initial_") and name.endswith("state_dict"))}


def _bind_positional(cls: type, args: tuple, kwargs: dict) -> dict:
    """Positional constructor arguments named by the first ``__init__`` in the MRO
    with named parameters (mixins forward ``*args, **kwargs``)."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        parameters = list(inspect.signature(init).parameters.values())[1:]
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if all(p.kind in variadic for p in parameters):
            continue
        bound = inspect.signature(init).bind_partial(None, *args, **kwargs).arguments
        named = {}
        for parameter in parameters:
            value = bound.get(parameter.name)
            if parameter.name not in bound:
                continue
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    named["*args"] = _unrecorded(value, f"positional arguments of "
                                                        f"{klass.__name__} have no name")
            else:
                named[parameter.name] = value
        return named
    return {"*args": _unrecorded(args, f"{cls.__name__}'s constructor names no parameter")}


def encode_value(value: Any) -> Any:  # A user's config value: any type.
    """``value`` as plain values a ``weights_only`` load reads: classes and functions
    by importable name, numpy arrays as lists, the rest marked as unrecorded."""
    if type(value) in _PLAIN or isinstance(value, (torch.dtype, torch.device)):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            return _unrecorded(value, f"a numpy array of dtype {value.dtype}")
        return {_ARRAY: value.tolist(), "dtype": value.dtype.str}
    if type(value) in (list, tuple):
        return type(value)(encode_value(v) for v in value)
    if type(value) is dict:
        if not all(type(k) in _PLAIN for k in value):
            return _unrecorded(value, "a dict with keys that are not plain values")
        return {k: encode_value(v) for k, v in value.items()}
    name_or_marker = _name_or_marker(value)
    return {_OBJECT: name_or_marker} if isinstance(name_or_marker, str) else name_or_marker


def _name_or_marker(obj: Any) -> str | dict:
    """``"module.qualname"`` of a class or function found again under that name, or
    an unrecorded marker saying why not."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(qualname, str)):
        return _unrecorded(obj, f"a {type(obj).__name__} object, neither a plain value nor "
                                "an importable class or function")
    if "<" in qualname:  # <lambda>, <locals>
        return _unrecorded(obj, f"{qualname} is a lambda or is defined inside a function, "
                                "so it cannot be imported; define it at module level")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        return _unrecorded(obj, f"not found again as {module}.{qualname}")
    return f"{module}.{qualname}"


def _unrecorded(value: Any, reason: str) -> dict:
    try:
        text = repr(value)
    except Exception:  # A broken __repr__ must not cost the run its snapshot.
        text = f"<{type(value).__name__} object>"
    return {_UNRECORDED: text[:200], "reason": reason}


# ------------------------------------------------------------------ rebuilding
def decode_value(value: Any, where: str, problems: list[str]) -> Any:  # As encode_value.
    """Inverse of :func:`encode_value`; what cannot be rebuilt is added to ``problems``
    (``where`` names the value, e.g. ``agent_kwargs['model_kwargs']``)."""
    if type(value) is dict:
        if _UNRECORDED in value:
            problems.append(f"{where} = {value[_UNRECORDED]} was not recorded: "
                            f"{value['reason']}.")
            return None
        if _OBJECT in value:
            return _resolve(value[_OBJECT], where, problems)
        if _ARRAY in value:
            return np.array(value[_ARRAY], dtype=np.dtype(value["dtype"]))
        return {k: decode_value(v, f"{where}[{k!r}]", problems) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(decode_value(v, f"{where}[{i}]", problems)
                           for i, v in enumerate(value))
    return value


def resolve_name(name: str) -> Any:  # Whatever the name names (a class, a function).
    """Import ``"package.module.Class"`` (or a function, or ``Outer.Inner``) by name.

    Raises:
        ImportError: nothing importable has that name; a name in ``__main__`` (a
            training script) says to move it into a module.
    """
    parts = name.split(".")
    if parts[0] == "__main__":
        found = _get_attrs(sys.modules["__main__"], parts[1:])
        if found is None:
            raise ImportError(
                f"{name} was defined in the training script itself (__main__), which cannot "
                f"be imported here. Move {parts[-1]} into a module on the Python path (e.g. "
                f"my_agents.py) and import it from the training script, or define it in the "
                f"script that loads the run.")
        return found
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            if not (module_name == missing or module_name.startswith(missing + ".")):
                raise  # The module exists but an import inside it failed.
            continue
        found = _get_attrs(module, parts[split:])
        if found is not None:
            return found
        break
    raise ImportError(f"Cannot import {name}: was it renamed or moved since the run?")


def _get_attrs(obj: Any, names: list[str]) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
    return obj


def _resolve(name: str, where: str, problems: list[str]) -> Any:
    try:
        return resolve_name(name)
    except ImportError as error:
        problems.append(f"{where}: {error}")
        return None


def build_agent(spec: dict) -> BaseAgent:
    """A new (uninitialized) agent as ``spec`` (:func:`agent_spec`) recorded it.

    Raises:
        AgentLoadError: naming every value that was not recorded or cannot be imported.
    """
    _check_version(spec)
    problems: list[str] = []
    AgentCls = _decode_name(spec["agent_class"], "agent_class", problems)
    kwargs = decode_value(spec["agent_kwargs"], "agent_kwargs", problems)
    _raise_problems(problems, "agent")
    return AgentCls(**kwargs)


def make_env(spec: dict, eval: bool = False, **overrides: Any) -> Env:
    """Build one training (or evaluation) env of the run that ``spec`` describes.

    Args:
        spec: the snapshot's ``agent_spec``.
        eval: build it with the sampler's ``eval_env_kwargs`` (the training
            ``env_kwargs`` if the run had none).
        **overrides: env keyword arguments replacing the recorded ones (e.g.
            ``render_mode="rgb_array"`` for a gymnasium env).
    """
    _check_version(spec)
    problems: list[str] = []
    EnvCls = _decode_name(spec["EnvCls"], "EnvCls", problems)
    key = "eval_env_kwargs" if eval and spec["eval_env_kwargs"] is not None else "env_kwargs"
    kwargs = decode_value(spec[key], key, problems)
    _raise_problems(problems, "env")
    return EnvCls(**{**kwargs, **overrides})


def _decode_name(value: str | dict, where: str, problems: list[str]) -> Any:
    return (_resolve(value, where, problems) if isinstance(value, str)
            else decode_value(value, where, problems))


def _raise_problems(problems: list[str], what: str) -> None:
    if problems:
        raise AgentLoadError(
            f"The run's {what} cannot be rebuilt from its snapshot:\n  " + "\n  ".join(problems)
            + "\nOr build the agent yourself as the run did and pass it: "
              "load_agent(run_dir, agent=MyAgent(...)).")


def _check_version(spec: dict) -> None:
    if spec.get("version", 0) > SPEC_VERSION:
        raise AgentLoadError(f"The snapshot's agent_spec has version {spec['version']}; this "
                             f"rlframe reads up to {SPEC_VERSION}: update rlframe.")


# ------------------------------------------------------------------ loading
@dataclass
class LoadedRun:
    """A trained agent with what its snapshot says about the run.

    Attributes:
        agent: initialized, weights loaded, in eval mode, ready to ``act``.
        spec: the snapshot's ``agent_spec`` (None if the caller passed the agent
            for a snapshot without one).
        path: the snapshot file.
        itr: the snapshot's iteration.
        cum_steps: env steps trained on up to it.
    """

    agent: BaseAgent
    spec: dict | None
    path: str
    itr: int
    cum_steps: int | None

    def make_env(self, eval: bool = False, **overrides: Any) -> Env:
        """One training (or evaluation) env of the run, as :func:`make_env` builds it."""
        if self.spec is None:
            raise AgentLoadError(f"{self.path} records no env (no agent_spec); build it "
                                 "yourself.")
        return make_env(self.spec, eval=eval, **overrides)


def find_snapshot(run_dir_or_snapshot: str | os.PathLike, itr: int | None = None) -> str:
    """The snapshot file of a run: the newest (``params.pkl`` or the latest ``itr_<N>.pkl``,
    see :func:`rlframe.utils.checkpoint.find_snapshot`), or ``itr_<itr>.pkl`` when ``itr``
    is given; a file path is returned as it is."""
    path = os.fspath(run_dir_or_snapshot)
    if os.path.isfile(path):
        if itr is not None:
            raise ValueError(f"itr={itr} picks a snapshot in a run directory, but {path!r} is "
                             "a snapshot file already.")
        return path
    if not os.path.isdir(path):
        raise FileNotFoundError(f"No run directory or snapshot file at {path!r}.")
    names = sorted(os.listdir(path))
    itrs = checkpoint.itr_snapshots(path)
    if itr is not None:
        if itr in itrs:
            return os.path.join(path, f"itr_{itr}.pkl")
        raise FileNotFoundError(f"No itr_{itr}.pkl in {path}; its iteration snapshots are "
                                f"{itrs or 'none'}" + (" (and params.pkl, the last one)."
                                                        if "params.pkl" in names else "."))
    newest = checkpoint.find_snapshot(path)
    if newest is not None:
        return newest
    raise FileNotFoundError(
        f"No snapshot (params.pkl or itr_<N>.pkl) in {path}; it holds {names}. Runs write "
        "snapshots inside logger_context(..., snapshot_mode='last') (or 'all', 'gap', "
        "'last+gap'); the default snapshot_mode='none' writes none.")


def load_run(run_dir_or_snapshot: str | os.PathLike, itr: int | None = None,
             device: str | None = None, agent: BaseAgent | None = None) -> LoadedRun:
    """Rebuild a run's trained agent from its snapshot (see :func:`find_snapshot`).

    Builds the env once for its spaces, builds and initializes the agent, loads
    ``agent_state_dict`` and puts the agent in eval mode at the snapshot's iteration.

    Args:
        run_dir_or_snapshot: the run directory (``run_<ID>``) or a snapshot file.
        itr: load ``itr_<itr>.pkl`` (default: ``params.pkl`` or the latest).
        device: ``"cpu"`` (default), ``"cuda"`` or ``"cuda:<idx>"``.
        agent: an agent built as the run's was, used instead of the recorded one;
            for a snapshot written before snapshots recorded ``agent_spec`` it must
            be initialized already (``agent.initialize(env.spaces)``).

    Raises:
        FileNotFoundError: no such run directory or snapshot.
        SnapshotError: (a ``ValueError``) the file is not a readable rlframe snapshot,
            or its model does not fit the agent (listing the parameters that differ).
        AgentLoadError: the agent or env cannot be rebuilt from the snapshot's spec.
    """
    path = find_snapshot(run_dir_or_snapshot, itr)
    snapshot = checkpoint.load_snapshot(path, required=("agent_state_dict",))
    spec = snapshot.get("agent_spec")
    if agent is None and spec is None:
        raise AgentLoadError(
            f"{path} was written before snapshots recorded their agent (no 'agent_spec'). "
            "Build and initialize the agent as the run did and pass it: agent = MyAgent(...); "
            "agent.initialize(env.spaces); load_agent(run_dir, agent=agent); or load the "
            "weights by hand: agent.load_state_dict(torch.load(path, weights_only=True)"
            "['agent_state_dict']).")
    if agent is None:
        agent = build_agent(spec)
    if spec is not None:
        env = make_env(spec)
        try:
            agent.initialize(env.spaces)
        finally:
            env.close()
    elif agent.env_spaces is None:
        raise AgentLoadError(f"{path} records no env (no agent_spec): initialize the agent "
                             "(agent.initialize(env.spaces)) before passing it.")
    checkpoint.load_agent_state(agent, snapshot["agent_state_dict"], path)
    agent.to_device(_cuda_index(device))
    snapshot_itr = int(snapshot.get("itr", 0))
    agent.eval_mode(max(snapshot_itr, 1))  # Iteration 0's evaluation acts at random.
    agent.reset()
    return LoadedRun(agent=agent, spec=spec, path=path, itr=snapshot_itr,
                     cum_steps=snapshot.get("cum_steps"))


def load_agent(run_dir_or_snapshot: str | os.PathLike, itr: int | None = None,
               device: str | None = None, agent: BaseAgent | None = None) -> BaseAgent:
    """The trained agent of a run, ready to act: ``load_run(...).agent``.

    Args:
        run_dir_or_snapshot, itr, device, agent: see :func:`load_run`.
    """
    return load_run(run_dir_or_snapshot, itr=itr, device=device, agent=agent).agent


def _cuda_index(device: str | None) -> int | None:
    if device is None:
        return None
    parsed = torch.device(device)
    if parsed.type == "cpu":
        return None
    if parsed.type != "cuda":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:<idx>', got {device!r}.")
    return 0 if parsed.index is None else parsed.index
