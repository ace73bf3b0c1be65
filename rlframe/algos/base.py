"""Algorithm interface: optimizes an agent from samples (or its own replay).

Annotations name the sampler's structures (``Samples``, ``BatchSpec``,
``Examples`` from :mod:`rlframe.samplers.collections`), which live in a layer
above the algorithms. They are imported under ``if TYPE_CHECKING:`` only, as
everywhere in rlframe where a lower layer names a higher layer's type: the
annotations say what arrives, and no algorithm imports a sampler at run time.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple

import torch

from rlframe.utils.collections import iter_leaves
from rlframe.utils.logging import logger
from rlframe.utils.tensor import clip_grad_norm

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.replays.base import BaseReplayBuffer
    from rlframe.samplers.collections import BatchSpec, Examples, Samples


class NonFiniteError(FloatingPointError):
    """Too many updates in a row met a non-finite loss or gradient; the message says
    where the non-finite values came from."""


class RlAlgorithm:
    """Base class of all algorithms.

    Runners read ``opt_info_fields`` (logged statistics), ``bootstrap_value``
    (whether the sampler stores the value after each batch), ``update_counter``,
    ``batch_size`` and ``non_finite_updates``.

    Non-finite guard: an update whose loss or gradient norm is not finite (NaN
    or infinite) is skipped, so the weights stay finite, and counted in
    ``non_finite_updates`` (progress.csv's ``NonFiniteUpdates``); the first one
    draws a warning. After ``non_finite_limit`` such updates in a row the run
    stops with a :class:`NonFiniteError` that names where the values came from
    (observations, rewards, model outputs). Set ``non_finite_limit = 0`` on an
    algorithm to turn the guard off.
    """

    agent: BaseAgent  # Attached by initialize().
    opt_info_fields: tuple = ()
    bootstrap_value: bool = False
    update_counter: int = 0
    clip_grad_norm: float = float("inf")
    non_finite_limit: int = 100
    non_finite_updates: int = 0  # Updates skipped for a non-finite loss or gradient.
    non_finite_streak: int = 0  # Of them, in a row up to now.
    _non_finite_what: str | None = None  # What went non-finite in the current update.

    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        """Attach the agent and build the optimizer (synchronous runners)."""
        raise NotImplementedError

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
            optimizer.zero_grad()
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

    def check_update(self, samples: Any) -> bool:
        """Account for the update just made on ``samples`` (its input batch): count it if
        it was skipped, warn at the first, raise once ``non_finite_limit`` come in a row.

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


def make_optimizer(OptimCls: type, params: Iterable, lr: float,
                   optim_kwargs: dict | None = None) -> torch.optim.Optimizer:
    """``OptimCls(params, lr=lr, **optim_kwargs)``; Adam and AdamW get their fused kernel.

    Without a ``fused`` or ``foreach`` choice in ``optim_kwargs``, torch's Adam
    steps a small network one parameter tensor at a time on the CPU; the fused
    kernel does the same arithmetic in one call, about three times faster for
    the networks of classic control. Where the kernel is not available (older
    torch, other devices) the default implementation is used.
    """
    kwargs = dict(optim_kwargs or {})
    params = list(params)
    if OptimCls in (torch.optim.Adam, torch.optim.AdamW) and not {"fused", "foreach"} & set(kwargs):
        try:
            return OptimCls(params, lr=lr, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError):
            pass
    return OptimCls(params, lr=lr, **kwargs)


def non_finite_source(samples: Any, agent: Any) -> str:
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
