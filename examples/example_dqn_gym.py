"""
DQN on CartPole, written as an rlpyt example: double DQN with 3-step returns
and prioritized replay, a serial sampler, and evaluation episodes at every log
interval (MinibatchRlEval). Episodes cut by CartPole's 500-step time limit
are not taken as failures (``bootstrap_timelimit``, on by default).

    python examples/example_dqn_gym.py --env_id CartPole-v1 --run_ID 0
"""
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="CartPole-v1", run_ID=0, cuda_idx=None, n_steps=50e3,
                    log_interval_steps=4096, seed=None):
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=32,
        batch_B=8,  # 256 steps per iteration, then 96 updates (replay_ratio 24)
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 1000),
        eval_max_trajectories=8,
    )
    algo = DQN(
        discount=0.99,
        batch_size=64,
        min_steps_learn=1000,
        replay_size=int(5e4),
        replay_ratio=24,
        target_update_interval=96,  # once per iteration
        n_step_return=3,
        learning_rate=2.3e-3,
        delta_clip=1.,
        eps_steps=8000,
        double_dqn=True,
        prioritized_replay=True,
        pri_beta_steps=int(60e3),
    )
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[128, 128]), eps_final=0.04, eps_eval=0.)
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        # Small models: one CPU thread is fastest (more threads only contend).
        affinity=dict(cuda_idx=cuda_idx, master_torch_threads=1),
        seed=seed,
    )
    config = dict(env_id=env_id)
    name = "dqn_" + env_id
    log_dir = "example_dqn_gym"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=50e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=4096)
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
