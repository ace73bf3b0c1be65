"""
PPO over several processes with SyncRl, as in rlpyt's example_7: each rank
samples its own batch and DistributedDataParallel averages the gradients.

With GPUs, one rank per GPU (affinity from make_affinity with gpu_per_run);
without, one rank per group of CPU cores (make_sync_affinity).

    python examples/example_sync_ppo.py --n_rank 2
    torchrun --standalone --nproc_per_node=2 examples/example_sync_ppo.py
    # Two machines (or two shells on one, over loopback):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 --master_addr=127.0.0.1 \\
        --master_port=29510 examples/example_sync_ppo.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=1 --master_addr=127.0.0.1 \\
        --master_port=29510 examples/example_sync_ppo.py

Under torchrun the ranks come from torchrun (--n_rank is ignored) and only rank
0 writes the run directory.
"""
import argparse
import os

import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.sync_rl import SyncRlEval
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import make_affinity, make_sync_affinity
from rlframe.utils.logging.context import logger_context


def build_affinity(n_rank: int, cpu_per_rank: int | None) -> list:
    """One affinity dict per rank: GPUs when there are enough, else CPU cores."""
    if "LOCAL_WORLD_SIZE" in os.environ:  # torchrun: the ranks on this machine.
        n_rank = int(os.environ["LOCAL_WORLD_SIZE"])
    n_gpu = torch.cuda.device_count()
    if n_gpu >= n_rank:
        n_cpu_core = os.cpu_count() or n_rank
        return make_affinity(n_cpu_core=n_cpu_core - n_cpu_core % n_rank, n_gpu=n_rank,
                             gpu_per_run=n_rank) if n_rank > 1 else [
            make_affinity(n_cpu_core=n_cpu_core, n_gpu=1)]
    return make_sync_affinity(n_rank=n_rank, cpu_per_rank=cpu_per_rank)


def build_and_train(env_id="CartPole-v1", run_ID=0, n_rank=2, sampler="serial",
                    cpu_per_rank=None, n_steps=150e3, log_interval_steps=10240, seed=None,
                    log_dir="example_sync_ppo"):
    affinity = build_affinity(n_rank, cpu_per_rank)
    SamplerCls = SerialSampler if sampler == "serial" else CpuSampler
    sampler = SamplerCls(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=128,
        batch_B=4,  # Per rank: the effective batch is n_rank x 128 x 4 steps.
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 500),
    )
    algo = PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2, epochs=8,
               value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
               normalize_advantage=True)
    agent = CategoricalPgAgent()
    runner = SyncRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
    )
    config = dict(env_id=env_id, n_rank=len(affinity), sampler=SamplerCls.__name__)
    with logger_context(log_dir, run_ID, "sync_ppo", config, snapshot_mode="last"):
        runner.train()
    return runner


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env_id", default="CartPole-v1")
    parser.add_argument("--run_ID", type=int, default=0)
    parser.add_argument("--n_rank", type=int, default=2, help="processes (without torchrun)")
    parser.add_argument("--sampler", choices=["serial", "cpu"], default="serial")
    parser.add_argument("--cpu_per_rank", type=int, default=None)
    parser.add_argument("--n_steps", type=float, default=150e3)
    parser.add_argument("--log_interval_steps", type=float, default=10240)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--log_dir", default="example_sync_ppo")
    args = parser.parse_args()
    build_and_train(env_id=args.env_id, run_ID=args.run_ID, n_rank=args.n_rank,
                    sampler=args.sampler, cpu_per_rank=args.cpu_per_rank, n_steps=args.n_steps,
                    log_interval_steps=args.log_interval_steps, seed=args.seed,
                    log_dir=args.log_dir)
