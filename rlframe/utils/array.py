"""Numpy counterparts of :mod:`rlframe.utils.tensor`."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def select_at_indexes(indexes: np.ndarray, array: np.ndarray) -> np.ndarray:
    """``array[..., indexes[...]]`` elementwise over the leading dims of ``indexes``."""
    dim = indexes.ndim
    if indexes.shape != array.shape[:dim]:
        raise ValueError(f"indexes shape {indexes.shape} must match the leading dims of "
                         f"array shape {array.shape}.")
    num = indexes.size
    a_flat = array.reshape((num,) + array.shape[dim:])
    s_flat = a_flat[np.arange(num), indexes.reshape(-1)]
    return s_flat.reshape(array.shape[:dim] + array.shape[dim + 1:])


def to_onehot(indexes: Any, dim: int, dtype: Any = None) -> np.ndarray:
    """One-hot encode integer ``indexes`` [*lead] into [*lead, dim]."""
    indexes = np.asarray(indexes)
    dtype = indexes.dtype if dtype is None else dtype
    onehot = np.zeros(indexes.shape + (dim,), dtype=dtype)
    np.put_along_axis(onehot, indexes[..., None].astype(np.int64), 1, axis=-1)
    return onehot


def from_onehot(onehot: np.ndarray, dtype: Any = None) -> np.ndarray:
    """Index of the max along the last axis."""
    out = np.argmax(onehot, axis=-1)
    return out if dtype is None else out.astype(dtype)


def valid_mean(array: np.ndarray, valid: np.ndarray | None = None,
               axis: int | Sequence[int] | None = None) -> Any:
    """Mean over entries where ``valid`` is nonzero (all if None)."""
    if valid is None:
        return array.mean(axis=axis)
    return (array * valid).sum(axis=axis) / max(float(np.sum(valid, axis=axis)), 1e-8) \
        if axis is None else (array * valid).sum(axis=axis) / np.maximum(valid.sum(axis=axis), 1e-8)


def infer_leading_dims(array: np.ndarray, dim: int) -> tuple[int, int, tuple, bool, bool]:
    """Returns ``(T, B, shape, has_T, has_B)`` for [T, B, *shape], [B, *shape] or [*shape]."""
    lead_dim = array.ndim - dim
    if lead_dim not in (0, 1, 2):
        raise ValueError(f"Array of shape {array.shape} has {lead_dim} leading dims; expected 0-2.")
    T = B = 1
    has_T = has_B = False
    if lead_dim == 2:
        T, B = array.shape[:2]
        has_T = has_B = True
    elif lead_dim == 1:
        B = array.shape[0]
        has_B = True
    return T, B, tuple(array.shape[lead_dim:]), has_T, has_B
