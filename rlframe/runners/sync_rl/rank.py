"""Being one rank of a synchronous run: the process group, strong batch scaling, rank
0's state given to every rank, and rank 0 gathering the others' statistics at every
log point (a part of :class:`~rlframe.runners.sync_rl.SyncRlMixin`)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from rlframe.runners.minibatch_rl import MinibatchRlBase
from rlframe.samplers.collections import BatchSpec, TrajInfo
from rlframe.utils.distributed import (broadcast_object, broadcast_state, gather_objects,
                                       init_process_group, is_collective_error, state_digest)
from rlframe.utils.seed import make_seed, set_seed

BATCH_SCALINGS = ("weak", "strong")


class SyncRlError(RuntimeError):
    """A rank of a synchronous run failed; the message names it."""


class SyncRank(MinibatchRlBase):
    """What every rank of a synchronous run does; not a runner by itself.

    Rank 0 also starts and watches ranks 1.. (:class:`SyncRankLauncher`, which
    supplies :meth:`_start_ranks`) unless torchrun started them.
    """

    rank: int
    world_size: int
    batch_scaling: str
    pg_timeout: float
    _failure: str | None
    _ctrl_group: dist.ProcessGroup | None

    @property
    def is_rank0(self) -> bool:
        """Whether this process is rank 0 (it logs, evaluates and saves)."""
        return self.rank == 0

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
            if failure is None and not self.is_rank0 and is_collective_error(error):
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
        if not self.is_rank0 and self.evaluation is not None:
            self.sampler.eval_n_envs = 0  # Only rank 0 evaluates.
        n_itr = super().startup()  # Rank 0 loads the snapshot of a resumed run.
        self._sync_initial_state()
        self._sync_resumed_state()
        dist.barrier(group=self._ctrl_group)
        self.stats.start_time = self.stats.last_time = time.time()
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
            self.logger.log(f"Joined torchrun's process group: rank {self.rank} of "
                            f"{self.world_size}, backend {backend}.")
        elif self.is_rank0:  # SyncRankLauncher's part.
            self._ctrl_group = self._start_ranks(backend)  # type: ignore[attr-defined]
        else:  # Started by rank 0, with seed and init_method set (_become_rank).
            self._ctrl_group = init_process_group(backend, self.rank, self.world_size,
                                                  self._init_method, self.pg_timeout)

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
        self.logger.log(f"Strong scaling: each of {ws} ranks samples batch_B={spec.B // ws}.")

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
        state = (self.algo.optim_state_dict(), self.algo.state_dict()) if self.is_rank0 \
            else None
        optim_state, algo_state = broadcast_object(state, group=self._ctrl_group)
        if not self.is_rank0:
            self.algo.load_optim_state_dict(optim_state)
            self.algo.load_state_dict(algo_state)
            set_seed(self.seed + 7919 * self.start_itr)
            self.last_completed_itr = self.start_itr - 1

    # ------------------------------------------------------------------ log points
    def before_training(self) -> None:
        """Rank 0 logs the untrained agent's evaluation; in a resumed run whose snapshot's
        row is missing, every rank takes part in writing it (rank 0 tells them)."""
        if self.is_rank0 and self.evaluation is not None:
            self.evaluation.before_training(self)
        if broadcast_object(self.is_rank0 and self.resumed_row_missing(),
                            group=self._ctrl_group):
            self.log_resumed_row()
        elif self.resumed_at_log_point():
            self.stats.start_row()  # Its row was written: the next row starts afresh.
        self._share_stop_request()

    def at_log_point(self, itr: int) -> None:
        """Rank 0 receives the others' trajectories and parameter digests, logs
        (and evaluates); then every rank learns whether a callback stopped the run."""
        payload = (self._unsent_traj_infos if not self.is_rank0 else [],
                   state_digest(self.agent.state_dict()))
        gathered = gather_objects(payload, dst=0, group=self._ctrl_group)
        self._unsent_traj_infos = []
        if gathered is not None:  # Rank 0.
            self._receive_from_ranks(gathered)
            super().at_log_point(itr)
        self._share_stop_request()

    def _share_stop_request(self) -> None:
        self._stop_reason = broadcast_object(self._stop_reason, group=self._ctrl_group)

    def _receive_from_ranks(self, gathered: list[tuple[list[TrajInfo], str]]) -> None:
        traj_infos = [info for infos, _ in gathered[1:] for info in infos]
        self.stats.cum_completed_trajs += len(traj_infos)
        self.stats.add_to_window(traj_infos)  # Online runners only (the others keep none).
        self.rank_digests = [digest for _, digest in gathered]
        if len(set(self.rank_digests)) > 1:
            differ = [r for r, d in enumerate(self.rank_digests) if d != self.rank_digests[0]]
            self.logger.log(f"WARNING: the agent's parameters on rank(s) {differ} differ from rank "
                            "0's (a parameter trained outside DistributedDataParallel?).")

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._unsent_traj_infos: list[TrajInfo] = []
        if not self.is_rank0:
            self._stop_pbar()

    def _start_pbar(self) -> None:
        if self.is_rank0:
            super()._start_pbar()

    def store_diagnostics(self, itr: int, traj_infos: list[TrajInfo], opt_info: object) -> None:
        if self.is_rank0:
            super().store_diagnostics(itr, traj_infos, opt_info)
        else:
            self._unsent_traj_infos.extend(traj_infos)
