"""Algorithm interface: optimizes an agent from samples (or its own replay).

Annotations name the sampler's structures (``Samples``, ``BatchSpec``,
``Examples`` from :mod:`rlframe.samplers.collections`), which live in a layer
above the algorithms. They are imported under ``if TYPE_CHECKING:`` only, as
everywhere in rlframe where a lower layer names a higher layer's type: the
annotations say what arrives, and no algorithm imports a sampler at run time.
"""
from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Protocol,
                    runtime_checkable)

import numpy as np
import torch

from rlframe.utils.checks import check_bool, check_keywords
from rlframe.utils.collections import iter_leaves
from rlframe.utils.logging import logger
from rlframe.utils.tensor import clip_grad_norm

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.replays.base import BaseReplayBuffer
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.collections import NamedArrayTuple


class NonFiniteError(FloatingPointError):
    """Too many updates in a row met a non-finite loss or gradient; the message says
    where the non-finite values came from."""


class RlAlgorithm:
    """Base class of all algorithms, and the contract synchronous runners rely on.

    Runners call :meth:`initialize` once (after the sampler's, with its
    ``examples``), then :meth:`optimize_agent` with each ``[T, B]`` batch, which
    returns the iteration's ``OptInfo``; snapshots save :meth:`optim_state_dict`
    and :meth:`state_dict`, and resuming loads them back. Runners read
    ``opt_info_fields`` (logged statistics), ``bootstrap_value`` (whether the
    sampler stores the value after each batch), ``update_counter``,
    ``batch_size`` and ``non_finite_updates``. Asynchronous runners need more:
    see :class:`AsyncAlgorithm`.

    Non-finite guard: an update whose loss or gradient norm is not finite (NaN
    or infinite) is skipped, so the weights stay finite, and counted in
    ``non_finite_updates`` (progress.csv's ``NonFiniteUpdates``); the first one
    draws a warning. After ``non_finite_limit`` such updates in a row the run
    stops with a :class:`NonFiniteError` that names where the values came from
    (observations, rewards, model outputs). Set ``non_finite_limit = 0`` on an
    algorithm to turn the guard off.

    Compilation: with ``compile=True`` (a constructor argument of the algorithms)
    the loss computations, which run the model, go through ``torch.compile`` on
    first use (see :meth:`compiled`); off by default.
    """

    agent: BaseAgent  # Attached by initialize().
    optimizer: torch.optim.Optimizer  # Built by initialize() (or optim_initialize()).
    opt_info_fields: tuple[str, ...] = ()
    bootstrap_value: bool = False
    update_counter: int = 0
    clip_grad_norm: float = float("inf")
    non_finite_limit: int = 100
    non_finite_updates: int = 0  # Updates skipped for a non-finite loss or gradient.
    non_finite_streak: int = 0  # Of them, in a row up to now.
    _non_finite_what: str | None = None  # What went non-finite in the current update.
    compile: bool = False  # Run the losses through torch.compile (see compiled()).

    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        """Attach the agent and build the optimizer (synchronous runners)."""
        raise NotImplementedError

    def check_agent(self, agent: BaseAgent) -> None:
        """Raise a TypeError if this algorithm cannot train ``agent`` (e.g. DQN given a
        policy-gradient agent). Runners call it in their constructor, before any run
        directory exists (default: every agent fits)."""

    def check_batch_spec(self, batch_spec: BatchSpec, recurrent: bool = False) -> None:
        """Raise if this algorithm cannot train on the sampler's ``[T, B]`` batches.

        Runners call it in their constructor, before any run directory exists
        (default: every batch fits).

        Args:
            batch_spec: the sampler's ``BatchSpec(T, B)``.
            recurrent: the agent keeps an RNN state (trains on whole ``[T]`` sequences).
        """

    def async_initialize(self, agent: BaseAgent, sampler_n_itr: int, batch_spec: BatchSpec,
                         mid_batch_reset: bool, examples: Examples,
                         world_size: int = 1) -> BaseReplayBuffer:
        """Asynchronous runners: build the shared replay buffer and return it."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous "
                                  "runners (it has no replay buffer).")

    def optim_initialize(self, rank: int = 0) -> None:
        """Asynchronous runners: build the optimizer in the optimizer process."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous runners.")

    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> NamedTuple:
        """One iteration of training; returns an OptInfo namedtuple of lists/scalars."""
        raise NotImplementedError

    def optim_state_dict(self) -> dict:
        """Optimizer state for snapshots."""
        return self.optimizer.state_dict()

    def load_optim_state_dict(self, state_dict: dict) -> None:
        """Restore optimizer state from a snapshot."""
        self.optimizer.load_state_dict(state_dict)

    def state_dict(self) -> dict:
        """Training state besides the weights and the optimizer, for resuming a run:
        counters here; subclasses add their schedules (numbers, tensors, dicts only)."""
        return dict(update_counter=self.update_counter,
                    non_finite_updates=self.non_finite_updates,
                    non_finite_streak=self.non_finite_streak)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` saved (after ``initialize``)."""
        self.update_counter = int(state_dict["update_counter"])
        self.non_finite_updates = int(state_dict["non_finite_updates"])
        self.non_finite_streak = int(state_dict["non_finite_streak"])

    @property
    def batch_size(self) -> int:
        """Samples consumed per gradient update."""
        return self._batch_size

    # ------------------------------------------------------------ gradient steps
    def gradient_step(self, loss: torch.Tensor,
                      *groups: tuple[torch.optim.Optimizer, list]) -> list[torch.Tensor]:
        """Backpropagate ``loss`` and step each ``(optimizer, parameters)`` group.

        Each group's gradient is clipped to ``clip_grad_norm`` on its own. With the
        non-finite guard on, a non-finite loss or gradient norm skips every step
        of the call (see :class:`RlAlgorithm`).

        Returns:
            The gradient norm of each group, before clipping.
        """
        for optimizer, _ in groups:
            # optimizer.zero_grad() does this behind a profiler scope, ten times slower.
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        loss.backward()
        norms = [clip_grad_norm(params, self.clip_grad_norm) for _, params in groups]
        # Scalars read back after clipping (which reads its norm anyway): the guard is cheap.
        if self.non_finite_limit and not math.isfinite(loss.item() + sum(map(float, norms))):
            if self._non_finite_what is None:
                self._non_finite_what = ("loss" if not math.isfinite(loss.item())
                                         else "gradient norm")
            return norms
        for optimizer, _ in groups:
            optimizer.step()
        return norms

    def compiled(self, name: str) -> Callable:
        """The method ``name``, through ``torch.compile`` when ``self.compile`` is True.

        The method (of the class: a copy of the algorithm calls it on itself) is
        compiled on the first call and kept; the model runs inside it, so it is
        compiled with it. Random draws keep eager torch's generator (inductor's
        ``fallback_random``), so a compiled update computes what the eager one
        does, up to float rounding. Values that change between calls reach the
        method as tensors, or it would be recompiled for each new number.

        Raises:
            RuntimeError: naming ``compile=True``, if torch cannot compile here
                (e.g. no C++ compiler for the CPU backend); ``compile=False`` runs eagerly.
        """
        if not self.compile:
            return getattr(self, name)
        functions = self.__dict__.setdefault("_compiled_functions", {})
        if name not in functions:
            functions[name] = _compile_method(type(self), name)
        return functools.partial(functions[name], self)

    def check_update(self, samples: NamedArrayTuple | None) -> bool:
        """Account for the update just made on ``samples`` (its input batch: the sampler's
        ``Samples`` or a replay minibatch): count it if it was skipped, warn at the
        first, raise once ``non_finite_limit`` come in a row.

        Returns:
            True if the update was made, False if it was skipped (its statistics and
            priorities are not to be used).
        """
        what, self._non_finite_what = self._non_finite_what, None
        if what is None:
            self.non_finite_streak = 0
            return True
        self.non_finite_updates += 1
        self.non_finite_streak += 1
        if self.non_finite_updates == 1:
            message = (f"{type(self).__name__}: non-finite {what} at update "
                       f"{self.update_counter}: the update was skipped (counted in "
                       f"NonFiniteUpdates; {self.non_finite_limit} in a row stop the run).")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            logger.log(f"WARNING: {message}")
        if self.non_finite_streak >= self.non_finite_limit:
            raise NonFiniteError(
                f"{type(self).__name__}: {self.non_finite_streak} updates in a row had a "
                f"non-finite {what} ({self.non_finite_updates} in all) and were skipped; "
                f"{non_finite_source(samples, self.agent)}")
        return False


@runtime_checkable
class AsyncAlgorithm(Protocol):
    """What an asynchronous runner (``AsyncRl``) needs of its algorithm: the replay it
    shares with the sampler's memory copiers, and the optimizer built in the optimizer
    process. Every :class:`~rlframe.algos.off_policy.OffPolicyAlgorithm` keeps it;
    on-policy algorithms (A2C, PPO) do not.

    ``isinstance(algo, AsyncAlgorithm)`` checks that the members exist.
    """

    replay_ratio: float  # Transitions trained on per transition collected.
    updates_per_sync: int  # Updates per optimize_agent() call.
    min_steps_learn: int  # Env steps collected before the first update.

    @property
    def batch_size(self) -> int:
        """Transitions (or sequences) per update."""
        ...

    def async_initialize(self, agent: BaseAgent, sampler_n_itr: int, batch_spec: BatchSpec,
                         mid_batch_reset: bool, examples: Examples,
                         world_size: int = 1) -> BaseReplayBuffer:
        """In the runner's process: build the shared replay buffer and return it."""
        ...

    def optim_initialize(self, rank: int = 0) -> None:
        """In the optimizer process: build the optimizers."""
        ...

    def samples_to_buffer(self, samples: Samples) -> NamedArrayTuple:
        """A sampler batch [T, B] in the replay's layout (memory copiers append it)."""
        ...

    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> NamedTuple:
        """``updates_per_sync`` updates from the replay (``samples`` is None)."""
        ...


def check_optimizer(OptimCls: type[torch.optim.Optimizer],
                    optim_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Raise unless ``OptimCls`` is a torch optimizer class that takes ``optim_kwargs``.

    Algorithms call this in their constructors, so a wrong optimizer fails before
    any run directory exists. ``lr`` is set from the algorithm's learning rate.

    Returns:
        ``optim_kwargs`` as a new dict (``{}`` for None).

    Raises:
        TypeError: ``OptimCls`` is not a ``torch.optim.Optimizer`` subclass, or
            ``optim_kwargs`` holds ``lr`` or a keyword the class does not take.
    """
    if not (isinstance(OptimCls, type) and issubclass(OptimCls, torch.optim.Optimizer)):
        what = (f"the class {OptimCls.__module__}.{OptimCls.__qualname__}"
                if isinstance(OptimCls, type) else f"{OptimCls!r} ({type(OptimCls).__name__})")
        raise TypeError(f"OptimCls must be a torch.optim.Optimizer subclass (e.g. "
                        f"torch.optim.Adam, passed as the class itself), got {what}.")
    module = OptimCls.__module__
    name = ("torch.optim" if module.startswith("torch.optim") else module) + \
        f".{OptimCls.__qualname__}"
    return check_keywords("optim_kwargs", optim_kwargs, OptimCls, f"OptimCls={name}",
                          reserved={"params": "the agent's parameters",
                                    "lr": "set learning_rate instead"})


def make_optimizer(OptimCls: type, params: Iterable, lr: float,
                   optim_kwargs: dict | None = None) -> torch.optim.Optimizer:
    """``OptimCls(params, lr=lr, **optim_kwargs)`` with torch's fastest implementation.

    Without a ``fused`` or ``foreach`` choice in ``optim_kwargs``, torch steps a
    network one parameter tensor at a time on the CPU. An optimizer that takes
    ``fused`` (Adam, AdamW, SGD, Adagrad) gets its fused kernel, which does the
    same arithmetic in one call (Adam: four times faster for a pair of 64x64
    MLPs); one that takes only ``foreach`` (RMSprop, ...) gets the multi-tensor
    version (a third faster). Where the choice is refused (older torch, other
    devices or dtypes) the next one is tried, down to the default.
    """
    kwargs = check_optimizer(OptimCls, optim_kwargs)
    params = list(params)
    try:
        accepted = inspect.signature(OptimCls).parameters
    except (TypeError, ValueError):  # No signature to read: torch's default.
        accepted = {}
    if not {"fused", "foreach"} & set(kwargs):
        for choice in ("fused", "foreach"):
            if choice in accepted:
                try:
                    return OptimCls(params, lr=lr, **{choice: True}, **kwargs)
                except (RuntimeError, ValueError, TypeError):
                    pass
    return OptimCls(params, lr=lr, **kwargs)


def read_stats(stats: dict[str, list]) -> dict[str, list[float]]:
    """An iteration's logged values as flat lists of floats, read from the device once.

    Updates keep their statistics as tensors; reading each to the host (``.item()``)
    would wait for the device at every update, so they are gathered here and
    converted in one transfer at the end of the iteration.

    Args:
        stats: field -> the updates' values: tensors of any shape (flattened, in
            order) or numbers and arrays.
    """
    tensors = [v.detach().reshape(-1) for values in stats.values() for v in values
               if isinstance(v, torch.Tensor)]
    host: list[float] = []
    if tensors:
        device = tensors[0].device
        host = torch.cat([t.to(device, torch.float32) for t in tensors]).tolist()
    out, start = {}, 0
    for field, values in stats.items():
        flat: list[float] = []
        for v in values:
            if isinstance(v, torch.Tensor):
                flat.extend(host[start:start + v.numel()])
                start += v.numel()
            else:
                flat.extend(np.ravel(v).tolist())
        out[field] = flat
    return out


def check_compile(compile: bool) -> bool:
    """Validate an algorithm's ``compile`` argument (a bool; torch.compile must exist)."""
    check_bool("compile", compile)
    if compile and not hasattr(torch, "compile"):
        raise ValueError(f"compile=True needs torch.compile (torch >= 2.0); this is torch "
                         f"{torch.__version__}. Use compile=False.")
    return compile


def _compile_method(cls: type, name: str) -> Callable:
    """``cls.<name>`` (called with the instance first) compiled by torch.compile, with
    compiler failures reported as a RuntimeError that names the ``compile`` argument."""
    function = torch.compile(getattr(cls, name), options={"fallback_random": True})

    def call(owner: RlAlgorithm, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(owner, *args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            inner = error.inner_exception
            first_line = str(inner).strip().split("\n", 1)[0][:300]
            raise RuntimeError(
                f"{cls.__name__}(compile=True): torch.compile could not compile "
                f"{name}() here ({type(inner).__name__}: {first_line}). The CPU backend "
                "needs a working C++ compiler; pass compile=False to run eagerly.") from error

    return call


def non_finite_source(samples: NamedArrayTuple | None, agent: BaseAgent) -> str:
    """Where a batch's non-finite values come from, in words: the environment's
    observations or rewards first (the usual root cause), else the model's outputs."""
    bad = [path for path, leaf in iter_leaves(samples)
           if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
           and not bool(torch.isfinite(leaf).all())]
    from_env = {"observations": [p for p in bad if "observation" in p],
                "rewards": [p for p in bad if "reward" in p or "return" in p]}
    from_env = {what: paths for what, paths in from_env.items() if paths}
    if from_env:
        fields = [p for paths in from_env.values() for p in paths]
        return (f"the training batch holds non-finite {' and '.join(from_env)} (fields "
                f"{', '.join(fields)}): the environment (or a wrapper of it) produced them.")
    if bad:
        return (f"the model's outputs were non-finite while sampling (fields "
                f"{', '.join(bad)}), with finite observations and rewards.")
    params = [name for name, p in agent.named_parameters() if not bool(torch.isfinite(p).all())]
    if params:
        return (f"the agent's parameters are not finite ({', '.join(params[:5])}); the "
                "updates before diverged: lower the learning rate or clip gradients.")
    return ("the batch and the agent's parameters are finite, so the model outputs or the "
            "loss went non-finite (e.g. a log of zero or an overflow): check the model and "
            "the learning rate.")
