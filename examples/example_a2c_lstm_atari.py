"""
A2C with a recurrent (LSTM) agent on an Atari game, sampled by GpuSampler, as
in rlpyt's example_4: worker processes step the envs while this process picks
the actions of all envs in one batched forward pass (on a GPU with
``--cuda_idx``, else on the CPU).

    python examples/example_a2c_lstm_atari.py --game pong --n_parallel 2

The agent sees single frames (``num_img_obs=1``); the LSTM carries the history.
A recurrent agent cannot train across an env reset inside its batch, so by
default envs that finish wait for the next batch to reset
(GpuWaitResetCollector; the algorithm masks the steps after ``done`` as
invalid). ``--mid_batch_reset`` resets them at once instead (GpuResetCollector).
"""
import torch

from rlframe.agents.pg.atari import AtariLstmAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector, GpuWaitResetCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(game="pong", run_ID=0, cuda_idx=None, mid_batch_reset=False,
                    n_parallel=2, n_steps=10e6, log_interval_steps=1e5, batch_B=16,
                    max_decorrelation_steps=400, seed=None):
    affinity = dict(cuda_idx=cuda_idx, workers_cpus=list(range(n_parallel)))
    Collector = GpuResetCollector if mid_batch_reset else GpuWaitResetCollector
    print(f"mid_batch_reset={mid_batch_reset}: collecting with {Collector.__name__}.")
    sampler = GpuSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,
        env_kwargs=dict(game=game, num_img_obs=1),  # Single frames: the LSTM remembers.
        CollectorCls=Collector,
        batch_T=20,  # A longer horizon for the recurrence,
        batch_B=batch_B,  # in 16 parallel envs.
        max_decorrelation_steps=max_decorrelation_steps,
    )
    algo = A2C(
        discount=0.99,
        learning_rate=7e-4,
        OptimCls=torch.optim.RMSprop,
        optim_kwargs=dict(alpha=0.99, eps=1e-5),
        entropy_loss_coeff=0.01,
        clip_grad_norm=0.5,
    )
    agent = AtariLstmAgent()
    runner = MinibatchRl(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
    )
    config = dict(game=game, mid_batch_reset=mid_batch_reset)
    name = "a2c_lstm_" + game
    log_dir = "example_a2c_lstm_atari"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--mid_batch_reset", action="store_true",
                        help="reset finished envs within the batch")
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
        mid_batch_reset=args.mid_batch_reset,
        n_parallel=args.n_parallel,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        batch_B=args.batch_B,
        max_decorrelation_steps=args.max_decorrelation_steps,
        seed=args.seed,
    )
