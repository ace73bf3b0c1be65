"""
PPO on a gymnasium task with a choice of sampler, as in rlpyt's parallel-sampling
example: switching from serial to parallel sampling changes only the sampler
class and the affinity dict.

    python examples/example_parallel_ppo.py --sample_mode cpu --n_parallel 2

sample_mode:
    serial       envs and agent in this process (SerialSampler)
    cpu          n_parallel worker processes, each acting with the shared model (CpuSampler)
    gpu          workers step envs; this process picks all actions in one batch (GpuSampler)
    alternating  two worker groups take turns so action selection overlaps env stepping
"""
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(env_id="CartPole-v1", run_ID=0, cuda_idx=None, sample_mode="serial",
                    n_parallel=2, n_steps=150e3, log_interval_steps=10240, seed=None):
    affinity = dict(cuda_idx=cuda_idx, workers_cpus=list(range(n_parallel)))
    gpu_cpu = "CPU" if cuda_idx is None else f"GPU {cuda_idx}"
    if sample_mode == "serial":
        Sampler = SerialSampler  # (Ignores workers_cpus.)
        print(f"Using serial sampler, {gpu_cpu} for sampling and optimizing.")
    elif sample_mode == "cpu":
        Sampler = CpuSampler
        print(f"Using CPU parallel sampler (agent in workers), {gpu_cpu} for optimizing.")
    elif sample_mode == "gpu":
        Sampler = GpuSampler
        print(f"Using GPU parallel sampler (agent in master), {gpu_cpu} for sampling and "
              "optimizing.")
    elif sample_mode == "alternating":
        Sampler = AlternatingSampler
        affinity["workers_cpus"] += affinity["workers_cpus"]  # (Double list)
        affinity["alternating"] = True  # Sampler will check for this.
        print(f"Using Alternating GPU parallel sampler, {gpu_cpu} for sampling and "
              "optimizing.")
    else:
        raise ValueError(f"sample_mode must be serial, cpu, gpu or alternating, got "
                         f"{sample_mode!r}.")
    collector = GpuResetCollector if sample_mode in ("gpu", "alternating") \
        else CpuResetCollector
    sampler = Sampler(
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        CollectorCls=collector,
        batch_T=128,
        batch_B=8,
        max_decorrelation_steps=0,
        eval_n_envs=4,
        eval_max_steps=int(4 * 500),
    )
    algo = PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2, epochs=8,
               value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
               normalize_advantage=True)
    agent = CategoricalPgAgent()
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
    )
    config = dict(env_id=env_id, sample_mode=sample_mode, n_parallel=n_parallel)
    name = "ppo_" + env_id
    log_dir = "example_parallel_ppo"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--sample_mode", help="serial or parallel sampling",
                        type=str, default="serial",
                        choices=["serial", "cpu", "gpu", "alternating"])
    parser.add_argument("--n_parallel", help="number of sampler workers", type=int, default=2)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=150e3)
    parser.add_argument("--log_interval_steps", type=float, default=10240)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        sample_mode=args.sample_mode,
        n_parallel=args.n_parallel,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        seed=args.seed,
    )
