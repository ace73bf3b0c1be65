"""
SAC on Pendulum with the asynchronous runner: the sampler process steps the env
and acts with the newest published policy while this process makes one update
of 128 transitions per sampled step (``replay_ratio=128``). On a CPU-only
machine the optimizer takes the first core and the sampler the others; with
``--n_gpu 1`` the optimizer trains on GPU 0 and publishes to the sampler's CPU
copy after every update.

    python examples/example_sac_async.py --env_id Pendulum-v1 --run_ID 0
"""
import psutil

from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRlEval
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="Pendulum-v1", run_ID=0, n_gpu=0, n_steps=20e3,
                    log_interval_steps=1000, min_steps_learn=1000, seed=None):
    affinity = make_affinity(run_slot=0, n_cpu_core=psutil.cpu_count(logical=False) or 2,
                             n_gpu=n_gpu, async_sample=True)
    sampler = AsyncSerialSampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=8,  # the policy is refreshed every 8 steps
        batch_B=1,
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 200),
    )
    algo = SAC(
        batch_size=128,
        replay_ratio=128,  # one update per sampled step
        min_steps_learn=min_steps_learn,
        replay_size=int(1e5),
    )
    agent = SacAgent()
    runner = AsyncRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
        # The env steps much faster than SAC updates: keep the sampler within 8
        # batches of where replay_ratio puts the optimizer.
        sampler_lead_steps=64,
    )
    config = dict(env_id=env_id)
    name = "async_sac_" + env_id
    log_dir = "example_sac_async"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="Pendulum-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--n_gpu", help="GPUs (0: optimizer on CPU)", type=int, default=0)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=20e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=1000)
    parser.add_argument("--min_steps_learn", help="env steps before updates start", type=int,
                        default=1000)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        n_gpu=args.n_gpu,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        min_steps_learn=args.min_steps_learn,
        seed=args.seed,
    )
