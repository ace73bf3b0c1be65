"""Real-valued box with per-element bounds."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from rlframe.spaces.base import Space
from rlframe.spaces.int_box import _as_shape

if TYPE_CHECKING:
    import numpy.typing as npt


class FloatBox(Space):
    """Floats within ``[low, high]`` elementwise (bounds may be infinite).

    Args:
        low: lower bound: a scalar (with ``shape``) or an array (``shape`` is None).
        high: upper bound, same form as ``low``.
        shape: shape of one value when the bounds are scalars.
        null_value: fill value of :meth:`null_value` (``None``: zeros).
        dtype: a floating numpy dtype.
    """

    def __init__(self, low: npt.ArrayLike, high: npt.ArrayLike,
                 shape: int | Sequence[int] | None = None, null_value: float | None = 0.,
                 dtype: npt.DTypeLike = "float32") -> None:
        self.dtype: np.dtype = np.dtype(dtype)
        if not np.issubdtype(self.dtype, np.floating):
            raise ValueError(f"FloatBox: dtype must be a floating type, got dtype={dtype!r}.")
        if shape is None:
            low_a, high_a = np.asarray(low, self.dtype), np.asarray(high, self.dtype)
            if low_a.shape != high_a.shape:
                raise ValueError(f"FloatBox: low and high shapes differ: {low_a.shape} vs "
                                 f"{high_a.shape} (pass scalars and shape=... instead).")
        else:
            if not (np.isscalar(low) and np.isscalar(high)):
                raise ValueError("FloatBox: with shape given, low and high must be scalars, "
                                 f"got low={low!r}, high={high!r}.")
            low_a = np.full(_as_shape(shape), low, self.dtype)
            high_a = np.full(_as_shape(shape), high, self.dtype)
        if np.any(high_a < low_a):
            raise ValueError(f"FloatBox: high must be >= low, got low={low!r}, high={high!r}.")
        self.low: np.ndarray = low_a
        self.high: np.ndarray = high_a
        self._null_value: float | None = null_value

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one value."""
        return self.low.shape

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` arrays."""
        return self.low, self.high

    def sample(self) -> np.ndarray:
        """``[*shape]`` array of ``dtype``.

        Uniform where both bounds are finite; where a bound is infinite,
        a standard normal (unbounded) or a unit exponential offset from the
        finite bound.
        """
        low, high = self.low.astype(np.float64), self.high.astype(np.float64)
        lo_fin, hi_fin = np.isfinite(low), np.isfinite(high)
        out = self.rng.standard_normal(self.shape)
        both = lo_fin & hi_fin
        out[both] = self.rng.uniform(low[both], high[both])
        only_lo, only_hi = lo_fin & ~hi_fin, hi_fin & ~lo_fin
        out[only_lo] = low[only_lo] + self.rng.exponential(size=int(only_lo.sum()))
        out[only_hi] = high[only_hi] - self.rng.exponential(size=int(only_hi.sum()))
        return np.asarray(out, dtype=self.dtype)

    def null_value(self) -> np.ndarray:
        """``[*shape]`` array filled with the null value."""
        fill = 0. if self._null_value is None else self._null_value
        return np.full(self.shape, fill, dtype=self.dtype)

    def contains(self, x: object) -> bool:
        """True for a numeric array of this shape within the bounds."""
        a = np.asarray(x)
        if a.shape != self.shape or a.dtype.kind not in "biuf":
            return False
        return bool(np.all(a >= self.low) and np.all(a <= self.high))

    def __repr__(self) -> str:
        return f"FloatBox(shape={self.shape}, dtype={self.dtype.name})"
