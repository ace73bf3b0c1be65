"""AsyncRl against MinibatchRl: env steps/s and updates/s of DQN at the same replay ratio.

DQN (double, 3-step, prioritized replay, 128x128 MLP, batch 64) with a sampler
batch of 32 x 8 steps, on CartPole-v1 and on a heavier env: CartPole whose every
step also burns ``--heavy_us`` microseconds of CPU (a stand-in for a simulator
that costs about as much per step as the updates do per step). Each case runs
in its own process tree; cases alternate over rounds and medians are reported:

* MinibatchRl: one process samples, then trains (1 torch thread);
* AsyncRl, sampler lead: the sampler in its own process on core 1, the
  optimizer on core 0 (``make_affinity(n_cpu_core=2, n_gpu=0,
  async_sample=True)``), the sampler kept within ``--lead_steps`` of the
  replay ratio, so both runners train the same number of times per step;
* AsyncRl, free sampler: as rlpyt, the sampler never waits (replay_ratio is
  only an upper bound: its effective ratio is printed).

Rates are taken from the first diagnostics row with updates to the last (the
warm-up before ``min_steps_learn`` is excluded; a free sampler that finishes
before two such rows is timed over its whole run). Target: AsyncRl (sampler
lead) >= 1.5x MinibatchRl's env steps/s on a 2-core machine.

    python benchmarks/async_vs_sync.py [--n_steps 30000] [--rounds 2] [--replay_ratio 8]
        [--heavy_us 150] [--lead_steps 512] [--cuda_idx 0]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import warn_if_cpus_busy

CASES = ("MinibatchRl", "AsyncRl, sampler lead", "AsyncRl, free sampler")


def busy_cartpole(heavy_us: float = 0., **kwargs: object):
    """CartPole-v1 whose every step also spins the CPU for ``heavy_us`` microseconds."""
    import gymnasium

    from rlframe.envs.gym import GymEnvWrapper

    class BusyStep(gymnasium.Wrapper):
        def step(self, action):
            end = time.perf_counter() + heavy_us * 1e-6
            while time.perf_counter() < end:
                pass
            return self.env.step(action)

    env = gymnasium.make("CartPole-v1", **kwargs)
    return GymEnvWrapper(BusyStep(env) if heavy_us > 0 else env)


def train(case: str, heavy_us: float, n_steps: int, replay_ratio: float, lead_steps: int,
          log_dir: str, cuda_idx: int | None) -> None:
    """One measured run (in a child process)."""
    from rlframe.agents.dqn.dqn_agent import DqnAgent
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.runners.async_rl import AsyncRl
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.launching.affinity import make_affinity
    from rlframe.utils.logging.context import logger_context

    sampler_kwargs = dict(EnvCls=busy_cartpole, env_kwargs=dict(heavy_us=heavy_us), batch_T=32,
                          batch_B=8, max_decorrelation_steps=0)
    algo = DQN(discount=0.99, batch_size=64, min_steps_learn=2048, replay_size=int(5e4),
               replay_ratio=replay_ratio, target_update_interval=96, n_step_return=3,
               learning_rate=2.3e-3, delta_clip=1., eps_steps=8000, double_dqn=True,
               prioritized_replay=True)
    agent = DqnAgent(eps_final=0.04, model_kwargs=dict(hidden_sizes=[128, 128]))
    common = dict(algo=algo, agent=agent, n_steps=n_steps, log_interval_steps=2048, seed=0)
    if case == "MinibatchRl":
        runner = MinibatchRl(sampler=SerialSampler(**sampler_kwargs),
                             affinity=dict(cuda_idx=cuda_idx, master_torch_threads=1), **common)
    else:
        affinity = make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0 if cuda_idx is None else 1,
                                 async_sample=True)
        if cuda_idx is not None:
            affinity["optimizer"][0]["cuda_idx"] = cuda_idx
        lead = lead_steps if case == "AsyncRl, sampler lead" else None
        runner = AsyncRl(sampler=AsyncSerialSampler(**sampler_kwargs), affinity=affinity,
                         sampler_lead_steps=lead, **common)
    with logger_context(log_dir, 0, "async_vs_sync", {}, override_prefix=True,
                        snapshot_mode="none"):
        runner.train()


def measure(case: str, **spec: object) -> tuple[float, float, float]:
    """(env steps/s, updates/s, effective replay ratio) of one run after learning starts."""
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = os.path.join(tmp, "run")
        args = [sys.executable, os.path.abspath(__file__), "--child",
                json.dumps(dict(spec, case=case, log_dir=log_dir))]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        result = subprocess.run(args, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise RuntimeError(f"{case} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        with open(os.path.join(log_dir, "run_0", "progress.csv")) as f:
            rows = list(csv.DictReader(f))

    def get(row: dict, key: str) -> float:
        return float(row.get(f"Diagnostics/{key}", row.get(key)))

    learning = [r for r in rows if get(r, "CumUpdates") > 0]
    last = rows[-1]
    # A free sampler may finish before two rows with updates: then the whole run.
    first = learning[0] if len(learning) > 1 else None
    keys = ("CumTime (s)", "CumSteps", "CumUpdates")
    seconds, steps, updates = (get(last, k) - (get(first, k) if first else 0.) for k in keys)
    seconds = max(seconds, 1e-9)
    return steps / seconds, updates / seconds, updates * 64 / max(steps, 1.)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n_steps", type=int, default=30000, help="env steps per run")
    parser.add_argument("--replay_ratio", type=float, default=8.)
    parser.add_argument("--heavy_us", type=float, default=150.,
                        help="CPU microseconds each step of the heavier env burns (0: no "
                             "heavier env)")
    parser.add_argument("--lead_steps", type=int, default=512,
                        help="sampler_lead_steps of the matched-ratio async case")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cuda_idx", type=int, default=None, help="optimizer GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        train(**json.loads(args.child))
        return
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    envs = {"CartPole-v1": 0.}
    if args.heavy_us > 0:
        envs[f"CartPole-v1 + {args.heavy_us:g} us/step"] = args.heavy_us
    print(f"DQN, sampler batch 32 x 8, replay_ratio {args.replay_ratio:g}, {args.n_steps} env "
          f"steps per run, {args.rounds} round(s):")
    print(f"{'env':<30}{'runner':<24}{'env steps/s':>12}{'updates/s':>11}"
          f"{'replay ratio':>14}{'steps ratio':>13}")
    footnote = False
    for env_name, heavy_us in envs.items():
        results: dict[str, list[tuple[float, float, float]]] = {case: [] for case in CASES}
        for _ in range(args.rounds):
            for case in CASES:
                results[case].append(measure(case, heavy_us=heavy_us, n_steps=args.n_steps,
                                             replay_ratio=args.replay_ratio,
                                             lead_steps=args.lead_steps,
                                             cuda_idx=args.cuda_idx))
        base = statistics.median(r[0] for r in results["MinibatchRl"])
        for case, runs in results.items():
            steps, updates, ratio = (statistics.median(r[i] for r in runs) for i in range(3))
            if updates == 0:
                footnote = True
                print(f"{env_name:<30}{case:<24}{'-':>12}{0:>11}{'-':>14}{'-':>13} *")
                continue
            print(f"{env_name:<30}{case:<24}{steps:>12.0f}{updates:>11.0f}{ratio:>14.2f}"
                  f"{steps / base:>12.2f}x")
    if footnote:
        print("* no update: the free sampler finished before the optimizer's first call")


if __name__ == "__main__":
    main()
