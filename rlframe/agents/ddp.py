"""DistributedDataParallel for agents: wrapping a model for synchronous ranks, unwrapping it.

Agents wrap their models in :meth:`~rlframe.agents.base.BaseAgent.data_parallel`
(through :func:`wrap_ddp`); runners give the plain models back with
:func:`unwrap_ddp` once the process group is gone.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from rlframe.utils.distributed import is_gloo_pair, pair_mean_hook

__all__ = ["DDP", "StepDDP", "wrap_ddp", "unwrap_ddp"]

# DistributedDataParallel's switch for buffer broadcasts before forward passes
# (renamed in newer torch; buffers are still broadcast once, when wrapping).
_NO_FORWARD_BUFFER_SYNC = ({"forward_sync_buffers": False}
                           if "forward_sync_buffers" in inspect.signature(DDP).parameters
                           else {"broadcast_buffers": False})


class StepDDP(DDP):
    """DistributedDataParallel that calls its module directly when no gradient
    is recorded (sampling, evaluation, target computations).

    Without gradients DDP has nothing to synchronise (buffers are not
    broadcast, see :func:`wrap_ddp`), but its forward still costs about 20 us
    of bookkeeping per call, as much as a small policy's forward pass: at one
    call per sampler step that slowed every rank's sampling. With gradients
    on, DDP's forward runs as usual. Inputs must already be on the module's
    device (agents move them there).
    """

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.module(*inputs, **kwargs)
        return super().forward(*inputs, **kwargs)


def unwrap_ddp(agent: object) -> None:
    """Give the agent back its plain models once the process group is gone.

    Args:
        agent: a :class:`~rlframe.agents.base.BaseAgent`; every attribute holding a
            DistributedDataParallel wrapper gets the wrapped module back.
    """
    for name, value in list(vars(agent).items()):
        if isinstance(value, DDP):
            setattr(agent, name, value.module)
    if hasattr(agent, "_ddp"):
        setattr(agent, "_ddp", False)
    if hasattr(agent, "_target_pairs"):
        setattr(agent, "_target_pairs", None)


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> DDP:
    """``model`` in DistributedDataParallel on ``device`` (CPU: no device ids, gloo).

    Buffers are not broadcast before every forward pass: a collective there would
    make every sampling step (and rank 0's evaluation alone) a meeting of all ranks;
    forward passes without gradients skip DDP altogether (:class:`StepDDP`).
    On a gloo group of two ranks, gradients are averaged by one exchange of
    messages (:func:`rlframe.utils.distributed.pair_mean_hook`), not gloo's
    all_reduce.
    """
    device_id = device.index if device.type == "cuda" else None
    # Gradients live in the all-reduce buckets: no copy into and out of them per update.
    ddp = StepDDP(model, device_ids=None if device_id is None else [device_id],
                  output_device=device_id, gradient_as_bucket_view=True,
                  **_NO_FORWARD_BUFFER_SYNC)
    if device.type == "cpu" and is_gloo_pair():
        ddp.register_comm_hook(None, pair_mean_hook)  # Two CPU ranks: one message exchange.
    return ddp
