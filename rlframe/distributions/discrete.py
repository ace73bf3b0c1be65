"""Conversions between action indexes and one-hot vectors for discrete distributions."""
from __future__ import annotations

import torch

from rlframe.utils.tensor import from_onehot


class DiscreteMixin:
    """Holds the number of choices and converts indexes <-> one-hot.

    Args:
        dim: number of discrete choices.
        dtype: dtype of index samples.
        onehot_dtype: dtype of one-hot vectors.
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.long,
                 onehot_dtype: torch.dtype = torch.float) -> None:
        self._dim: int = int(dim)
        self.dtype: torch.dtype = dtype
        self.onehot_dtype: torch.dtype = onehot_dtype
        # Identity matrices by (dtype, device): a one-hot is a row lookup in them.
        self._identity: dict[tuple, torch.Tensor] = {}

    @property
    def dim(self) -> int:
        """Number of discrete choices."""
        return self._dim

    def to_onehot(self, indexes: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Map integer ``indexes`` [*lead] to one-hot [*lead, dim] (``onehot_dtype`` by default)."""
        dtype = dtype or self.onehot_dtype
        identity = self._identity.get((dtype, indexes.device))
        if identity is None:
            identity = torch.eye(self._dim, dtype=dtype, device=indexes.device)
            self._identity[(dtype, indexes.device)] = identity
        # A row lookup costs a third of zeros + scatter for the small batches of training.
        if indexes.dim() == 1 and indexes.dtype == torch.int64:  # Replay batches: no reshapes.
            return identity.index_select(0, indexes)
        return identity.index_select(0, indexes.reshape(-1).long()).reshape(
            indexes.shape + (self._dim,))

    def from_onehot(self, onehot: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Map one-hot [*lead, dim] back to indexes [*lead] (``dtype`` by default)."""
        return from_onehot(onehot, dtype=dtype or self.dtype)
