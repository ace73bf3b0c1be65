"""A SyncRl PPO run of 2 ranks, resumable, for the resume tests:

    python resume_sync_script.py DIE_RANK DIE_ITR [interrupt]
    torchrun --standalone --nproc_per_node=2 --max-restarts=1 resume_sync_script.py 1 13

Rank DIE_RANK kills itself with SIGKILL after iteration DIE_ITR, in the first attempt
only (torchrun's restarts, and runs started again by hand, train to the end); with
``interrupt``, rank 0 raises KeyboardInterrupt (as Ctrl-C) right after its snapshot of
log point DIE_ITR, before that row. The run
directory is ./sync_runs/run_0; logger_context(resume=True) continues it.
"""
import os
import signal
import sys
from functools import partial

from resume_helpers import ppo_runner
from rlframe.runners.callbacks import Callback
from rlframe.runners.sync_rl import SyncRl
from rlframe.utils.logging.context import logger_context

TWO_RANKS = [dict(master_torch_threads=1, workers_cpus=[0]),
             dict(master_torch_threads=1, workers_cpus=[0])]
FIRST_ATTEMPT = "first_attempt_done"


class DieOnce(Callback):
    def __init__(self, rank, itr):
        self.rank, self.itr = rank, itr

    def on_iteration_end(self, runner, itr, samples, opt_info):
        if runner.rank == self.rank and itr == self.itr and not os.path.exists(FIRST_ATTEMPT):
            open(FIRST_ATTEMPT, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


class InterruptAfterSnapshot(SyncRl):
    def __init__(self, *args, stop_itr, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop_itr = stop_itr

    def save_itr_snapshot(self, itr, final=False):
        names = super().save_itr_snapshot(itr, final=final)
        if (self.rank == 0 and itr == self.stop_itr and not final
                and not os.path.exists(FIRST_ATTEMPT)):
            open(FIRST_ATTEMPT, "w").close()
            raise KeyboardInterrupt
        return names


if __name__ == "__main__":
    die_rank, die_itr = int(sys.argv[1]), int(sys.argv[2])
    plain = ppo_runner()
    interrupt = sys.argv[3:] == ["interrupt"]
    runner_cls = partial(InterruptAfterSnapshot, stop_itr=die_itr) if interrupt else SyncRl
    runner = runner_cls(algo=plain.algo, agent=plain.agent, sampler=plain.sampler,
                    n_steps=256 * 24, log_interval_steps=256 * 4, seed=3, affinity=TWO_RANKS,
                    callbacks=[] if interrupt else [DieOnce(die_rank, die_itr)])
    with logger_context("sync_runs", 0, "sync", dict(algo="ppo"), snapshot_mode="last",
                        override_prefix=True, resume=True):
        runner.train()
