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

The package: :mod:`.rank` (being a rank: process group, batch scaling, state sync,
statistics at log points), :mod:`.launch` (rank 0 starting, watching and stopping
ranks 1.., and their entry point :func:`run_sync_rank`) and :mod:`.runner` (the
classes).
"""
from rlframe.runners.sync_rl.launch import (FAILURE_GRACE_S, JOIN_TIMEOUT_S, STOP_TIMEOUT_S,
                                           SyncRankLauncher, run_sync_rank)
from rlframe.runners.sync_rl.rank import BATCH_SCALINGS, SyncRank, SyncRlError
from rlframe.runners.sync_rl.runner import (SyncRl, SyncRlEval, SyncRlMixin, SyncWorker,
                                           SyncWorkerEval, SyncWorkerMixin)

__all__ = ["BATCH_SCALINGS", "FAILURE_GRACE_S", "JOIN_TIMEOUT_S", "STOP_TIMEOUT_S", "SyncRank",
           "SyncRankLauncher", "SyncRl", "SyncRlError", "SyncRlEval", "SyncRlMixin",
           "SyncWorker", "SyncWorkerEval", "SyncWorkerMixin", "run_sync_rank"]
