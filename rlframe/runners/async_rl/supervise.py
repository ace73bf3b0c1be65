"""Watching the children of an asynchronous run: a child's failure stops the run with
an :class:`AsyncRlError` naming it; shutdown stops every process (a part of
:class:`AsyncRlBase`)."""
from __future__ import annotations

import gc
import queue
import threading
import time
from multiprocessing.context import BaseContext

import torch.distributed as dist

from rlframe.agents.base import unwrap_ddp
from rlframe.runners.async_rl.control import POLL_S
from rlframe.runners.minibatch_rl import MinibatchRlBase
from rlframe.utils.distributed import gather_objects, is_collective_error, state_digest
from rlframe.utils.launching.pinning import set_cpu_affinity
from rlframe.utils.processes import ChildSupervisor, interrupt_main_thread
from rlframe.utils.synchronize import drain_queue

JOIN_TIMEOUT_S = 5.  # Children ending by themselves at shutdown, before SIGTERM.
FAILURE_GRACE_S = 3.  # A child failed: time for the master to notice before it is interrupted.
RANK_STOP_S = 0.5  # A failed run: optimizer ranks ending by themselves, before SIGTERM.


class AsyncRlError(RuntimeError):
    """A process of an asynchronous run failed; the message names it."""


def _broke_ranks(error: BaseException) -> bool:
    """Whether ``error`` says that the optimizer ranks' barrier or process group broke."""
    return isinstance(error, threading.BrokenBarrierError) or is_collective_error(error)



class AsyncRlSupervision(MinibatchRlBase):
    """Failures and shutdown of :class:`AsyncRlBase`; not a runner by itself."""

    def _new_supervisor(self, ctx: BaseContext) -> ChildSupervisor:
        """The supervisor of this run's children (sampler, memory copiers, optimizer
        ranks 1..). A child that exits cleanly before it was told to quit failed too
        (the others would wait for it): an optimizer rank before ``quit_opt``, the
        sampler or a copier before ``quit``."""
        def exit_too_early(name: str) -> bool:
            ctrl = self.ctrl
            if ctrl is None:
                return False
            told = ctrl.quit_opt if name.startswith("optimizer rank") else ctrl.quit
            return not told.value

        return ChildSupervisor(ctx, title=lambda name: f"the {name} process",
                               broke_note=" as the optimizer ranks' process group broke",
                               exit_too_early=exit_too_early)

    def _find_failure(self) -> str | None:
        """A message naming the child that failed, if one did: its own report first, then
        a child that died without one, then an optimizer rank that only saw the ranks'
        process group break (when another process failed)."""
        supervisor = getattr(self, "_supervisor", None)
        return None if supervisor is None else supervisor.find_failure()

    def _start_watchdog(self) -> None:
        """Watchdog thread: record a child's failure and break the optimizer ranks' barrier
        (ranks waiting there stop); interrupt the master if it has not noticed within
        FAILURE_GRACE_S (e.g. it is blocked)."""
        def on_failure(failure: str) -> None:
            self._failure = failure
            ctrl = self.ctrl
            if ctrl is not None and ctrl.opt_throttle is not None:
                ctrl.opt_throttle.abort()

        def on_grace_passed(failure: str) -> None:
            self.logger.log(f"ERROR: {failure} Stopping the run.")
            interrupt_main_thread()

        self._monitor = self._supervisor.start_watchdog(
            lambda: self._training, FAILURE_GRACE_S, on_grace_passed, on_failure,
            poll_s=0.1, name="AsyncRl-monitor")

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
        supervisor = getattr(self, "_supervisor", None)

        def drain() -> None:  # A child blocked flushing the queue cannot exit.
            if self.traj_infos_queue is not None:
                drain_queue(self.traj_infos_queue)
        if supervisor is not None:
            supervisor.join(JOIN_TIMEOUT_S, drain)
            if self._failure is None and not getattr(self, "_completed", False):
                failure = self._find_failure()
                if failure is not None:
                    self.logger.log(f"ERROR: {failure}")
            supervisor.stop(join_s=0., terminate_s=1., drain=drain)
        if self.traj_infos_queue is not None:
            drain()
            self.traj_infos_queue.close()
            self.traj_infos_queue.join_thread()
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
            self._supervisor.join(JOIN_TIMEOUT_S, names=[name for name, _ in ranks])
        else:
            ctrl.opt_throttle.abort()
            # Ranks waiting in a collective for this one stay there (destroying the process
            # group does not close its connections): their work is discarded, so end them.
            self._supervisor.join(RANK_STOP_S, names=[name for name, _ in ranks])
            for name, process in ranks:
                if process.is_alive():
                    self._supervisor.stopped.add(name)
                    process.terminate()
        unwrap_ddp(self.agent)
        gc.collect()  # DDP's reducers go while their process group still exists.
        if self._joined_ranks:
            dist.destroy_process_group()
            self._joined_ranks = False
        self._opt_group = None
        self._master_store = None  # Still listening when the run ended before rank 0 joined.

    def _meet_to_quit(self) -> bool:
        """Meet ranks 1.. (waiting with ``quit_opt`` set) for the last time."""
        try:
            met = self.ctrl.opt_throttle.wait(0, timeout=JOIN_TIMEOUT_S)
        except threading.BrokenBarrierError:
            met = False
        if not met:
            self.logger.log(
                "WARNING: optimizer ranks 1.. did not meet rank 0 at the end of the run "
                f"within {JOIN_TIMEOUT_S} s; stopping them.")
        return met

    def _gather_rank_summaries(self) -> None:
        """Every rank's number of optimize_agent calls and parameter digest, on rank 0."""
        n_calls = 0 if self.last_completed_itr is None else self.last_completed_itr + 1
        summary = dict(optimize_calls=n_calls, digest=state_digest(self.agent.state_dict()))
        try:
            gathered = gather_objects(summary, dst=0, group=self._opt_group)
        except Exception as error:  # noqa: BLE001 - a rank failing at the very end.
            self.logger.log(f"WARNING: could not gather the optimizer ranks' parameter digests "
                            f"({type(error).__name__}: {error}).")
            return
        self.rank_optimize_calls = [item["optimize_calls"] for item in gathered]
        self.rank_digests = [item["digest"] for item in gathered]
        differ = [r for r, d in enumerate(self.rank_digests) if d != self.rank_digests[0]]
        if differ:
            self.logger.log(f"WARNING: the agent's parameters on optimizer rank(s) {differ} differ "
                            "from rank 0's (a parameter trained outside DistributedDataParallel?).")
