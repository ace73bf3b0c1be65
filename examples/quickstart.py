"""Quickstart: PPO on CartPole-v1 with a serial sampler.

Trains to an average evaluation return of about 500 (the maximum) in roughly a
minute on a laptop CPU, then prints the run directory, which holds
``progress.csv``, ``debug.log``, ``params.json`` and the ``params.pkl`` snapshot.

    python examples/quickstart.py
"""
import argparse

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context


def build_and_train(n_steps: float = 150 * 1024, seed: int = 0, run_ID: int = 0) -> str:
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id="CartPole-v1"),
        eval_env_kwargs=dict(id="CartPole-v1"),
        batch_T=128,  # Time steps per env per iteration.
        batch_B=8,  # Parallel envs.
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=4 * 500,  # One full-length episode per eval env.
    )
    algo = PPO(
        discount=0.98,
        learning_rate=1e-3,  # Decays linearly to 0 over the run.
        gae_lambda=0.95,
        minibatches=4,
        epochs=8,
        ratio_clip=0.2,
        value_loss_coeff=0.5,
        entropy_loss_coeff=0.0,
        clip_grad_norm=10.,
        normalize_advantage=True,
    )
    agent = CategoricalPgAgent()  # MLP policy and value heads for vector observations.
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                             log_interval_steps=10240, seed=seed,
                             affinity=dict(master_torch_threads=1))
    config = dict(env_id="CartPole-v1", algo="PPO", n_steps=n_steps, seed=seed)
    with logger_context("quickstart", run_ID, "ppo_cartpole", config, snapshot_mode="last"):
        runner.train()
        run_dir = logger.get_snapshot_dir()
    print(f"Run directory: {run_dir}")
    return run_dir


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--n_steps", type=float, default=150 * 1024,
                        help="total env steps (150 iterations of 8 x 128)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--run_ID", type=int, default=0, help="run identifier")
    args = parser.parse_args()
    build_and_train(n_steps=args.n_steps, seed=args.seed, run_ID=args.run_ID)
