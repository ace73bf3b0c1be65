"""Helpers shared by the Q-policy-gradient agents: action bounds, target networks.

Action scaling: these agents act in the env's own action units. The env's
action space must be a 1-D box with finite bounds ``[-bound, bound]`` (the
same bound for every component). Every agent argument that is in action units
(DDPG/TD3 exploration and target noise, SAC's ``action_squash``) is given as a
fraction of that bound, so the defaults suit any such env. On the ``[-1, 1]``
boxes of most MuJoCo tasks this is the same as rlpyt, whose agents used the
numbers as absolute values; for other bounds (Pendulum-v1: 2, Humanoid-v5: 0.4)
rlpyt's agents did not cover, or overshot, the action range. Envs with
asymmetric or per-component bounds can be rescaled first, e.g. with
``gymnasium.wrappers.RescaleAction(env, -1, 1)``.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from rlframe.utils.buffer import np_mp_array
from rlframe.utils.checks import as_int
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInfo: TypeAlias = NamedArrayTuple
else:
    AgentInfo = namedarraytuple("AgentInfo", ["mu"])
    """DDPG/TD3 ``agent_info``: ``mu`` [*lead, A], the deterministic action before noise."""


def check_continuous_action_space(agent: BaseAgent, env_spaces: EnvSpaces) -> float:
    """Return the action bound, or raise if the agent cannot act in ``env_spaces``.

    Allowed: a 1-D float box whose bounds are finite and equal to
    ``[-bound, bound]`` in every component.

    Raises:
        TypeError: a discrete, multi-dimensional or non-float action space.
        ValueError: infinite, asymmetric or per-component bounds.
    """
    name = type(agent).__name__
    space = env_spaces.action
    allowed = (f"{name} needs a continuous 1-D Box action space with finite bounds "
               "[-bound, bound], the same for every component")
    if getattr(space, "n", None) is not None:
        raise TypeError(f"{allowed}; got the discrete action space env_spaces.action={space!r}. "
                        "For discrete actions use a DQN-family agent (DqnAgent) or "
                        "CategoricalPgAgent.")
    try:
        shape = tuple(space.shape)
        dtype = np.dtype(space.dtype)
        low = np.asarray(space.low, dtype=np.float64)
        high = np.asarray(space.high, dtype=np.float64)
    except (AttributeError, TypeError) as e:
        raise TypeError(f"{allowed}; got env_spaces.action={space!r}.") from e
    if len(shape) != 1 or dtype.kind != "f":
        raise TypeError(f"{allowed}; got env_spaces.action={space!r} with shape {shape} and "
                        f"dtype {dtype}.")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"{allowed}; got non-finite bounds low={low}, high={high} in "
                         f"env_spaces.action={space!r}. Give the env a bounded action space.")
    bound = float(high[0])
    if not (bound > 0 and np.all(high == bound) and np.all(low == -bound)):
        raise ValueError(f"{allowed}; got low={low}, high={high} in env_spaces.action={space!r}. "
                         "Rescale the actions first, e.g. with "
                         "gymnasium.wrappers.RescaleAction(env, -1, 1).")
    return bound


def accepts_kwarg(cls: type, name: str) -> bool:
    """Whether ``cls(...)`` takes a keyword argument ``name`` (or ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DistributedDataParallel wrapper (else ``model`` itself)."""
    return model.module if isinstance(model, DDP) else model


@contextlib.contextmanager
def without_weight_grads(*models: torch.nn.Module) -> Iterator[list[torch.nn.Module]]:
    """Run ``models`` so that their outputs record no gradient for their weights.

    Yields the models with any DistributedDataParallel wrapper removed; call
    those inside the block. Gradients still flow through them to their inputs.
    The policy losses of DDPG, TD3 and SAC backpropagate ``Q(s, pi(s))`` into
    the policy and need only the critics' input gradients: skipping their
    weight gradients saves part of that backward pass, and under DDP the
    wrapper would otherwise all-reduce gradients nobody uses.
    """
    modules = [unwrap(m) for m in models]
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield modules
    finally:
        for p in params:
            p.requires_grad_(True)


class TargetPairs:
    """The tensors of ``(target, source)`` model pairs, gathered once for fast updates.

    Soft target updates run after every gradient update; gathering the
    parameters each time (module traversal) and blending them one by one costs
    more than the arithmetic. Build a new one whenever a model object is
    replaced (e.g. after ``to_device`` rebuilt it).

    Args:
        pairs: ``(target, source)`` modules (DistributedDataParallel unwrapped).
    """

    def __init__(self, pairs: Iterable[tuple[torch.nn.Module, torch.nn.Module]]):
        self.targets: list[torch.Tensor] = []  # Blended: parameters and float buffers.
        self.sources: list[torch.Tensor] = []
        self.copy_targets: list[torch.Tensor] = []  # Copied: integer buffers.
        self.copy_sources: list[torch.Tensor] = []
        for target, source in pairs:
            target, source = unwrap(target), unwrap(source)
            self.targets.extend(target.parameters())
            self.sources.extend(source.parameters())
            for t, s in zip(target.buffers(), source.buffers()):
                floating = torch.is_floating_point(t)
                (self.targets if floating else self.copy_targets).append(t)
                (self.sources if floating else self.copy_sources).append(s)

    @torch.no_grad()
    def update(self, tau: float = 1) -> None:
        """``target <- tau * source + (1 - tau) * target`` for every pair (1: copy)."""
        if tau == 1:
            for t, s in zip(self.targets, self.sources):
                t.copy_(s)
        else:
            torch._foreach_lerp_(self.targets, self.sources, tau)
        for t, s in zip(self.copy_targets, self.copy_sources):
            t.copy_(s)


def chain_parameters(*models: torch.nn.Module) -> Iterable[torch.nn.Parameter]:
    """Parameters of every model in turn."""
    for model in models:
        yield from model.parameters()


class LearningStartMixin:
    """``min_itr_learn`` kept in shared memory.

    The algorithm calls :meth:`give_min_itr_learn` after the sampler started
    its workers, so a plain attribute would reach only the master's copy of the
    agent; the workers' copies read this shared value instead. Subclasses call
    :meth:`_init_learning_start` in ``__init__``.
    """

    def _init_learning_start(self) -> None:
        self._min_itr_learn = np_mp_array(1, "int64")

    @property
    def min_itr_learn(self) -> int:
        """Iteration at which learning starts (0 until the algorithm sets it)."""
        return int(self._min_itr_learn[0])

    def give_min_itr_learn(self, min_itr_learn: int) -> None:
        """Iteration at which learning starts; sampling switches from the
        pre-training noise to the agent's own from then on (in every worker)."""
        self._min_itr_learn[0] = as_int("min_itr_learn", min_itr_learn, minimum=0)
