"""Checks of what an agent's model returns for one observation, with clear errors.

Agents call these from ``check_model_outputs`` (see
:meth:`~rlframe.agents.base.BaseAgent.check_model`), so that a model of the
wrong shape is reported before any work, not deep inside a distribution.
"""
from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["ModelOwner", "check_output_size", "check_output_count", "check_value_output",
           "check_probabilities"]


class ModelOwner(Protocol):
    """What the checks read of an agent: its model class, for the messages."""

    ModelCls: type | None


def check_output_size(agent: ModelOwner, output: object, size: int, what: str,
                      expected: str) -> None:
    """Raise unless a model output for one observation is a ``[1, size, ...]`` tensor.

    Args:
        agent: the agent checking its model.
        output: the output to check (e.g. the first of the model's outputs).
        size: entries it needs in its last dim (e.g. the number of actions).
        what: what those entries are, for the message.
        expected: the model's whole output contract, for the message.
    """
    if not isinstance(output, torch.Tensor) or tuple(output.shape[:2]) != (1, size):
        got = (f"of shape {tuple(output.shape)}" if isinstance(output, torch.Tensor)
               else f"as {type(output).__name__}")
        raise ValueError(
            f"{type(agent).__name__}: the model {agent.ModelCls.__name__} returned {what} {got} "
            f"for one observation, but the action space needs {size}: its forward must "
            f"return {expected}.")


def check_output_count(agent: ModelOwner, outputs: object, count: int, expected: str) -> tuple:
    """Return ``outputs`` if the model returned a tuple of at least ``count`` values, else raise.

    Args:
        agent: the agent checking its model.
        outputs: what the model returned for one observation.
        count: outputs the agent unpacks (without the RNN state).
        expected: the model's whole output contract, for the message.
    """
    if isinstance(outputs, (tuple, list)) and len(outputs) >= count:
        return tuple(outputs)
    got = (f"{len(outputs)} outputs" if isinstance(outputs, (tuple, list))
           else f"one {type(outputs).__name__}")
    raise ValueError(f"{type(agent).__name__}: the model {agent.ModelCls.__name__} returned "
                     f"{got}, but its forward must return {expected}.")


def check_value_output(agent: ModelOwner, value: object, expected: str) -> None:
    """Raise unless the model's ``value`` for one observation has shape ``[1]``.

    A value of shape ``[1, 1]`` (the value head's trailing dim kept) would
    broadcast against ``[T, B]`` returns in the loss and train on wrong targets.

    Args:
        agent: the agent checking its model.
        value: the model's value output for one observation (leading dim [1]).
        expected: the model's whole output contract, for the message.
    """
    if isinstance(value, torch.Tensor) and tuple(value.shape) == (1,):
        return
    got = (f"of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
           else f"as {type(value).__name__}")
    hint = (" Drop the value head's trailing dim (value.squeeze(-1))."
            if isinstance(value, torch.Tensor) and tuple(value.shape) == (1, 1) else "")
    raise ValueError(
        f"{type(agent).__name__}: the model {agent.ModelCls.__name__} returned value {got} "
        f"for one observation, but value must have shape (1,) there (value [*lead], no "
        f"trailing dim): its forward must return {expected}.{hint}")


def check_probabilities(agent: ModelOwner, probs: torch.Tensor, name: str,
                        expected: str) -> None:
    """Raise unless ``probs`` holds probability vectors along its last dim.

    Entries must be finite and non-negative, and each vector must sum to 1
    (within 1e-3): a model that returns logits (no softmax) is refused.

    Args:
        agent: the agent checking its model.
        probs: the model's probabilities for one observation, ``[1, ..., K]``.
        name: the output's name, for the message (e.g. ``"pi"``).
        expected: the model's whole output contract, for the message.
    """
    probs = probs.detach().float()
    sums = probs.sum(-1)
    if (torch.isfinite(probs).all() and (probs >= 0).all()
            and torch.allclose(sums, torch.ones_like(sums), atol=1e-3, rtol=0)):
        return
    found = (f"min entry {probs.min().item():.4g}, sums over the last dim "
             f"{[round(s, 4) for s in sums.flatten()[:4].tolist()]}")
    raise ValueError(
        f"{type(agent).__name__}: the model {agent.ModelCls.__name__} returned {name} that is "
        f"not a probability vector for one observation ({found}); its entries must be >= 0 "
        f"and sum to 1 over the last dim. If the model returns logits, apply "
        f"torch.softmax(logits, dim=-1): its forward must return {expected}.")
