"""Double-buffer collectors: the CPU and GPU collectors, writing into one of two
sample buffers.

The sampler process of an asynchronous runner alternates between two shared
``[T, B]`` sample buffers (the double buffer): it fills one while a memory
copier moves the other into the replay buffer. These collectors step their
envs exactly as :class:`CpuResetCollector` / :class:`CpuWaitResetCollector`
(the agent acts in the collector) and :class:`GpuResetCollector` /
:class:`GpuWaitResetCollector` (an action server acts) do; they only point the
stepping core at buffer ``sync.db_idx.value`` before each batch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from rlframe.samplers.async_.base import N_DOUBLE_BUFFER, check_db_idx
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector, CpuWaitResetCollector
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector, GpuWaitResetCollector

if TYPE_CHECKING:
    from rlframe.agents.base import AgentInputs
    from rlframe.samplers.collections import Samples, TrajInfo
    from rlframe.samplers.stepping import TrajTracker
    from rlframe.utils.collections import AttrDict


class DoubleBufferCollectorMixin:
    """Writes each batch into ``double_buffer[sync.db_idx.value]``.

    The collector's ``samples_np`` argument is the pair of numpy ``Samples``
    buffers ``[T, B]`` (this collector's columns of each), and ``sync.db_idx``
    an object with an integer ``value`` (a shared value in parallel samplers).
    """

    double_buffer: tuple[Samples, ...]
    samples_np: Samples
    sync: AttrDict

    def __init__(self, *args: Any, samples_np: Sequence[Samples], **kwargs: Any):
        if not isinstance(samples_np, (tuple, list)) or len(samples_np) != N_DOUBLE_BUFFER:
            raise TypeError(f"{type(self).__name__} writes into a double buffer: samples_np "
                            f"must be a pair of sample buffers, got {type(samples_np).__name__}.")
        self.double_buffer = tuple(samples_np)
        super().__init__(*args, samples_np=self.double_buffer[0], **kwargs)
        if self.sync is None or not hasattr(self.sync, "db_idx"):
            raise ValueError(f"{type(self).__name__} needs sync.db_idx (which half of the "
                             "double buffer to write); the async samplers provide it.")

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: TrajTracker,
                      itr: int) -> tuple[AgentInputs, TrajTracker, list[TrajInfo]]:
        self.samples_np = self.double_buffer[check_db_idx(self.sync.db_idx.value, "sync.db_idx")]
        self.stepper.use_samples(self.samples_np)
        return super().collect_batch(agent_inputs, traj_infos, itr)  # type: ignore[misc]


class DbCpuResetCollector(DoubleBufferCollectorMixin, CpuResetCollector):
    """:class:`CpuResetCollector` writing into one half of the double buffer."""


class DbCpuWaitResetCollector(DoubleBufferCollectorMixin, CpuWaitResetCollector):
    """:class:`CpuWaitResetCollector` writing into one half of the double buffer."""


class DbGpuResetCollector(DoubleBufferCollectorMixin, GpuResetCollector):
    """:class:`GpuResetCollector` writing into one half of the double buffer."""


class DbGpuWaitResetCollector(DoubleBufferCollectorMixin, GpuWaitResetCollector):
    """:class:`GpuWaitResetCollector` writing into one half of the double buffer."""
