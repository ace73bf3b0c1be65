"""Small helpers: minibatch index iteration, typed zeros, sequence extraction."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence, TypeVar

import numpy as np
import torch

if TYPE_CHECKING:
    import numpy.typing as npt

ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


def iterate_mb_idxs(data_length: int, minibatch_size: int,
                    shuffle: bool = False) -> Iterator[np.ndarray | slice]:
    """Yield index sets of ``minibatch_size`` covering ``range(data_length)``.

    The remainder that does not fill a whole minibatch is dropped.
    """
    if shuffle:
        indexes = np.arange(data_length)
        np.random.shuffle(indexes)
    for start_idx in range(0, data_length - minibatch_size + 1, minibatch_size):
        batch = slice(start_idx, start_idx + minibatch_size)
        yield indexes[batch] if shuffle else batch


def zeros(shape: int | Sequence[int],
          dtype: npt.DTypeLike | torch.dtype) -> np.ndarray | torch.Tensor:
    """Zeros as a torch tensor for a torch dtype, else a numpy array."""
    if isinstance(dtype, torch.dtype):
        return torch.zeros(shape, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


def empty(shape: int | Sequence[int],
          dtype: npt.DTypeLike | torch.dtype) -> np.ndarray | torch.Tensor:
    """Uninitialised tensor (torch dtype) or array (numpy dtype)."""
    if isinstance(dtype, torch.dtype):
        return torch.empty(shape, dtype=dtype)
    return np.empty(shape, dtype=dtype)


def extract_sequences(array_or_tensor: ArrayOrTensor, T_idxs: npt.ArrayLike,
                      B_idxs: npt.ArrayLike, T: int) -> ArrayOrTensor:
    """Gather ``[T, len(B_idxs)]`` sequences starting at ``T_idxs``, wrapping in time.

    Args:
        array_or_tensor: [T_total, B_total, ...].
        T_idxs, B_idxs: [n] start times and env indexes.
        T: sequence length.
    """
    T_total = array_or_tensor.shape[0]
    t = (np.asarray(T_idxs)[None, :] + np.arange(T)[:, None]) % T_total
    b = np.broadcast_to(np.asarray(B_idxs)[None, :], t.shape)
    if isinstance(array_or_tensor, torch.Tensor):
        return array_or_tensor[torch.as_tensor(t), torch.as_tensor(b)]
    return array_or_tensor[t, b]
