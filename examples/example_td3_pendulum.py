"""
TD3 on Pendulum-v1, written as an rlpyt example: one env stepped serially,
twin critics with delayed policy updates, and evaluation episodes at every log
interval. Pendulum's torque bound is 2: the agent's actions and noise scale
with it. Reaches an average return of about -150 within 20k env steps.

    python examples/example_td3_pendulum.py --n_steps 20e3
"""
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.qpg.td3 import TD3
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="Pendulum-v1", run_ID=0, cuda_idx=None, n_steps=20e3,
                    log_interval_steps=2000, seed=None, min_steps_learn=1000):
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=1,
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=5,
        eval_max_steps=int(5 * 1000),
        eval_max_trajectories=5,
    )
    algo = TD3(min_steps_learn=min_steps_learn, replay_size=int(1e5))
    agent = Td3Agent()
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx),
        seed=seed,
    )
    config = dict(env_id=env_id, min_steps_learn=min_steps_learn)
    name = "td3_" + env_id
    log_dir = "example_td3_pendulum"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id (continuous actions)",
                        default="Pendulum-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=20e3)
    parser.add_argument("--log_interval_steps", help="env steps between evaluations",
                        type=float, default=2000)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    parser.add_argument("--min_steps_learn", help="env steps before the first update",
                        type=float, default=1000)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
        min_steps_learn=args.min_steps_learn,
    )
