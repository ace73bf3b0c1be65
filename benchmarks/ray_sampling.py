"""RaySampler against CpuSampler, Ray's transfer costs, and how many nodes a PPO learner feeds.

Three measurements in one run, then a projection on paper from them:

1. Throughput: env steps/s of CpuSampler (2 worker processes pinned to two of
   this machine's cores) and RaySampler (2 actors on a local Ray) on the same
   cores, the same env (HalfCheetah-v5) and the same agent (MujocoFfAgent with
   PPO-on-MuJoCo's 64x64 model and observation normalization), for each
   batch_B, with ``--steps_per_itr`` env steps per iteration (batch_T =
   steps_per_itr / batch_B, a PPO batch); for reference also a CpuSampler whose
   workers are not pinned (on a busy machine a pinned worker cannot move away
   from a loaded core). The samplers stay up side by side; rounds of
   ``--n_itr`` iterations alternate between them (medians). RaySampler
   publishes the parameters every iteration, as in training; CpuSampler's
   workers read them from shared memory. Target: Ray/Cpu >= 0.8 at batch_B=64.
2. Transfers, for a model of about 1M parameters (``--hidden`` units in each
   of the two hidden layers of the policy and value MLPs): each part of one
   RaySampler iteration that moves data, timed on its own through the
   sampler's actors (medians over ``--rounds``; an empty actor call's round
   trip is subtracted from the round trips):
     * publish, master: the state dict copied to CPU and ``ray.put`` once;
     * publish, workers: every actor fetches it and loads it into its agent;
     * batch, fetch: ``ray.get`` of every actor's [T, B/2] numpy chunks;
     * batch, write: the chunks copied into the master's [T, B] buffer;
   and a whole iteration of both samplers with that model, for comparison.
3. Learner: one ``PPO.optimize_agent`` on a sampled batch of steps_per_itr
   steps with the settings of examples/example_ppo_mujoco.py (10 epochs of 32
   minibatches), on ``--learner_threads`` torch threads of this CPU, for both
   models.

Projection: see ``PROJECTION`` below (printed with the figures). On a shared
machine the figures move with other load; the load average is printed.

    python benchmarks/ray_sampling.py [--batch_B 8 64] [--steps_per_itr 4096]
        [--n_itr 3] [--rounds 3] [--hidden 700] [--node_cores 32] [--network_gbps 10]
    python benchmarks/ray_sampling.py --quick     # tiny sizes, a smoke test
"""
import argparse
import logging
import os
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch
from _timing import median_rates, warn_if_cpus_busy

from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.utils.buffer import buffer_func
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed

N_WORKERS = 2
PPO_MUJOCO = dict(discount=0.99, learning_rate=3e-4, gae_lambda=0.95, minibatches=32, epochs=10,
                  ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
                  clip_grad_norm=0.5, normalize_advantage=True)


def make_agent(hidden: int | None) -> MujocoFfAgent:
    """PPO-on-MuJoCo's agent; ``hidden`` units per hidden layer (None: the 64x64 default)."""
    kwargs: dict[str, Any] = dict(normalize_observation=True)
    if hidden is not None:
        kwargs["hidden_sizes"] = [hidden, hidden]
    return MujocoFfAgent(model_kwargs=kwargs)


def make_samplers(args: argparse.Namespace, batch_B: int, hidden: int | None,
                  cores: list[int], unpinned: bool = False) -> dict[str, Any]:
    """A CpuSampler and a RaySampler, and with ``unpinned`` a CpuSampler whose workers
    are not pinned (each with its own agent, seeded alike), initialized; name ->
    ``(sampler, examples)``."""
    from rlframe.samplers.ray import RaySampler
    batch_T = args.steps_per_itr // batch_B
    common = dict(EnvCls=gym_make, env_kwargs=dict(id=args.env_id), batch_T=batch_T,
                  batch_B=batch_B, max_decorrelation_steps=0)
    samplers = {"Cpu": CpuSampler(**common), "Ray": RaySampler(**common, n_workers=N_WORKERS)}
    if unpinned:
        samplers["Cpu unpinned"] = CpuSampler(**common)
    affinity = dict(workers_cpus=cores, worker_torch_threads=1)
    started = {}
    try:
        for name, sampler in samplers.items():
            set_seed(0)
            examples = sampler.initialize(
                make_agent(hidden), affinity=dict(affinity, set_affinity=name != "Cpu unpinned"),
                seed=0, bootstrap_value=True)
            started[name] = (sampler, examples)
    except BaseException:
        for sampler, _ in started.values():
            sampler.shutdown()
        raise
    return started


def iterations(sampler: Any, n_itr: int) -> Callable[[], None]:
    """A function running ``n_itr`` sampler iterations (counting on from the last call)."""
    counter = [0]

    def run() -> None:
        for _ in range(n_itr):
            sampler.obtain_samples(counter[0])
            counter[0] += 1
    return run


def sampler_rates(samplers: dict[str, Any], args: argparse.Namespace) -> dict[str, float]:
    """Median env steps/s (wall clock) of each sampler, rounds alternating between them."""
    cases = {name: iterations(sampler, args.n_itr) for name, (sampler, _) in samplers.items()}
    return median_rates(cases, args.rounds, args.n_itr * args.steps_per_itr)["wall"]


# Run inside the Ray actors through ``__ray_call__`` (the actor is the first argument).
def _noop(worker: Any) -> None:
    return None


def _load(worker: Any, version: int, params_ref: list) -> float:
    start = time.perf_counter()
    worker._load_params(version, params_ref)
    return time.perf_counter() - start


def _chunk(worker: Any) -> Any:
    return worker.samples_np


def _median_seconds(fn: Callable[[], Any], rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def transfer_costs(sampler: Any, rounds: int) -> dict[str, float]:
    """Seconds per iteration of each data movement of a RaySampler (see the docstring)."""
    import ray
    workers = sampler.workers

    def call(fn: Callable, *fn_args: Any) -> list:
        return ray.get([w.__ray_call__.remote(fn, *fn_args) for w in workers])

    empty = _median_seconds(lambda: call(_noop), rounds)
    put = _median_seconds(sampler._publish_params, rounds)
    loads: list[float] = []

    def publish_and_load() -> None:
        version, ref = sampler._publish_params()
        loads.append(max(call(_load, version, ref)))
    publish = _median_seconds(publish_and_load, rounds)
    chunks = call(_chunk)
    B_w = sampler.B_per_worker

    def write() -> None:
        for w, chunk in enumerate(chunks):
            sampler.samples_np[:, w * B_w:(w + 1) * B_w] = chunk
    # publish: put and every worker's load, as the master waits for them.
    return dict(empty_call=empty, put=put, load_in_worker=statistics.median(loads[1:]),
                publish=max(0., publish - empty),
                fetch=max(0., _median_seconds(lambda: call(_chunk), rounds) - empty),
                write=_median_seconds(write, rounds))


def nbytes(tree: Any) -> int:
    """Bytes of every array of a (named) tuple tree of numpy arrays."""
    if isinstance(tree, np.ndarray):
        return tree.nbytes
    if isinstance(tree, tuple):
        return sum(nbytes(leaf) for leaf in tree)
    return 0


def learner_seconds(agent: MujocoFfAgent, samples: Any, batch_spec: Any, examples: Any,
                    rounds: int, minibatches: int) -> float:
    """Median seconds of one ``PPO.optimize_agent`` on ``samples`` [T, B]."""
    algo = PPO(**dict(PPO_MUJOCO, minibatches=minibatches))
    algo.initialize(agent, n_itr=10_000, batch_spec=batch_spec, mid_batch_reset=True,
                    examples=examples)
    itr = [0]

    def update() -> None:
        agent.train_mode(itr[0])
        algo.optimize_agent(itr[0], samples)
        itr[0] += 1
    return _median_seconds(update, rounds)


def n_params(agent: MujocoFfAgent) -> int:
    return sum(p.numel() for p in agent.model.parameters())


def state_bytes(agent: MujocoFfAgent) -> int:
    return sum(v.numel() * v.element_size() for v in agent.state_dict().values())


PROJECTION = """\
Projection (on paper, from the figures above):
  c      = RaySampler steps/s at batch_B={B} / {w} workers: one core's sampling rate
  R_node = node_cores x c: one worker node's rate, assuming it scales linearly over its
           {cores} cores (one Ray worker per core, as many envs per worker as measured)
  L      = S / t_update: steps/s the learner consumes (S = {S} steps per iteration;
           PPO's update time grows with S, so L hardly depends on S)
  N*     = L / R_node: worker nodes whose sampling matches the learner. With fewer,
           the learner waits for samples; with more, the learner is the bottleneck.
  With transfers the learner's time per iteration is
  t_L(N) = t_update + t_put + t_fetch + t_write + (S x b_step + N x P) / BW
  (b_step: bytes of one step of the batch, P: bytes of the parameters, BW: the learner
  node's network bandwidth, {gbps:g} Gb/s assumed; the master sends the parameters to each
  node once, the worst case for Ray's object transfer), and N* is the largest N with
  N x R_node <= S / t_L(N). The sampler here is synchronous: sampling and the update
  alternate, so at N* a batch takes twice the update's time (steps/s = L_eff / 2);
  overlapping them (an asynchronous sampler) would reach L_eff itself. N* grows in
  proportion to the learner's speed (more threads, a GPU) and shrinks with node_cores."""


def nodes_fed(r_node: float, S: int, t_fixed: float, b_step: float, P: float,
              bandwidth: float) -> int:
    """The largest N with ``N * r_node <= S / t_L(N)`` (at least 0)."""
    n = 0
    while (n + 1) * r_node <= S / (t_fixed + (S * b_step + (n + 1) * P) / bandwidth):
        n += 1
        if n > 100_000:
            break
    return n


def project(name: str, c: float, t_update: float, costs: dict[str, float], S: int,
            b_step: float, P: float, args: argparse.Namespace) -> None:
    r_node = args.node_cores * c
    L = S / t_update
    bandwidth = args.network_gbps * 1e9 / 8
    t_fixed = t_update + costs["put"] + costs["fetch"] + costs["write"]
    n_compute = L / r_node
    n_eff = nodes_fed(r_node, S, t_fixed, b_step, P, bandwidth)
    t_l = t_fixed + (S * b_step + max(n_eff, 1) * P) / bandwidth
    print(f"  {name}: c = {c:,.0f} steps/s/core, R_node = {r_node:,.0f} steps/s, "
          f"t_update = {t_update:.3f} s, L = {L:,.0f} steps/s")
    print(f"    compute only: N* = L / R_node = {n_compute:.2f} nodes of {args.node_cores} cores "
          f"(L / c = {L / c:.1f} sampling cores)")
    print(f"    with transfers: t_L = {t_l:.3f} s, L_eff = {S / t_l:,.0f} steps/s, "
          f"N* = {n_eff} node(s) (continuous: {S / t_l / r_node:.2f}); feeding one node "
          f"takes a learner {r_node * t_l / S:.0f}x as fast")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env_id", default="HalfCheetah-v5")
    parser.add_argument("--batch_B", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--steps_per_itr", type=int, default=4096,
                        help="env steps per iteration (batch_T = steps_per_itr / batch_B)")
    parser.add_argument("--n_itr", type=int, default=3, help="iterations per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=700,
                        help="units per hidden layer of the ~1M-parameter model")
    parser.add_argument("--minibatches", type=int, default=32, help="PPO minibatches")
    parser.add_argument("--learner_threads", type=int, default=1)
    parser.add_argument("--node_cores", type=int, default=32,
                        help="cores of a worker node, for the projection")
    parser.add_argument("--network_gbps", type=float, default=10.,
                        help="learner node's network bandwidth, for the projection")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    if args.quick:
        args.batch_B, args.steps_per_itr, args.n_itr, args.rounds = [4], 64, 1, 1
        args.hidden, args.minibatches = 32, 2
    for B in args.batch_B:
        if B % N_WORKERS or args.steps_per_itr % B:
            parser.error(f"--batch_B {B} must be a multiple of {N_WORKERS} and divide "
                         f"--steps_per_itr {args.steps_per_itr}.")
    import ray
    cores = sorted(os.sched_getaffinity(0))[:N_WORKERS] if hasattr(os, "sched_getaffinity") \
        else list(range(N_WORKERS))
    torch.set_num_threads(1)  # The master's own work (the batch write): one thread.
    logger.disable()
    print(f"{args.env_id}, {N_WORKERS} workers (CpuSampler pinned to cores {cores}, "
          f"RaySampler on a local Ray with {N_WORKERS} CPUs), {args.steps_per_itr} steps "
          f"per iteration, {args.rounds} rounds x {args.n_itr} iterations; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    # "local": a Ray of this run's own, even where `ray start` left a cluster to find.
    ray.init(address="local", num_cpus=N_WORKERS, include_dashboard=False,
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        run(args, cores)
    finally:
        ray.shutdown()
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def run(args: argparse.Namespace, cores: list[int]) -> None:
    S = args.steps_per_itr
    print("\n1. Throughput, MujocoFfAgent 64x64 (PPO on MuJoCo)")
    print(f"{'batch_B':>8} {'batch_T':>8} {'Cpu steps/s':>12} {'Ray steps/s':>12} "
          f"{'Ray/Cpu':>8} {'Cpu unpinned':>13} {'Ray/unpinned':>13}")
    rates: dict[int, dict[str, float]] = {}
    small: dict[str, Any] = {}
    small_costs: dict[str, float] = {}
    for B in args.batch_B:
        samplers = make_samplers(args, B, None, cores, unpinned=True)
        try:
            rates[B] = sampler_rates(samplers, args)
            if B == args.batch_B[-1]:
                sampler, examples = samplers["Cpu"]
                small = dict(agent=sampler.agent, examples=examples,
                             samples=buffer_func(sampler.samples_pyt, torch.clone),
                             batch_spec=sampler.batch_spec)
                small_costs = transfer_costs(samplers["Ray"][0], args.rounds)
        finally:
            for sampler, _ in samplers.values():
                sampler.shutdown()
        r = rates[B]
        print(f"{B:>8} {S // B:>8} {r['Cpu']:>12,.0f} {r['Ray']:>12,.0f} "
              f"{r['Ray'] / r['Cpu']:>8.2f} {r['Cpu unpinned']:>13,.0f} "
              f"{r['Ray'] / r['Cpu unpinned']:>13.2f}")
    print("(Cpu: workers pinned to one core each, as CpuSampler runs by default; Cpu "
          "unpinned: set_affinity=False, free to move like Ray's actors)")

    B = args.batch_B[-1]
    samplers = make_samplers(args, B, args.hidden, cores)
    try:
        ray_sampler, _ = samplers["Ray"]
        agent = ray_sampler.agent
        P, count = state_bytes(agent), n_params(agent)
        print(f"\n2. Transfers, {args.hidden}x{args.hidden} model: {count:,} parameters "
              f"({P / 1e6:.2f} MB state dict), batch_B={B}, batch_T={S // B}")
        big_rates = sampler_rates(samplers, args)
        costs = transfer_costs(ray_sampler, args.rounds)
        batch_bytes = nbytes(ray_sampler.samples_np)
        b_step = batch_bytes / S
        big = dict(agent=samplers["Cpu"][0].agent, examples=samplers["Cpu"][1],
                   samples=buffer_func(samplers["Cpu"][0].samples_pyt, torch.clone),
                   batch_spec=samplers["Cpu"][0].batch_spec)
    finally:
        for sampler, _ in samplers.values():
            sampler.shutdown()
    t_ray_itr = S / big_rates["Ray"]
    moved = costs["publish"] + costs["fetch"] + costs["write"]
    print(f"  whole iteration: Cpu {big_rates['Cpu']:,.0f} steps/s, Ray "
          f"{big_rates['Ray']:,.0f} steps/s (Ray/Cpu {big_rates['Ray'] / big_rates['Cpu']:.2f}"
          f"), {t_ray_itr * 1e3:.1f} ms per Ray iteration")
    print(f"  {'empty actor call, round trip (subtracted below)':<58}"
          f"{costs['empty_call'] * 1e3:>9.2f} ms")
    print(f"  {'publish, master: state dict to CPU + ray.put':<58}{costs['put'] * 1e3:>9.2f} ms")
    print(f"  {'publish, workers: fetch + load_state_dict (seen by master)':<58}"
          f"{max(0., costs['publish'] - costs['put']) * 1e3:>9.2f} ms")
    print(f"  {'  of which inside the slowest worker':<58}"
          f"{costs['load_in_worker'] * 1e3:>9.2f} ms")
    print(f"  {'batch, fetch: ray.get of the workers numpy chunks':<58}"
          f"{costs['fetch'] * 1e3:>9.2f} ms  ({batch_bytes / 1e6:.2f} MB, "
          f"{b_step:.0f} B/step)")
    print(f"  {'batch, write into the master buffer':<58}{costs['write'] * 1e3:>9.2f} ms")
    print(f"  {'all data movement per iteration':<58}{moved * 1e3:>9.2f} ms  "
          f"({moved / t_ray_itr:.1%} of the Ray iteration)")

    torch.set_num_threads(args.learner_threads)
    print(f"\n3. Learner: PPO.optimize_agent on {S} steps, {PPO_MUJOCO['epochs']} epochs x "
          f"{args.minibatches} minibatches, {args.learner_threads} torch thread(s)")
    t_small = learner_seconds(**small, rounds=args.rounds, minibatches=args.minibatches)
    t_big = learner_seconds(**big, rounds=args.rounds, minibatches=args.minibatches)
    print(f"  {'64x64 model:':<16}{t_small:.3f} s per iteration ({S / t_small:,.0f} steps/s)")
    print(f"  {f'{args.hidden}x{args.hidden} model:':<16}{t_big:.3f} s per iteration "
          f"({S / t_big:,.0f} steps/s)")

    print("\n" + PROJECTION.format(B=B, w=N_WORKERS, cores=args.node_cores, S=S,
                                   gbps=args.network_gbps))
    print(f"Figures (node_cores={args.node_cores}, {args.network_gbps:g} Gb/s):")
    small_P = state_bytes(small["agent"])
    project("64x64 model", rates[B]["Ray"] / N_WORKERS, t_small, small_costs, S, b_step,
            small_P, args)
    project(f"{args.hidden}x{args.hidden} model", big_rates["Ray"] / N_WORKERS, t_big, costs,
            S, b_step, P, args)


if __name__ == "__main__":
    main()
