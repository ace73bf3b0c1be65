"""Rank 0's job in a synchronous run started without torchrun: start ranks 1.. on this
machine, watch them, name the one that failed and stop them in order (a part of
:class:`~rlframe.runners.sync_rl.SyncRlMixin`); and :func:`run_sync_rank`, their entry
point."""
from __future__ import annotations

import copy
import gc
import multiprocessing as mp
import pickle
from multiprocessing.process import BaseProcess

import torch.distributed as dist

from rlframe.runners.minibatch_rl import MinibatchRlBase
from rlframe.runners.sync_rl.rank import SyncRank, SyncRlError
from rlframe.utils.distributed import (init_process_group_watched, is_collective_error,
                                       master_store)
from rlframe.utils.logging import logger
from rlframe.utils.processes import (ChildSupervisor, QueueLike, die_with_parent,
                                     interrupt_main_thread, report_error)
from rlframe.utils.seed import make_seed
from rlframe.utils.synchronize import (autograd_fork_problem, cuda_fork_problem,
                                      process_context, start_method_without_fork)

JOIN_TIMEOUT_S = 30.  # Ranks 1.. finishing after rank 0 at the end of a run.
# Ranks 1.. stopping after SIGTERM, before SIGKILL (a rank blocked in a collective
# runs no signal handler until the collective fails).
STOP_TIMEOUT_S = 3.
FAILURE_GRACE_S = 10.  # A rank died: time for rank 0's collective to fail by itself.
WATCH_POLL_S = 0.2  # How often rank 0's watchdog looks at ranks 1..


class SyncRankLauncher(MinibatchRlBase):
    """Rank 0 starting, watching and stopping ranks 1..; not a runner by itself."""

    rank: int
    world_size: int
    start_method: str | None
    pg_timeout: float
    affinities: list[dict] | None
    workers: list[BaseProcess]
    _supervisor: ChildSupervisor | None
    _failure: str | None
    _training: bool

    def _check_picklable(self) -> None:
        method = self.start_method or mp.get_context().get_start_method()
        if method == "fork":
            return
        try:
            pickle.dumps(self._worker_copy())
        except Exception as error:  # noqa: BLE001 - any pickling failure reads the same.
            raise TypeError(
                f"{type(self).__name__} starts ranks 1.. with {method!r}, which sends them "
                f"the runner (algo, agent, sampler) by pickle, but it does not pickle "
                f"({type(error).__name__}: {error}). Define env factories and models at "
                "module level, or use start_method='fork' on Linux.") from None

    def _worker_copy(self) -> SyncRankLauncher:
        """The runner as ranks 1.. receive it: no callbacks (they run on rank 0), no
        supervisor (ranks 1.. start no ranks)."""
        worker = copy.copy(self)
        worker.callbacks = []
        worker.workers = []
        worker._supervisor = None
        return worker

    @property
    def _monitor(self) -> object | None:
        """Rank 0's watchdog thread, while ranks 1.. run."""
        return None if self._supervisor is None else self._supervisor.watchdog

    def _start_ranks(self, backend: str) -> dist.ProcessGroup | None:
        """Seed, pick the process group's address, start ranks 1.. and join the group."""
        self._base_seed = make_seed() if self.seed is None else self.seed
        self.seed = self._base_seed
        master_cpus = self.affinity.get("master_cpus") or [0]
        first_cpu = master_cpus[0] if isinstance(master_cpus[0], int) else 0
        # Listening before ranks 1.. start: they cannot meet another run's rank 0.
        store = master_store(first_cpu % 100, self.world_size, self.pg_timeout)
        self._init_method = f"tcp://127.0.0.1:{store.port}"
        self._launch_workers()
        return self._join_watching_workers(backend, store)

    def _join_watching_workers(self, backend: str, store: dist.TCPStore
                               ) -> dist.ProcessGroup | None:
        """Rank 0 joins the process group (through its ``store``) in a thread while it
        watches ranks 1..: one that dies before joining would otherwise keep it waiting
        for ``pg_timeout``."""
        def check() -> None:
            failure = self._find_failure()
            if failure is not None:
                self._failure = failure
                raise SyncRlError(f"{failure} (before joining the process group)")
        return init_process_group_watched(backend, 0, self.world_size, self._init_method,
                                          self.pg_timeout, check, store=store)

    def launch_workers(self) -> None:
        """rlpyt's name: rank 0 starts ranks 1.. (called by :meth:`startup`)."""
        self._launch_workers()

    def _ranks_start_method(self) -> str | None:
        """``start_method``, or ``"forkserver"`` in place of a default fork (logged) where
        a forked rank would fail: ranks on a GPU when this process has initialized CUDA,
        or any rank once a backward pass here started autograd's device threads (torch
        sees a GPU; every rank runs backward passes).

        Raises:
            RuntimeError: ``start_method="fork"`` was asked for in such a process.
        """
        assert self.affinities is not None  # Not under torchrun.
        why = (cuda_fork_problem([affinity.get("cuda_idx") for affinity in self.affinities[1:]])
               or autograd_fork_problem())
        return start_method_without_fork(self.start_method, type(self).__name__, why)

    def _launch_workers(self) -> None:
        if self.workers:
            return
        assert self.affinities is not None  # Not under torchrun.
        ctx = process_context(self._ranks_start_method())
        supervisor = self._supervisor = ChildSupervisor(ctx)
        for rank in range(1, self.world_size):
            supervisor.add(f"rank {rank}", run_sync_rank, daemon=False,
                           process_name=f"SyncRl-rank{rank}",
                           kwargs=dict(runner=self._worker_copy(), rank=rank,
                                       init_method=self._init_method,
                                       error_queue=supervisor.error_queue))
        supervisor.start()
        self.workers = list(supervisor.children.values())
        self.logger.log(f"Started ranks 1..{self.world_size - 1} (pids "
                        f"{[p.pid for p in self.workers]}); process group at {self._init_method}.")
        if self.workers:
            supervisor.start_watchdog(lambda: self._training, FAILURE_GRACE_S,
                                      self._stop_for_failure, poll_s=WATCH_POLL_S,
                                      name="SyncRl-monitor")

    def _stop_for_failure(self, failure: str) -> None:
        """The watchdog's last resort: a rank died and rank 0 did not notice within
        FAILURE_GRACE_S (e.g. it is evaluating)."""
        self._failure = failure
        self.logger.log(f"ERROR: {failure} Stopping the run.")
        interrupt_main_thread(real_signal=False)

    def _find_failure(self, wait_s: float = 0.) -> str | None:
        """A message naming the rank that failed, if any (waiting up to ``wait_s`` for a
        dying rank to show); see :meth:`ChildSupervisor.find_failure`."""
        if self._supervisor is None:
            return None
        return self._supervisor.find_failure(wait_s)

    def _look_for_failure_on_collective_error(self) -> None:
        """Rank 0 ends with a broken process group: find the rank that broke it."""
        error = getattr(self, "_ending_error", None)
        if (self.workers and self._failure is None and error is not None
                and is_collective_error(error)):
            self._failure = self._find_failure(wait_s=5.)

    def _end_watchdog(self) -> None:
        """Wait for the watchdog, which sees ``_training`` False within WATCH_POLL_S."""
        monitor = self._monitor
        if monitor is not None:
            monitor.join()

    def _stop_workers(self, join_s: float) -> None:
        """Stop ranks 1..: wait up to ``join_s`` seconds, then SIGTERM, SIGKILL."""
        if self._supervisor is not None:
            self._supervisor.stop(join_s, STOP_TIMEOUT_S)
        self.workers = []


def run_sync_rank(runner: SyncRank, rank: int, init_method: str,
                  error_queue: QueueLike) -> None:
    """Entry point of rank ``rank`` started by rank 0 (importable for any start method).

    Runs quietly (rank 0 logs) and reports an exception's traceback to rank 0
    through ``error_queue`` (a :class:`~rlframe.utils.processes.ChildReport` named
    ``"rank <rank>"``) before exiting with code 1.
    """
    die_with_parent()
    # Objects inherited from rank 0 by fork are never collected here: their destructors
    # may wait on threads that exist only in rank 0 (e.g. an earlier run's gloo group).
    gc.freeze()
    quiet = logger.quiet_logger()
    try:
        with logger.use_logger(quiet):
            runner._become_rank(rank, init_method)
            runner.train()
    except BaseException as error:  # noqa: BLE001 - reported to rank 0, then exit 1.
        if not isinstance(error, (KeyboardInterrupt, SystemExit)):
            cause = error.__cause__ if isinstance(error, SyncRlError) else error
            report_error(error_queue, f"rank {rank}",
                         broke=cause is not None and is_collective_error(cause))
        else:
            error_queue.close()  # type: ignore[attr-defined]
            error_queue.join_thread()  # type: ignore[attr-defined]
        raise SystemExit(1) from None
