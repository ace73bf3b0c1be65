"""Trains A2C on CartPole with a RaySampler that starts its own Ray, for far longer
than a test waits: tests stop it with Ctrl-C (SIGINT). Prints "TRAINING STARTED" after
the first iteration."""
import sys

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners.callbacks import Callback
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.ray import RaySampler
from rlframe.utils.logging.context import logger_context


class SayStarted(Callback):
    def on_iteration_end(self, runner, itr, samples, opt_info):
        if itr == 0:
            print("TRAINING STARTED", flush=True)


if __name__ == "__main__":
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=16,
                         batch_B=2, n_workers=2, max_decorrelation_steps=0)
    runner = MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=1e9,
                         log_interval_steps=3200, seed=0,
                         affinity=dict(master_torch_threads=1), callbacks=[SayStarted()])
    with logger_context("ctrl_c", 0, "ctrl_c", {}, snapshot_mode="none"):
        runner.train()
    sys.exit("training was not interrupted")
