"""Argument checks that fail early with messages naming the parameter and value."""
from __future__ import annotations

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
