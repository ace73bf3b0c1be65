"""Asynchronous GPU-style sampler: workers step envs, an action server picks all actions.

With one affinity dict (``affinity["sampler"]``) the sampler process itself is
the action server: it starts the env workers, moves its agent to
``cuda_idx`` (None: the CPU) and runs one batched forward pass per time step,
writing the batch into half ``db_idx`` of the double buffer.

With a list of affinity dicts (``make_affinity(..., async_sample=True,
sample_gpu_per_run=n)``) the sampler process starts one action-server process
per entry. The envs are split evenly over the servers (server ``r`` serves
batch columns ``r * B / n_server ...``), then over each server's workers;
each server pins itself to its ``master_cpus``, starts its workers on
``workers_cpus``, acts on its ``cuda_idx`` and takes new parameters before
every batch and evaluation. Workers and envs are numbered over all servers, so
worker ``w`` (global) is seeded ``seed + w`` and env ``b`` ``seed + b``: the
envs see the same seeds however they are split. To the sampler process the
servers look like the workers of a parallel sampler, so the same machinery
starts them, waits for them, reports their failures and stops them.
"""
from __future__ import annotations

import copy
import os
import signal
from typing import TYPE_CHECKING, Any, Sequence

import torch

from rlframe.samplers.async_.action_server import AsyncActionServer
from rlframe.samplers.async_.base import AsyncParallelSamplerMixin
from rlframe.samplers.async_.collectors import DbGpuResetCollector, DoubleBufferCollectorMixin
from rlframe.samplers.collections import BatchSpec
from rlframe.samplers.parallel.base import ParallelSamplerBase
from rlframe.samplers.parallel.gpu.collectors import GpuEvalCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSamplerBase
from rlframe.samplers.parallel.worker import wait_for
from rlframe.utils.buffer import torchify_buffer
from rlframe.utils.launching.pinning import check_cuda_device, check_workers_cpus
from rlframe.utils.processes import report_error
from rlframe.utils.synchronize import die_with_parent, process_context

if TYPE_CHECKING:
    from rlframe.samplers.collections import TrajInfo
    from rlframe.utils.collections import AttrDict


class AsyncGpuSamplerBase(AsyncParallelSamplerMixin, GpuSamplerBase):
    """Asynchronous GPU-style sampling: one action server, or one process per server.

    Constructor arguments are those of :class:`GpuSamplerBase`; the collector
    defaults to :class:`DbGpuResetCollector` (or give
    :class:`DbGpuWaitResetCollector`) and evaluation to :class:`GpuEvalCollector`.
    Evaluation envs are split over the servers like the training envs, and
    ``eval_max_trajectories`` counts the trajectories of all servers.

    Attributes:
        server_group: in the sampler process with a list affinity, the
            :class:`ActionServerGroup` of the server processes (else None).
        group_sync: in a server process, the group's shared values (the
            evaluation's trajectory count over all servers); else None.
    """

    takes_affinity_list = True

    def __init__(self, *args: Any, CollectorCls: type = DbGpuResetCollector,
                 eval_CollectorCls: type = GpuEvalCollector, **kwargs: Any):
        if not (isinstance(CollectorCls, type)
                and issubclass(CollectorCls, DoubleBufferCollectorMixin)):
            raise TypeError(f"{type(self).__name__} writes into a double buffer: CollectorCls "
                            f"must be DbGpuResetCollector or DbGpuWaitResetCollector, got "
                            f"{CollectorCls!r}.")
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)
        self.server_group: ActionServerGroup | None = None
        self.group_sync: AttrDict | None = None

    # ------------------------------------------------------------------ initialize
    def initialize(self, affinity: dict | Sequence[dict] | None = None  # type: ignore[override]
                   ) -> None:
        """In the sampler process: start the workers (and, with a list, the servers).

        Args:
            affinity: the runner's ``affinity["sampler"]``. A dict: this process
                serves actions, on ``cuda_idx`` (None: the CPU), pinned to
                ``master_cpus``, with workers on ``workers_cpus``. A list of such
                dicts: one action-server process per entry.
        """
        if isinstance(affinity, (list, tuple)):
            self._start_action_servers(list(affinity))
            return
        affinity = {} if affinity is None else affinity
        workers_cpus = self._prepare_sampler_process(affinity)
        cuda_idx = affinity.get("cuda_idx")
        check_cuda_device(cuda_idx, f"{self.affinity_name}['cuda_idx']")
        self._start_async_workers(affinity, workers_cpus)  # Before this process uses CUDA.
        agent, B = self.agent, self.batch_spec.B
        agent.to_device(cuda_idx)
        agent.async_cpu(share_memory=False)  # On the CPU: a private copy, which recv fills.
        agent.collector_initialize(global_B=self.global_B,
                                   env_ranks=list(range(self.env_offset, self.env_offset + B)))
        agent.reset()

    def _start_action_servers(self, affinities: list[dict]) -> None:
        """Split the envs (and evaluation envs) over one server per affinity dict and
        start the server processes."""
        n_server, B = len(affinities), self.batch_spec.B
        if n_server == 0:
            raise ValueError(f"{self.affinity_name} is an empty list; give one affinity dict "
                             "per action server (or one dict).")
        if B % n_server != 0:
            raise ValueError(f"batch_B={B} must be a multiple of the number of action "
                             f"servers (len({self.affinity_name})={n_server}): the envs split "
                             "evenly over the servers.")
        torch.set_num_threads(1)
        B_server = B // n_server
        eval_n_envs = max(1, self.eval_n_envs // n_server) if self.eval_n_envs > 0 else 0
        servers, worker_offset, eval_sizes = [], 0, []
        for r, affinity in enumerate(affinities):
            name = f"{self.affinity_name}[{r}]"
            # Each server checks its cuda_idx itself: asking for GPUs here, before the
            # servers fork, could leave CUDA unusable in them.
            n_worker = len(check_workers_cpus(affinity, alternating=self.alternating, name=name))
            if B_server % n_worker != 0:
                raise ValueError(f"batch_B={B} gives each of the {n_server} action servers "
                                 f"{B_server} envs, which must be a multiple of the number "
                                 f"of its workers (len({name}['workers_cpus'])={n_worker}).")
            servers.append(self._action_server(name, slice(r * B_server, (r + 1) * B_server),
                                               worker_offset, eval_n_envs))
            worker_offset += n_worker
            # Each server's workers split its evaluation envs as a parallel sampler does.
            eval_sizes.append(max(1, eval_n_envs // n_worker) * n_worker if eval_n_envs else 0)
        offset = 0
        for server, size in zip(servers, eval_sizes):  # Their envs' place in the evaluation.
            server.eval_env_offset, server.eval_env_total = offset, sum(eval_sizes)
            offset += size
        self.server_group = ActionServerGroup(self)
        self.server_group.start(servers, affinities)

    def _action_server(self, name: str, columns: slice, worker_offset: int,
                       eval_n_envs: int) -> AsyncGpuSamplerBase:
        """This sampler restricted to batch ``columns``: what one server process runs."""
        server = copy.copy(self)
        server.affinity_name = name
        server.batch_spec = BatchSpec(self.batch_spec.T, columns.stop - columns.start)
        server.batch_B = server.batch_spec.B
        server.double_buffer = tuple(buffer[:, columns] for buffer in self.double_buffer)
        server.double_buffer_pyt = tuple(torchify_buffer(b) for b in server.double_buffer)
        server.env_offset, server.worker_offset = columns.start, worker_offset
        server.eval_n_envs = eval_n_envs
        if eval_n_envs > 0:  # The same steps per env as without servers.
            n_server = self.batch_spec.B // server.batch_B
            server.eval_max_steps = max(eval_n_envs, self.eval_max_steps // n_server)
        return server

    # ------------------------------------------------------------------ sampling
    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Collect one batch into ``double_buffer[db_idx]`` with the newest parameters.

        Returns:
            the TrajInfos of trajectories completed in this batch.
        """
        if self.server_group is not None:
            return self.server_group.obtain_samples(itr, db_idx)
        return super().obtain_samples(itr, db_idx)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation episodes with the newest parameters; returns completed TrajInfos."""
        if self.server_group is not None:
            return self.server_group.evaluate_agent(itr)
        return super().evaluate_agent(itr)

    def poll_eval_queue(self, timeout: float | None = None) -> None:
        n_before = len(self._eval_traj_infos)
        super().poll_eval_queue(timeout)
        if self.group_sync is None or self.eval_max_trajectories is None:
            return
        # One of several servers: stop once all servers together have enough.
        count = self.group_sync.eval_count
        with count.get_lock():
            count.value += len(self._eval_traj_infos) - n_before
            enough = count.value >= self.eval_max_trajectories
        if enough:
            self.sync.stop_eval.value = True

    def shutdown(self) -> None:
        """Stop the server processes, or this server's workers."""
        if self.server_group is not None:
            self.server_group.shutdown()
            self.server_group = None
        super().shutdown()


class AsyncGpuSampler(AsyncActionServer, AsyncGpuSamplerBase):
    """Asynchronous GPU-style sampler (defaults: DbGpuResetCollector, GpuEvalCollector)."""


# ---------------------------------------------------------------------------- servers

class ActionServerGroup(AsyncParallelSamplerMixin, ParallelSamplerBase):
    """The sampler process's side of several action-server processes.

    Each server process runs a copy of the sampler restricted to its columns of
    the batch (:func:`action_server_process`); here they are driven like the
    workers of a parallel sampler: released for a batch or an evaluation,
    awaited, checked for failures, stopped.

    Args:
        sampler: the :class:`AsyncGpuSamplerBase` after ``async_initialize``.
    """

    worker_label = "Action server"
    daemon_workers = False  # Servers start their own workers.

    def __init__(self, sampler: AsyncGpuSamplerBase):
        super().__init__(
            EnvCls=sampler.EnvCls, env_kwargs=sampler.env_kwargs, batch_T=sampler.batch_T,
            batch_B=sampler.batch_B, CollectorCls=sampler.CollectorCls,
            max_decorrelation_steps=sampler.max_decorrelation_steps,
            TrajInfoCls=sampler.TrajInfoCls, eval_n_envs=sampler.eval_n_envs,
            eval_CollectorCls=sampler.eval_CollectorCls,
            eval_env_kwargs=sampler.eval_env_kwargs, eval_max_steps=sampler.eval_max_steps,
            eval_max_trajectories=sampler.eval_max_trajectories,
            env_backend=sampler.env_backend, start_method=sampler.start_method)
        self.seed = sampler.seed
        self.double_buffer = sampler.double_buffer
        self.double_buffer_pyt = sampler.double_buffer_pyt
        self.servers: list[AsyncGpuSamplerBase] = []

    def start(self, servers: list[AsyncGpuSamplerBase], affinities: list[dict]) -> None:
        """Start one process per server and wait until each has started its workers."""
        self.servers = servers
        self.n_worker = len(servers)
        self.B_per_worker = servers[0].batch_spec.B
        self.ctx = process_context(self.start_method)
        self.master_pid = os.getpid()
        self._start_workers({}, affinities, self.seed, env_rank_offset=0,
                            worker_process=action_server_process)

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        super()._build_parallel_ctrl(n_worker)
        self.sync.eval_count = self.ctx.Value("l", 0)  # Eval trajectories of all servers.

    def _assemble_common_kwargs(self, affinity: dict, traj_info_kwargs: dict | None) -> dict:
        return dict(ctrl=self.ctrl, traj_infos_queue=self.traj_infos_queue,
                    eval_traj_infos_queue=self.eval_traj_infos_queue,
                    error_queue=self.error_queue, master_pid=self.master_pid)

    def _assemble_workers_kwargs(self, affinity: dict, workers_cpus: list, seed: int,
                                 env_rank_offset: int) -> list:
        # Here workers_cpus holds the servers' affinity dicts.
        servers = zip(self.servers, workers_cpus, strict=True)
        return [dict(rank=r, server=server, affinity=server_affinity, sync=self.sync)
                for r, (server, server_affinity) in enumerate(servers)]

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        self.sync.eval_count.value = 0
        return super().evaluate_agent(itr)


def action_server_process(common_kwargs: dict, worker_kwargs: dict) -> None:
    """Entry point of one action-server process (importable, for every start method).

    Starts the server's workers, then per round of the sampler process runs one
    batch (into the half ``sync.db_idx``) or one evaluation and reports the
    completed TrajInfos, until ``ctrl.quit``. Ctrl-C is left to the master; on
    Linux the process ends with the sampler process, and its workers with it.

    Args:
        common_kwargs: ``ctrl``, ``traj_infos_queue``, ``eval_traj_infos_queue``,
            ``error_queue``, ``master_pid`` (the sampler process).
        worker_kwargs: ``rank``, ``server`` (the sampler restricted to this
            server's envs), ``affinity`` (its dict), ``sync`` (the group's).
    """
    c, w = common_kwargs, worker_kwargs
    ctrl, rank, server = c["ctrl"], w["rank"], w["server"]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    try:
        server.group_sync = w["sync"]
        server.initialize(w["affinity"])
        ctrl.step_out.release()  # Ready.
        while True:
            wait_for(ctrl.step_in[rank], c["master_pid"])
            if ctrl.quit.value:
                break
            itr = ctrl.itr.value
            if ctrl.do_eval.value:
                for info in server.evaluate_agent(itr):
                    c["eval_traj_infos_queue"].put(info)
                c["eval_traj_infos_queue"].put(None)  # End sentinel.
            else:
                traj_infos = server.obtain_samples(itr, w["sync"].db_idx.value)
                for info in traj_infos:
                    c["traj_infos_queue"].put(info)
                ctrl.n_completed[rank] = len(traj_infos)
            ctrl.step_out.release()
    except BaseException:  # noqa: BLE001 (report everything, then exit)
        report_error(c["error_queue"], str(rank))
        ctrl.step_out.release()  # Wake the sampler process, which then finds the error.
    finally:
        server.shutdown()
