"""Measure the sampler set-ups an algorithm allows on this machine and keep the fastest.

A *candidate* is one way to run the standard experiment of ``build_experiment``:
the sampler (serial, cpu, gpu, alternating), its worker count, the env backend
(plain, gymnasium's vector env, EnvPool), ``batch_B`` (off-policy algorithms only,
where the replay ratio keeps the updates per env step), and the training process's
torch threads. Each is measured as it trains: sampling and updates together, from
the second iteration on (the first one warms up), in a process of its own.

The search is successive halving: every candidate gets a short measurement, the
best quarter (at least two, and any within 15% of the best, up to half) a longer one,
and the fastest of those by their longer measurement wins. Its full config, as ``rlframe
train --config`` takes it, is the result.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import multiprocessing
import multiprocessing.util
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Sequence

from rlframe.algos.off_policy import OffPolicyAlgorithm
from rlframe.presets.algos import ALGOS
from rlframe.presets.build import SAMPLERS, build_experiment
from rlframe.utils.launching.affinity import usable_cpus
from rlframe.utils.processes import master_alive, start_child, stop_in_order
from rlframe.utils.synchronize import process_context

MeasureFn = Callable[[list["Candidate"], float], Sequence[float]]
"""``(candidates of one set-up, seconds) -> env steps/s of each``."""

SAMPLER_CHOICES = tuple(SAMPLERS)
BACKEND_CHOICES = ("plain", "gymnasium", "envpool")
"""Env backends tried (of ``rlframe.envs.vector.ENV_BACKENDS``; gymnasium's
asynchronous one, a process per env, is left out)."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One set-up: the config keys it sets on top of the algorithm's preset."""

    sampler: str
    n_parallel: int | None
    env_backend: str
    batch_B: int
    torch_threads: int

    @property
    def label(self) -> str:
        workers = "" if self.n_parallel is None else f" x{self.n_parallel}"
        return (f"{self.sampler}{workers}, {self.env_backend}, B={self.batch_B}, "
                f"{self.torch_threads} thread{'s' if self.torch_threads > 1 else ''}")

    @property
    def setup(self) -> tuple[str, int | None, str, int]:
        """What one measuring process runs: all but the torch threads."""
        return self.sampler, self.n_parallel, self.env_backend, self.batch_B

    def config(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (a config of ``build_experiment``) run with this set-up."""
        kwargs = {section: dict(values) for section, values in (base.get("kwargs") or {}).items()}
        sampler_kwargs = kwargs.setdefault("sampler", {})
        if self.env_backend == "plain":
            sampler_kwargs.pop("env_backend", None)
        else:
            sampler_kwargs["env_backend"] = self.env_backend
        return {**base, "sampler": self.sampler, "n_parallel": self.n_parallel,
                "batch_B": self.batch_B, "torch_threads": self.torch_threads,
                "kwargs": kwargs}


@dataclasses.dataclass
class Measurement:
    """A candidate's measurements (env steps/s, one per round), or why it failed."""

    candidate: Candidate
    steps_per_second: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def score(self) -> float:
        """The last (longest) measurement; 0 for a failed candidate."""
        return self.steps_per_second[-1] if self.steps_per_second and not self.error else 0.


@dataclasses.dataclass
class AutotuneResult:
    """The measurements, best first, and the best candidate's config."""

    measurements: list[Measurement]
    best: Candidate
    config: dict[str, Any]

    def table(self) -> str:
        """A Markdown table of every candidate: env steps/s per round, best first."""
        n_rounds = max(len(m.steps_per_second) for m in self.measurements)
        head = ["set-up"] + [f"round {r + 1} steps/s" for r in range(n_rounds)]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in self.measurements:
            cells = [f"{v:,.0f}" for v in m.steps_per_second]
            cells += [""] * (n_rounds - len(cells))
            if m.error:
                cells = [f"failed: {m.error}"] + [""] * (n_rounds - 1)
            mark = " (chosen)" if m.candidate == self.best else ""
            lines.append("| " + " | ".join([m.candidate.label + mark] + cells) + " |")
        return "\n".join(lines)


def candidates(config: dict[str, Any], samplers: Sequence[str] = SAMPLER_CHOICES,
               backends: Sequence[str] | None = None, batch_Bs: Sequence[int] | None = None,
               torch_threads: Sequence[int] | None = None,
               n_cpu: int | None = None) -> tuple[list[Candidate], list[str]]:
    """The set-ups to measure for ``config`` (algo and env_id at least) on ``n_cpu`` cores.

    Parallel samplers get every worker count from 2 to ``n_cpu`` that divides
    ``batch_B`` (the alternating sampler: twice that count of worker groups); on one
    core, one worker. Backends default to those that can run the env: gymnasium's for
    gymnasium envs, EnvPool when installed and it has the task. Off-policy algorithms
    try ``batch_B`` and twice it; on-policy ones keep the config's (it sets the batch
    their updates learn from). Torch threads: 1 and ``n_cpu``.

    Returns:
        ``(candidates, notes)``: notes say what was left out and why.
    """
    for name in samplers:
        if name not in SAMPLER_CHOICES:
            raise ValueError(f"autotune: unknown sampler {name!r}; samplers: "
                             f"{', '.join(SAMPLER_CHOICES)}.")
    n_cpu = n_cpu or len(usable_cpus() or []) or os.cpu_count() or 1
    _, full = build_experiment({**config, "n_parallel": None, "sampler": "serial"})
    notes: list[str] = []
    if backends is None:
        backends, notes = _runnable_backends(full)
    for name in backends:
        if name not in BACKEND_CHOICES:
            raise ValueError(f"autotune: unknown env backend {name!r}; backends: "
                             f"{', '.join(BACKEND_CHOICES)}.")
    B = full["batch_B"]
    if batch_Bs is None:
        batch_Bs = (B, 2 * B) if _off_policy(full["algo"]) else (B,)
    threads = sorted(set(torch_threads or (1, n_cpu)))
    out = []
    for b in batch_Bs:
        for sampler in samplers:
            per_worker = 2 if sampler == "alternating" else 1
            if sampler == "serial":
                counts: list[int | None] = [None]
            else:
                counts = [k for k in range(min(2, n_cpu), n_cpu + 1) if b % (k * per_worker) == 0]
                if not counts:
                    notes.append(f"{sampler} sampler with B={b}: no worker count from "
                                 f"{min(2, n_cpu)} to {n_cpu} divides B into "
                                 f"{'pairs of ' if per_worker == 2 else ''}equal groups")
            for k in counts:
                for backend in backends:
                    candidate = Candidate(sampler, k, backend, b, threads[0])
                    try:  # The config checks (e.g. a collector a backend cannot hold).
                        build_experiment(candidate.config(config))
                    except ValueError as error:
                        notes.append(f"{candidate.label.rsplit(',', 1)[0]}: "
                                     f"{' '.join(str(error).split())}")
                        continue
                    out.extend(dataclasses.replace(candidate, torch_threads=t) for t in threads)
    return out, notes


def select(cands: Sequence[Candidate], measure: MeasureFn, seconds: Sequence[float] = (1., 5.),
           keep: float = 1 / 4, margin: float = 0.15) -> list[Measurement]:
    """Successive halving: measure all, then the best ``keep`` share again, longer.

    Candidates that differ only in torch threads form one set-up, measured by one
    ``measure`` call (one start-up and warm-up for all its thread counts).

    Args:
        cands: the candidates.
        measure: ``(candidates of one set-up, seconds) -> env steps/s of each``; an
            exception marks them failed (its message is kept) and drops them.
        seconds: the measuring time of each candidate in each round.
        keep: share of the candidates measured in the next round (at least two), and
            any within ``margin`` of the round's best up to half of them.
        margin: relative distance to the best that stays in the running.

    Returns:
        Measurements, best first: the finalists by their last measurement, then the
        others by theirs, failed ones last.
    """
    results = [Measurement(c) for c in cands]
    alive = list(results)
    for r, duration in enumerate(seconds):
        for group in _setups(alive):
            try:
                speeds = measure([m.candidate for m in group], duration)
            except Exception as error:  # A set-up that cannot run here.
                for m in group:
                    m.error = " ".join(str(error).split()) or type(error).__name__
                continue
            for m, speed in zip(group, speeds):
                m.steps_per_second.append(float(speed))
        alive = sorted((m for m in alive if not m.error), key=lambda m: -m.score)
        if not alive:
            errors = sorted({m.error for m in results if m.error})
            raise RuntimeError(f"autotune: every set-up failed ({len(results)}), with "
                               f"{'this error' if len(errors) == 1 else 'these errors'}: "
                               + "; ".join(errors))
        if r + 1 < len(seconds):
            n_keep, n_most = max(2, math.ceil(keep * len(alive))), max(2, math.ceil(len(alive) / 2))
            best = alive[0].score
            alive = [m for i, m in enumerate(alive)
                     if i < n_keep or (i < n_most and m.score >= (1 - margin) * best)]
    finalists = {id(m) for m in alive}
    rank = {id(m): i for i, m in enumerate(alive)}
    return sorted(results, key=lambda m: (m.error is not None, id(m) not in finalists,
                                          rank.get(id(m), 0), -m.score))


def autotune(algo: str, env_id: str, config: dict[str, Any] | None = None,
             seconds: Sequence[float] = (1., 5.), samplers: Sequence[str] = SAMPLER_CHOICES,
             backends: Sequence[str] | None = None, batch_Bs: Sequence[int] | None = None,
             torch_threads: Sequence[int] | None = None,
             progress: Callable[[str], None] | None = None) -> AutotuneResult:
    """Measure the set-ups ``algo`` allows on ``env_id`` here and return the fastest.

    Args:
        algo, env_id: as for ``rlframe train``.
        config: further config keys of ``build_experiment`` (``kwargs``, ``batch_T``,
            ``cuda_idx``, ...), kept in every candidate.
        seconds: measuring time per candidate in each round (see :func:`select`).
        samplers, backends, batch_Bs, torch_threads: the choices to try (see
            :func:`candidates`).
        progress: called with a line per measurement (e.g. ``print``).

    Returns:
        The measurements and the best candidate's full config (no seed), which
        ``build_experiment`` and ``rlframe train --config`` take.
    """
    base = {**(config or {}), "algo": algo, "env_id": env_id}
    cands, notes = candidates(base, samplers, backends, batch_Bs, torch_threads)
    say = progress or (lambda line: None)
    for note in notes:
        say(f"left out: {note}")
    say(f"{len(cands)} set-ups, {len(seconds)} rounds of {', '.join(f'{s:g}' for s in seconds)} s")

    def measure(group: list[Candidate], duration: float) -> list[float]:
        start = time.perf_counter()
        speeds = measure_in_process(group[0].config(base), duration,
                                    [c.torch_threads for c in group])
        for c, speed in zip(group, speeds):
            say(f"  {c.label}: {speed:,.0f} env steps/s ({duration:g} s)")
        say(f"    ({time.perf_counter() - start:.1f} s with start-up and warm-up)")
        return speeds

    measurements = select(cands, measure, seconds)
    best = measurements[0].candidate
    _, full = build_experiment(best.config(base))
    full.pop("seed", None)
    return AutotuneResult(measurements, best, full)


def measure_in_process(config: dict[str, Any], seconds: float,
                       torch_threads: Sequence[int | None] = (None,),
                       timeout: float | None = None) -> list[float]:
    """:func:`measure_config` in a child process (its pinning, threads and workers stay
    there); on Linux the child ends with this process.

    Raises:
        RuntimeError: the set-up failed (the child's error), or it ran past ``timeout``
            (default: 120 s for start-up and warm-up, plus ``seconds`` per thread count).
    """
    timeout = 120. + seconds * len(torch_threads) if timeout is None else timeout
    # Not a fork: threads of the parent (EnvPool's, torch's) may hold locks a forked
    # child would wait on forever. A forkserver forks children from a process with
    # torch and rlframe imported (and torch._dynamo, which the first optimizer imports).
    methods = multiprocessing.get_all_start_methods()
    context = process_context("forkserver" if "forkserver" in methods else "spawn",
                              preload=("rlframe.presets.autotune", "torch._dynamo"))
    receiver, sender = context.Pipe(duplex=False)
    # This process's multiprocessing folder (the forkserver's socket is in it): removed
    # by the child should this process be killed, as it would have been at its exit.
    master_dir = multiprocessing.util.get_temp_dir()
    child = context.Process(target=_measure_child, name="rlframe-autotune", daemon=False,
                            args=(config, seconds, list(torch_threads), sender, os.getpid(),
                                  master_dir))
    child.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise RuntimeError(f"no result within {timeout:g} s")
        ok, value = receiver.recv()
    except EOFError:
        ok, value = False, f"the measuring process died (exit code {child.exitcode})"
    except BaseException:  # Ctrl-C, or no result in time: stop the child now.
        stop_in_order([child], join_s=0., terminate_s=10.)
        raise
    finally:
        stop_in_order([child], join_s=10., terminate_s=10.)  # It has sent its result.
        receiver.close()
    if not ok:
        raise RuntimeError(value)
    return value


def measure_config(config: dict[str, Any], seconds: float,
                   torch_threads: Sequence[int | None] = (None,),
                   warmup_itrs: int = 1) -> list[float]:
    """Env steps/s of ``config``'s training iterations (sampling and updates) with each
    of ``torch_threads`` (None: the config's), each timed for at least ``seconds`` and one
    iteration, after ``warmup_itrs`` iterations.

    Off-policy algorithms learn from the warm-up's samples on (``min_steps_learn`` is
    set to them), so that the updates are timed too; envs start undecorrelated and no
    evaluation runs.
    """
    from rlframe.utils.launching.pinning import set_torch_threads
    from rlframe.utils.logging.context import logger_context
    config = _measuring_config(config, warmup_itrs)
    runner, full = build_experiment(config)
    speeds = []
    with tempfile.TemporaryDirectory(prefix="rlframe-autotune-") as tmp, \
            logger_context(tmp, 0, "autotune", full, override_prefix=True):
        runner.bind_logger()
        runner.startup()
        try:
            for itr in range(warmup_itrs):
                _iteration(runner, itr)
            itr = warmup_itrs
            for n_threads in torch_threads:
                if n_threads is not None:
                    set_torch_threads(n_threads)
                start, first = time.perf_counter(), itr
                while True:
                    _iteration(runner, itr)
                    itr += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= seconds:
                        break
                speeds.append((itr - first) * runner.itr_batch_size / elapsed)
        finally:
            runner.shutdown()
    return speeds


def _iteration(runner: Any, itr: int) -> None:
    runner.agent.sample_mode(itr)
    samples, _ = runner.sampler.obtain_samples(itr)
    runner.agent.train_mode(itr)
    runner.algo.optimize_agent(itr, samples)


def _measuring_config(config: dict[str, Any], warmup_itrs: int) -> dict[str, Any]:
    """``config`` without evaluation, learning from the warm-up's samples on."""
    _, full = build_experiment(config)
    kwargs = {section: dict(values) for section, values in full["kwargs"].items()}
    kwargs["sampler"].update(eval_n_envs=0, max_decorrelation_steps=0)  # A MinibatchRl.
    if _off_policy(full["algo"]):
        steps = full["batch_T"] * full["batch_B"] * warmup_itrs
        batch = kwargs["algo"].get("batch_size", 32)
        kwargs["algo"]["min_steps_learn"] = max(steps, batch)
    return {**full, "kwargs": kwargs}


def _off_policy(algo: str) -> bool:
    """Whether the preset algorithm ``algo`` learns from a replay buffer."""
    return issubclass(ALGOS[algo].AlgoCls, OffPolicyAlgorithm)


def _measure_child(config: dict[str, Any], seconds: float, torch_threads: list[int | None],
                   sender: Any, master_pid: int, master_dir: str) -> None:
    """Child process: measure quietly and send ``(True, [steps/s])`` or ``(False, error)``.

    Ctrl-C is the master's to handle (it stops this process). Should the master die,
    this process removes the master's multiprocessing folder ``master_dir`` and sends
    itself SIGTERM, on which the runner shuts the workers down: its parent is the
    forkserver, which may outlive the master.
    """
    start_child()
    _watch_master(master_pid, master_dir)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):  # The run's log lines and warnings, its workers' included.
        os.dup2(devnull, fd)
    warnings.simplefilter("ignore")
    try:
        result: tuple[bool, Any] = (True, measure_config(config, seconds, torch_threads))
    except Exception as error:  # Reported to the parent, which keeps measuring.
        last = traceback.extract_tb(error.__traceback__)[-1:]
        where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
        result = (False, f"{type(error).__name__}: {error}{where}")
    sender.send(result)
    sender.close()


def _runnable_backends(full: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Backends that can step ``full``'s env, and notes on those that cannot."""
    from rlframe.presets.envs import resolve_env
    target = resolve_env(full["env_id"], full["kwargs"].get("env", {}))
    backends, notes = ["plain"], []
    if target.profile == "atari":
        notes.append("gymnasium backend: Atari runs on AtariEnv, not a gymnasium env")
    else:
        backends.append("gymnasium")
    if importlib.util.find_spec("envpool") is None:
        notes.append('envpool backend: EnvPool is not installed (pip install -e ".[envpool]")')
        return backends, notes
    from rlframe.envs.vector import make_vec_env
    try:
        make_vec_env("envpool", target.EnvCls, target.env_kwargs, 1).close()
    except (ValueError, ImportError) as error:
        notes.append(f"envpool backend: {' '.join(str(error).split())}")
    else:
        backends.append("envpool")
    return backends, notes


def _setups(measurements: list[Measurement]) -> list[list[Measurement]]:
    """``measurements`` grouped by set-up (all but torch threads), in first-seen order."""
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.candidate.setup, []).append(m)
    return list(groups.values())


def _watch_master(pid: int, master_dir: str, interval_s: float = 0.5) -> None:
    """A daemon thread that, once process ``pid`` has ended, removes its multiprocessing
    folder ``master_dir`` (a killed process leaves it) and sends this process SIGTERM."""
    def watch() -> None:
        while master_alive(pid):
            time.sleep(interval_s)
        if os.path.basename(master_dir).startswith("pymp-"):
            shutil.rmtree(master_dir, ignore_errors=True)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=watch, name="rlframe-autotune-master-watch", daemon=True).start()
