"""
A2C on an Atari game with a choice of sampler, as in rlpyt's example_3: going
from serial to parallel sampling changes only the sampler class and the
affinity dict.

    python examples/example_a2c_atari.py --game breakout --sample_mode cpu --n_parallel 2

sample_mode:
    serial       envs and agent in this process (SerialSampler)
    cpu          n_parallel worker processes, each acting with the shared model (CpuSampler)
    gpu          workers step envs; this process picks all actions in one batch (GpuSampler)
    alternating  two worker groups take turns so action selection overlaps env stepping

The optimizer settings are the usual A2C ones for Atari (RMSprop, learning rate
7e-4, 16 envs x 5 steps, gradient norm clipped at 0.5). Every log line reports
GameScore, the unclipped score of the games finished since the last log.
"""
import torch

from rlframe.agents.pg.atari import AtariFfAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context

SAMPLERS = dict(serial=SerialSampler, cpu=CpuSampler, gpu=GpuSampler,
                alternating=AlternatingSampler)


def build_and_train(game="pong", run_ID=0, cuda_idx=None, sample_mode="cpu", n_parallel=2,
                    n_steps=10e6, log_interval_steps=1e5, batch_B=16,
                    max_decorrelation_steps=400, seed=None):
    affinity = dict(cuda_idx=cuda_idx, workers_cpus=list(range(n_parallel)))
    if sample_mode == "alternating":
        affinity["workers_cpus"] += affinity["workers_cpus"]  # Two groups on the same CPUs.
        affinity["alternating"] = True
    gpu_cpu = "CPU" if cuda_idx is None else f"GPU {cuda_idx}"
    print(f"Sampling with {SAMPLERS[sample_mode].__name__}, optimizing on {gpu_cpu}.")
    sampler = SAMPLERS[sample_mode](
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,  # Adds GameScore, the unclipped score.
        env_kwargs=dict(game=game),
        batch_T=5,  # 5 time steps per sampler iteration,
        batch_B=batch_B,  # in 16 parallel envs.
        max_decorrelation_steps=max_decorrelation_steps,
    )
    algo = A2C(
        discount=0.99,
        learning_rate=7e-4,
        OptimCls=torch.optim.RMSprop,
        optim_kwargs=dict(alpha=0.99, eps=1e-5),
        value_loss_coeff=0.5,
        entropy_loss_coeff=0.01,
        clip_grad_norm=0.5,
    )
    agent = AtariFfAgent()
    runner = MinibatchRl(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
    )
    config = dict(game=game, sample_mode=sample_mode, n_parallel=n_parallel)
    name = "a2c_" + game
    log_dir = "example_a2c_atari"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--sample_mode", help="serial or parallel sampling", default="cpu",
                        choices=sorted(SAMPLERS))
    parser.add_argument("--n_parallel", help="number of sampler workers", type=int, default=2)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=10e6)
    parser.add_argument("--log_interval_steps", type=float, default=1e5)
    parser.add_argument("--batch_B", help="parallel envs", type=int, default=16)
    parser.add_argument("--max_decorrelation_steps", type=int, default=400,
                        help="random steps at start, so the envs do not run in lockstep")
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        game=args.game,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        sample_mode=args.sample_mode,
        n_parallel=args.n_parallel,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        batch_B=args.batch_B,
        max_decorrelation_steps=args.max_decorrelation_steps,
        seed=args.seed,
    )
