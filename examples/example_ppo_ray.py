"""
PPO on CartPole with RaySampler: the envs run in Ray actors, on this machine or
across a cluster. Against a CpuSampler script only the sampler changes.

    pip install -e ".[ray]"
    python examples/example_ppo_ray.py --n_workers 2                      # local Ray
    ray start --head                                                      # or a cluster:
    ray start --address=HEAD_IP:6379                                      # (other machines)
    python examples/example_ppo_ray.py --n_workers 8 --ray_address auto   # on the head
"""
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.ray import RaySampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="CartPole-v1", run_ID=0, cuda_idx=None, n_workers=2,
                    ray_address=None, n_steps=150e3, log_interval_steps=10240, seed=None):
    sampler = RaySampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=128,
        batch_B=8,  # A multiple of n_workers.
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 500),
        n_workers=n_workers,
        ray_address=ray_address,  # None: a local Ray, stopped at the end.
    )
    algo = PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2, epochs=8,
               value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
               normalize_advantage=True)
    runner = MinibatchRlEval(
        algo=algo,
        agent=CategoricalPgAgent(),
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx),  # No workers_cpus: Ray places the workers.
        seed=seed,
    )
    config = dict(env_id=env_id, n_workers=n_workers, ray_address=ray_address)
    with logger_context("example_ppo_ray", run_ID, "ppo_" + env_id, config,
                        snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to optimize on", type=int, default=None)
    parser.add_argument("--n_workers", help="Ray sampler workers (divides 8)", type=int,
                        default=2)
    parser.add_argument("--ray_address", default=None,
                        help="None: start a local Ray; 'auto' or 'host:port': join a cluster")
    parser.add_argument("--n_steps", help="total env steps", type=float, default=150e3)
    parser.add_argument("--log_interval_steps", type=float, default=10240)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_workers=args.n_workers,
        ray_address=args.ray_address,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
    )
