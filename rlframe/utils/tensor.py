"""Torch helpers for leading dims, indexing, one-hot, masked means, minibatches and
gradient clipping."""
from __future__ import annotations

from typing import Any, Sequence, overload

import torch


def select_at_indexes(indexes: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """Pick one element per leading position.

    Args:
        indexes: [*lead] integer indexes into the next dim of ``tensor``.
        tensor: [*lead, N, *rest].

    Returns:
        [*lead, *rest]: ``tensor[..., indexes[...], ...]`` elementwise.
    """
    dim = len(indexes.shape)
    if indexes.shape != tensor.shape[:dim]:
        raise ValueError(f"indexes shape {tuple(indexes.shape)} must match the leading dims of "
                         f"tensor shape {tuple(tensor.shape)}.")
    rest = tensor.shape[dim + 1:]
    if not rest:  # The common case, e.g. Q-values [B, A] at actions [B]: one gather.
        return torch.gather(tensor, dim, indexes.long().unsqueeze(dim)).squeeze(dim)
    index = indexes.long().reshape(indexes.shape + (1,) * (1 + len(rest)))
    index = index.expand(indexes.shape + (1,) + rest)
    return torch.gather(tensor, dim, index).squeeze(dim)


def to_onehot(indexes: torch.Tensor, num: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """One-hot encode integer ``indexes`` [*lead] into [*lead, num]."""
    if dtype is None:
        dtype = indexes.dtype
    onehot = torch.zeros(indexes.shape + (num,), dtype=dtype, device=indexes.device)
    onehot.scatter_(-1, indexes.unsqueeze(-1).long(), 1)
    return onehot


def from_onehot(onehot: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Index of the max along ``dim`` (inverse of :func:`to_onehot`)."""
    indexes = torch.argmax(onehot, dim=dim)
    if dtype is not None:
        indexes = indexes.type(dtype)
    return indexes


def valid_mean(tensor: torch.Tensor, valid: torch.Tensor | None = None,
               dim: int | Sequence[int] | None = None) -> torch.Tensor:
    """Mean of ``tensor`` over entries where ``valid`` is nonzero (all if None)."""
    if valid is None:
        return tensor.mean() if dim is None else tensor.mean(dim=dim)
    dim = () if dim is None else dim
    valid = valid.type(tensor.dtype)
    return (tensor * valid).sum(dim=dim) / valid.sum(dim=dim).clamp(min=1e-8)


def valid_standardize(tensor: torch.Tensor, valid: torch.Tensor | None = None,
                      eps: float = 1e-6) -> torch.Tensor:
    """``(tensor - mean) / (std + eps)`` over the entries where ``valid`` is nonzero.

    The population standard deviation (no Bessel correction), so a single entry
    standardizes to 0 rather than NaN. Entries outside ``valid`` are shifted and scaled
    alike and stay masked wherever ``valid`` is used.
    """
    mean = valid_mean(tensor, valid)
    var = valid_mean((tensor - mean) ** 2, valid)
    return (tensor - mean) / (var.sqrt() + eps)


def minibatch_indexes(n: int, minibatches: int,
                      generator: torch.Generator | None = None) -> list[torch.Tensor | slice]:
    """Split ``range(n)`` into ``minibatches`` shuffled index sets of ``n // minibatches``.

    One ``torch.randperm`` cut into chunks (views); the remainder that does not fill a
    whole minibatch is dropped. A single minibatch is ``slice(0, n)``: the whole
    batch in order, since a loss averaged over it is the same in any order (up to
    float rounding), so it is neither shuffled nor gathered.

    Returns:
        ``minibatches`` [n // minibatches] int64 tensors, or ``[slice(0, n)]``.
    """
    if not 1 <= minibatches <= n:
        raise ValueError(f"minibatches must be in [1, n={n}], got {minibatches}.")
    if minibatches == 1:
        return [slice(0, n)]
    size = n // minibatches
    return list(torch.randperm(n, generator=generator)[:size * minibatches].split(size))


def infer_leading_dims(tensor: torch.Tensor, dim: int) -> tuple[int, int, int, tuple]:
    """Find the leading [T, B] dims in front of ``dim`` data dims.

    Args:
        tensor: [T, B, *shape], [B, *shape] or [*shape].
        dim: number of data dims (``len(shape)``).

    Returns:
        ``(lead_dim, T, B, shape)`` with lead_dim in {0, 1, 2}; T and B are 1 where absent.
    """
    lead_dim = tensor.dim() - dim
    if lead_dim not in (0, 1, 2):
        raise ValueError(f"Tensor of shape {tuple(tensor.shape)} has {lead_dim} leading dims "
                         f"before {dim} data dims; expected 0, 1 or 2.")
    T = B = 1
    shape = tuple(tensor.shape[lead_dim:])
    if lead_dim == 2:
        T, B = tensor.shape[:2]
    elif lead_dim == 1:
        B = tensor.shape[0]
    return lead_dim, T, B, shape


@overload
def restore_leading_dims(tensors: torch.Tensor, lead_dim: int, T: int = 1, B: int = 1
                         ) -> torch.Tensor: ...
@overload
def restore_leading_dims(tensors: Sequence[torch.Tensor], lead_dim: int, T: int = 1, B: int = 1
                         ) -> Sequence[torch.Tensor]: ...
def restore_leading_dims(tensors: torch.Tensor | Sequence[torch.Tensor], lead_dim: int,
                         T: int = 1, B: int = 1) -> torch.Tensor | Sequence[torch.Tensor]:
    """Reshape [T*B, ...] outputs back to the input's leading dims.

    Args:
        tensors: a tensor, or a tuple/list of tensors, each with leading dim T*B.
        lead_dim: as returned by :func:`infer_leading_dims`.
    """
    is_seq = isinstance(tensors, (tuple, list))
    tensors = tensors if is_seq else (tensors,)
    if lead_dim == 2:
        tensors = tuple(t.view((T, B) + t.shape[1:]) for t in tensors)
    elif lead_dim == 0:
        if any(t.shape[0] != 1 for t in tensors):
            raise ValueError("Unbatched input must give outputs with leading dim 1.")
        tensors = tuple(t.squeeze(0) for t in tensors)
    return tensors if is_seq else tensors[0]


def clip_grad_norm(parameters: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Global gradient norm of ``parameters``, scaling the gradients down to
    ``max_norm`` when it exceeds it (``torch.nn.utils.clip_grad_norm_`` always
    rescales, which costs a pass over every gradient even when the factor is 1)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if norm > max_norm:
        torch._foreach_mul_(grads, max_norm / (float(norm) + 1e-6))
    return norm
