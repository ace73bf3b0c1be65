"""The diagnostics row every runner logs at its log points, and the statistics behind it.

:class:`DiagnosticsRow` builds one row of progress.csv in its final column order, from
the parts every runner shares: the head (the training-trajectory window of
:class:`MinibatchRl` / :class:`AsyncRl`, or an evaluation's columns), the runner's
counters and rates, the sampler's ``diagnostics()``, then the statistics of every
trajectory field and every opt-info field. :class:`RunStatistics` holds the counters
the rows are built from, with ``state_dict()`` / ``load_state_dict()`` for resuming.
"""
from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING, Generic, Iterable, Sequence, TypeVar, overload

from rlframe.utils.logging.current import current_logger
from rlframe.utils.logging.run_logger import Logger

if TYPE_CHECKING:
    from rlframe.algos.base import RlAlgorithm
    from rlframe.samplers.base import BaseSampler
    from rlframe.samplers.collections import TrajInfo

DIAGNOSTICS_PREFIX = "Diagnostics/"
T = TypeVar("T")


def sampler_diagnostics(sampler: object) -> dict[str, float]:
    """The sampler's ``diagnostics()`` (``{}`` for samplers without the method)."""
    diagnostics = getattr(sampler, "diagnostics", None)
    return {} if diagnostics is None else dict(diagnostics())


def steps_in(traj_infos: Iterable[TrajInfo]) -> int:
    """Env steps of the trajectories ``traj_infos`` (the sum of their ``Length``)."""
    return sum(info["Length"] for info in traj_infos)


class DiagnosticsRow:
    """One row of progress.csv, built column by column in its final order.

    The columns added with :meth:`add` and the ``add_*`` helpers go first (under the
    ``prefix``, e.g. ``Diagnostics/Iteration``), then :meth:`write` adds the sampler's
    diagnostics, the statistics of every trajectory field (``ReturnAverage``, ...) and
    of every opt-info field (``lossAverage``, ...), and writes the row.
    """

    def __init__(self, prefix: str = DIAGNOSTICS_PREFIX, run_logger: Logger | None = None):
        """Args:
            prefix: the columns' prefix in progress.csv.
            run_logger: the run's logger the row is written to (default: the current
                logger); runners pass ``runner.logger``.
        """
        self.prefix = prefix
        self.logger = current_logger() if run_logger is None else run_logger
        self.columns: list[tuple[str, float]] = []

    def add(self, name: str, value: float) -> None:
        """Append the column ``prefix + name``."""
        self.columns.append((name, value))

    def add_window(self, window: Sequence[TrajInfo], new_completed_trajs: int) -> None:
        """The online runners' head: trajectories completed since the last row and the
        env steps of the trajectory window summarized below."""
        self.add("NewCompletedTrajs", new_completed_trajs)
        self.add("StepsInTrajWindow", steps_in(window))

    def add_evaluation(self, eval_traj_infos: Sequence[TrajInfo],
                       cum_eval_time: float) -> None:
        """The evaluating runners' head: the evaluation summarized below (warns in
        debug.log when it completed no trajectory) and the seconds spent evaluating."""
        if not eval_traj_infos:
            self.logger.log("WARNING: had no complete trajectories in eval: this row's returns "
                            "are NaN. Give the evaluation more steps (the sampler's "
                            "eval_max_steps counts the steps of all eval envs together) "
                            "or fewer eval envs (eval_n_envs).")
        self.add("StepsInEval", steps_in(eval_traj_infos))
        self.add("TrajsInEval", len(eval_traj_infos))
        self.add("CumEvalTime", cum_eval_time)

    def add_minibatch_counters(self, itr: int, stats: RunStatistics, algo: RlAlgorithm,
                               sampler_batch_size: int, world_size: int,
                               log_interval_itrs: int, train_seconds: float) -> None:
        """Counters and rates of a synchronous run (``MinibatchRl``, ``SyncRl``).

        Args:
            itr: the iteration just completed (-1: the row before training, whose
                rates are NaN).
            stats: the run's statistics (``cum_time`` already updated).
            train_seconds: seconds trained (not evaluated) since the last row; NaN when
                not measured (the row a resumed run writes for its snapshot's log
                point, whose training the stopped run did): the interval's rates are
                NaN then.
        """
        new_updates = algo.update_counter - stats.last_update_counter
        new_samples = sampler_batch_size * world_size * log_interval_itrs
        nan = float("nan")
        before_training = itr < 0
        no_rates = before_training or math.isnan(train_seconds)
        self.add("Iteration", itr)
        self.add("CumTime (s)", stats.cum_time)
        self.add("CumSteps", (itr + 1) * sampler_batch_size * world_size)
        self.add("CumCompletedTrajs", stats.cum_completed_trajs)
        self.add("CumUpdates", algo.update_counter)
        self.add("StepsPerSecond", nan if no_rates else new_samples / train_seconds)
        self.add("UpdatesPerSecond", nan if no_rates else new_updates / train_seconds)
        self.add("ReplayRatio", nan if no_rates else
                 new_updates * algo.batch_size * world_size / new_samples)
        self.add("CumReplayRatio", nan if before_training else
                 algo.batch_size * algo.update_counter / ((itr + 1) * sampler_batch_size))
        self.add("NonFiniteUpdates", algo.non_finite_updates)

    def add_async_counters(self, itr: int, sampler_itr: int, stats: RunStatistics,
                           algo: RlAlgorithm, cum_steps: int, replay_ratio: float,
                           cum_replay_ratio: float, learning_replay_ratio: float,
                           steps_per_second: float, non_eval_steps_per_second: float | None,
                           updates_per_second: float, opt_throttle: float,
                           sampler_throttle: float) -> None:
        """Counters and rates of an asynchronous run (``AsyncRl``); the rates are
        computed by the runner, which knows its sampler's and optimizer's timings.

        Args:
            itr: optimizer iteration (-1: the evaluation before any training).
            sampler_itr: the sampler's iteration when the row is written.
            non_eval_steps_per_second: sampled steps per second outside evaluations
                (None: not an evaluating run, no such column).
        """
        self.add("Iteration", itr)
        self.add("SamplerIteration", sampler_itr)
        self.add("CumTime (s)", stats.cum_time)
        self.add("CumSteps", cum_steps)
        self.add("CumUpdates", algo.update_counter)
        self.add("ReplayRatio", replay_ratio)
        self.add("CumReplayRatio", cum_replay_ratio)
        self.add("LearningReplayRatio", learning_replay_ratio)
        self.add("StepsPerSecond", steps_per_second)
        if non_eval_steps_per_second is not None:
            self.add("NonEvalSamplesPerSecond", non_eval_steps_per_second)
        self.add("UpdatesPerSecond", updates_per_second)
        self.add("OptThrottle", opt_throttle)
        self.add("SamplerThrottle", sampler_throttle)
        self.add("NonFiniteUpdates", getattr(algo, "non_finite_updates", 0))

    def write(self, sampler: BaseSampler, traj_infos: Sequence[TrajInfo],
              opt_infos: dict[str, list[float]]) -> dict[str, float]:
        """Add the sampler's diagnostics and the trajectory and opt-info statistics,
        then write the row (progress.csv, debug.log, TensorBoard).

        A row without completed trajectories gets NaN statistics of every field of
        the sampler's ``TrajInfoCls``, so that progress.csv keeps one schema.

        Returns:
            the row, keyed like progress.csv's columns.
        """
        with self.logger.tabular_prefix(self.prefix):
            for name, value in self.columns:
                self.logger.record_tabular(name, value)
            for name, value in sampler_diagnostics(sampler).items():
                self.logger.record_tabular(name, value)
        keys = (traj_infos[0].keys() if traj_infos
                else sampler.TrajInfoCls(**sampler.traj_info_kwargs).keys())
        for key in keys:
            if not key.startswith("_"):
                self.logger.record_tabular_misc_stat(key, [info[key] for info in traj_infos])
        for key, values in opt_infos.items():
            self.logger.record_tabular_misc_stat(key, values)
        return self.logger.dump_tabular(with_prefix=False)


class RunStatistics:
    """The counters diagnostics rows are built from, kept between and across rows.

    Args:
        opt_info_fields: the algorithm's opt-info fields (one list of values each).
        log_traj_window: completed training trajectories kept for the online
            statistics (None: no window, as in the evaluating runners).
    """

    def __init__(self, opt_info_fields: Iterable[str], log_traj_window: int | None = None):
        self.opt_infos: dict[str, list[float]] = {k: [] for k in opt_info_fields}
        self.traj_window: deque[TrajInfo] | None = (
            None if log_traj_window is None else deque(maxlen=log_traj_window))
        self.start_time = self.last_time = time.time()
        self.cum_time = 0.
        self.cum_completed_trajs = 0
        self.new_completed_trajs = 0
        self.last_update_counter = 0

    def store(self, traj_infos: Sequence[TrajInfo], opt_info: object | None) -> None:
        """Count the trajectories completed in one iteration and keep its opt info."""
        self.cum_completed_trajs += len(traj_infos)
        self.add_to_window(traj_infos)
        if opt_info is not None:
            for key, values in self.opt_infos.items():
                new = getattr(opt_info, key, [])
                values.extend(new if isinstance(new, list) else [new])

    def add_to_window(self, traj_infos: Sequence[TrajInfo]) -> None:
        """Training trajectories for the window (counted in ``NewCompletedTrajs``)."""
        if self.traj_window is not None:
            self.new_completed_trajs += len(traj_infos)
            self.traj_window.extend(traj_infos)

    def take_opt_infos(self) -> dict[str, list[float]]:
        """The opt infos since the last row (the store starts empty again)."""
        opt_infos = self.opt_infos
        self.opt_infos = {k: [] for k in opt_infos}
        return opt_infos

    def state_dict(self) -> dict:
        """Numbers and lists of plain dicts (loadable with ``weights_only=True``), with
        what the next row gathers so far: its new trajectories' count and opt infos."""
        state: dict = dict(cum_time=float(time.time() - self.start_time),
                           cum_completed_trajs=int(self.cum_completed_trajs),
                           new_completed_trajs=int(self.new_completed_trajs),
                           opt_infos={k: [float(v) for v in values]
                                      for k, values in self.opt_infos.items()})
        if self.traj_window is not None:
            state["traj_window"] = [_plain(info) for info in self.traj_window]
        return state

    def load_state_dict(self, state: dict, update_counter: int) -> None:
        """Continue the counters of ``state``; rates count from now and from the
        algorithm's ``update_counter``."""
        now = time.time()
        self.start_time = now - float(state["cum_time"])
        self.last_time = now
        self.cum_completed_trajs = int(state["cum_completed_trajs"])
        self.new_completed_trajs = int(state.get("new_completed_trajs", 0))
        saved = state.get("opt_infos", {})
        self.opt_infos = {k: list(saved.get(k, [])) for k in self.opt_infos}
        self.last_update_counter = update_counter
        if self.traj_window is not None:
            self.traj_window.extend(state.get("traj_window", []))

    def start_row(self) -> None:
        """Forget what the next row had gathered (its row was written already)."""
        self.new_completed_trajs = 0
        self.take_opt_infos()


def _plain(info: object) -> dict:
    """A trajectory info as a dict of Python numbers (loadable with weights_only)."""
    return {key: (value.item() if hasattr(value, "item") else value)
            for key, value in dict(info).items()  # type: ignore[call-overload]
            if isinstance(value, (int, float, bool)) or hasattr(value, "item")}


class StatisticsField(Generic[T]):
    """A runner attribute under its older private name (``_cum_completed_trajs``, ...),
    stored in the runner's :class:`RunStatistics` as ``name``; for runner subclasses
    written against those names."""

    def __init__(self, name: str):
        self.name = name

    @overload
    def __get__(self, runner: None, owner: type) -> StatisticsField[T]: ...
    @overload
    def __get__(self, runner: object, owner: type | None = None) -> T: ...

    def __get__(self, runner: object, owner: type | None = None) -> T | StatisticsField[T]:
        if runner is None:
            return self
        return getattr(runner.stats, self.name)  # type: ignore[attr-defined,no-any-return]

    def __set__(self, runner: object, value: T) -> None:
        setattr(runner.stats, self.name, value)  # type: ignore[attr-defined]
