"""
DQN on CartPole with the asynchronous runner and AsyncRaySampler: Ray actors, on
this machine or across a cluster, step the envs without pause, each keeping up
to ``--max_batches_in_flight`` batches queued; finished batches reach the
replay buffer through Ray's object store while this process trains. Against
``example_dqn_async.py`` only the sampler changes.

The optimizer takes the first CPU core; the sampler process, and a local Ray
it starts, the others. ``--ray_address`` None starts that local Ray (stopped
at the end); ``auto`` or ``host:port`` joins a running cluster.

    pip install -e ".[ray]"
    python examples/example_dqn_async_ray.py --n_workers 2                  # local Ray
    ray start --head                                                        # or a cluster:
    ray start --address=HEAD_IP:6379                                        # (other machines)
    python examples/example_dqn_async_ray.py --n_workers 8 --ray_address auto   # on the head
"""
import psutil

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRlEval
from rlframe.samplers.ray import AsyncRaySampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="CartPole-v1", run_ID=0, n_workers=2, ray_address=None, n_gpu=0,
                    n_steps=80e3, log_interval_steps=4096, sampler_lead_steps=2048,
                    max_batches_in_flight=2, seed=None):
    affinity = make_affinity(
        run_slot=0,
        n_cpu_core=psutil.cpu_count(logical=False) or 2,
        n_gpu=n_gpu,
        async_sample=True,
    )  # The sampler's workers_cpus are not read: Ray places the workers.
    sampler = AsyncRaySampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=32,
        batch_B=4 * n_workers,  # 4 envs per worker, 128 steps per worker and batch.
        max_decorrelation_steps=0,
        eval_n_envs=2 * n_workers,
        eval_max_steps=int(2 * n_workers * 1000),
        eval_max_trajectories=8,
        n_workers=n_workers,
        ray_address=ray_address,
        max_batches_in_flight=max_batches_in_flight,
    )
    algo = DQN(
        discount=0.99,
        batch_size=64,
        min_steps_learn=1000,
        replay_size=int(5e4),
        replay_ratio=24,  # at most 24 replayed transitions per sampled one
        target_update_interval=96,
        n_step_return=3,
        learning_rate=2.3e-3,
        delta_clip=1.,
        eps_steps=8000,
        double_dqn=True,
        prioritized_replay=True,
        pri_beta_steps=int(60e3),
    )
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[128, 128]), eps_final=0.04, eps_eval=0.)
    runner = AsyncRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
        sampler_lead_steps=sampler_lead_steps or None,
    )
    config = dict(env_id=env_id, n_workers=n_workers, ray_address=ray_address,
                  max_batches_in_flight=max_batches_in_flight)
    with logger_context("example_dqn_async_ray", run_ID, "async_ray_dqn_" + env_id, config,
                        snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--n_workers", help="Ray sampler workers", type=int, default=2)
    parser.add_argument("--ray_address", default=None,
                        help="None: start a local Ray; 'auto' or 'host:port': join a cluster")
    parser.add_argument("--n_gpu", help="GPUs (0: optimizer on CPU)", type=int, default=0)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=80e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=4096)
    parser.add_argument("--sampler_lead_steps", type=float, default=2048,
                        help="env steps the sampler may run ahead of the optimizer (0: free)")
    parser.add_argument("--max_batches_in_flight", type=int, default=2,
                        help="sample calls queued on each worker")
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        n_workers=args.n_workers,
        ray_address=args.ray_address,
        n_gpu=args.n_gpu,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        sampler_lead_steps=args.sampler_lead_steps,
        max_batches_in_flight=args.max_batches_in_flight,
        seed=args.seed,
    )
