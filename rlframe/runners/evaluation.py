"""Evaluation as a part a runner is given: run evaluation episodes at every log point and
log them in place of the training trajectories.

``MinibatchRl(..., evaluation=Evaluation())`` logs the rows of ``MinibatchRlEval``
(which installs an :class:`Evaluation` itself); :class:`AsyncEvaluation` is the same
for ``AsyncRl``, whose sampler process runs the evaluations.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, Sequence

from rlframe.runners.diagnostics import DiagnosticsRow

if TYPE_CHECKING:
    from rlframe.utils.logging.run_logger import Logger
    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.base import BaseSampler
    from rlframe.samplers.collections import TrajInfo


class EvaluatedRunner(Protocol):
    """What an :class:`Evaluation` uses of the runner it is given."""

    agent: BaseAgent
    sampler: BaseSampler
    start_itr: int
    min_itr_learn: int
    logger: Logger

    def stop_progress_bar(self) -> None: ...

    def log_diagnostics(self, itr: int, traj_infos: Sequence[TrajInfo],
                        eval_time: float) -> object: ...


class Evaluation:
    """Evaluate the agent with the sampler's evaluation envs at every log point.

    The first row evaluates the untrained agent (``Iteration`` -1, ``CumSteps`` 0;
    not when a run resumes, whose row exists). Each row then summarizes the
    evaluation's trajectories, with ``StepsInEval``, ``TrajsInEval``,
    ``CumEvalTime`` and ``CumTrainTime`` columns first.
    """

    def __init__(self) -> None:
        self.cum_eval_time = 0.

    def check(self, runner: EvaluatedRunner) -> None:
        """Raise ``ValueError`` unless ``runner``'s sampler has evaluation envs."""
        eval_n_envs = getattr(runner.sampler, "eval_n_envs", 0)
        if eval_n_envs < 1:
            name = type(runner).__name__
            raise ValueError(
                f"{name} evaluates the agent at every log point, but the sampler has "
                f"eval_n_envs={eval_n_envs}; give the sampler eval_n_envs >= 1 (with "
                "eval_max_steps or eval_max_trajectories), or use "
                f"{name.removesuffix('Eval') or 'a runner without Eval'}, which logs the "
                "training episodes instead.")

    def reset(self) -> None:
        """A run starts: no time spent evaluating yet."""
        self.cum_eval_time = 0.

    def before_training(self, runner: EvaluatedRunner) -> None:
        """Evaluate the untrained agent and log its row (``Iteration`` -1)."""
        if runner.start_itr > 0:
            return
        with runner.logger.prefix("itr #0 "):
            eval_traj_infos, eval_time = self.evaluate(runner, 0)
            runner.log_diagnostics(-1, eval_traj_infos, eval_time)

    def at_log_point(self, runner: EvaluatedRunner, itr: int) -> None:
        """Evaluate the agent and log the evaluation's row."""
        eval_traj_infos, eval_time = self.evaluate(runner, itr)
        runner.log_diagnostics(itr, eval_traj_infos, eval_time)

    def evaluate(self, runner: EvaluatedRunner, itr: int) -> tuple[list[TrajInfo], float]:
        """Run the sampler's evaluation; returns ``(traj_infos, seconds)`` (nothing
        while the algorithm has not started learning)."""
        runner.stop_progress_bar()
        if 0 < itr < runner.min_itr_learn - 1:
            return [], 0.0
        runner.logger.log("Evaluating agent...")
        runner.agent.eval_mode(itr)
        eval_time = -time.time()
        traj_infos = runner.sampler.evaluate_agent(itr)
        eval_time += time.time()
        runner.logger.log("Evaluation runs complete.")
        return traj_infos, eval_time

    def add_columns(self, row: DiagnosticsRow, eval_traj_infos: list[TrajInfo],
                    eval_time: float) -> None:
        """The head of an evaluating row (``eval_time``: seconds of this evaluation)."""
        self.cum_eval_time += eval_time
        row.add_evaluation(eval_traj_infos, self.cum_eval_time)

    def state_dict(self) -> dict:
        return dict(cum_eval_time=float(self.cum_eval_time))

    def load_state_dict(self, state: dict) -> None:
        self.cum_eval_time = float(state["cum_eval_time"])


class AsyncEvaluation(Evaluation):
    """:class:`Evaluation` of ``AsyncRl``: the sampler process evaluates the agent every
    ``log_interval_itrs`` sampler iterations (from iteration 0), and the runner drains
    each evaluation's trajectories into :attr:`traj_infos` (its ``before_training`` and
    ``at_log_point`` do, with the sampler's iteration at hand); a row takes those that
    arrived since the last one. ``CumEvalTime`` is the sampler process's time spent
    evaluating (it restarts with a resumed run)."""

    def __init__(self) -> None:
        super().__init__()
        self.traj_infos: list[TrajInfo] = []  # Arrived, not logged yet.

    def reset(self) -> None:
        super().reset()
        self.traj_infos = []

    def take(self) -> list[TrajInfo]:
        """The evaluation trajectories that arrived since the last row."""
        traj_infos, self.traj_infos = self.traj_infos, []
        return traj_infos

    def add_columns(self, row: DiagnosticsRow, eval_traj_infos: list[TrajInfo],
                    eval_time: float) -> None:
        """The head of an evaluating row (``eval_time``: the sampler's total)."""
        row.add_evaluation(eval_traj_infos, eval_time)

    def state_dict(self) -> dict:
        # The sampler process keeps the time spent evaluating; a snapshot holds none.
        return dict(cum_eval_time=0.)

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""
