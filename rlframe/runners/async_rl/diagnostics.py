"""Logging of an asynchronous run: snapshots, diagnostics rows and the replay ratio
reached (a part of :class:`AsyncRlBase`)."""
from __future__ import annotations

import math
import time
import warnings
from typing import Any

from rlframe.runners import resume
from rlframe.runners.async_rl.schedule import RATIO_CHECK_CALLS
from rlframe.runners.minibatch_rl import MinibatchRlBase, sampler_diagnostics
from rlframe.utils.loading import agent_spec
from rlframe.utils.logging import logger


class AsyncRlDiagnostics(MinibatchRlBase):
    """Snapshots and diagnostics rows of :class:`AsyncRlBase`; not a runner by itself."""

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
        super().initialize_logging()
        self._last_sampler_itr = 0
        self._log_sampler_itr = 0
        self._last_eval_time = 0.
        self._last_sampler_wait = 0.

    def store_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                          traj_infos: list, opt_info: Any) -> None:
        self._cum_completed_trajs += len(traj_infos)
        if opt_info is not None:
            for k, v in self._opt_infos.items():
                new_v = getattr(opt_info, k, [])
                v.extend(new_v if isinstance(new_v, list) else [new_v])
        self._last_sampler_itr = sampler_itr

    def log_diagnostics(self, itr: int, sampler_itr: int,  # type: ignore[override]
                        throttle_time: float, traj_infos: list | None = None,
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
            traj_infos: TrajInfos to summarize (default: the runner's window).

        Returns:
            the row, keyed like progress.csv's columns.
        """
        if itr >= 0:
            self.save_itr_snapshot(itr)
        new_time = time.time()
        self._cum_time = new_time - self._start_time
        elapsed = max(new_time - self._last_time, 1e-9)
        new_updates = self.algo.update_counter - self._last_update_counter
        new_samples = self.sampler_batch_size * (sampler_itr - self._log_sampler_itr)
        batch_size, ws = self.algo.batch_size, self.world_size
        cum_samples = sampler_itr * self.sampler_batch_size
        replay_ratio = new_updates * batch_size * ws / max(1, new_samples)
        learn_samples = self.sampler_batch_size * (sampler_itr - self._learn_start_itr)
        learning_ratio = (self.algo.update_counter * batch_size * ws / learn_samples
                          if learn_samples > 0 else float("nan"))
        with logger.tabular_prefix(prefix):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("SamplerIteration", sampler_itr)
            logger.record_tabular("CumTime (s)", self._cum_time)
            logger.record_tabular("CumSteps", cum_samples)
            logger.record_tabular("CumUpdates", self.algo.update_counter)
            logger.record_tabular("ReplayRatio", replay_ratio)
            logger.record_tabular("CumReplayRatio",
                                  self.algo.update_counter * batch_size * ws / max(1, cum_samples))
            logger.record_tabular("LearningReplayRatio", learning_ratio)
            logger.record_tabular("StepsPerSecond", new_samples / elapsed)
            if self._eval:
                eval_time = self.ctrl.eval_time.value if self.ctrl is not None else 0.
                non_eval = max(elapsed - (eval_time - self._last_eval_time), 1e-9)
                logger.record_tabular("NonEvalSamplesPerSecond", new_samples / non_eval)
                self._last_eval_time = eval_time
            logger.record_tabular("UpdatesPerSecond", new_updates / elapsed)
            logger.record_tabular("OptThrottle", (elapsed - throttle_time) / elapsed)
            sampler_wait = self.ctrl.sampler_wait_time.value if self.ctrl is not None else 0.
            logger.record_tabular("SamplerThrottle",
                                  max(elapsed - (sampler_wait - self._last_sampler_wait), 0.)
                                  / elapsed)
            self._last_sampler_wait = sampler_wait
            logger.record_tabular("NonFiniteUpdates", getattr(self.algo, "non_finite_updates", 0))
            for key, value in sampler_diagnostics(self.sampler).items():
                logger.record_tabular(key, value)
        self._log_infos(traj_infos)
        diagnostics = logger.dump_tabular(with_prefix=False)
        interval_learns = self._log_sampler_itr >= self._learn_start_itr
        self._warn_if_ratio_dropped(replay_ratio if interval_learns else float("nan"),
                                    new_samples, learning_ratio, learn_samples)
        self._last_time = new_time
        self._last_update_counter = self.algo.update_counter
        self._log_sampler_itr = sampler_itr
        stopped_by = self._call_callbacks("on_log", itr, diagnostics)
        if stopped_by:
            names = ", ".join(repr(callback) for callback in stopped_by)
            self._stop_reason = f"{names} returned False from on_log at iteration {itr}"
            logger.log(f"Stopping the run: {self._stop_reason}.")
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
            logger.log(f"WARNING: {message}")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return

