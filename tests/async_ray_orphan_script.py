"""AsyncRl with an AsyncRaySampler whose Ray workers' envs each leave an orphaned process
(pids appended to the file argv[1]), for far longer than a test waits: tests kill this
process. Prints "TRAINING STARTED" once the optimizer made its first call."""
import sys

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.runners.async_rl import AsyncRl
from rlframe.runners.callbacks import Callback
from rlframe.samplers.ray import AsyncRaySampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context
from samplers_helpers import orphan_leaving_env


class SayStarted(Callback):
    def on_iteration_end(self, runner, itr, samples, opt_info):
        if itr == 0:
            print("TRAINING STARTED", flush=True)


if __name__ == "__main__":
    affinity = make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True)
    affinity["sampler"].pop("workers_cpus")  # Ray places the workers.
    sampler = AsyncRaySampler(EnvCls=orphan_leaving_env,
                              env_kwargs=dict(id="CartPole-v1", pid_file=sys.argv[1]),
                              batch_T=16, batch_B=2, n_workers=2, max_decorrelation_steps=0)
    runner = AsyncRl(algo=DQN(batch_size=32, min_steps_learn=64, replay_size=4096),
                     agent=DqnAgent(), sampler=sampler, n_steps=1e9, log_interval_steps=1e4,
                     affinity=affinity, seed=0, sampler_lead_steps=64,
                     callbacks=[SayStarted()])
    with logger_context("orphan", 0, "orphan", {}, snapshot_mode="none"):
        runner.train()
    sys.exit("training was not interrupted")
