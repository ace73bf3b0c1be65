"""The synchronous runners: :class:`SyncRlMixin` (arguments, checks, shutdown) joins
being a rank (:mod:`.rank`) and rank 0's starting of ranks 1.. (:mod:`.launch`) onto
:class:`MinibatchRl` / :class:`MinibatchRlEval`."""
from __future__ import annotations

import gc
from multiprocessing.process import BaseProcess
from typing import Any

import torch.distributed as dist

from rlframe.agents.base import unwrap_ddp
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.runners.sync_rl.launch import JOIN_TIMEOUT_S, SyncRankLauncher
from rlframe.runners.sync_rl.rank import BATCH_SCALINGS, SyncRank
from rlframe.utils.distributed import torchrun_env
from rlframe.utils.launching.pinning import check_affinity, check_cuda_device
from rlframe.utils.processes import ChildSupervisor
from rlframe.utils.synchronize import check_start_method


class SyncRlMixin(SyncRank, SyncRankLauncher):
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

    def __init__(self, *, affinity: dict | list[dict] | tuple[dict, ...] | None = None,
                 start_method: str | None = None, pg_timeout: float = 1800.,
                 batch_scaling: str = "weak", **kwargs: Any):
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
        self.workers: list[BaseProcess] = []
        self._supervisor: ChildSupervisor | None = None
        if self.is_rank0 and self.torchrun is None and self.world_size > 1:
            self._check_picklable()
        self._ctrl_group: dist.ProcessGroup | None = None
        self._failure: str | None = None
        self._training = False
        self.rank_digests: list[str] = []

    # ------------------------------------------------------------------ validation
    def _resolve_affinity(self, affinity: object) -> dict:
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

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Shut the sampler down, then (rank 0) ranks 1.., then the process group."""
        completed = getattr(self, "_completed", False)
        self._look_for_failure_on_collective_error()
        try:
            super().shutdown()
        finally:
            self._training = False
            self._end_watchdog()
            if completed:
                self._stop_workers(join_s=JOIN_TIMEOUT_S)  # They end by themselves.
            unwrap_ddp(self.agent)
            gc.collect()  # DDP's reducers go while their process group still exists.
            if dist.is_initialized():
                # Closes this rank's connections: ranks waiting in a collective get an error.
                dist.destroy_process_group()
            self._stop_workers(join_s=0.)


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

