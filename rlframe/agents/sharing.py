"""Parameter hand-over between processes and devices: the shared-memory model.

Parallel samplers read an agent's parameters from a model on shared memory
(``initialize(..., share_memory=True)``). When the agent trains a copy of it
(on a GPU, or in an asynchronous runner's optimizer process), the trained
parameters reach the samplers through :class:`ParameterSharingMixin`:
synchronous runners copy them over (:meth:`~ParameterSharingMixin.sync_shared_memory`),
asynchronous ones publish them under a lock with a version counter
(:meth:`~ParameterSharingMixin.send_shared_memory` /
:meth:`~ParameterSharingMixin.recv_shared_memory`).
"""
from __future__ import annotations

import copy
import multiprocessing as mp
from typing import TYPE_CHECKING

import torch

from rlframe.models.utils import strip_ddp_state_dict
from rlframe.utils.synchronize import RWLock

if TYPE_CHECKING:
    import ctypes
    from multiprocessing.context import BaseContext

__all__ = ["ParameterSharingMixin"]

# (dst model, src model, dst tensors, src tensors) of the last hand-over copy.
_CopyPlan = tuple[torch.nn.Module, torch.nn.Module, list[torch.Tensor], list[torch.Tensor]]


class ParameterSharingMixin:
    """The shared-memory model of an agent and the hand-over of parameters to it.

    Mixed into :class:`~rlframe.agents.base.BaseAgent`, which sets ``model``,
    ``shared_model`` and ``device`` and calls :meth:`_init_parameter_sharing`.
    """

    model: torch.nn.Module | None
    shared_model: torch.nn.Module | None
    device: torch.device

    def _init_parameter_sharing(self) -> None:
        """No hand-over yet (see :meth:`make_async_handles`)."""
        self._send_count: ctypes.c_long | None = None
        self._recv_count = 0
        self._rw_lock: RWLock | None = None
        self._copy_plan: _CopyPlan | None = None

    def sync_shared_memory(self) -> None:
        """Copy the trained model into the shared-memory model samplers read."""
        if self.shared_model is not None and self.shared_model is not self.model:
            # The model's own parameters: subclasses' state_dict() may hold more (targets).
            self.shared_model.load_state_dict(strip_ddp_state_dict(self.model.state_dict()))

    def async_cpu(self, share_memory: bool = True) -> None:
        """In an asynchronous CPU sampler: act with a private copy of the shared model."""
        if self.device.type != "cpu":
            return
        if self.shared_model is None:
            raise RuntimeError("async_cpu() needs an agent initialized with share_memory=True.")
        self.model = copy.deepcopy(self.shared_model)
        if share_memory:
            self.model.share_memory()

    def make_async_handles(self, ctx: BaseContext | None = None) -> None:
        """Create the lock and counter of asynchronous parameter hand-over.

        Called by asynchronous samplers before their processes start, with the
        multiprocessing context those processes use.
        """
        ctx = mp.get_context() if ctx is None else ctx
        self._send_count = ctx.RawValue("l", 0)
        self._rw_lock = RWLock(ctx=ctx)

    def _copy_model(self, dst: torch.nn.Module, src: torch.nn.Module) -> None:
        """Copy ``src``'s parameters and buffers into ``dst`` (same architecture; a
        DistributedDataParallel wrapper on either side is fine).

        The tensor pairs are matched by name once and reused while both models stay
        the same objects (the plan holds them, so a model built later is never taken
        for one of them): a hand-over happens after every optimizer call, and
        ``load_state_dict`` would spend most of its time on bookkeeping.
        """
        plan = self._copy_plan
        if plan is None or plan[0] is not dst or plan[1] is not src:
            dst_state = strip_ddp_state_dict(dst.state_dict(keep_vars=True))
            src_state = strip_ddp_state_dict(src.state_dict(keep_vars=True))
            if dst_state.keys() != src_state.keys():
                raise RuntimeError(
                    f"{type(self).__name__}: the shared model's entries "
                    f"{sorted(set(dst_state) ^ set(src_state))} have no counterpart in the "
                    "trained model; both must be the same architecture.")
            names = list(dst_state)
            plan = (dst, src, [dst_state[n] for n in names],
                    [src_state[n] for n in names])
            self._copy_plan = plan
        with torch.no_grad():
            for d, s in zip(plan[2], plan[3]):
                d.copy_(s)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_copy_plan"] = None  # Rebuilt on first use: the models are copies there.
        return state

    def send_shared_memory(self) -> None:
        """Optimizer side of asynchronous mode: publish new parameters."""
        if self.shared_model is None or self._send_count is None:
            return
        with self._rw_lock.write_lock:
            if self.shared_model is not self.model:
                self._copy_model(self.shared_model, self.model)
            self._send_count.value += 1

    @property
    def recv_count(self) -> int:
        """Hand-overs taken by :meth:`recv_shared_memory` in this process: the sender's
        count at the last take (0 before any), so it changes only with new parameters."""
        return self._recv_count

    def recv_shared_memory(self) -> None:
        """Sampler side of asynchronous mode: take parameters if new ones were sent."""
        if (self.shared_model is None or self.shared_model is self.model
                or self._send_count is None):
            return
        if self._send_count.value > self._recv_count:
            with self._rw_lock:
                self._copy_model(self.model, self.shared_model)
                self._recv_count = self._send_count.value
