"""
DQN on CartPole with the asynchronous runner, as rlpyt's ``atari_dqn_async_*``
examples: the sampler runs in its own process and fills a shared replay buffer
while this process trains. ``--sampler`` picks AsyncSerialSampler (envs and
agent in the sampler process), AsyncCpuSampler (env worker processes acting
with a shared copy of the model) or AsyncGpuSampler (worker processes step
envs, the sampler process acts for all of them at once, on a GPU if given).

On a CPU-only machine the optimizer takes the first core and the sampler the
others. CartPole steps far faster than the optimizer trains, so the sampler is
kept within ``--sampler_lead_steps`` of where ``replay_ratio`` puts the
optimizer (without it, the sampler runs free, as in rlpyt).

    python examples/example_dqn_async.py --sampler cpu --run_ID 0
    python examples/example_dqn_async.py --sampler gpu --n_gpu 1   # optimizer and actions on GPU 0
"""
import psutil

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRlEval
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

SAMPLERS = dict(serial=AsyncSerialSampler, cpu=AsyncCpuSampler, gpu=AsyncGpuSampler)


def build_and_train(env_id="CartPole-v1", run_ID=0, sampler="cpu", n_gpu=0, n_steps=80e3,
                    log_interval_steps=4096, sampler_lead_steps=2048, seed=None):
    n_cpu_core = psutil.cpu_count(logical=False) or 2
    affinity = make_affinity(
        run_slot=0,
        n_cpu_core=n_cpu_core,
        n_gpu=n_gpu,
        async_sample=True,
        # One GPU: the GPU sampler acts on the optimizer's GPU.
        optim_sample_share_gpu=n_gpu > 0 and sampler == "gpu",
    )
    n_worker = len(affinity["sampler"]["workers_cpus"]) if isinstance(affinity["sampler"], dict) \
        else sum(len(a["workers_cpus"]) for a in affinity["sampler"])
    sampler = SAMPLERS[sampler](
        EnvCls=gym_make,
        env_kwargs=dict(id=env_id),
        eval_env_kwargs=dict(id=env_id),
        batch_T=32,
        batch_B=8 * n_worker,  # 256 steps per sampler iteration per worker
        max_decorrelation_steps=0,
        eval_n_envs=4 * n_worker,
        eval_max_steps=int(4 * n_worker * 1000),
        eval_max_trajectories=8,
    )
    algo = DQN(
        discount=0.99,
        batch_size=64,
        min_steps_learn=1000,
        replay_size=int(5e4),
        replay_ratio=24,  # at most 24 replayed transitions per sampled one
        target_update_interval=96,
        n_step_return=3,
        learning_rate=2.3e-3,
        delta_clip=1.,
        eps_steps=8000,
        double_dqn=True,
        prioritized_replay=True,
        pri_beta_steps=int(60e3),
    )
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[128, 128]), eps_final=0.04, eps_eval=0.)
    runner = AsyncRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=affinity,
        seed=seed,
        sampler_lead_steps=sampler_lead_steps or None,
    )
    config = dict(env_id=env_id, sampler=type(sampler).__name__)
    name = "async_dqn_" + env_id
    log_dir = "example_dqn_async"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env_id", help="gymnasium env id", default="CartPole-v1")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--sampler", help="asynchronous sampler", choices=sorted(SAMPLERS),
                        default="cpu")
    parser.add_argument("--n_gpu", help="GPUs (0: optimizer on CPU)", type=int, default=0)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=80e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=4096)
    parser.add_argument("--sampler_lead_steps", type=float, default=2048,
                        help="env steps the sampler may run ahead of the optimizer (0: free)")
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        env_id=args.env_id,
        run_ID=args.run_ID,
        sampler=args.sampler,
        n_gpu=args.n_gpu,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        sampler_lead_steps=args.sampler_lead_steps,
        seed=args.seed,
    )
