"""Timing shared by the benchmarks: alternating rounds, medians, sampler rates, timed
windows of training runs, and children whose peak memory is read when they are reaped."""
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable


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


def run_reaped(command: list[str], cwd: str, env: dict, log_path: str) -> tuple[int, float]:
    """Run ``command`` with its output in ``log_path``; kill it if the wait is interrupted.

    Returns:
        ``(exit code, peak RSS in MiB)``, the RSS read from the kernel when the child is
        reaped (``os.wait4``): the child's own, whatever its parent holds.
    """
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    return (os.waitstatus_to_exitcode(status),
            usage.ru_maxrss / (2 ** 20 if sys.platform == "darwin" else 2 ** 10))


class Window:
    """Wall-clock and process CPU time of one timed window of a run."""

    def __init__(self) -> None:
        self._start: tuple[float, float] | None = None
        self._end: tuple[float, float] | None = None

    def open(self) -> None:
        self._start = (time.perf_counter(), time.process_time())

    def close(self) -> None:
        """End the window; a window never opened stays unopened (``result`` says so)."""
        if self._start is not None:
            self._end = (time.perf_counter(), time.process_time())

    def result(self, steps: int, warmup_steps: int, setup: str) -> dict:
        """``dict(steps, seconds, cpu_seconds, warmup_steps, setup)`` of the window."""
        if self._start is None or self._end is None:
            missing = "opened" if self._start is None else "closed"
            raise RuntimeError(f"the timed window of {steps} steps after {warmup_steps} was "
                               f"never {missing}: the run did not reach the clock's boundary.")
        return dict(steps=steps, seconds=self._end[0] - self._start[0],
                    cpu_seconds=self._end[1] - self._start[1], warmup_steps=warmup_steps,
                    setup=setup)


def sb3_without_log_folder(model: Any) -> Any:
    """Give an SB3 model a logger with no outputs, and return the model.

    Without a logger of its own, every ``learn()`` configures one that makes an empty
    ``SB3-<time>`` folder in the temporary directory; these scripts log their own figures.
    """
    from stable_baselines3.common.logger import Logger
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def sb3_window_callback(window: Window, start_steps: int) -> Any:
    """An SB3 callback that opens ``window`` at the rollout beginning at ``start_steps``
    (the warm-up trained) and closes it when ``learn()`` returns from its last updates."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Sb3WindowCallback(BaseCallback):
        def _on_rollout_start(self) -> None:
            if self.model.num_timesteps == start_steps:
                window.open()

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            window.close()

    return Sb3WindowCallback()


def warn_if_cpus_busy() -> None:
    """Print a warning (stderr) when other processes keep this process's CPUs busy: the
    figures measured then understate this machine. Measured for a second in a child
    process, so that this one imports nothing for it (some scripts keep their parent
    small for the peak memory they measure)."""
    code = ("from rlframe.utils.system import warn_if_cpus_busy; "
            "warn_if_cpus_busy('this benchmark')")
    subprocess.run([sys.executable, "-c", code], check=False)
