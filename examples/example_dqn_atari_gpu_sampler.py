"""
DQN on an Atari game with GpuSampler, as in rlpyt's example_5: worker
processes step ``--batch_B`` envs and this process picks all their actions in
one forward pass. More parallel envs make that pass more efficient on a GPU,
and a larger ``--batch_size`` makes the updates more efficient (both may call
for other hyperparameters).

    python examples/example_dqn_atari_gpu_sampler.py --game pong --cuda_idx 0 --n_parallel 4

The config dict is logged with the run (params.json), as rlpyt's example does.
"""
from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(game="pong", run_ID=0, cuda_idx=None, n_parallel=2, n_steps=10e6,
                    log_interval_steps=1e5, batch_B=32, batch_size=128, min_steps_learn=5e4,
                    replay_size=1e6, eval_n_envs=10, eval_max_steps=10e3, seed=None):
    config = dict(
        env=dict(game=game),
        algo=dict(batch_size=batch_size, min_steps_learn=int(min_steps_learn),
                  replay_size=int(replay_size)),
        sampler=dict(batch_T=2, batch_B=batch_B),
    )
    sampler = GpuSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=config["env"],
        CollectorCls=GpuResetCollector,  # Finished envs reset at once: no idle steps in replay.
        eval_env_kwargs=config["env"],
        max_decorrelation_steps=0,
        eval_n_envs=eval_n_envs,
        eval_max_steps=int(eval_max_steps),
        eval_max_trajectories=5,
        **config["sampler"],  # Many envs for a batched forward pass.
    )
    algo = DQN(**config["algo"])
    agent = AtariDqnAgent()
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx, workers_cpus=list(range(n_parallel))),
        seed=seed,
    )
    name = "dqn_" + game
    log_dir = "example_dqn_atari_gpu_sampler"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_parallel", help="number of sampler workers", type=int, default=2)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=10e6)
    parser.add_argument("--log_interval_steps", help="env steps between logs (and evaluations)",
                        type=float, default=1e5)
    parser.add_argument("--batch_B", help="parallel envs", type=int, default=32)
    parser.add_argument("--batch_size", help="replayed transitions per update", type=int,
                        default=128)
    parser.add_argument("--min_steps_learn", type=float, default=5e4)
    parser.add_argument("--replay_size", type=float, default=1e6)
    parser.add_argument("--eval_n_envs", type=int, default=10)
    parser.add_argument("--eval_max_steps", type=float, default=10e3)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        game=args.game,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_parallel=args.n_parallel,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        batch_B=args.batch_B,
        batch_size=args.batch_size,
        min_steps_learn=args.min_steps_learn,
        replay_size=args.replay_size,
        eval_n_envs=args.eval_n_envs,
        eval_max_steps=args.eval_max_steps,
        seed=args.seed,
    )
