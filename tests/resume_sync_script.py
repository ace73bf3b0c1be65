"""A SyncRl PPO run of 2 ranks, resumable, for the resume tests:

    python resume_sync_script.py DIE_RANK DIE_ITR
    torchrun --standalone --nproc_per_node=2 --max-restarts=1 resume_sync_script.py 1 13

Rank DIE_RANK kills itself with SIGKILL after iteration DIE_ITR, in the first attempt
only (torchrun's restarts, and runs started again by hand, train to the end). The run
directory is ./sync_runs/run_0; logger_context(resume=True) continues it.
"""
import os
import signal
import sys

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


if __name__ == "__main__":
    die_rank, die_itr = int(sys.argv[1]), int(sys.argv[2])
    plain = ppo_runner()
    runner = SyncRl(algo=plain.algo, agent=plain.agent, sampler=plain.sampler,
                    n_steps=256 * 24, log_interval_steps=256 * 4, seed=3, affinity=TWO_RANKS,
                    callbacks=[DieOnce(die_rank, die_itr)])
    with logger_context("sync_runs", 0, "sync", dict(algo="ppo"), snapshot_mode="last",
                        override_prefix=True, resume=True):
        runner.train()
