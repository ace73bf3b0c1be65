"""
PPO on a MuJoCo task (default HalfCheetah-v5) with a Gaussian MLP agent and
running observation normalization. Needs the mujoco extra:
``pip install -e ".[mujoco]"``.

    python examples/example_ppo_mujoco.py --env_id HalfCheetah-v5 --n_steps 1e6
"""
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="HalfCheetah-v5", run_ID=0, cuda_idx=None, n_steps=1e6,
                    log_interval_steps=2048 * 10, batch_T=2048, batch_B=1, seed=None):
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        batch_T=batch_T,
        batch_B=batch_B,
        max_decorrelation_steps=0,
    )
    algo = PPO(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, minibatches=32, epochs=10,
               ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
               clip_grad_norm=0.5, normalize_advantage=True)
    agent = MujocoFfAgent(model_kwargs=dict(normalize_observation=True))
    runner = MinibatchRl(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx),
        seed=seed,
    )
    config = dict(env_id=env_id, batch_T=batch_T, batch_B=batch_B)
    name = "ppo_" + env_id
    log_dir = "example_ppo_mujoco"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium MuJoCo env id", default="HalfCheetah-v5")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=1e6)
    parser.add_argument("--log_interval_steps", type=float, default=2048 * 10)
    parser.add_argument("--batch_T", help="time steps per env per iteration", type=int,
                        default=2048)
    parser.add_argument("--batch_B", help="parallel envs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        batch_T=args.batch_T,
        batch_B=args.batch_B,
        seed=args.seed,
    )
