"""Running mean and variance of observations, for input normalisation."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from rlframe.utils.distributed import sum_over_ranks_
from rlframe.utils.tensor import infer_leading_dims


class RunningMeanStdModel(torch.nn.Module):
    """Tracks the mean and (population) variance of all data passed to :meth:`update`.

    Buffers (saved in the state dict): ``mean`` and ``var`` of shape ``shape``, and
    the scalar ``count``. Before the first update ``mean`` is 0 and ``var`` is 1.
    When ``torch.distributed`` is initialised, each update combines the batches of
    all ranks, so every rank keeps identical statistics.

    Args:
        shape: shape of one data point, e.g. the observation shape.
    """

    def __init__(self, shape: Sequence[int] | int) -> None:
        super().__init__()
        self.shape: tuple[int, ...] = (int(shape),) if isinstance(shape, int) else tuple(shape)
        self.register_buffer("mean", torch.zeros(self.shape))
        self.register_buffer("var", torch.ones(self.shape))
        self.register_buffer("count", torch.zeros(()))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x`` [T, B, *shape], [B, *shape] or [*shape] into the statistics."""
        _, T, B, _ = infer_leading_dims(x, len(self.shape))
        x = x.reshape((T * B,) + self.shape).to(self.mean.dtype)
        batch_count = torch.tensor(float(T * B), device=x.device)
        batch_sum = x.sum(dim=0)
        if dist.is_available() and dist.is_initialized():
            # Two passes over the union of all ranks' data: the global mean first, then
            # squared deviations from it, which is exact (not an average of variances).
            count_sum = sum_over_ranks_(torch.cat([batch_count.reshape(1), batch_sum.flatten()]))
            batch_count, batch_sum = count_sum[0], count_sum[1:].reshape(self.shape)
            batch_mean = batch_sum / batch_count
            sq_dev = sum_over_ranks_(((x - batch_mean) ** 2).sum(dim=0))
            batch_var = sq_dev / batch_count
        else:
            batch_mean = batch_sum / batch_count
            batch_var = x.var(dim=0, correction=0)
        if self.count == 0:
            self.mean.copy_(batch_mean)
            self.var.copy_(batch_var)
        else:
            # Chan et al.'s parallel combination of two (mean, M2, count) summaries.
            total = self.count + batch_count
            delta = batch_mean - self.mean
            m2 = (self.var * self.count + batch_var * batch_count
                  + delta ** 2 * self.count * batch_count / total)
            self.mean.add_(delta * batch_count / total)
            self.var.copy_(m2 / total)
        self.count.add_(batch_count)

    def normalize(self, x: torch.Tensor, clip: float | None = None,
                  var_clip: float | None = None) -> torch.Tensor:
        """``(x - mean) / sqrt(max(var, var_clip))``, then clamped to ``[-clip, clip]``."""
        var = self.var if var_clip is None else torch.clamp(self.var, min=var_clip)
        x = (x - self.mean) / torch.sqrt(var)
        return x if clip is None else torch.clamp(x, -clip, clip)
