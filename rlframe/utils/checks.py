"""Argument checks that fail early with messages naming the parameter and value."""
from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def as_int(name: str, value: object, minimum: int | None = None) -> int:
    """Return ``value`` as an int, or raise if it is not a whole number >= ``minimum``.

    Integral floats such as ``50e6`` are accepted (rlpyt scripts pass them).

    Raises:
        TypeError: ``value`` is not a number (bools are rejected too).
        ValueError: ``value`` is not whole, or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer, got {value!r} "
                        f"({type(value).__name__}).")
    if value != value or value in (float("inf"), float("-inf")) or int(value) != value:
        raise ValueError(f"{name} must be a whole number, got {value!r}.")
    number = int(value)
    if minimum is not None and number < minimum:
        allowed = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {allowed}, got {number}.")
    return number


def positive_int(name: str, value: object) -> int:
    """``as_int(name, value, minimum=1)``."""
    return as_int(name, value, minimum=1)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool, else a TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
    return value


def check_number(name: str, value: object, low: float = 0., high: float = math.inf,
                 low_open: bool = True) -> float:
    """``value`` as a float in ``(low, high]`` (``[low, high]`` if not ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    ok_low = low < value if low_open else low <= value
    if not (ok_low and value <= high):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must lie in {bracket}{low}, {high}], got {value}.")
    return value


def close_names(name: str, names: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for names close to ``name`` ('' if none)."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def keywords_of(fn: Callable) -> list[str] | None:
    """Keyword names ``fn`` (a function or class) takes; None when it takes ``**kwargs``
    or has no signature to read (then any keyword may be right)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)]


def check_keywords(name: str, kwargs: object, fn: Callable, fn_name: str,
                   reserved: dict[str, str] | None = None) -> dict[str, Any]:
    """Raise unless ``kwargs`` (the argument ``name``) holds only keywords ``fn`` takes.

    Args:
        name: the argument holding the keywords (``"optim_kwargs"``).
        kwargs: a dict of keywords (None means ``{}``).
        fn: the function or class they are passed to.
        fn_name: how to name ``fn`` in messages (``"torch.optim.Adam"``).
        reserved: keywords rlframe passes itself, each with a hint for the message
            (``{"lr": "set learning_rate instead"}``).

    Returns:
        ``kwargs`` as a new dict.

    Raises:
        TypeError: ``kwargs`` is not a dict, holds a reserved keyword, or one that
            ``fn`` does not take (with close matches and the keywords it takes).
    """
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise TypeError(f"{name} must be a dict of keyword arguments for {fn_name}, got "
                        f"{type(kwargs).__name__}: {kwargs!r}.")
    reserved = reserved or {}
    for key in kwargs:
        if key in reserved:
            raise TypeError(f"{name} holds {key!r}, which rlframe passes to {fn_name} itself: "
                            f"{reserved[key]}.")
    accepted = keywords_of(fn)
    if accepted is None:
        return dict(kwargs)
    accepted = [k for k in accepted if k not in reserved]
    unknown = [key for key in kwargs if key not in accepted]
    if unknown:
        hint = "".join(close_names(str(key), accepted) for key in unknown)
        raise TypeError(f"{name} holds {', '.join(repr(k) for k in unknown)}, which "
                        f"{fn_name} does not take.{hint} {fn_name} takes: "
                        f"{', '.join(accepted) or '(no keywords)'}.")
    return dict(kwargs)


def listed(items: list[str], limit: int = 10) -> str:
    """``items`` joined by commas, cut after ``limit`` (", and N more")."""
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f", and {more} more" if more > 0 else "")


def shape_differences(own: Mapping[str, Any], given: Mapping[str, Any]
                      ) -> tuple[list[str], list[str], list[str]]:
    """Compare two ``{name: shape}`` maps (a shape may be None: not a tensor).

    Returns:
        ``(names in both with other shapes, names missing from given, names only in
        given)``, in ``own``'s order (the last in ``given``'s).
    """
    shaped = [k for k in own if k in given and given[k] != own[k]]
    missing = [k for k in own if k not in given]
    unexpected = [k for k in given if k not in own]
    return shaped, missing, unexpected


def state_dict_mismatch(module: torch.nn.Module, state_dict: object, limit: int = 10
                        ) -> str | None:
    """How ``state_dict`` fails to fit ``module`` (a torch module), in words; None if it fits.

    Lists missing and unexpected keys and entries of another shape, each list
    cut after ``limit`` names ("and N more").
    """
    if not isinstance(state_dict, Mapping):
        return f"it is a {type(state_dict).__name__}, not a state dict (a mapping of names " \
               "to tensors)"
    own = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    given = {k: tuple(v.shape) for k, v in state_dict.items() if hasattr(v, "shape")}
    shaped = shape_differences(own, given)[0]
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [f"{k} {given[k]} (model: {own[k]})" for k in shaped]
    parts = []
    if missing:
        parts.append(f"missing keys: {listed(missing, limit)}")
    if unexpected:
        parts.append(f"unexpected keys: {listed(unexpected, limit)}")
    if shapes:
        parts.append(f"other shapes: {listed(shapes, limit)}")
    return "; ".join(parts) or None
