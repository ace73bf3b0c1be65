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

Modules: :mod:`.control` (the shared :class:`AsyncControl` and the optimizer
ranks' :class:`OptimizerBarrier`), :mod:`.schedule` (the throttle schedule),
:mod:`.children` (the sampler's and the memory copiers' entry points),
:mod:`.optimizer` (optimizer ranks), :mod:`.runner` (:class:`AsyncRlBase`,
:class:`AsyncRl`, :class:`AsyncRlEval`), with the parts of :class:`AsyncRlBase`
in :mod:`.launch` (startup), :mod:`.supervise` (failures, shutdown) and
:mod:`.diagnostics` (logging).
"""
from rlframe.runners.async_rl.children import (_sampler_loop, _wait, _wait_for_optimizer,
                                               memory_copier, run_async_sampler,
                                               run_async_sampler_eval)
from rlframe.runners.async_rl.control import (POLL_S, AsyncControl, CopierControl,
                                              OptimizerBarrier, build_ctrl)
from rlframe.runners.async_rl.optimizer import (AsyncOptWorker, _check_optimizer_devices,
                                                prepare_optimizer_rank)
from rlframe.runners.async_rl.runner import (ALGO_ASYNC_ATTRIBUTES, AsyncRl, AsyncRlBase,
                                             AsyncRlEval)
from rlframe.runners.async_rl.schedule import (OPT_POLL_S, RATIO_CHECK_CALLS, SAMPLER_WAIT,
                                               THROTTLE_WAIT, _poll_until, async_n_itr,
                                               throttle_schedule)
from rlframe.runners.async_rl.supervise import (FAILURE_GRACE_S, JOIN_TIMEOUT_S, RANK_STOP_S,
                                                AsyncRlError, _broke_ranks)

__all__ = ["ALGO_ASYNC_ATTRIBUTES", "AsyncControl", "AsyncOptWorker", "AsyncRl", "AsyncRlBase",
           "AsyncRlError", "AsyncRlEval", "CopierControl", "FAILURE_GRACE_S", "JOIN_TIMEOUT_S",
           "OPT_POLL_S", "OptimizerBarrier", "POLL_S", "RANK_STOP_S", "RATIO_CHECK_CALLS",
           "SAMPLER_WAIT", "THROTTLE_WAIT", "async_n_itr", "build_ctrl", "memory_copier",
           "prepare_optimizer_rank", "run_async_sampler", "run_async_sampler_eval",
           "throttle_schedule"]
