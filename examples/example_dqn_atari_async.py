"""
DQN on an Atari game with the asynchronous runner, as rlpyt's
``atari_dqn_async_{serial,cpu,gpu}`` examples: the sampler runs in its own
process and fills a shared replay buffer (frames stored once, in shared
memory) while this process trains, throttled to ``replay_ratio``.

    python examples/example_dqn_atari_async.py --game pong --sampler cpu
    python examples/example_dqn_atari_async.py --game pong --sampler gpu --n_gpu 1

``--sampler``: AsyncSerialSampler (envs and agent in the sampler process),
AsyncCpuSampler (env worker processes acting with a shared copy of the model)
or AsyncGpuSampler (worker processes step envs; action-server processes act
for all of them at once, on a GPU when there is one). The affinity comes from
``make_affinity(..., async_sample=True)`` over this machine's cores: with no
GPU the optimizer takes the first core and the sampler the others.
"""
import psutil

from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.runners.async_rl import AsyncRlEval
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

SAMPLERS = dict(serial=AsyncSerialSampler, cpu=AsyncCpuSampler, gpu=AsyncGpuSampler)


def build_and_train(game="pong", run_ID=0, sampler="cpu", n_gpu=0, n_steps=2e6,
                    log_interval_steps=1e4, min_steps_learn=1e4, replay_size=1e5,
                    eval_max_steps=10e3, seed=None):
    affinity = make_affinity(
        run_slot=0,
        n_cpu_core=psutil.cpu_count(logical=False) or 2,
        n_gpu=n_gpu,
        async_sample=True,
        # One GPU: the GPU sampler acts on the optimizer's GPU.
        optim_sample_share_gpu=n_gpu > 0 and sampler == "gpu",
    )
    sampler = SAMPLERS[sampler](
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=game),
        batch_T=5,
        batch_B=8,
        max_decorrelation_steps=100,
        eval_env_kwargs=dict(game=game),
        eval_n_envs=2,
        eval_max_steps=int(eval_max_steps),
        eval_max_trajectories=4,
    )
    algo = DQN(
        replay_ratio=8,
        min_steps_learn=int(min_steps_learn),
        replay_size=int(replay_size),
    )
    agent = AtariDqnAgent()
    runner = AsyncRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
    )
    config = dict(game=game, sampler=type(sampler).__name__)
    name = "async_dqn_" + game
    log_dir = "example_dqn_atari_async"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--sampler", help="asynchronous sampler", choices=sorted(SAMPLERS),
                        default="cpu")
    parser.add_argument("--n_gpu", help="GPUs (0: optimizer on CPU)", type=int, default=0)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=2e6)
    parser.add_argument("--log_interval_steps", type=float, default=1e4)
    parser.add_argument("--min_steps_learn", type=float, default=1e4)
    parser.add_argument("--replay_size", type=float, default=1e5)
    parser.add_argument("--eval_max_steps", type=float, default=10e3)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        game=args.game,
        run_ID=args.run_ID,
        sampler=args.sampler,
        n_gpu=args.n_gpu,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        min_steps_learn=args.min_steps_learn,
        replay_size=args.replay_size,
        eval_max_steps=args.eval_max_steps,
        seed=args.seed,
    )
