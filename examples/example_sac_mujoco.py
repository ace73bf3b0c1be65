"""
SAC on a MuJoCo task (default Hopper-v5), written as an rlpyt example: one
env stepped serially, one transition per iteration, SAC with its defaults
(one update of 256 transitions per env step after 10k random-ish steps) and
evaluation episodes at every log interval. Needs the mujoco extra:
``pip install -e ".[mujoco]"``.

    python examples/example_sac_mujoco.py --env_id Hopper-v5 --n_steps 1e6
"""
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="Hopper-v5", run_ID=0, cuda_idx=None, n_steps=1e6,
                    log_interval_steps=1e4, seed=None, min_steps_learn=1e4,
                    eval_max_trajectories=50):
    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=1,  # One time step per iteration...
        batch_B=1,  # ...of one env.
        max_decorrelation_steps=0,
        eval_n_envs=10,
        eval_max_steps=int(51e3),
        eval_max_trajectories=eval_max_trajectories,
    )
    algo = SAC(min_steps_learn=min_steps_learn)  # Otherwise SAC's defaults.
    agent = SacAgent()
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
    name = "sac_" + env_id
    log_dir = "example_sac_mujoco"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium MuJoCo env id", default="Hopper-v5")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=1e6)
    parser.add_argument("--log_interval_steps", help="env steps between evaluations",
                        type=float, default=1e4)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    parser.add_argument("--min_steps_learn", help="env steps before the first update",
                        type=float, default=1e4)
    parser.add_argument("--eval_max_trajectories", help="evaluation episodes per log",
                        type=int, default=50)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
        min_steps_learn=args.min_steps_learn,
        eval_max_trajectories=args.eval_max_trajectories,
    )
