"""Entry points of the child processes of an asynchronous run: the sampler loop and
the memory copiers, with how a child waits, watches the master and reports its error."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from rlframe.runners.async_rl.control import POLL_S
from rlframe.runners.async_rl.schedule import SAMPLER_WAIT, _poll_until
from rlframe.utils.logging import logger
from rlframe.utils.processes import QueueLike, master_alive, report_error, start_child

if TYPE_CHECKING:
    from rlframe.replays.base import BaseReplayBuffer
    from rlframe.runners.async_rl.control import AsyncControl, CopierControl
    from rlframe.samplers.base import AsyncSampler
    from rlframe.samplers.collections import Samples


def _wait(semaphore: Any, quit_flag: Any, parent_pid: int | None) -> bool:
    """Acquire ``semaphore``; False (not acquired) once ``quit_flag`` is set or the
    master is gone."""
    while not semaphore.acquire(timeout=POLL_S):
        if quit_flag.value or not master_alive(parent_pid):
            return False
    return True


def _wait_for_optimizer(itr: int, ctrl: AsyncControl, parent_pid: int | None) -> bool:
    """Sleep while batch ``itr`` is beyond ``ctrl.sample_limit_itr``; False once
    ``ctrl.quit`` is set or the master is gone."""
    ready, waited = _poll_until(lambda: itr <= ctrl.sample_limit_itr.value, SAMPLER_WAIT,
                                POLL_S, lambda: ctrl.quit.value or not master_alive(parent_pid))
    if ready:
        ctrl.sampler_wait_time.value += waited
    return ready


def _sampler_loop(sampler: AsyncSampler, affinity: dict | list[dict], ctrl: AsyncControl,
                  traj_infos_queue: QueueLike, n_itr: int, eval_itrs: int | None,
                  error_queue: QueueLike | None,
                  parent_pid: int | None, start_itr: int = 0) -> None:
    start_child(exit_when_orphaned=True)  # Ctrl-C is the master's; on Linux, end with it.
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
        report_error(error_queue, "sampler")
    finally:
        try:
            sampler.shutdown()
        finally:
            for semaphore in ctrl.sample_ready:  # Wake the memory copiers.
                semaphore.release()
    if failed:
        raise SystemExit(1)


def run_async_sampler(sampler: AsyncSampler, affinity: dict | list[dict], ctrl: AsyncControl,
                      traj_infos_queue: QueueLike, n_itr: int,
                      error_queue: QueueLike | None = None, parent_pid: int | None = None,
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
        error_queue: where a ``ChildReport`` named ``"sampler"`` goes if this process
            fails.
        parent_pid: the master's pid (the process stops waiting once it is gone).
        start_itr: the first iteration (a resumed run's).
    """
    _sampler_loop(sampler, affinity, ctrl, traj_infos_queue, n_itr, None, error_queue,
                  parent_pid, start_itr)


def run_async_sampler_eval(sampler: AsyncSampler, affinity: dict | list[dict],
                           ctrl: AsyncControl, traj_infos_queue: QueueLike, n_itr: int,
                           eval_itrs: int, error_queue: QueueLike | None = None,
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
                  replay_buffer: BaseReplayBuffer, ctrl: CopierControl, name: str = "memory copier",
                  error_queue: QueueLike | None = None, parent_pid: int | None = None) -> None:
    """Entry point of a memory copier: appends one half of the double buffer to the replay.

    Args:
        sample_buffer: the half ``[T, B]`` (shared numpy ``Samples``) it copies.
        samples_to_buffer: the algorithm's conversion to the replay's fields (it runs
            in this process, so it must not depend on state the optimizer changes).
        replay_buffer: the shared replay buffer.
        ctrl: its half's :class:`CopierControl` (``AsyncControl.copier(i)``).
        name: how errors name this process.
        error_queue: where a ``ChildReport`` named ``name`` goes if this process fails.
        parent_pid: the master's pid.
    """
    start_child(exit_when_orphaned=True)  # Ctrl-C is the master's; on Linux, end with it.
    import torch
    torch.set_num_threads(1)
    try:
        while True:
            if not _wait(ctrl.sample_ready, ctrl.quit, parent_pid) or ctrl.quit.value:
                break
            replay_buffer.append_samples(samples_to_buffer(sample_buffer))
            ctrl.sample_copied.release()
    except BaseException:  # noqa: BLE001 - reported to the master, then exit 1.
        report_error(error_queue, name)
        raise SystemExit(1) from None

