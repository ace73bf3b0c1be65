"""Asynchronous runners: the sampler and the optimizer run at the same time.

Processes:

* the master (this process): the optimizer, logging, snapshots and callbacks;
* one sampler process, writing batches alternately into the two halves of a
  shared double buffer (an :mod:`~rlframe.samplers.async_` sampler, which may
  start its own env workers);
* two memory copiers, one per half of the double buffer, appending a finished
  batch to the shared replay buffer and handing the half back to the sampler;
* with several optimizer dicts in ``affinity["optimizer"]``, one
  :class:`AsyncOptWorker` process per optimizer rank >= 1.

Several optimizer ranks train data-parallel: each draws its own minibatches
from the one shared replay buffer, and DistributedDataParallel (gloo on CPUs,
NCCL on GPUs) averages the gradients, so every rank holds the same
parameters. The ranks meet at a barrier (``ctrl.opt_throttle``) before every
``optimize_agent`` call; rank 0, this process, throttles, publishes the
parameters, logs and saves snapshots.

The optimizer makes one ``optimize_agent`` call (``updates_per_sync`` updates)
per ``delta_throttle_itr`` sampler iterations, so ``replay_ratio`` is an upper
bound on the transitions trained on per transition collected. The sampler runs
free (as in rlpyt) unless the runner has ``sampler_lead_steps``: then it waits
while it is more than that many env steps ahead of where ``replay_ratio`` puts
the optimizer, which makes ``replay_ratio`` a lower bound too (up to the
lead), e.g. for envs that step faster than the optimizer trains. Every
diagnostics row logs the replay ratio reached (``ReplayRatio``: over the last
interval; ``LearningReplayRatio``: since learning began); a run whose reached
ratio falls below half of ``replay_ratio`` warns once, suggesting
``sampler_lead_steps``. After every
call the optimizer publishes the parameters
(``agent.send_shared_memory``), which the sampler takes before its next batch
or evaluation. A child that raises sends its traceback to the master, which
stops the run with an :class:`AsyncRlError` naming the process (e.g. "the
optimizer rank 1 process failed"); a child that is killed is named likewise.
Ctrl-C and SIGTERM stop every process.
"""
from __future__ import annotations

import _thread
import gc
import math
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
import warnings
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence

import psutil
import torch
import torch.distributed as dist

from rlframe.agents.base import unwrap_ddp
from rlframe.runners import resume
from rlframe.runners.callbacks import Callback
from rlframe.runners.minibatch_rl import MinibatchRlBase, sampler_diagnostics
from rlframe.samplers.async_.base import N_DOUBLE_BUFFER
from rlframe.samplers.ray.sampler import RaySampler, ray_used_here
from rlframe.utils.checks import positive_int
from rlframe.utils.collections import AttrDict
from rlframe.utils.distributed import (broadcast_state, gather_objects, init_process_group,
                                       init_process_group_watched, is_collective_error,
                                       state_digest)
from rlframe.utils.launching.pinning import (check_async_affinity, check_cuda_device,
                                             set_cpu_affinity, set_torch_threads)
from rlframe.utils.loading import agent_spec
from rlframe.utils.logging import logger
from rlframe.utils.seed import make_seed, set_seed
from rlframe.utils.synchronize import (check_start_method, cuda_fork_problem, die_with_parent,
                                       drain_queue, find_port, start_method_without_fork)

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.replays.base import BaseReplayBuffer
    from rlframe.samplers.collections import Samples

THROTTLE_WAIT = 0.05  # While the optimizer waits for the sampler: seconds between checks
# on the children.
OPT_POLL_S = 0.001  # How often the waiting optimizer looks at the sampler's iteration.
SAMPLER_WAIT = 0.001  # Seconds the sampler sleeps while it is too far ahead of the optimizer.
POLL_S = 0.2  # How often a blocked process checks on the others.
JOIN_TIMEOUT_S = 5.  # Children ending by themselves at shutdown, before SIGTERM.
FAILURE_GRACE_S = 3.  # A child failed: time for the master to notice before it is interrupted.
RANK_STOP_S = 0.5  # A failed run: optimizer ranks ending by themselves, before SIGTERM.
# The reached replay ratio is checked against replay_ratio only over at least this many
# optimize_agent calls' worth of sampled steps (one call's lag must not look like a drop).
RATIO_CHECK_CALLS = 4

ALGO_ASYNC_ATTRIBUTES = ("async_initialize", "optim_initialize", "samples_to_buffer",
                         "optimize_agent", "updates_per_sync", "replay_ratio", "batch_size",
                         "min_steps_learn")


class AsyncRlError(RuntimeError):
    """A process of an asynchronous run failed; the message names it."""


# ---------------------------------------------------------------------------- schedule

def async_n_itr(n_steps: int, log_interval_steps: int, sampler_batch_size: int
                ) -> tuple[int, int]:
    """Sampler iterations of an asynchronous run.

    Returns:
        ``(log_interval_itrs, n_itr)`` with ``log_interval_itrs =
        max(log_interval_steps // sampler_batch_size, 1)`` and ``n_itr =
        ceil(n_steps / log_interval_steps) * log_interval_itrs``.
    """
    log_interval_itrs = max(int(log_interval_steps) // int(sampler_batch_size), 1)
    n_itr = math.ceil(n_steps / log_interval_steps) * log_interval_itrs
    return log_interval_itrs, n_itr


def throttle_schedule(min_steps_learn: int, batch_size: int, updates_per_sync: int,
                      sampler_batch_size: int, replay_ratio: float, world_size: int = 1
                      ) -> tuple[int, float]:
    """When the optimizer may make its first and its following ``optimize_agent`` calls.

    Returns:
        ``(throttle_itr, delta_throttle_itr)``: the first call waits until the
        sampler's iteration reaches ``1 + min_steps_learn // sampler_batch_size``;
        each call then moves that mark by ``batch_size * world_size *
        updates_per_sync / (sampler_batch_size * replay_ratio)`` iterations.
    """
    if not replay_ratio > 0:
        raise ValueError(f"replay_ratio must be positive to throttle the optimizer, got "
                         f"{replay_ratio!r}.")
    throttle_itr = 1 + int(min_steps_learn) // int(sampler_batch_size)
    delta_throttle_itr = (batch_size * world_size * updates_per_sync
                          / (sampler_batch_size * replay_ratio))
    return throttle_itr, delta_throttle_itr


class OptimizerBarrier:
    """Where the optimizer ranks meet before every ``optimize_agent`` call (``ctrl.opt_throttle``).

    Rank 0 waits until ranks 1.. have arrived, then lets them all go. Unlike a
    ``multiprocessing.Barrier``, whose last arrival waits for every waiting party
    to acknowledge its wake-up (forever, for a rank that died waiting), no rank
    here ever waits on another's acknowledgement: every wait polls, can time out
    and check on the others, and :meth:`abort` never blocks.

    Args:
        parties: number of optimizer ranks (at least 2).
        ctx: multiprocessing context of the ranks' processes.
    """

    def __init__(self, parties: int, ctx: BaseContext | None = None):
        if parties < 2:
            raise ValueError(f"parties must be at least 2 optimizer ranks, got {parties!r}.")
        ctx = mp.get_context() if ctx is None else ctx
        self.parties = parties
        self._arrived = ctx.Semaphore(0)
        self._go = [ctx.Semaphore(0) for _ in range(parties - 1)]
        self._broken = ctx.RawValue("b", False)
        self._n_arrived = 0  # Rank 0's count of arrivals at the current meeting.

    @property
    def broken(self) -> bool:
        """Whether :meth:`abort` was called (by any process)."""
        return bool(self._broken.value)

    def wait(self, rank: int, timeout: float | None = None,
             check: Callable[[], None] | None = None) -> bool:
        """Meet the other ranks.

        Args:
            rank: the caller's optimizer rank.
            timeout: seconds to wait at most (None: no limit).
            check: called every POLL_S seconds while waiting (it may raise).

        Returns:
            True once all ranks met, False if ``timeout`` passed first (rank 0 then
            keeps the arrivals for its next call; ranks 1.. must not call again).

        Raises:
            threading.BrokenBarrierError: the barrier was aborted.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if rank == 0:
            while self._n_arrived < self.parties - 1:
                if self._wait_for(self._arrived, deadline, check):
                    self._n_arrived += 1
                elif deadline is not None and time.monotonic() >= deadline:
                    return False
            self._raise_if_broken()
            self._n_arrived = 0
            for go in self._go:
                go.release()
            return True
        self._raise_if_broken()
        self._arrived.release()
        go = self._go[rank - 1]
        while not self._wait_for(go, deadline, check):
            if deadline is not None and time.monotonic() >= deadline:
                return False
        self._raise_if_broken()
        return True

    def _wait_for(self, semaphore: Any, deadline: float | None,
                  check: Callable[[], None] | None) -> bool:
        """One poll: acquire ``semaphore`` within POLL_S (or until ``deadline``)."""
        self._raise_if_broken()
        wait_s = POLL_S if deadline is None else max(0., min(POLL_S, deadline - time.monotonic()))
        if semaphore.acquire(timeout=wait_s):
            self._raise_if_broken()
            return True
        if check is not None:
            check()
        return False

    def _raise_if_broken(self) -> None:
        if self._broken.value:
            raise threading.BrokenBarrierError

    def abort(self) -> None:
        """Break the barrier: every rank waiting on it, now or later, raises
        ``threading.BrokenBarrierError``."""
        self._broken.value = True
        self._arrived.release()
        for go in self._go:
            go.release()


def build_ctrl(world_size: int = 1, ctx: BaseContext | None = None) -> AttrDict:
    """Shared control objects of one asynchronous run.

    Args:
        world_size: optimizer ranks (an :class:`OptimizerBarrier`, ``opt_throttle``,
            joins them when more than one).
        ctx: multiprocessing context of the children (default: the default context).

    Returns:
        ``AttrDict(quit, quit_opt, sample_ready, sample_copied, sampler_itr,
        opt_throttle, eval_time, sample_limit_itr, sampler_wait_time)``;
        ``sample_ready[i]`` / ``sample_copied[i]`` are the semaphores of half ``i``
        of the double buffer; the sampler starts batch ``itr`` only once
        ``itr <= sample_limit_itr`` (inf: it runs free), and adds the seconds it
        waited for that to ``sampler_wait_time``.
    """
    ctx = mp.get_context() if ctx is None else ctx
    return AttrDict(
        quit=ctx.Value("b", False, lock=True),
        quit_opt=ctx.RawValue("b", False),
        sample_ready=[ctx.Semaphore(0) for _ in range(N_DOUBLE_BUFFER)],
        sample_copied=[ctx.Semaphore(1) for _ in range(N_DOUBLE_BUFFER)],
        sampler_itr=ctx.Value("l", 0, lock=True),
        opt_throttle=OptimizerBarrier(world_size, ctx) if world_size > 1 else None,
        eval_time=ctx.Value("d", 0., lock=True),
        sample_limit_itr=ctx.RawValue("d", math.inf),
        sampler_wait_time=ctx.RawValue("d", 0.),
    )


# ---------------------------------------------------------------------------- children

def _start_child() -> None:
    """Ctrl-C reaches the whole process group: children leave it to the master, which
    stops them. On Linux a child also ends with the master."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def _master_gone(parent_pid: int | None) -> bool:
    """Whether the master, pid ``parent_pid`` (None: not watched), has ended. Its pid is
    checked itself: under forkserver a child's parent is the fork server."""
    if parent_pid is None or os.getppid() == parent_pid:
        return False
    try:
        return psutil.Process(parent_pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(semaphore: Any, quit_flag: Any, parent_pid: int | None) -> bool:
    """Acquire ``semaphore``; False (not acquired) once ``quit_flag`` is set or the
    master is gone."""
    while not semaphore.acquire(timeout=POLL_S):
        if quit_flag.value or _master_gone(parent_pid):
            return False
    return True


def _poll_until(ready: Callable[[], bool], poll_s: float, check_s: float,
                give_up: Callable[[], bool]) -> tuple[bool, float]:
    """Sleep ``poll_s`` at a time until ``ready()``; every ``check_s`` seconds ask
    ``give_up()`` (which may also raise).

    Returns:
        ``(ready, seconds waited)``; ``ready`` is False when ``give_up()`` said so.
    """
    if ready():
        return True, 0.
    start = checked = time.perf_counter()
    while not ready():
        time.sleep(poll_s)
        now = time.perf_counter()
        if now - checked >= check_s:
            checked = now
            if give_up():
                return False, now - start
    return True, time.perf_counter() - start


def _wait_for_optimizer(itr: int, ctrl: AttrDict, parent_pid: int | None) -> bool:
    """Sleep while batch ``itr`` is beyond ``ctrl.sample_limit_itr``; False once
    ``ctrl.quit`` is set or the master is gone."""
    ready, waited = _poll_until(lambda: itr <= ctrl.sample_limit_itr.value, SAMPLER_WAIT,
                                POLL_S, lambda: ctrl.quit.value or _master_gone(parent_pid))
    if ready:
        ctrl.sampler_wait_time.value += waited
    return ready


def _report_error(error_queue: Any, name: str, broke: bool = False) -> None:
    """Send ``(name, traceback, broke)`` to the master; ``broke``: the error only says
    that the optimizer ranks' process group broke (some other process failed)."""
    if error_queue is not None:
        error_queue.put((name, traceback.format_exc(), broke))
        error_queue.close()
        error_queue.join_thread()


def _interrupt_main_thread() -> None:
    """KeyboardInterrupt in the main thread, as Ctrl-C gives it: a real SIGINT, which also
    wakes the thread from a blocking wait (a lock, the barrier), where Python handles
    SIGINT; else only Python's flag (the thread sees it once it runs again)."""
    if hasattr(signal, "pthread_kill") and callable(signal.getsignal(signal.SIGINT)):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    else:
        _thread.interrupt_main()


def _broke_ranks(error: BaseException) -> bool:
    """Whether ``error`` says that the optimizer ranks' barrier or process group broke."""
    return isinstance(error, threading.BrokenBarrierError) or is_collective_error(error)


def _sampler_loop(sampler: Any, affinity: dict, ctrl: AttrDict, traj_infos_queue: Any,
                  n_itr: int, eval_itrs: int | None, error_queue: Any,
                  parent_pid: int | None, start_itr: int = 0) -> None:
    _start_child()
    failed = False
    try:
        sampler.initialize(affinity)
        db_idx = 0
        n_loop = n_itr if eval_itrs is None else n_itr + 1  # Eval: the final evaluation too.
        for itr in range(start_itr, n_loop):
            if not _wait_for_optimizer(itr, ctrl, parent_pid):
                break
            if not _wait(ctrl.sample_copied[db_idx], ctrl.quit, parent_pid):
                break
            traj_infos = sampler.obtain_samples(itr, db_idx)
            ctrl.sample_ready[db_idx].release()
            if eval_itrs is not None:
                traj_infos = None  # Training trajectories are not logged.
                if itr % eval_itrs == 0:
                    eval_time = -time.time()
                    traj_infos = sampler.evaluate_agent(itr)
                    eval_time += time.time()
                    with ctrl.eval_time.get_lock():
                        ctrl.eval_time.value += eval_time
            with ctrl.sampler_itr.get_lock():
                if traj_infos is not None:
                    for info in traj_infos:
                        traj_infos_queue.put(info)
                    if eval_itrs is not None:
                        traj_infos_queue.put(None)  # The end of one evaluation.
                ctrl.sampler_itr.value = itr
            db_idx ^= 1
        else:
            logger.log(f"Async sampler reached its final iteration {n_loop - 1}; quitting.")
            ctrl.quit.value = True
    except BaseException:  # noqa: BLE001 - reported to the master, then exit 1.
        failed = True
        _report_error(error_queue, "sampler")
    finally:
        try:
            sampler.shutdown()
        finally:
            for semaphore in ctrl.sample_ready:  # Wake the memory copiers.
                semaphore.release()
    if failed:
        raise SystemExit(1)


def run_async_sampler(sampler: Any, affinity: dict, ctrl: AttrDict, traj_infos_queue: Any,
                      n_itr: int, error_queue: Any = None, parent_pid: int | None = None,
                      start_itr: int = 0) -> None:
    """Entry point of the sampler process (importable, for every start method).

    Runs ``n_itr`` batches into alternate halves of the double buffer; after each,
    puts its completed TrajInfos on ``traj_infos_queue`` and sets
    ``ctrl.sampler_itr``. Sets ``ctrl.quit`` when done.

    Args:
        sampler: an asynchronous sampler after ``async_initialize``.
        affinity: the run's ``affinity["sampler"]``.
        ctrl: from :func:`build_ctrl`.
        traj_infos_queue: where completed TrajInfos go.
        n_itr: sampler iterations.
        error_queue: where ``("sampler", traceback)`` goes if this process fails.
        parent_pid: the master's pid (the process stops waiting once it is gone).
        start_itr: the first iteration (a resumed run's).
    """
    _sampler_loop(sampler, affinity, ctrl, traj_infos_queue, n_itr, None, error_queue,
                  parent_pid, start_itr)


def run_async_sampler_eval(sampler: Any, affinity: dict, ctrl: AttrDict, traj_infos_queue: Any,
                           n_itr: int, eval_itrs: int, error_queue: Any = None,
                           parent_pid: int | None = None, start_itr: int = 0) -> None:
    """Entry point of the sampler process of :class:`AsyncRlEval`.

    As :func:`run_async_sampler`, over ``n_itr + 1`` batches; training TrajInfos
    are dropped, and every ``eval_itrs`` iterations (from iteration 0) the agent
    is evaluated: its TrajInfos, then a ``None``, go on ``traj_infos_queue``
    before ``ctrl.sampler_itr`` is set, and ``ctrl.eval_time`` adds its duration.
    """
    if eval_itrs < 1:
        raise ValueError(f"eval_itrs must be a positive number of iterations, got {eval_itrs!r}.")
    _sampler_loop(sampler, affinity, ctrl, traj_infos_queue, n_itr, eval_itrs, error_queue,
                  parent_pid, start_itr)


def memory_copier(sample_buffer: Samples, samples_to_buffer: Callable[[Samples], Any],
                  replay_buffer: BaseReplayBuffer, ctrl: AttrDict, name: str = "memory copier",
                  error_queue: Any = None, parent_pid: int | None = None) -> None:
    """Entry point of a memory copier: appends one half of the double buffer to the replay.

    Args:
        sample_buffer: the half ``[T, B]`` (shared numpy ``Samples``) it copies.
        samples_to_buffer: the algorithm's conversion to the replay's fields (it runs
            in this process, so it must not depend on state the optimizer changes).
        replay_buffer: the shared replay buffer.
        ctrl: ``AttrDict(quit, sample_ready, sample_copied)`` of this half.
        name: how errors name this process.
        error_queue: where ``(name, traceback)`` goes if this process fails.
        parent_pid: the master's pid.
    """
    _start_child()
    import torch
    torch.set_num_threads(1)
    try:
        while True:
            if not _wait(ctrl.sample_ready, ctrl.quit, parent_pid) or ctrl.quit.value:
                break
            replay_buffer.append_samples(samples_to_buffer(sample_buffer))
            ctrl.sample_copied.release()
    except BaseException:  # noqa: BLE001 - reported to the master, then exit 1.
        _report_error(error_queue, name)
        raise SystemExit(1) from None


def prepare_optimizer_rank(algo: Any, agent: Any, rank: int, world_size: int,
                           cuda_idx: int | None, group: Any = None) -> None:
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
    is stopping). An error of its own goes to ``error_queue`` as
    ``("optimizer rank <rank>", traceback, broke)`` before it exits with code 1.

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

    def __init__(self, rank: int, world_size: int, algo: Any, agent: Any, n_itr: int,
                 affinity: dict, seed: int, ctrl: AttrDict, port: int,
                 pg_timeout: float = 1800., error_queue: Any = None,
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
        self.group: Any = None
        self.resume_snapshot: str | None = None  # A resumed run's snapshot (set by the master).

    def optimize(self) -> None:
        """Process entry point: join the ranks, then optimize until the run stops."""
        _start_child()
        # Stopped by the master (or with it): end now, even inside a collective.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Objects inherited from the master by fork are never collected here: their
        # destructors may wait on threads that exist only in the master.
        gc.freeze()
        quiet = logger.Logger()
        quiet.disable()
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
                _report_error(self.error_queue, self.name, broke=is_collective_error(error))
        finally:
            self.shutdown()
        if failed:
            raise SystemExit(1)

    def startup(self) -> None:
        """Pin, seed, join the process group, then :func:`prepare_optimizer_rank`."""
        if self.affinity.get("set_affinity", True):
            set_cpu_affinity(self.affinity["cpus"])
        set_torch_threads(self.affinity.get("torch_threads"))
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
        if _master_gone(self.parent_pid):
            self.ctrl.opt_throttle.abort()

    def shutdown(self) -> None:
        """Leave the process group (DDP's reducers go first, while it exists)."""
        unwrap_ddp(self.agent)
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()


# ---------------------------------------------------------------------------- runners

class AsyncRlBase(MinibatchRlBase):
    """Sampling in its own process, optimization (and logging) in this one.

    Args:
        algo: an off-policy algorithm with ``async_initialize`` (a replay on shared
            memory), ``optim_initialize``, ``samples_to_buffer``, ``updates_per_sync``,
            ``replay_ratio``, ``batch_size`` and ``min_steps_learn``.
        agent: the agent.
        sampler: an asynchronous sampler (:class:`AsyncSerialSampler`,
            :class:`AsyncCpuSampler`, :class:`AsyncGpuSampler`,
            :class:`AsyncAlternatingSampler`).
        n_steps: env steps to sample (rounded up to whole log intervals).
        affinity: the asynchronous layout, e.g. ``make_affinity(n_cpu_core=2,
            n_gpu=0, cpu_per_run=2, async_sample=True)``: ``optimizer`` (a list with
            one dict per optimizer rank, each with ``cpus``; either every dict has
            an int ``cuda_idx``, one GPU per rank, or none has, and the ranks train
            on CPUs; rank 0 is this process) and ``sampler`` (a dict; for the
            GPU-style samplers also a list of dicts, one action-server process each).
        seed: random seed (None: a fresh one); the sampler process uses it too.
        log_interval_steps: sampled env steps between diagnostics rows.
        callbacks: :class:`~rlframe.runners.callbacks.Callback` objects;
            ``on_iteration_end`` receives ``samples=None``.
        start_method: how the children start (``"fork"``, ``"forkserver"``,
            ``"spawn"``; None: the multiprocessing default, except that a Ray
            sampler in a process that already used Ray gets ``"forkserver"``,
            as Ray cannot start in a forked child). Under spawn and
            forkserver the sampler and the algorithm must pickle.
        sampler_lead_steps: env steps the sampler may run ahead of the point
            where ``replay_ratio`` puts the optimizer (rounded up to whole
            sampler batches, at least one); the sampler waits beyond it. None
            (default, as rlpyt): the sampler runs free, so a slow env never
            waits for the optimizer; on envs that step faster than the
            optimizer trains, far fewer updates are made than ``replay_ratio``
            asks for, which the ``ReplayRatio`` column shows and a warning
            names. Set it (e.g. 8 sampler batches) to keep ``replay_ratio``.
        pg_timeout: seconds a collective of several optimizer ranks may wait for
            the others before it fails.
    """

    _async = True

    def __init__(self, algo: Any, agent: Any, sampler: Any, n_steps: int | float,
                 affinity: dict, seed: int | None = None,
                 log_interval_steps: int | float = 1e5,
                 callbacks: Sequence[Callback] | None = None, start_method: str | None = None,
                 sampler_lead_steps: int | float | None = None, pg_timeout: float = 1800.):
        name = type(self).__name__
        if not isinstance(affinity, dict) or "optimizer" not in affinity:
            raise TypeError(f"{name}: affinity must be an asynchronous affinity dict with "
                            "'optimizer' and 'sampler' entries, e.g. make_affinity(n_cpu_core=2, "
                            f"n_gpu=0, cpu_per_run=2, async_sample=True); got {affinity!r}.")
        check_async_affinity(affinity)
        if not isinstance(affinity["sampler"], dict) and not getattr(
                sampler, "takes_affinity_list", False):
            raise TypeError(
                f"{name}: affinity['sampler'] is a list of {len(affinity['sampler'])} dicts "
                f"(one action server per entry), but {type(sampler).__name__} takes one "
                "dict; use AsyncGpuSampler or an AsyncAlternatingSampler, or build the "
                "affinity with sample_gpu_per_run=0 (one sampler dict).")
        _check_optimizer_devices(affinity["optimizer"], name)
        missing = [a for a in ALGO_ASYNC_ATTRIBUTES if not hasattr(algo, a)]
        if missing:
            raise TypeError(
                f"{name} trains off-policy algorithms from a replay buffer the sampler fills "
                f"(DQN, CategoricalDQN, R2D1, DDPG, TD3, SAC); algo={type(algo).__name__} "
                f"lacks {missing}. On-policy algorithms (A2C, PPO) train on each fresh batch: "
                "run them with MinibatchRl or SyncRl.")
        for method in ("async_initialize", "initialize", "obtain_samples", "evaluate_agent",
                       "shutdown"):
            if not callable(getattr(sampler, method, None)):
                raise TypeError(f"{name} needs an asynchronous sampler (e.g. AsyncSerialSampler "
                                f"or AsyncCpuSampler); {type(sampler).__name__} has no "
                                f"{method}().")
        self.start_method = check_start_method(start_method)
        if sampler_lead_steps is not None and not (
                isinstance(sampler_lead_steps, (int, float)) and sampler_lead_steps > 0
                and math.isfinite(sampler_lead_steps)):
            raise ValueError(f"sampler_lead_steps must be a positive number of env steps or "
                             f"None (the sampler runs free), got {sampler_lead_steps!r}.")
        self.sampler_lead_steps = sampler_lead_steps
        if not (isinstance(pg_timeout, (int, float)) and pg_timeout > 0):
            raise ValueError(f"pg_timeout must be a positive number of seconds, got "
                             f"{pg_timeout!r}.")
        self.pg_timeout = float(pg_timeout)
        super().__init__(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                         affinity=affinity, log_interval_steps=log_interval_steps,
                         callbacks=callbacks)
        self.ctrl: AttrDict | None = None
        self.processes: dict[str, Any] = {}
        self.traj_infos_queue: Any = None
        self.error_queue: Any = None
        self._failure: str | None = None
        self._training = False
        self._monitor: threading.Thread | None = None
        self._original_cpus: list[int] | None = None
        self.rank, self.world_size = 0, len(affinity["optimizer"])  # Optimizer ranks.
        self._error_reports: list[tuple[str, str, bool]] = []
        self._stopped_children: set[str] = set()  # Ended by this process at shutdown.
        self._init_method: str | None = None  # Where optimizer ranks 1.. meet rank 0.
        self._opt_group: Any = None  # Gloo group of the ranks' objects (None: the default).
        self._joined_ranks = False  # This process joined the optimizer ranks' process group.
        self.rank_digests: list[str] = []  # Parameter digests of the ranks at a run's end.
        self.rank_optimize_calls: list[int] = []  # optimize_agent calls made by each rank.

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        """Optimize while the sampler runs, until it has sampled ``n_itr`` batches.

        Raises:
            AsyncRlError: a child process failed (an exception, whose traceback
                the message holds, or killed); the message names it.
        """
        try:
            self.startup()  # Sets throttle_itr and delta_throttle_itr (and returns them).
            self.before_training()
            throttle_time, itr = 0., self.start_itr
            log_counter = self._start_sampler_itr // self.log_interval_itrs
            ctrl = self.ctrl
            while not self.stop_requested:
                logger.set_iteration(itr)
                with logger.prefix(f"opt_itr #{itr} "):
                    throttle_time += self._wait_for_sampler(self.throttle_itr)
                    self._raise_if_failed()
                    if ctrl.quit.value:
                        break
                    self.throttle_itr += self.delta_throttle_itr  # In snapshots, for resuming.
                    self._set_sample_limit(self.throttle_itr)
                    self._meet_optimizer_ranks()
                    opt_info = self.algo.optimize_agent(itr, sampler_itr=ctrl.sampler_itr.value)
                    self.agent.send_shared_memory()
                    sampler_itr = ctrl.sampler_itr.value
                    traj_infos = [] if self._eval else drain_queue(self.traj_infos_queue)
                    self.last_completed_itr = itr
                    self.store_diagnostics(itr, sampler_itr, traj_infos, opt_info)
                    self._call_callbacks("on_iteration_end", itr, None, opt_info)
                    if sampler_itr // self.log_interval_itrs > log_counter:
                        self.at_log_point(itr, sampler_itr, throttle_time)
                        log_counter += 1
                        throttle_time = 0.
                itr += 1
            if not self.stop_requested:
                self._final_log(throttle_time)
            self._completed = True
        except BaseException as error:  # Ctrl-C, SIGTERM, a child's failure, ...
            self._training = False
            if self.world_size > 1 and _broke_ranks(error):
                self._wait_for_failure(FAILURE_GRACE_S)  # Which rank broke them?
            self.save_final_snapshot(error)
            if self._failure is not None:
                raise AsyncRlError(self._failure) from error
            raise
        finally:
            self.shutdown()

    def _wait_for_sampler(self, throttle_itr: float) -> float:
        """Sleep until the sampler reaches ``throttle_itr`` (or the run quits), checking
        on the children every ``THROTTLE_WAIT`` s; returns the seconds waited."""
        ctrl = self.ctrl

        def check_children() -> bool:
            self._raise_if_failed()
            return False
        _, waited = _poll_until(lambda: self._may_optimize(throttle_itr) or ctrl.quit.value,
                                OPT_POLL_S, THROTTLE_WAIT, check_children)
        return waited

    def _final_log(self, throttle_time: float) -> None:
        """The sampler finished: log what arrived since the last row."""
        sampler = self.processes.get("sampler")
        if sampler is not None:  # Its last TrajInfos are flushed once it has exited.
            deadline = time.time() + JOIN_TIMEOUT_S
            while sampler.is_alive() and time.time() < deadline:
                sampler.join(0.05)
            # A failing sampler's report may trail its exit.
            self._raise_if_failed(wait_s=0.5 if sampler.exitcode else 0.)
        traj_infos = drain_queue(self.traj_infos_queue)
        if traj_infos or not self._eval:
            itr = 0 if self.last_completed_itr is None else self.last_completed_itr
            self.store_diagnostics(itr, self.ctrl.sampler_itr.value,
                                   [] if self._eval else traj_infos, None)
            if self._eval:
                self._eval_traj_infos.extend(traj_infos)
            self.log_diagnostics(itr, self.ctrl.sampler_itr.value, throttle_time)

    def at_log_point(self, itr: int, sampler_itr: int, throttle_time: float) -> None:
        """Write a diagnostics row (the eval runner first takes one evaluation's TrajInfos)."""
        self.log_diagnostics(itr, sampler_itr, throttle_time)

    # ------------------------------------------------------------------ startup
    def startup(self) -> tuple[int, float]:  # type: ignore[override]
        """Seed, build the double buffer and the replay, start the children, then set up
        the optimizer here; returns ``(throttle_itr, delta_throttle_itr)``."""
        self._completed = False
        self._stop_reason = None
        self._callbacks_started = False
        self._failure = None
        self._error_reports, self._stopped_children = [], set()
        self.rank_digests, self.rank_optimize_calls = [], []
        self.last_completed_itr: int | None = None
        if not logger.writes_files():
            message = (f"{type(self).__name__}.train() runs outside logger_context: nothing "
                       "(progress.csv, debug.log, snapshots) will be saved.")
            logger.log(f"WARNING: {message}")
        self._install_sigterm_handler()
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        self.ctx = mp.get_context(self._children_start_method())
        double_buffer, examples = self.sampler.async_initialize(
            agent=self.agent, bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), seed=self.seed, ctx=self.ctx)
        self.sampler_batch_size = self.sampler.batch_spec.size
        self.itr_batch_size = self.sampler_batch_size
        n_itr = self.get_n_itr()
        self.replay_buffer = self.algo.async_initialize(
            agent=self.agent, sampler_n_itr=n_itr, batch_spec=self.sampler.batch_spec,
            mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
            world_size=self.world_size)
        self.throttle_itr, self.delta_throttle_itr = throttle_schedule(
            getattr(self.algo, "min_steps_learn", 0), self.algo.batch_size,
            self.algo.updates_per_sync, self.sampler_batch_size, self.algo.replay_ratio,
            self.world_size)
        self.sampler_lead_itrs = None if self.sampler_lead_steps is None else max(
            1, math.ceil(self.sampler_lead_steps / self.sampler_batch_size))
        self._learn_start_itr = self.throttle_itr  # The optimizer's first call may come here.
        self._ratio_warned = False
        self.warn_if_never_learning(n_itr, self.throttle_itr - 1)
        resume_from = logger.get_resume_snapshot()
        snapshot = None if resume_from is None else resume.load_async_snapshot(self, resume_from)
        self._start_sampler_itr = 0 if snapshot is None else snapshot["sampler_itr"] + 1
        self.launch_workers(n_itr)
        throttle = self.optim_startup()
        # A resumed run's throttle came with the snapshot, before the children started.
        self.start_itr = 0 if snapshot is None else resume.restore_async(self, snapshot,
                                                                         resume_from)
        self._callbacks_started = True
        self._call_callbacks("on_startup")
        return throttle

    def _children_start_method(self) -> str | None:
        """``start_method``, or ``"forkserver"`` in place of a default fork (logged) where
        a forked child would fail: a Ray sampler in a process that used Ray (a notebook,
        a script that ran a RaySampler first), or children on a GPU when this process has
        initialized CUDA.

        Raises:
            RuntimeError: ``start_method="fork"`` was asked for in such a process.
        """
        why = None
        if isinstance(self.sampler, RaySampler) and ray_used_here():
            why = (f"this process (pid {os.getpid()}) used Ray, and Ray cannot start in a "
                   f"process forked from it (for {type(self.sampler).__name__})")
        else:
            sampler_affinity = self.affinity["sampler"]
            servers = sampler_affinity if isinstance(sampler_affinity, (list, tuple)) \
                else [sampler_affinity]
            cuda_idxs = [server.get("cuda_idx") for server in servers]
            cuda_idxs += [opt.get("cuda_idx") for opt in self.affinity["optimizer"][1:]]
            why = cuda_fork_problem(cuda_idxs)
        return start_method_without_fork(self.start_method, type(self).__name__, why)

    def get_n_itr(self) -> int:
        """Sampler iterations; see :func:`async_n_itr`."""
        self.log_interval_itrs, self.n_itr = async_n_itr(self.n_steps, self.log_interval_steps,
                                                         self.sampler_batch_size)
        logger.log(f"Running {self.n_itr} sampler iterations.")
        return self.n_itr

    def launch_workers(self, n_itr: int) -> None:
        """Start the sampler process, the two memory copiers, the optimizer ranks 1..
        (several optimizer dicts) and the watchdog of them all."""
        ctx = self.ctx
        self.traj_infos_queue = ctx.Queue()
        self.error_queue = ctx.Queue()
        self.ctrl = ctrl = build_ctrl(self.world_size, ctx)
        self._set_sample_limit(self.throttle_itr)
        common = dict(error_queue=self.error_queue, parent_pid=os.getpid())
        sampler_kwargs = dict(sampler=self.sampler, affinity=self.affinity["sampler"], ctrl=ctrl,
                              traj_infos_queue=self.traj_infos_queue, n_itr=n_itr, **common)
        if self._eval:
            sampler_kwargs["eval_itrs"] = self.log_interval_itrs
        if self._start_sampler_itr > 0:  # A resumed run.
            sampler_kwargs["start_itr"] = self._start_sampler_itr
            ctrl.sampler_itr.value = self._start_sampler_itr - 1
        target = run_async_sampler_eval if self._eval else run_async_sampler
        # Not a daemon: an AsyncCpuSampler starts worker processes of its own.
        self.processes = {"sampler": ctx.Process(target=target, kwargs=sampler_kwargs,
                                                 name="AsyncRl-sampler", daemon=False)}
        for i in range(N_DOUBLE_BUFFER):
            name = f"memory copier {i}"
            copier_ctrl = AttrDict(quit=ctrl.quit, sample_ready=ctrl.sample_ready[i],
                                   sample_copied=ctrl.sample_copied[i])
            self.processes[name] = ctx.Process(
                target=memory_copier, name=f"AsyncRl-copier{i}", daemon=True,
                args=(self.sampler.double_buffer[i], self.algo.samples_to_buffer,
                      self.replay_buffer, copier_ctrl), kwargs=dict(name=name, **common))
        opt_processes = self._optimizer_rank_processes(n_itr, common)
        self.processes.update(opt_processes)
        self._training = True
        for process in self.processes.values():
            process.start()
        logger.log("Started the sampler and memory copier processes (pids "
                   f"{[p.pid for name, p in self.processes.items() if name not in opt_processes]}"
                   ").")
        if opt_processes:
            logger.log(f"Started optimizer ranks 1..{self.world_size - 1} (pids "
                       f"{[p.pid for p in opt_processes.values()]}); process group at "
                       f"{self._init_method}.")
        self._monitor = threading.Thread(target=self._watch_children, daemon=True,
                                         name="AsyncRl-monitor")
        self._monitor.start()

    def _optimizer_rank_processes(self, n_itr: int, common: dict) -> dict[str, Any]:
        """The (unstarted) processes of optimizer ranks 1.., keyed by name."""
        if self.world_size == 1:
            return {}
        opt_affinities = self.affinity["optimizer"]
        first_cpu = opt_affinities[0]["cpus"]
        first_cpu = first_cpu if isinstance(first_cpu, int) else first_cpu[0]
        port = find_port(offset=first_cpu % 100)
        self._init_method = f"tcp://127.0.0.1:{port}"
        processes = {}
        for rank in range(1, self.world_size):
            pin = (self.affinity.get("set_affinity", True)
                   and opt_affinities[rank].get("set_affinity", True))
            worker = AsyncOptWorker(rank, self.world_size, self.algo, self.agent, n_itr,
                                    affinity={**opt_affinities[rank], "set_affinity": pin},
                                    seed=self.seed + 100, ctrl=self.ctrl, port=port,
                                    pg_timeout=self.pg_timeout, **common)
            worker.resume_snapshot = logger.get_resume_snapshot()
            processes[worker.name] = self.ctx.Process(target=worker.optimize, daemon=True,
                                                      name=f"AsyncRl-opt{rank}")
        return processes

    def optim_startup(self) -> tuple[int, float]:
        """Pin this process to the optimizer's CPUs, join the other optimizer ranks (if
        any), place the agent, build the optimizer; returns ``(throttle_itr,
        delta_throttle_itr)``."""
        opt_affinity = self.affinity["optimizer"][0]
        process = psutil.Process()
        if hasattr(process, "cpu_affinity"):
            self._original_cpus = process.cpu_affinity()
        if self.affinity.get("set_affinity", True) and opt_affinity.get("set_affinity", True):
            set_cpu_affinity(opt_affinity["cpus"])
        n_threads = set_torch_threads(opt_affinity.get("torch_threads"))
        logger.log(f"Optimizer CPUs {opt_affinity['cpus']}, Torch threads {n_threads}.")
        cuda_idx = opt_affinity.get("cuda_idx")
        if self.world_size > 1:
            self._opt_group = self._join_optimizer_ranks(cuda_idx)
        # A private copy: the sampler reads the shared model only as send_shared_memory()
        # writes it (under its lock), never mid-update.
        prepare_optimizer_rank(self.algo, self.agent, 0, self.world_size, cuda_idx,
                               self._opt_group)
        self.min_itr_learn = getattr(self.algo, "min_itr_learn", 0)
        self.initialize_logging()
        return self.throttle_itr, self.delta_throttle_itr

    def _join_optimizer_ranks(self, cuda_idx: int | None) -> Any:
        """Join the optimizer ranks' process group as rank 0; returns the gloo group for
        objects (None: the default group is gloo). Joins in a thread, so that a child
        failing meanwhile stops the run instead of leaving this process waiting for
        ``pg_timeout``."""
        if dist.is_initialized():
            raise RuntimeError(f"{type(self).__name__} with {self.world_size} optimizer ranks "
                               "starts a torch.distributed process group of its own, but this "
                               "process already has one; destroy it first.")
        backend = "gloo" if cuda_idx is None else "nccl"
        if cuda_idx is not None:
            torch.cuda.set_device(cuda_idx)
        group = init_process_group_watched(backend, 0, self.world_size, self._init_method,
                                           self.pg_timeout, self._raise_if_failed, POLL_S)
        self._joined_ranks = True
        logger.log(f"Joined the process group of {self.world_size} optimizer ranks as rank 0 "
                   f"(backend {backend}).")
        return group

    def _may_optimize(self, throttle_itr: float) -> bool:
        """Whether the sampler passed ``throttle_itr``; with several optimizer ranks, also
        whether the replay can be sampled: then every rank trains in the coming call (the
        replay only fills), where DistributedDataParallel needs all of them in each update."""
        if self.ctrl.sampler_itr.value < throttle_itr:
            return False
        return self.world_size == 1 or self.replay_buffer.can_sample()

    def _meet_optimizer_ranks(self) -> None:
        """With several optimizer ranks: wait until every rank is ready for the next call."""
        if self.ctrl.opt_throttle is not None:
            self.ctrl.opt_throttle.wait(0, check=self._raise_if_failed)

    def _optimizer_ranks(self) -> list[tuple[str, Any]]:
        """``(name, process)`` of optimizer ranks 1.."""
        return [(name, p) for name, p in self.processes.items()
                if name.startswith("optimizer rank")]

    def _set_sample_limit(self, throttle_itr: float) -> None:
        """Let the sampler run up to ``sampler_lead_itrs`` past the optimizer's next mark."""
        if self.sampler_lead_itrs is not None:
            self.ctrl.sample_limit_itr.value = throttle_itr + self.sampler_lead_itrs

    # ------------------------------------------------------------------ failures
    def _find_failure(self) -> str | None:
        """A message naming the child that failed, if one did: its own report first, then
        a child that died without one, then an optimizer rank that only saw the ranks'
        process group break (when another process failed)."""
        self._collect_reports()
        dead = self._dead_unreported()
        if dead and not any(not broke for _, _, broke in self._error_reports):
            time.sleep(0.2)  # Its report may still be in the pipe.
            self._collect_reports()
            dead = self._dead_unreported()
        own = [(name, text) for name, text, broke in self._error_reports if not broke]
        if own:
            return f"the {own[0][0]} process failed:\n{own[0][1]}"
        if dead:
            name, p = dead[0]
            code = p.exitcode
            how = (f"was killed by signal {-code}" if code < 0 else
                   f"exited with code {code}" if code else "exited (code 0) before the run ended")
            return f"the {name} process (pid {p.pid}) {how}."
        if self._error_reports:
            name, text, _ = self._error_reports[0]
            return f"the {name} process failed as the optimizer ranks' process group broke:\n{text}"
        return None

    def _collect_reports(self) -> None:
        """Keep the children's error reports (the watchdog and this thread both read them)."""
        if self.error_queue is not None:
            self._error_reports.extend(drain_queue(self.error_queue))

    def _dead_unreported(self) -> list[tuple[str, Any]]:
        """Children that ended in failure without a report: a non-zero exit code, or a
        child that left before it was told to (the others would wait for it): an
        optimizer rank before ``quit_opt``, the sampler or a copier before ``quit``."""
        reported = {name for name, _, _ in self._error_reports} | self._stopped_children
        ctrl = self.ctrl
        ranks_quit = ctrl is None or bool(ctrl.quit_opt.value)
        run_quit = ctrl is None or bool(ctrl.quit.value)

        def told_to_quit(name: str) -> bool:
            return ranks_quit if name.startswith("optimizer rank") else run_quit

        return [(name, p) for name, p in self.processes.items()
                if name not in reported and p.exitcode is not None
                and (p.exitcode != 0 or not told_to_quit(name))]

    def _watch_children(self) -> None:
        """Watchdog thread: record a child's failure and break the optimizer ranks' barrier
        (ranks waiting there stop); interrupt the master if it has not noticed within
        FAILURE_GRACE_S (e.g. it is blocked)."""
        while self._training:
            failure = self._find_failure()
            if failure is not None:
                self._failure = failure
                ctrl = self.ctrl
                if ctrl is not None and ctrl.opt_throttle is not None:
                    ctrl.opt_throttle.abort()
                deadline = time.time() + FAILURE_GRACE_S
                while self._training and time.time() < deadline:
                    time.sleep(0.05)
                if self._training:
                    logger.log(f"ERROR: {failure} Stopping the run.")
                    _interrupt_main_thread()
                return
            time.sleep(0.1)

    def _wait_for_failure(self, wait_s: float = 0.) -> str | None:
        """The failure of a child, waiting up to ``wait_s`` seconds for one to show."""
        deadline = time.time() + wait_s
        while True:
            if self._failure is None and (self._monitor is None or not self._monitor.is_alive()):
                self._failure = self._find_failure()
            if self._failure is not None or time.time() >= deadline:
                return self._failure
            time.sleep(0.05)

    def _raise_if_failed(self, wait_s: float = 0.) -> None:
        failure = self._wait_for_failure(wait_s)
        if failure is not None:
            raise AsyncRlError(failure)

    def _drain_one_evaluation(self) -> list:
        """Block until one evaluation's TrajInfos (up to its ``None``) arrived."""
        infos = []
        while True:
            try:
                item = self.traj_infos_queue.get(timeout=POLL_S)
            except queue.Empty:
                self._raise_if_failed()
                sampler = self.processes.get("sampler")
                if self.ctrl.quit.value and (sampler is None or not sampler.is_alive()):
                    return infos
                continue
            if item is None:
                return infos
            infos.append(item)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Stop callbacks, then every child (politely, then by force); free queues."""
        self._training = False
        try:
            super().shutdown()
        finally:
            self._stop_children()
            if self._original_cpus is not None:
                set_cpu_affinity(self._original_cpus)
                self._original_cpus = None

    def _stop_children(self) -> None:
        if self.ctrl is not None:
            self.ctrl.quit.value = True
            for semaphore in self.ctrl.sample_ready + self.ctrl.sample_copied:
                semaphore.release()
        self._stop_optimizer_ranks()
        deadline = time.time() + JOIN_TIMEOUT_S
        for process in self.processes.values():
            # Keep the queue drained: a child blocked flushing it cannot exit.
            while process.is_alive() and time.time() < deadline:
                drain_queue(self.traj_infos_queue)
                process.join(0.05)
        if self._failure is None and not getattr(self, "_completed", False):
            failure = self._find_failure() if self.error_queue is not None else None
            if failure is not None:
                logger.log(f"ERROR: {failure}")
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()
                process.join(1.)
            if process.is_alive():
                process.kill()
                process.join()
        for q in (self.traj_infos_queue, self.error_queue):
            if q is not None:
                drain_queue(q)
                q.close()
                q.join_thread()
        if self._monitor is not None:
            self._monitor.join(1.)
        self.processes = {}
        self.traj_infos_queue = self.error_queue = None
        # Named semaphores (spawn, forkserver) are unlinked when collected.
        self.ctrl = None
        self._monitor = None

    def _stop_optimizer_ranks(self) -> None:
        """Tell ranks 1.. to quit, then leave the process group. After a completed run
        they meet this rank once more, send their parameter digests and call counts
        (``rank_digests``, ``rank_optimize_calls``) and end by themselves; otherwise
        the barrier is broken, and ranks still there after RANK_STOP_S (waiting in a
        collective for this one) are terminated."""
        ctrl = self.ctrl
        if ctrl is None or ctrl.opt_throttle is None:
            return
        ctrl.quit_opt.value = True
        completed = getattr(self, "_completed", False) and self._failure is None
        ranks = self._optimizer_ranks()
        if completed and self._joined_ranks and self._meet_to_quit():
            self._gather_rank_summaries()
            deadline = time.time() + JOIN_TIMEOUT_S
            for _, process in ranks:
                process.join(max(0., deadline - time.time()))
        else:
            ctrl.opt_throttle.abort()
            # Ranks waiting in a collective for this one stay there (destroying the process
            # group does not close its connections): their work is discarded, so end them.
            deadline = time.time() + RANK_STOP_S
            for name, process in ranks:
                process.join(max(0., deadline - time.time()))
                if process.is_alive():
                    self._stopped_children.add(name)
                    process.terminate()
        unwrap_ddp(self.agent)
        gc.collect()  # DDP's reducers go while their process group still exists.
        if self._joined_ranks:
            dist.destroy_process_group()
            self._joined_ranks = False
        self._opt_group = None

    def _meet_to_quit(self) -> bool:
        """Meet ranks 1.. (waiting with ``quit_opt`` set) for the last time."""
        try:
            met = self.ctrl.opt_throttle.wait(0, timeout=JOIN_TIMEOUT_S)
        except threading.BrokenBarrierError:
            met = False
        if not met:
            logger.log("WARNING: optimizer ranks 1.. did not meet rank 0 at the end of the run "
                       f"within {JOIN_TIMEOUT_S} s; stopping them.")
        return met

    def _gather_rank_summaries(self) -> None:
        """Every rank's number of optimize_agent calls and parameter digest, on rank 0."""
        n_calls = 0 if self.last_completed_itr is None else self.last_completed_itr + 1
        summary = dict(optimize_calls=n_calls, digest=state_digest(self.agent.state_dict()))
        try:
            gathered = gather_objects(summary, dst=0, group=self._opt_group)
        except Exception as error:  # noqa: BLE001 - a rank failing at the very end.
            logger.log(f"WARNING: could not gather the optimizer ranks' parameter digests "
                       f"({type(error).__name__}: {error}).")
            return
        self.rank_optimize_calls = [item["optimize_calls"] for item in gathered]
        self.rank_digests = [item["digest"] for item in gathered]
        differ = [r for r, d in enumerate(self.rank_digests) if d != self.rank_digests[0]]
        if differ:
            logger.log(f"WARNING: the agent's parameters on optimizer rank(s) {differ} differ "
                       "from rank 0's (a parameter trained outside DistributedDataParallel?).")

    # ------------------------------------------------------------------ logging
    def get_itr_snapshot(self, itr: int, sampler_itr: int | None = None) -> dict:
        """Snapshot of tensors, numbers and dicts (loads with ``weights_only=True``)."""
        sampler_itr = self._last_sampler_itr if sampler_itr is None else sampler_itr
        return dict(
            itr=itr,
            sampler_itr=sampler_itr,
            cum_steps=sampler_itr * self.sampler_batch_size,
            cum_updates=self.algo.update_counter,
            agent_state_dict=self.agent.state_dict(),
            optimizer_state_dict=self.algo.optim_state_dict(),
            agent_spec=agent_spec(self.agent, self.sampler),
            **resume.training_state(self),
        )

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._last_sampler_itr = 0
        self._log_sampler_itr = 0
        self._last_eval_time = 0.
        self._last_sampler_wait = 0.

    def store_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                          traj_infos: list, opt_info: Any) -> None:
        self._cum_completed_trajs += len(traj_infos)
        if opt_info is not None:
            for k, v in self._opt_infos.items():
                new_v = getattr(opt_info, k, [])
                v.extend(new_v if isinstance(new_v, list) else [new_v])
        self._last_sampler_itr = sampler_itr

    def log_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                        throttle_time: float, traj_infos: list | None = None,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        """Save the snapshot, write one diagnostics row and hand it to the callbacks.

        The replay ratio columns count the transitions trained on (updates x
        ``batch_size`` x optimizer ranks) per env step sampled: ``ReplayRatio`` over
        the steps since the last row, ``CumReplayRatio`` over all steps (as rlpyt: it
        counts the ``min_steps_learn`` steps, so it stays below ``replay_ratio``), and
        ``LearningReplayRatio`` over the steps since learning could begin, the one to
        compare with the algorithm's ``replay_ratio``. Below half of it, a warning is
        given once per run (see :meth:`_warn_if_ratio_dropped`).

        Args:
            itr: optimizer iteration (-1: the evaluation before any training).
            sampler_itr: the sampler's iteration when the row is written.
            throttle_time: seconds the optimizer waited for the sampler since the last row.
            traj_infos: TrajInfos to summarize (default: the runner's window).

        Returns:
            the row, keyed like progress.csv's columns.
        """
        if itr >= 0:
            self.save_itr_snapshot(itr)
        new_time = time.time()
        self._cum_time = new_time - self._start_time
        elapsed = max(new_time - self._last_time, 1e-9)
        new_updates = self.algo.update_counter - self._last_update_counter
        new_samples = self.sampler_batch_size * (sampler_itr - self._log_sampler_itr)
        batch_size, ws = self.algo.batch_size, self.world_size
        cum_samples = sampler_itr * self.sampler_batch_size
        replay_ratio = new_updates * batch_size * ws / max(1, new_samples)
        learn_samples = self.sampler_batch_size * (sampler_itr - self._learn_start_itr)
        learning_ratio = (self.algo.update_counter * batch_size * ws / learn_samples
                          if learn_samples > 0 else float("nan"))
        with logger.tabular_prefix(prefix):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("SamplerIteration", sampler_itr)
            logger.record_tabular("CumTime (s)", self._cum_time)
            logger.record_tabular("CumSteps", cum_samples)
            logger.record_tabular("CumUpdates", self.algo.update_counter)
            logger.record_tabular("ReplayRatio", replay_ratio)
            logger.record_tabular("CumReplayRatio",
                                  self.algo.update_counter * batch_size * ws / max(1, cum_samples))
            logger.record_tabular("LearningReplayRatio", learning_ratio)
            logger.record_tabular("StepsPerSecond", new_samples / elapsed)
            if self._eval:
                eval_time = self.ctrl.eval_time.value if self.ctrl is not None else 0.
                non_eval = max(elapsed - (eval_time - self._last_eval_time), 1e-9)
                logger.record_tabular("NonEvalSamplesPerSecond", new_samples / non_eval)
                self._last_eval_time = eval_time
            logger.record_tabular("UpdatesPerSecond", new_updates / elapsed)
            logger.record_tabular("OptThrottle", (elapsed - throttle_time) / elapsed)
            sampler_wait = self.ctrl.sampler_wait_time.value if self.ctrl is not None else 0.
            logger.record_tabular("SamplerThrottle",
                                  max(elapsed - (sampler_wait - self._last_sampler_wait), 0.)
                                  / elapsed)
            self._last_sampler_wait = sampler_wait
            logger.record_tabular("NonFiniteUpdates", getattr(self.algo, "non_finite_updates", 0))
            for key, value in sampler_diagnostics(self.sampler).items():
                logger.record_tabular(key, value)
        self._log_infos(traj_infos)
        diagnostics = logger.dump_tabular(with_prefix=False)
        interval_learns = self._log_sampler_itr >= self._learn_start_itr
        self._warn_if_ratio_dropped(replay_ratio if interval_learns else float("nan"),
                                    new_samples, learning_ratio, learn_samples)
        self._last_time = new_time
        self._last_update_counter = self.algo.update_counter
        self._log_sampler_itr = sampler_itr
        stopped_by = self._call_callbacks("on_log", itr, diagnostics)
        if stopped_by:
            names = ", ".join(repr(callback) for callback in stopped_by)
            self._stop_reason = f"{names} returned False from on_log at iteration {itr}"
            logger.log(f"Stopping the run: {self._stop_reason}.")
        return diagnostics


    def _warn_if_ratio_dropped(self, interval_ratio: float, interval_steps: int,
                               learning_ratio: float, learning_steps: int) -> None:
        """Warn (once per run) when the replay ratio reached, over the last interval or
        since learning began, is below half of the algorithm's ``replay_ratio``.

        A ratio counts only over at least RATIO_CHECK_CALLS ``optimize_agent`` calls'
        worth of sampled steps, and with a sampler lead over at least twice the lead
        (within which the optimizer may lag by design); ``nan`` (no such steps) is skipped.
        """
        if self._ratio_warned:
            return
        target = float(self.algo.replay_ratio)
        min_steps = RATIO_CHECK_CALLS * self.delta_throttle_itr * self.sampler_batch_size
        if self.sampler_lead_itrs is not None:
            min_steps = max(min_steps, 2 * (self.sampler_lead_itrs + 1) * self.sampler_batch_size)
        for ratio, steps, over in ((interval_ratio, interval_steps, "over the last interval"),
                                   (learning_ratio, learning_steps, "since learning began")):
            if math.isnan(ratio) or steps < min_steps or ratio >= 0.5 * target:
                continue
            self._ratio_warned = True
            lead = self.sampler_lead_steps
            advice = (f"pass sampler_lead_steps (e.g. {8 * self.sampler_batch_size}, 8 "
                      "sampler batches) so that the sampler waits for the optimizer"
                      if lead is None else f"lower sampler_lead_steps={lead:g}")
            message = (f"{type(self).__name__}: the replay ratio reached {over} is "
                       f"{ratio:.3g}, below half of {type(self.algo).__name__}'s "
                       f"replay_ratio={target:g}: the sampler outruns the optimizer, which "
                       f"makes fewer updates than asked for. To keep replay_ratio, {advice}.")
            logger.log(f"WARNING: {message}")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return


class AsyncRl(AsyncRlBase):
    """Logs the online performance of the training trajectories.

    Args:
        log_traj_window: completed training trajectories kept for statistics.
        **kwargs: :class:`AsyncRlBase` arguments.
    """

    def __init__(self, *args: Any, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.log_traj_window = positive_int("log_traj_window", log_traj_window)

    def initialize_logging(self) -> None:
        self._traj_infos: deque = deque(maxlen=self.log_traj_window)
        self._new_completed_trajs = 0
        super().initialize_logging()

    def store_diagnostics(self, itr: int, sampler_itr: int, traj_infos: list,
                          opt_info: Any) -> None:
        self._new_completed_trajs += len(traj_infos)
        self._traj_infos.extend(traj_infos)
        super().store_diagnostics(itr, sampler_itr, traj_infos, opt_info)

    def log_diagnostics(self, itr: int, sampler_itr: int, throttle_time: float,
                        traj_infos: list | None = None,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        with logger.tabular_prefix(prefix):
            logger.record_tabular("CumCompletedTrajs", self._cum_completed_trajs)
            logger.record_tabular("NewCompletedTrajs", self._new_completed_trajs)
            logger.record_tabular("StepsInTrajWindow",
                                  sum(info["Length"] for info in self._traj_infos))
        self._new_completed_trajs = 0
        return super().log_diagnostics(itr, sampler_itr, throttle_time, list(self._traj_infos),
                                       prefix=prefix)


class AsyncRlEval(AsyncRlBase):
    """Logs offline performance: the sampler process evaluates the agent every
    ``log_interval_itrs`` sampler iterations (from iteration 0).

    The first row, from the evaluation before any training, has ``Iteration`` -1
    (as in :class:`MinibatchRlEval`, every row's ``Iteration`` is unique).
    """

    _eval = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._check_eval_sampler()

    def initialize_logging(self) -> None:
        self._eval_traj_infos: list = []
        super().initialize_logging()

    def before_training(self) -> None:
        """Log the evaluation of the untrained agent (sampler iteration 0; not when the
        run resumes)."""
        if self.start_itr > 0:
            return
        while self.ctrl.sampler_itr.value < 1 and not self.ctrl.quit.value:
            self._raise_if_failed()
            time.sleep(THROTTLE_WAIT)
        self._eval_traj_infos.extend(self._drain_one_evaluation())
        self.log_diagnostics(-1, 0, 0.)

    def at_log_point(self, itr: int, sampler_itr: int, throttle_time: float) -> None:
        with self.ctrl.sampler_itr.get_lock():
            self._eval_traj_infos.extend(self._drain_one_evaluation())
        self.log_diagnostics(itr, sampler_itr, throttle_time)

    def log_diagnostics(self, itr: int, sampler_itr: int, throttle_time: float,
                        traj_infos: list | None = None,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        eval_traj_infos = self._eval_traj_infos
        if not eval_traj_infos:
            logger.log("WARNING: had no complete trajectories in eval.")
        with logger.tabular_prefix(prefix):
            logger.record_tabular("StepsInEval", sum(info["Length"] for info in eval_traj_infos))
            logger.record_tabular("TrajsInEval", len(eval_traj_infos))
            logger.record_tabular("CumEvalTime",
                                  self.ctrl.eval_time.value if self.ctrl is not None else 0.)
        self._eval_traj_infos = []
        return super().log_diagnostics(itr, sampler_itr, throttle_time, eval_traj_infos,
                                       prefix=prefix)
