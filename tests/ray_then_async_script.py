"""In one process: a short MinibatchRl with a RaySampler (its own local Ray, stopped at
its end), then a short AsyncRl with an AsyncRaySampler, with the default start method.
Prints "RAY RUN DONE" and "ASYNC RUN DONE" after each."""
import sys

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRl
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.ray import AsyncRaySampler, RaySampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

ENV = dict(id="CartPole-v1")

if __name__ == "__main__":
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=16, batch_B=2, n_workers=1,
                         max_decorrelation_steps=0)
    runner = MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=96,
                         log_interval_steps=32, seed=0, affinity=dict(master_torch_threads=1))
    with logger_context("ray_first", 0, "ray_first", {}, snapshot_mode="none"):
        runner.train()
    print("RAY RUN DONE", flush=True)

    affinity = make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True)
    affinity["sampler"].pop("workers_cpus")  # Ray places the workers.
    sampler = AsyncRaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=16, batch_B=2,
                              n_workers=1, max_decorrelation_steps=0)
    algo = DQN(batch_size=32, min_steps_learn=64, replay_size=4096, replay_ratio=4)
    runner = AsyncRl(algo=algo, agent=DqnAgent(), sampler=sampler, n_steps=640,
                     log_interval_steps=320, affinity=affinity, seed=0, sampler_lead_steps=64)
    with logger_context("async_after_ray", 0, "async_after_ray", {}, snapshot_mode="none"):
        runner.train()
    print(f"ASYNC RUN DONE {runner.algo.update_counter} updates", flush=True)
    sys.exit(0)
