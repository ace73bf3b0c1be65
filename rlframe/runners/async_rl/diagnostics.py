"""Logging of an asynchronous run: snapshots, diagnostics rows and the replay ratio
reached (a part of :class:`AsyncRlBase`); the row itself is built by
:class:`~rlframe.runners.diagnostics.DiagnosticsRow`, as every runner's is."""
from __future__ import annotations

import math
import time
import warnings
from typing import TYPE_CHECKING, Any, Sequence

from rlframe.runners import resume
from rlframe.runners.async_rl.schedule import RATIO_CHECK_CALLS
from rlframe.runners.diagnostics import DiagnosticsRow
from rlframe.runners.evaluation import AsyncEvaluation
from rlframe.runners.minibatch_rl import MinibatchRlBase, sampler_diagnostics
from rlframe.utils.loading import agent_spec

if TYPE_CHECKING:
    from rlframe.runners.async_rl.control import AsyncControl
    from rlframe.samplers.collections import TrajInfo

__all__ = ["AsyncRlDiagnostics", "sampler_diagnostics"]


class AsyncRlDiagnostics(MinibatchRlBase):
    """Snapshots and diagnostics rows of :class:`AsyncRlBase`; not a runner by itself."""

    ctrl: AsyncControl | None
    evaluation: AsyncEvaluation | None  # type: ignore[assignment]
    sampler_batch_size: int
    throttle_itr: float
    delta_throttle_itr: float
    sampler_lead_itrs: int | None
    sampler_lead_steps: int | float | None
    _learn_start_itr: float
    _ratio_warned: bool

    def get_itr_snapshot(self, itr: int, sampler_itr: int | None = None) -> dict:
        """Snapshot of tensors, numbers and dicts (loads with ``weights_only=True``)."""
        sampler_itr = self._last_sampler_itr if sampler_itr is None else sampler_itr
        return dict(
            itr=itr,
            sampler_itr=sampler_itr,
            cum_steps=sampler_itr * self.sampler_batch_size,
            cum_updates=self.algo.update_counter,
            agent_state_dict=self.agent.state_dict(),
            optimizer_state_dict=self.algo.optim_state_dict(),
            agent_spec=agent_spec(self.agent, self.sampler),
            **resume.training_state(self),
        )

    def initialize_logging(self) -> None:
        self._initialize_statistics()
        self._last_sampler_itr = 0
        self._log_sampler_itr = 0
        self._last_eval_time = 0.
        self._last_sampler_wait = 0.

    def state_dict(self) -> dict:
        """:meth:`MinibatchRlBase.state_dict` and where the optimizer waits next
        (``throttle_itr``) and the sampler's last iteration."""
        state = super().state_dict()
        state["throttle_itr"] = float(self.throttle_itr)
        state["sampler_itr"] = int(self._last_sampler_itr)
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stats.start_row()  # Its snapshots are of log points, taken before their rows.
        self.load_throttle(state)
        if "sampler_itr" in state:
            self._last_sampler_itr = self._log_sampler_itr = int(state["sampler_itr"])

    def load_throttle(self, state: dict) -> None:
        """Where the optimizer of a resumed run waits next (before the children start)."""
        self.throttle_itr = float(state["throttle_itr"])

    def store_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                          traj_infos: Sequence[TrajInfo], opt_info: object | None) -> None:
        self.stats.store(traj_infos, opt_info)
        self._last_sampler_itr = sampler_itr

    def log_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                        throttle_time: float, traj_infos: Sequence[TrajInfo] | None = None,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        """Save the snapshot, write one diagnostics row and hand it to the callbacks.

        The replay ratio columns count the transitions trained on (updates x
        ``batch_size`` x optimizer ranks) per env step sampled: ``ReplayRatio`` over
        the steps since the last row, ``CumReplayRatio`` over all steps (as rlpyt: it
        counts the ``min_steps_learn`` steps, so it stays below ``replay_ratio``), and
        ``LearningReplayRatio`` over the steps since learning could begin, the one to
        compare with the algorithm's ``replay_ratio``. Below half of it, a warning is
        given once per run (see :meth:`_warn_if_ratio_dropped`).

        Args:
            itr: optimizer iteration (-1: the evaluation before any training).
            sampler_itr: the sampler's iteration when the row is written.
            throttle_time: seconds the optimizer waited for the sampler since the last row.
            traj_infos: TrajInfos to summarize (default: the runner's window; an
                evaluating runner's rows summarize the evaluations that arrived).

        Returns:
            the row, keyed like progress.csv's columns.
        """
        if itr >= 0:
            self.save_itr_snapshot(itr)
        stats, ctrl = self.stats, self.ctrl
        new_time = time.time()
        stats.cum_time = new_time - stats.start_time
        elapsed = max(new_time - stats.last_time, 1e-9)
        new_updates = self.algo.update_counter - stats.last_update_counter
        new_samples = self.sampler_batch_size * (sampler_itr - self._log_sampler_itr)
        batch_size, ws = self.algo.batch_size, self.world_size
        cum_samples = sampler_itr * self.sampler_batch_size
        replay_ratio = new_updates * batch_size * ws / max(1, new_samples)
        learn_samples = self.sampler_batch_size * (sampler_itr - self._learn_start_itr)
        learning_ratio = (self.algo.update_counter * batch_size * ws / learn_samples
                          if learn_samples > 0 else float("nan"))
        row = DiagnosticsRow(prefix, self.logger)
        non_eval_rate = None
        if self.evaluation is not None:
            traj_infos = self.evaluation.take()
            eval_time = ctrl.eval_time.value if ctrl is not None else 0.
            self.evaluation.add_columns(row, traj_infos, eval_time)
            non_eval_rate = new_samples / max(elapsed - (eval_time - self._last_eval_time), 1e-9)
            self._last_eval_time = eval_time
        else:
            window = list(stats.traj_window or [])
            row.add("CumCompletedTrajs", stats.cum_completed_trajs)
            row.add_window(window, stats.new_completed_trajs)
            stats.new_completed_trajs = 0
            traj_infos = window if traj_infos is None else list(traj_infos)
        sampler_wait = ctrl.sampler_wait_time.value if ctrl is not None else 0.
        row.add_async_counters(
            itr, sampler_itr, stats, self.algo, cum_steps=cum_samples,
            replay_ratio=replay_ratio,
            cum_replay_ratio=self.algo.update_counter * batch_size * ws / max(1, cum_samples),
            learning_replay_ratio=learning_ratio, steps_per_second=new_samples / elapsed,
            non_eval_steps_per_second=non_eval_rate, updates_per_second=new_updates / elapsed,
            opt_throttle=(elapsed - throttle_time) / elapsed,
            sampler_throttle=max(elapsed - (sampler_wait - self._last_sampler_wait), 0.) / elapsed)
        self._last_sampler_wait = sampler_wait
        diagnostics = row.write(self.sampler, traj_infos, stats.take_opt_infos())
        interval_learns = self._log_sampler_itr >= self._learn_start_itr
        self._warn_if_ratio_dropped(replay_ratio if interval_learns else float("nan"),
                                    new_samples, learning_ratio, learn_samples)
        stats.last_time = new_time
        stats.last_update_counter = self.algo.update_counter
        self._log_sampler_itr = sampler_itr
        self._report_row(itr, diagnostics)
        return diagnostics

    def _warn_if_ratio_dropped(self, interval_ratio: float, interval_steps: int,
                               learning_ratio: float, learning_steps: int) -> None:
        """Warn (once per run) when the replay ratio reached, over the last interval or
        since learning began, is below half of the algorithm's ``replay_ratio``.

        A ratio counts only over at least RATIO_CHECK_CALLS ``optimize_agent`` calls'
        worth of sampled steps, and with a sampler lead over at least twice the lead
        (within which the optimizer may lag by design); ``nan`` (no such steps) is skipped.
        """
        if self._ratio_warned:
            return
        target = float(self.algo.replay_ratio)
        min_steps = RATIO_CHECK_CALLS * self.delta_throttle_itr * self.sampler_batch_size
        if self.sampler_lead_itrs is not None:
            min_steps = max(min_steps, 2 * (self.sampler_lead_itrs + 1) * self.sampler_batch_size)
        for ratio, steps, over in ((interval_ratio, interval_steps, "over the last interval"),
                                   (learning_ratio, learning_steps, "since learning began")):
            if math.isnan(ratio) or steps < min_steps or ratio >= 0.5 * target:
                continue
            self._ratio_warned = True
            lead = self.sampler_lead_steps
            advice = (f"pass sampler_lead_steps (e.g. {8 * self.sampler_batch_size}, 8 "
                      "sampler batches) so that the sampler waits for the optimizer"
                      if lead is None else f"lower sampler_lead_steps={lead:g}")
            message = (f"{type(self).__name__}: the replay ratio reached {over} is "
                       f"{ratio:.3g}, below half of {type(self.algo).__name__}'s "
                       f"replay_ratio={target:g}: the sampler outruns the optimizer, which "
                       f"makes fewer updates than asked for. To keep replay_ratio, {advice}.")
            self.logger.log(f"WARNING: {message}")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return

