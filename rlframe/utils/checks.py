"""Argument checks that fail early with messages naming the parameter and value."""
from __future__ import annotations

import math
import numbers
from typing import Any


def as_int(name: str, value: Any, minimum: int | None = None) -> int:
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
    value = int(value)
    if minimum is not None and value < minimum:
        allowed = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {allowed}, got {value}.")
    return value


def positive_int(name: str, value: Any) -> int:
    """``as_int(name, value, minimum=1)``."""
    return as_int(name, value, minimum=1)


def check_number(name: str, value: Any, low: float = 0., high: float = math.inf,
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
