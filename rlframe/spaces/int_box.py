"""Integer-valued box: every element lies in ``range(low, high)``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from rlframe.spaces.base import Space

if TYPE_CHECKING:
    import numpy.typing as npt


class IntBox(Space):
    """Integers in ``[low, high)``, all elements sharing the same scalar bounds.

    Args:
        low: smallest value (inclusive).
        high: bound (exclusive); ``n = high - low`` values are possible.
        shape: shape of one value; ``None`` or ``()`` for a scalar.
        dtype: an integer numpy dtype.
        null_value: the null value; ``low`` when ``None``.
    """

    def __init__(self, low: int, high: int, shape: int | Sequence[int] | None = None,
                 dtype: npt.DTypeLike = "int32", null_value: int | None = None) -> None:
        if not (np.isscalar(low) and np.isscalar(high)):
            raise ValueError(f"IntBox: low and high must be scalars, got low={low!r}, high={high!r}.")
        if high <= low:
            raise ValueError(f"IntBox: high must be greater than low, got low={low}, high={high}.")
        self.dtype: np.dtype = np.dtype(dtype)
        if not np.issubdtype(self.dtype, np.integer):
            raise ValueError(f"IntBox: dtype must be an integer type, got dtype={dtype!r}.")
        info = np.iinfo(self.dtype)
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"IntBox: values [{low}, {high - 1}] do not fit dtype={self.dtype.name} "
                             f"([{info.min}, {info.max}]).")
        null_value = low if null_value is None else null_value
        if not low <= null_value < high:
            raise ValueError(f"IntBox: null_value must lie in [{low}, {high}), got {null_value}.")
        self.low: int = int(low)
        self.high: int = int(high)
        self.shape: tuple[int, ...] = _as_shape(shape)
        self._null_value: int = int(null_value)

    def sample(self) -> np.ndarray:
        """Uniform integers; ``[*shape]`` array of ``dtype``."""
        return np.asarray(self.rng.integers(self.low, self.high, size=self.shape,
                                            dtype=self.dtype))

    def null_value(self) -> np.ndarray:
        """``[*shape]`` array filled with the null value."""
        return np.full(self.shape, self._null_value, dtype=self.dtype)

    def contains(self, x: object) -> bool:
        """True for an integer-valued array of this shape within the bounds."""
        a = np.asarray(x)
        if a.shape != self.shape or a.dtype.kind not in "biuf":
            return False
        return bool(np.all(a == np.round(a)) and np.all(a >= self.low) and np.all(a < self.high))

    @property
    def bounds(self) -> tuple[int, int]:
        """``(low, high)``, high exclusive."""
        return self.low, self.high

    @property
    def n(self) -> int:
        """Number of distinct values per element."""
        return self.high - self.low

    def __repr__(self) -> str:
        return f"IntBox({self.low}-{self.high - 1} shape={self.shape})"


def _as_shape(shape: int | Sequence[int] | None) -> tuple[int, ...]:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)
