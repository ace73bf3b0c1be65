"""Timing shared by the benchmarks: alternating rounds, medians, sampler rates."""
import statistics
import time
from typing import Callable


def median_rates(cases: dict[str, Callable[[], None]], rounds: int,
                 items: int) -> dict[str, dict[str, float]]:
    """Items per second of each case, as medians over ``rounds``.

    Every case runs once to warm up; then each round runs every case in turn, so
    that machine load affects all of them alike.

    Args:
        cases: name -> a function that processes ``items`` items per call.

    Returns:
        ``{"wall": {name: rate}, "cpu": {name: rate}}``: per second of wall time,
        and of this process's CPU time (steadier on a busy machine).
    """
    for fn in cases.values():
        fn()
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            rates[name].append((items / (time.perf_counter() - wall),
                                items / (time.process_time() - cpu)))
    return {clock: {name: statistics.median(r[i] for r in rs) for name, rs in rates.items()}
            for i, clock in enumerate(("wall", "cpu"))}


def without_guard(algo) -> None:
    """``algo.optimize_agent(1)`` with the non-finite guard off: the same algorithm,
    replay and networks as the guarded case, so the difference is the guard."""
    limit, algo.non_finite_limit = algo.non_finite_limit, 0
    try:
        algo.optimize_agent(1)
    finally:
        algo.non_finite_limit = limit


def sampler_rate(sampler, agent, affinity: dict, n_itr: int, **initialize_kwargs) -> float:
    """Env steps per second of ``sampler`` over ``n_itr`` batches after one warm-up
    batch, seeded with 0; the sampler is shut down afterwards."""
    from rlframe.utils.seed import set_seed
    set_seed(0)
    sampler.initialize(agent, affinity=affinity, seed=0, **initialize_kwargs)
    try:
        sampler.obtain_samples(0)  # warm-up
        start = time.perf_counter()
        for itr in range(1, n_itr + 1):
            sampler.obtain_samples(itr)
        elapsed = time.perf_counter() - start
    finally:
        sampler.shutdown()
    return n_itr * sampler.batch_size / elapsed
