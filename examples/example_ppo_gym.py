"""
PPO on a gymnasium task with discrete actions, written as an rlpyt example:
build a sampler, an algorithm and an agent, hand them to a runner, and train
inside ``logger_context``. Switch the runner to ``MinibatchRl`` to log the
training trajectories instead of separate evaluation episodes.

    python examples/example_ppo_gym.py --env_id CartPole-v1 --run_ID 0
"""
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="CartPole-v1", run_ID=0, cuda_idx=None, n_steps=150e3,
                    log_interval_steps=10240, seed=None):
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=128,
        batch_B=8,
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 500),
        eval_max_trajectories=8,
    )
    algo = PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2, epochs=8,
               value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
               normalize_advantage=True)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64]))
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx),
        seed=seed,
    )
    config = dict(env_id=env_id)
    name = "ppo_" + env_id
    log_dir = "example_ppo_gym"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=150e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=10240)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
    )
