"""Synchronous multi-process runners: data-parallel training over torch.distributed.

Every rank samples with its own sampler (and seed), trains the same agent on its
own batch, and DistributedDataParallel averages the gradients, so all ranks
hold the same parameters. Rank 0 logs, evaluates and writes snapshots; the
ranks meet at every log point, where rank 0 receives the other ranks'
completed trajectories.

Two ways to start the ranks run the same script unchanged:

* ``python train.py``: ``affinity`` is a list of dicts, one per rank; rank 0 is
  the calling process and starts ranks 1.. itself (on this machine).
* ``torchrun --nnodes=N --nproc_per_node=M train.py``: every process joins
  torchrun's process group; ``affinity`` is this process's dict, or a list
  indexed by ``LOCAL_RANK``.

Each rank has its own sampler. A RaySampler with ``ray_address=None`` starts a
local Ray of its rank's own and stops it when the rank ends (also when it or
another rank fails); with a cluster address every rank's workers join that one
cluster.
"""
from __future__ import annotations

import _thread
import copy
import gc
import multiprocessing as mp
import pickle
import threading
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from rlframe.agents.base import unwrap_ddp
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.collections import BatchSpec
from rlframe.utils.distributed import (broadcast_object, broadcast_state, gather_objects,
                                       init_process_group, init_process_group_watched,
                                       is_collective_error, state_digest, torchrun_env)
from rlframe.utils.launching.pinning import check_affinity, check_cuda_device
from rlframe.utils.logging import logger
from rlframe.utils.seed import make_seed, set_seed
from rlframe.utils.synchronize import (check_start_method, cuda_fork_problem, die_with_parent,
                                       drain_queue, find_port, start_method_without_fork)

BATCH_SCALINGS = ("weak", "strong")
JOIN_TIMEOUT_S = 30.  # Ranks 1.. finishing after rank 0 at the end of a run.
# Ranks 1.. stopping after SIGTERM, before SIGKILL (a rank blocked in a collective
# runs no signal handler until the collective fails).
STOP_TIMEOUT_S = 3.
FAILURE_GRACE_S = 10.  # A rank died: time for rank 0's collective to fail by itself.


class SyncRlError(RuntimeError):
    """A rank of a synchronous run failed; the message names it."""


class SyncRlMixin:
    """What the synchronous runners add to :class:`MinibatchRl` / :class:`MinibatchRlEval`.

    Args:
        affinity: a list of affinity dicts, one per rank (``world_size`` is its
            length; see :func:`~rlframe.utils.launching.affinity.make_sync_affinity`
            for CPU machines and ``make_affinity(n_gpu=K, gpu_per_run=K)`` for
            GPUs). Under torchrun: this process's dict, or a list indexed by
            ``LOCAL_RANK``.
        start_method: how rank 0 starts ranks 1.. (``"fork"``, ``"forkserver"``,
            ``"spawn"``; None: the multiprocessing default). Under spawn and
            forkserver the runner, with its algo, agent and sampler, must pickle.
            A process that has already run Ray cannot fork a rank that starts
            Ray again (a RaySampler's): use ``"forkserver"`` or ``"spawn"`` there.
        pg_timeout: seconds a rank waits in a collective (e.g. while rank 0
            evaluates) before it gives up with an error.
        batch_scaling: ``"weak"`` (rlpyt's): the sampler's ``batch_B`` and the
            algorithm's ``batch_size`` are per rank, so the effective batch is
            ``world_size`` times larger. ``"strong"``: they are totals, split
            evenly over the ranks (each must be a multiple of ``world_size``),
            so the hyperparameters of a one-process run keep their meaning.
        **kwargs: the runner's other arguments (``algo``, ``agent``, ``sampler``,
            ``n_steps``, ``seed``, ``log_interval_steps``, ``callbacks``, ...).
            Rank ``r`` is seeded ``seed + 100 * r``. Callbacks run on rank 0 only.
    """

    def __init__(self, *, affinity: Any = None, start_method: str | None = None,
                 pg_timeout: float = 1800., batch_scaling: str = "weak", **kwargs: Any):
        self.torchrun = torchrun_env()
        own_affinity = self._resolve_affinity(affinity)
        if batch_scaling not in BATCH_SCALINGS:
            raise ValueError(f"batch_scaling must be one of {BATCH_SCALINGS}, got "
                             f"{batch_scaling!r}.")
        self.batch_scaling = batch_scaling
        self.start_method = check_start_method(start_method)
        if not pg_timeout > 0:
            raise ValueError(f"pg_timeout must be a positive number of seconds, got "
                             f"{pg_timeout!r}.")
        self.pg_timeout = float(pg_timeout)
        super().__init__(affinity=own_affinity, **kwargs)
        self._check_batch_scaling()
        if self.rank == 0 and self.torchrun is None and self.world_size > 1:
            self._check_picklable()
        self.workers: list = []
        self._ctrl_group: Any = None
        self._error_queue: Any = None
        # Ranks' reports taken from the queue: (traceback, whether the group broke). Kept,
        # since rank 0's watchdog thread and its main thread both look for the failure
        # (each dict.update is atomic; the queue is thread-safe).
        self._error_reports: dict[int, tuple[str, bool]] = {}
        self._failure: str | None = None
        self._monitor: threading.Thread | None = None
        self._training = False
        self.rank_digests: list[str] = []

    # ------------------------------------------------------------------ validation
    def _resolve_affinity(self, affinity: Any) -> dict:
        """Set ``rank``, ``world_size`` and ``affinities``; return this rank's dict."""
        name = type(self).__name__
        if self.torchrun is not None:
            self.rank = self.torchrun["rank"]
            self.world_size = self.torchrun["world_size"]
            if not isinstance(affinity, (list, tuple)):
                self.affinities = None
                return check_affinity(affinity)
            local_rank = self.torchrun["local_rank"]
            self._check_affinity_list(affinity)
            if local_rank >= len(affinity):
                raise ValueError(f"{name}: LOCAL_RANK={local_rank}, but affinity lists only "
                                 f"{len(affinity)} dicts (one per process of this node).")
            self.affinities = list(affinity)
            return affinity[local_rank]
        if not isinstance(affinity, (list, tuple)) or not affinity:
            raise TypeError(
                f"{name}: affinity must be a list of affinity dicts, one per rank "
                f"(world_size = its length), e.g. make_sync_affinity(n_rank=2) on a CPU "
                f"machine; got {affinity!r}. (Under torchrun one dict per process works too.)")
        self._check_affinity_list(affinity)
        for i, entry in enumerate(affinity):
            check_cuda_device(entry.get("cuda_idx"), f"affinity[{i}]['cuda_idx']")
        self.rank, self.world_size = 0, len(affinity)
        self.affinities = list(affinity)
        return affinity[0]

    @staticmethod
    def _check_affinity_list(affinity: list | tuple) -> None:
        for i, entry in enumerate(affinity):
            check_affinity(entry, name=f"affinity[{i}]")
        keys = [set(entry) for entry in affinity]
        for i, entry_keys in enumerate(keys[1:], start=1):
            if entry_keys != keys[0]:
                raise ValueError(
                    f"affinity[{i}] has keys {sorted(entry_keys)} but affinity[0] has "
                    f"{sorted(keys[0])}: every rank's dict must have the same keys (missing "
                    f"in affinity[{i}]: {sorted(keys[0] - entry_keys)}, extra: "
                    f"{sorted(entry_keys - keys[0])}).")
        on_gpu = [entry.get("cuda_idx") is not None for entry in affinity]
        if any(on_gpu) and not all(on_gpu):
            raise ValueError("affinity: either every rank has a cuda_idx or none has; got "
                             f"cuda_idx {[entry.get('cuda_idx') for entry in affinity]}.")

    def _check_batch_scaling(self) -> None:
        if self.batch_scaling != "strong":
            return
        ws = self.world_size
        batch_B = self.sampler.batch_spec.B
        if batch_B % ws:
            raise ValueError(f"batch_scaling='strong' splits the sampler's batch_B={batch_B} "
                             f"over world_size={ws} ranks: it must be a multiple of {ws}.")
        batch_size = getattr(self.algo, "_batch_size", None)
        if batch_size is not None and batch_size % ws:
            raise ValueError(f"batch_scaling='strong' splits {type(self.algo).__name__}'s "
                             f"batch_size={batch_size} over world_size={ws} ranks: it must "
                             f"be a multiple of {ws}.")

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

    def _worker_copy(self) -> SyncRlMixin:
        """The runner as ranks 1.. receive it: no callbacks (they run on rank 0)."""
        worker = copy.copy(self)
        worker.callbacks = []
        worker.workers = []
        worker._monitor = None
        return worker

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        """Train on every rank; rank 0 starts ranks 1.. unless torchrun did.

        Raises:
            SyncRlError: a rank failed (an exception, or killed); the message
                names it and, if it raised, holds its traceback.
        """
        try:
            super().train()
        except BaseException as error:
            failure = self._failure
            if failure is None and self.rank > 0 and is_collective_error(error):
                first_line = str(error).splitlines()[0] if str(error) else ""
                failure = (f"rank {self.rank}: another rank failed or stopped, so the "
                           f"process group broke ({type(error).__name__}: {first_line})")
            if failure is not None:
                raise SyncRlError(failure) from error
            raise

    def save_final_snapshot(self, error: BaseException) -> None:
        """Remember how the run ends (to name a failed rank), then snapshot (rank 0)."""
        self._ending_error = error
        super().save_final_snapshot(error)

    def startup(self) -> int:
        """Start (or join) the ranks, then the usual startup; returns n_itr."""
        self._training = True
        self._init_distributed()
        self._scale_batches()
        if self.rank > 0 and self._eval:
            self.sampler.eval_n_envs = 0  # Only rank 0 evaluates.
        n_itr = super().startup()  # Rank 0 loads the snapshot of a resumed run.
        self._sync_initial_state()
        self._sync_resumed_state()
        dist.barrier(group=self._ctrl_group)
        self._start_time = self._last_time = time.time()
        return n_itr

    def _init_distributed(self) -> None:
        backend = "gloo" if self.affinity.get("cuda_idx") is None else "nccl"
        if backend == "nccl":
            torch.cuda.set_device(self.affinity["cuda_idx"])
        if self.torchrun is not None:
            self._ctrl_group = init_process_group(backend, self.rank, self.world_size,
                                                  "env://", self.pg_timeout)
            seed = make_seed() if self.seed is None else self.seed
            self._base_seed = broadcast_object(seed, group=self._ctrl_group)
            self.seed = self._base_seed + 100 * self.rank
            logger.log(f"Joined torchrun's process group: rank {self.rank} of "
                       f"{self.world_size}, backend {backend}.")
            return
        if self.rank == 0:  # Ranks 1.. arrive here with seed and init_method set.
            self._base_seed = make_seed() if self.seed is None else self.seed
            self.seed = self._base_seed
            master_cpus = self.affinity.get("master_cpus") or [0]
            first_cpu = master_cpus[0] if isinstance(master_cpus[0], int) else 0
            self._init_method = f"tcp://127.0.0.1:{find_port(offset=first_cpu % 100)}"
            self._launch_workers()
            self._ctrl_group = self._join_watching_workers(backend)
        else:
            self._ctrl_group = init_process_group(backend, self.rank, self.world_size,
                                                  self._init_method, self.pg_timeout)

    def _join_watching_workers(self, backend: str) -> Any:
        """Rank 0 joins the process group in a thread while it watches ranks 1..: one
        that dies before joining would otherwise keep it waiting for ``pg_timeout``."""
        def check() -> None:
            failure = self._find_failure()
            if failure is not None:
                self._failure = failure
                raise SyncRlError(f"{failure} (before joining the process group)")
        return init_process_group_watched(backend, 0, self.world_size, self._init_method,
                                          self.pg_timeout, check)

    def launch_workers(self) -> None:
        """rlpyt's name: rank 0 starts ranks 1.. (called by :meth:`startup`)."""
        self._launch_workers()

    def _launch_workers(self) -> None:
        if self.workers:
            return
        why = cuda_fork_problem([affinity.get("cuda_idx") for affinity in self.affinities[1:]])
        ctx = mp.get_context(start_method_without_fork(self.start_method, type(self).__name__,
                                                       why))
        self._error_queue = ctx.Queue()
        self._error_reports = {}
        for rank in range(1, self.world_size):
            worker = self._worker_copy()
            process = ctx.Process(target=run_sync_rank, daemon=False, name=f"SyncRl-rank{rank}",
                                  kwargs=dict(runner=worker, rank=rank,
                                              init_method=self._init_method,
                                              error_queue=self._error_queue))
            process.start()
            self.workers.append(process)
        logger.log(f"Started ranks 1..{self.world_size - 1} (pids "
                   f"{[p.pid for p in self.workers]}); process group at {self._init_method}.")
        if self.workers:
            self._monitor = threading.Thread(target=self._watch_workers, daemon=True,
                                             name="SyncRl-monitor")
            self._monitor.start()

    def _become_rank(self, rank: int, init_method: str) -> None:
        """In a process started by rank 0: take rank ``rank``'s place."""
        self.rank = rank
        self.affinity = self.affinities[rank]
        self.seed = self.seed + 100 * rank
        self._init_method = init_method

    def _scale_batches(self) -> None:
        """Strong scaling: this rank's share of the given totals (kept, so that a second
        ``train()`` does not split them again)."""
        if self.batch_scaling != "strong":
            return
        ws = self.world_size
        if not hasattr(self, "_total_batches"):
            self._total_batches = (self.sampler.batch_spec,
                                   getattr(self.algo, "_batch_size", None))
        spec, batch_size = self._total_batches
        self.sampler.batch_B = spec.B // ws
        self.sampler.batch_spec = BatchSpec(spec.T, spec.B // ws)
        if batch_size is not None:
            self.algo._batch_size = batch_size // ws
        logger.log(f"Strong scaling: each of {ws} ranks samples batch_B={spec.B // ws}.")

    def _sync_initial_state(self) -> None:
        """Give every rank rank 0's agent state (DistributedDataParallel broadcasts the
        trained models; this covers target networks and buffers too)."""
        broadcast_state(self.agent, src=0, group=self._ctrl_group)

    def _sync_resumed_state(self) -> None:
        """A resumed run: every rank continues at rank 0's iteration with its optimizer
        state and counters (the weights came with :meth:`_sync_initial_state`). Ranks
        1.. start fresh episodes (and an empty replay) and draw from generators seeded
        anew from their seed and that iteration."""
        self.start_itr = broadcast_object(self.start_itr, group=self._ctrl_group)
        if self.start_itr == 0:
            return
        state = (self.algo.optim_state_dict(), self.algo.state_dict()) if self.rank == 0 \
            else None
        optim_state, algo_state = broadcast_object(state, group=self._ctrl_group)
        if self.rank > 0:
            self.algo.load_optim_state_dict(optim_state)
            self.algo.load_state_dict(algo_state)
            set_seed(self.seed + 7919 * self.start_itr)
            self.last_completed_itr = self.start_itr - 1

    # ------------------------------------------------------------------ log points
    def before_training(self) -> None:
        if self.rank == 0:
            super().before_training()
        self._share_stop_request()

    def at_log_point(self, itr: int) -> None:
        """Rank 0 receives the others' trajectories and parameter digests, logs
        (and evaluates); then every rank learns whether a callback stopped the run."""
        payload = (self._unsent_traj_infos if self.rank > 0 else [],
                   state_digest(self.agent.state_dict()))
        gathered = gather_objects(payload, dst=0, group=self._ctrl_group)
        self._unsent_traj_infos = []
        if self.rank == 0:
            self._receive_from_ranks(gathered)
            super().at_log_point(itr)
        self._share_stop_request()

    def _share_stop_request(self) -> None:
        self._stop_reason = broadcast_object(self._stop_reason, group=self._ctrl_group)

    def _receive_from_ranks(self, gathered: list) -> None:
        traj_infos = [info for infos, _ in gathered[1:] for info in infos]
        self._cum_completed_trajs += len(traj_infos)
        if isinstance(self, MinibatchRl):
            self._traj_infos.extend(traj_infos)
            self._new_completed_trajs += len(traj_infos)
        self.rank_digests = [digest for _, digest in gathered]
        if len(set(self.rank_digests)) > 1:
            differ = [r for r, d in enumerate(self.rank_digests) if d != self.rank_digests[0]]
            logger.log(f"WARNING: the agent's parameters on rank(s) {differ} differ from rank "
                       "0's (a parameter trained outside DistributedDataParallel?).")

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._unsent_traj_infos: list = []
        if self.rank > 0:
            self._stop_pbar()

    def _start_pbar(self) -> None:
        if self.rank == 0:
            super()._start_pbar()

    def store_diagnostics(self, itr: int, traj_infos: list, opt_info: Any) -> None:
        if self.rank == 0:
            super().store_diagnostics(itr, traj_infos, opt_info)
        else:
            self._unsent_traj_infos.extend(traj_infos)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Shut the sampler down, then (rank 0) ranks 1.., then the process group."""
        completed = getattr(self, "_completed", False)
        error = getattr(self, "_ending_error", None)
        if (self.rank == 0 and self.workers and self._failure is None
                and error is not None and is_collective_error(error)):
            self._failure = self._find_failure(wait_s=5.)
        try:
            super().shutdown()
        finally:
            self._training = False
            if self._monitor is not None:  # It sees _training False within 0.2 s.
                self._monitor.join()
                self._monitor = None
            if self.rank == 0 and completed:
                self._stop_workers(join_s=JOIN_TIMEOUT_S)  # They end by themselves.
            unwrap_ddp(self.agent)
            gc.collect()  # DDP's reducers go while their process group still exists.
            if dist.is_initialized():
                # Closes this rank's connections: ranks waiting in a collective get an error.
                dist.destroy_process_group()
            if self.rank == 0:
                self._stop_workers(join_s=0.)

    def _stop_workers(self, join_s: float) -> None:
        deadline = time.time() + join_s
        for process in self.workers:
            process.join(max(0., deadline - time.time()))
        for process in self.workers:
            if process.is_alive():
                process.terminate()
        deadline = time.time() + STOP_TIMEOUT_S
        for process in self.workers:
            process.join(max(0., deadline - time.time()))
            if process.is_alive():
                process.kill()
                process.join()
        if self._error_queue is not None:
            self._error_queue.close()
            self._error_queue.join_thread()
        self.workers = []

    def _find_failure(self, wait_s: float = 0.) -> str | None:
        """A message naming the rank that failed, if any (waiting up to ``wait_s`` for a
        dying rank to be reaped). A rank's own error comes first, then a rank that
        died without one (killed), then ranks that only saw the process group break."""
        deadline = time.time() + wait_s
        reports = self._error_reports
        while True:
            reports.update({rank: (text, broke) for rank, text, broke
                            in drain_queue(self._error_queue)})
            dead = [(rank, p) for rank, p in enumerate(self.workers, start=1)
                    if p.exitcode not in (None, 0) and rank not in reports]
            if dead or reports or time.time() >= deadline:
                break
            time.sleep(0.05)
        own_errors = sorted(rank for rank, (_, broke) in reports.items() if not broke)
        if own_errors:
            return f"rank {own_errors[0]} failed:\n{reports[own_errors[0]][0]}"
        if dead:
            rank, process = dead[0]
            code = process.exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return f"rank {rank} (pid {process.pid}) {how}."
        if reports:
            rank = min(reports)
            return f"rank {rank} failed:\n{reports[rank][0]}"
        return None

    def _watch_workers(self) -> None:
        """Rank 0's watchdog: when a rank dies, interrupt rank 0 if its own collectives
        have not failed within FAILURE_GRACE_S (e.g. it is evaluating)."""
        while self._training:
            if any(p.exitcode not in (None, 0) for p in self.workers):
                failure = self._find_failure(wait_s=1.)
                deadline = time.time() + FAILURE_GRACE_S
                while self._training and time.time() < deadline:
                    time.sleep(0.1)
                if self._training:
                    self._failure = failure
                    logger.log(f"ERROR: {failure} Stopping the run.")
                    _thread.interrupt_main()
                return
            time.sleep(0.2)


class SyncRl(SyncRlMixin, MinibatchRl):
    """Data-parallel :class:`MinibatchRl`: online statistics of every rank's
    training trajectories. See :class:`SyncRlMixin` for the arguments."""


class SyncRlEval(SyncRlMixin, MinibatchRlEval):
    """Data-parallel :class:`MinibatchRlEval`: rank 0 evaluates the agent at every
    log point while the other ranks wait. See :class:`SyncRlMixin` for the arguments."""


# rlpyt's names of the classes its ranks 1.. ran. Here every rank runs the runner's own
# class (so a subclass of SyncRl runs on every rank), and these are the same classes.
SyncWorkerMixin = SyncRlMixin
SyncWorker = SyncRl
SyncWorkerEval = SyncRlEval


def run_sync_rank(runner: SyncRlMixin, rank: int, init_method: str, error_queue: Any) -> None:
    """Entry point of rank ``rank`` started by rank 0 (importable for any start method).

    Runs quietly (rank 0 logs) and reports an exception's traceback to rank 0
    through ``error_queue`` before exiting with code 1.
    """
    die_with_parent()
    # Objects inherited from rank 0 by fork are never collected here: their destructors
    # may wait on threads that exist only in rank 0 (e.g. an earlier run's gloo group).
    gc.freeze()
    quiet = logger.Logger()
    quiet.disable()
    try:
        with logger.use_logger(quiet):
            runner._become_rank(rank, init_method)
            runner.train()
    except BaseException as error:  # noqa: BLE001 - reported to rank 0, then exit 1.
        if not isinstance(error, (KeyboardInterrupt, SystemExit)):
            cause = error.__cause__ if isinstance(error, SyncRlError) else error
            error_queue.put((rank, traceback.format_exc(),
                             cause is not None and is_collective_error(cause)))
        error_queue.close()
        error_queue.join_thread()
        raise SystemExit(1) from None
