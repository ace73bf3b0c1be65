"""The log points of a synchronous runner: the statistics kept between diagnostics rows,
the row written every ``log_interval_itrs`` iterations, the progress bar, and the
runner's ``state_dict()`` (a part of :class:`~rlframe.runners.minibatch_rl.MinibatchRlBase`).
"""
from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Sequence

from rlframe.runners.diagnostics import DiagnosticsRow, RunStatistics, StatisticsField
from rlframe.utils.prog_bar import ProgBarCounter

if TYPE_CHECKING:
    from rlframe.algos.base import RlAlgorithm
    from rlframe.runners.callbacks import Callback
    from rlframe.runners.evaluation import Evaluation
    from rlframe.samplers.base import BaseSampler
    from rlframe.samplers.collections import TrajInfo


class LogPointsMixin:
    """Diagnostics rows, progress bar and ``state_dict()`` of a minibatch runner."""

    algo: RlAlgorithm
    sampler: BaseSampler
    evaluation: Evaluation | None
    log_traj_window: int | None
    log_interval_itrs: int
    n_itr: int
    min_itr_learn: int
    world_size: int
    last_completed_itr: int | None
    pbar: ProgBarCounter | None
    _stop_reason: str | None
    stats: RunStatistics
    # rlpyt's private names of the statistics, for subclasses written against them.
    _start_time: StatisticsField[float] = StatisticsField("start_time")
    _last_time: StatisticsField[float] = StatisticsField("last_time")
    _cum_completed_trajs: StatisticsField[int] = StatisticsField("cum_completed_trajs")
    _new_completed_trajs: StatisticsField[int] = StatisticsField("new_completed_trajs")
    _traj_infos: StatisticsField[deque | None] = StatisticsField("traj_window")
    # True while a resumed run writes the row its snapshot's log point lacked: that
    # snapshot is already on disk, and is not written again (with its replay).
    writing_resumed_row: bool = False

    if TYPE_CHECKING:  # Provided by the runner.
        def save_itr_snapshot(self, itr: int, final: bool = False) -> list[str]: ...

        def _call_callbacks(self, method: str, *args: Any) -> list[Callback]: ...

    def initialize_logging(self) -> None:
        """Fresh statistics for a run (those of a resumed run are loaded after); an
        online runner starts the progress bar of its first log interval."""
        self._initialize_statistics()
        if self.evaluation is None:
            self.logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")
            self._start_pbar()

    def _initialize_statistics(self) -> None:
        self.stats = RunStatistics(self.algo.opt_info_fields, self.log_traj_window)
        if self.evaluation is not None:
            self.evaluation.reset()
        self.pbar = None

    def _start_pbar(self) -> None:
        self.pbar = ProgBarCounter(self.log_interval_itrs)

    def _stop_pbar(self) -> None:
        if getattr(self, "pbar", None) is not None:
            self.pbar.stop()
            self.pbar = None

    def stop_progress_bar(self) -> None:
        """End the progress bar of the current log interval (before an evaluation)."""
        self._stop_pbar()

    # ------------------------------------------------------------------ diagnostics
    def store_diagnostics(self, itr: int, traj_infos: Sequence[TrajInfo],
                          opt_info: object) -> None:
        """Count one iteration's completed trajectories and keep its opt info."""
        self.stats.store(traj_infos, opt_info)
        if self.pbar is not None:
            self.pbar.update((itr % self.log_interval_itrs) + 1)

    def log_diagnostics(self, itr: int, traj_infos: Sequence[TrajInfo] | None = None,
                        eval_time: float = 0, prefix: str = "Diagnostics/") -> dict[str, Any]:
        """Save the snapshot, write one diagnostics row and hand it to the callbacks.

        Args:
            itr: the iteration just completed, or -1 for a row logged before any
                training (the evaluation of the untrained agent).
            traj_infos: the trajectories to summarize: an evaluation's when
                evaluating, else (None) the window of recent training trajectories.
            eval_time: seconds of the evaluation (not counted as training time).

        Returns:
            the row, keyed like progress.csv's columns.
        """
        self._stop_pbar()
        if 0 <= itr and itr >= self.min_itr_learn - 1 and not self.writing_resumed_row:
            self.save_itr_snapshot(itr)
        stats = self.stats
        new_time = time.time()
        stats.cum_time = new_time - stats.start_time
        row = DiagnosticsRow(prefix, self.logger)
        if self.evaluation is not None:
            traj_infos = list(traj_infos or [])
            self.evaluation.add_columns(row, traj_infos, eval_time)
            row.add("CumTrainTime", stats.cum_time - self.evaluation.cum_eval_time)
        else:
            window = list(stats.traj_window or [])
            row.add_window(window, stats.new_completed_trajs)
            stats.new_completed_trajs = 0
            traj_infos = window if traj_infos is None else list(traj_infos)
        row.add_minibatch_counters(itr, stats, self.algo, self.sampler.batch_size,
                                   self.world_size, self.log_interval_itrs,
                                   train_seconds=float("nan") if self.writing_resumed_row
                                   else new_time - stats.last_time - eval_time)
        diagnostics = row.write(self.sampler, traj_infos, stats.take_opt_infos())
        stats.last_time = new_time
        stats.last_update_counter = self.algo.update_counter
        if not self._report_row(itr, diagnostics) and itr < self.n_itr - 1:
            self.logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")
            self._start_pbar()
        return diagnostics

    def _report_row(self, itr: int, diagnostics: dict[str, Any]) -> bool:
        """Hand the row to the callbacks' ``on_log``; True when one stops the run."""
        stopped_by = self._call_callbacks("on_log", itr, diagnostics)
        if stopped_by:
            names = ", ".join(repr(callback) for callback in stopped_by)
            self._stop_reason = f"{names} returned False from on_log at iteration {itr}"
            self.logger.log(f"Stopping the run: {self._stop_reason}.")
        return bool(stopped_by)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The runner's counters, for resuming: the last completed iteration, the time
        trained and evaluated, completed trajectories and the trajectory window
        (numbers and plain dicts: loadable with ``weights_only=True``)."""
        state = self.stats.state_dict()
        state.update(self.evaluation.state_dict() if self.evaluation is not None
                     else dict(cum_eval_time=0.))
        state["last_completed_itr"] = self.last_completed_itr
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue the counters of :meth:`state_dict` (after ``initialize_logging``
        and after the algorithm's state is loaded: rates count from its updates)."""
        self.stats.load_state_dict(state, self.algo.update_counter)
        if self.evaluation is not None:
            self.evaluation.load_state_dict(state)
        if state.get("last_completed_itr") is not None:
            self.last_completed_itr = int(state["last_completed_itr"])
