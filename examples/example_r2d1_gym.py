"""
R2D1 (recurrent DQN) on CartPole with the velocities hidden: the agent sees only
the cart position and the pole angle, so it must infer the velocities from the
history its LSTM keeps. Written as an rlpyt example: a serial sampler, the
R2D1 algorithm with prioritized sequence replay, and evaluation episodes at
every log interval.

    python examples/example_r2d1_gym.py --run_ID 0
"""
from rlframe.agents.dqn.r2d1_agent import R2d1Agent
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.envs.wrappers import make_velocity_hidden_cartpole
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(run_ID=0, cuda_idx=None, n_steps=200e3, log_interval_steps=8000,
                    seed=None):
    sampler = SerialSampler(
        EnvCls=make_velocity_hidden_cartpole,
        env_kwargs=dict(),
        eval_env_kwargs=dict(),
        batch_T=20,  # a multiple of store_rnn_state_interval
        batch_B=16,
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 1000),
        eval_max_trajectories=8,
    )
    algo = R2D1(
        discount=0.99,
        batch_T=40,
        batch_B=32,
        warmup_T=20,
        store_rnn_state_interval=20,
        min_steps_learn=5000,
        replay_size=int(1e5),
        replay_ratio=64,  # 320 steps * 64 / (32 x 60-step sequences): 10.67 updates per itr
        target_update_interval=20,
        n_step_return=5,
        learning_rate=1e-3,
        clip_grad_norm=10.,
        eps_steps=30000,
        pri_beta_steps=int(n_steps),
    )
    agent = R2d1Agent(model_kwargs=dict(dueling=True), eps_final=0.02, eps_eval=0.)
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
    config = dict(env="velocity-hidden CartPole-v1")
    name = "r2d1_cartpole_no_velocity"
    log_dir = "example_r2d1_gym"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=200e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=8000)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
    )
