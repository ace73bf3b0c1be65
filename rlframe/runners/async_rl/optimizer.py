"""Optimizer ranks of an asynchronous run: how each rank prepares its agent, and the
process of every rank >= 1 (rank 0 is the master)."""
from __future__ import annotations

import gc
import signal
import threading
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from rlframe.agents.base import unwrap_ddp
from rlframe.runners import resume
from rlframe.utils.distributed import (broadcast_state, gather_objects, init_process_group,
                                       is_collective_error, state_digest)
from rlframe.utils.launching.pinning import check_cuda_device, set_cpu_affinity, set_torch_threads
from rlframe.utils.logging import logger
from rlframe.utils.processes import QueueLike, master_alive, report_error, start_child
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.algos.base import RlAlgorithm
    from rlframe.runners.async_rl.control import AsyncControl


def prepare_optimizer_rank(algo: RlAlgorithm, agent: BaseAgent, rank: int, world_size: int,
                           cuda_idx: int | None, group: dist.ProcessGroup | None = None) -> None:
    """Give an optimizer rank its trained copy of the agent and build its optimizer.

    The agent trains a private copy of its shared model (on GPU ``cuda_idx``, or
    on the CPU), which only :meth:`~rlframe.agents.base.BaseAgent.send_shared_memory`
    of rank 0 writes back. With several ranks (their process group joined), the
    models are wrapped in DistributedDataParallel and every rank takes rank 0's
    agent state, target networks and buffers included. Every rank calls this
    with the same ``world_size``, in the same order of collectives.

    Args:
        algo: the algorithm after ``async_initialize``.
        agent: its agent.
        rank: this optimizer rank (0: the master).
        world_size: number of optimizer ranks.
        cuda_idx: GPU of this rank, or None for the CPU.
        group: gloo group for the state broadcast (None: the default group).
    """
    if cuda_idx is None:
        agent.async_cpu(share_memory=False)
    else:
        agent.to_device(cuda_idx)
    if world_size > 1:
        agent.data_parallel()
        broadcast_state(agent, src=0, group=group)
    algo.optim_initialize(rank=rank)


def _check_optimizer_devices(optimizer: list, name: str) -> None:
    """Optimizer ranks are all on the CPU (gloo) or each on its own GPU (NCCL)."""
    cuda_idxs = [opt.get("cuda_idx") for opt in optimizer]
    on_gpu = [cuda_idx is not None for cuda_idx in cuda_idxs]
    if any(on_gpu) and not all(on_gpu):
        raise ValueError(f"{name}: either every optimizer rank has a cuda_idx or none has "
                         "(the ranks train together on GPUs with NCCL, or on CPUs with gloo); "
                         f"got affinity['optimizer'] cuda_idx {cuda_idxs}.")
    if all(on_gpu) and len(set(cuda_idxs)) < len(cuda_idxs):
        raise ValueError(f"{name}: every optimizer rank needs a GPU of its own (NCCL runs one "
                         f"rank per GPU); got affinity['optimizer'] cuda_idx {cuda_idxs}.")
    for rank, cuda_idx in enumerate(cuda_idxs):
        check_cuda_device(cuda_idx, f"affinity['optimizer'][{rank}]['cuda_idx']")


class AsyncOptWorker:
    """Optimizer rank ``rank >= 1`` of an asynchronous run with several optimizer ranks.

    Draws its own minibatches from the shared replay buffer and trains with the
    other ranks through DistributedDataParallel; rank 0 alone publishes the
    parameters, logs and saves snapshots. Before every ``optimize_agent`` call
    all ranks meet at ``ctrl.opt_throttle``; the worker stops when it passes the
    barrier with ``ctrl.quit_opt`` set (then it sends rank 0 a digest of its
    parameters and its number of calls) or when the barrier is broken (the run
    is stopping). An error of its own goes to ``error_queue`` as a
    :class:`~rlframe.utils.processes.ChildReport` named ``"optimizer rank <rank>"``
    before it exits with code 1.

    Args:
        rank: this optimizer rank, ``1 .. world_size - 1``.
        world_size: number of optimizer ranks (rank 0 is the master).
        algo: the algorithm after ``async_initialize`` (its replay on shared memory).
        agent: its agent, with the shared model the sampler reads.
        n_itr: sampler iterations of the run.
        affinity: ``affinity["optimizer"][rank]``: ``cpus``, ``torch_threads``,
            ``cuda_idx`` (None: gloo on the CPU; an int: NCCL on that GPU) and
            ``set_affinity``.
        seed: rank 1's seed (the run's seed + 100, as in rlpyt); rank ``r`` is
            seeded ``seed + 100 * (r - 1)`` (the run's seed + 100 r, as
            SyncRl's ranks), so that the ranks draw different minibatches.
        ctrl: the run's :func:`build_ctrl` objects.
        port: TCP port of rank 0's process group on 127.0.0.1.
        pg_timeout: seconds a collective may wait for the other ranks.
        error_queue: where this rank's error goes.
        parent_pid: the master's pid (the worker stops once it is gone).
    """

    def __init__(self, rank: int, world_size: int, algo: RlAlgorithm, agent: BaseAgent, n_itr: int,
                 affinity: dict, seed: int, ctrl: AsyncControl, port: int,
                 pg_timeout: float = 1800., error_queue: QueueLike | None = None,
                 parent_pid: int | None = None):
        if not 1 <= rank < world_size:
            raise ValueError(f"rank must be in [1, world_size={world_size}) for an optimizer "
                             f"worker (rank 0 is the master), got {rank!r}.")
        self.rank = rank
        self.world_size = world_size
        self.algo = algo
        self.agent = agent
        self.n_itr = n_itr
        self.affinity = affinity
        self.seed = seed
        self.ctrl = ctrl
        self.port = port
        self.pg_timeout = pg_timeout
        self.error_queue = error_queue
        self.parent_pid = parent_pid
        self.name = f"optimizer rank {rank}"
        self.optimize_calls = 0
        self.group: dist.ProcessGroup | None = None
        self.resume_snapshot: str | None = None  # A resumed run's snapshot (set by the master).

    def optimize(self) -> None:
        """Process entry point: join the ranks, then optimize until the run stops."""
        start_child()
        # Stopped by the master (or with it): end now, even inside a collective.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Objects inherited from the master by fork are never collected here: their
        # destructors may wait on threads that exist only in the master.
        gc.freeze()
        quiet = logger.quiet_logger()
        failed = False
        try:
            with logger.use_logger(quiet):
                self.startup()
                if self._optimize_loop():
                    self._report_to_master()
        except BaseException as error:  # noqa: BLE001 - reported to the master, then exit 1.
            stopping = self.ctrl.quit_opt.value or isinstance(error, threading.BrokenBarrierError)
            if not stopping:
                failed = True
                report_error(self.error_queue, self.name, broke=is_collective_error(error))
        finally:
            self.shutdown()
        if failed:
            raise SystemExit(1)

    def startup(self) -> None:
        """Pin, seed, join the process group, then :func:`prepare_optimizer_rank`."""
        if self.affinity.get("set_affinity", True):
            set_cpu_affinity(self.affinity["cpus"])
        set_torch_threads(self.affinity.get("torch_threads"),
                          f"affinity['optimizer'][{self.rank}]['torch_threads']")
        set_seed(self.seed + 100 * (self.rank - 1))
        cuda_idx = self.affinity.get("cuda_idx")
        if cuda_idx is not None:
            torch.cuda.set_device(cuda_idx)
        self.group = init_process_group("gloo" if cuda_idx is None else "nccl", self.rank,
                                        self.world_size, f"tcp://127.0.0.1:{self.port}",
                                        self.pg_timeout)
        prepare_optimizer_rank(self.algo, self.agent, self.rank, self.world_size, cuda_idx,
                               self.group)
        if self.resume_snapshot is not None:
            resume.restore_optimizer(self.algo, self.resume_snapshot)

    def _optimize_loop(self) -> bool:
        """One ``optimize_agent`` call per meeting of the ranks; True when told to quit
        at a meeting, False when the barrier was broken."""
        ctrl = self.ctrl
        while True:
            try:
                ctrl.opt_throttle.wait(self.rank, check=self._check_master)
            except threading.BrokenBarrierError:
                return False
            if ctrl.quit_opt.value:
                return True
            self.algo.optimize_agent(self.optimize_calls, sampler_itr=ctrl.sampler_itr.value)
            self.optimize_calls += 1

    def _report_to_master(self) -> None:
        """This rank's part of rank 0's gather at the end of a run."""
        summary = dict(optimize_calls=self.optimize_calls,
                       digest=state_digest(self.agent.state_dict()))
        gather_objects(summary, dst=0, group=self.group)

    def _check_master(self) -> None:
        """Break the barrier once the master is gone (Linux also ends this rank with it)."""
        if not master_alive(self.parent_pid):
            self.ctrl.opt_throttle.abort()

    def shutdown(self) -> None:
        """Leave the process group (DDP's reducers go first, while it exists)."""
        unwrap_ddp(self.agent)
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()

