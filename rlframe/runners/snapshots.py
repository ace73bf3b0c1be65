"""Snapshots of a training run: what a runner saves at its log points and when the run
ends by an error (a part of every runner; the files are written by the logger)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlframe.runners import resume
from rlframe.runners.loading import agent_spec
from rlframe.utils.collections import iter_leaves
from rlframe.utils.processes import signals_held

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.algos.base import RlAlgorithm
    from rlframe.samplers.base import BaseSampler


class SnapshotMixin:
    """``get_itr_snapshot``, ``save_itr_snapshot``, ``save_final_snapshot`` of a runner.

    A snapshot holds the agent's and optimizer's states and what resuming needs
    (:func:`rlframe.runners.resume.training_state`: the algorithm's state, the random
    generators and the runner's ``state_dict()``).
    """

    agent: BaseAgent
    algo: RlAlgorithm
    sampler: BaseSampler
    world_size: int
    last_completed_itr: int | None

    if TYPE_CHECKING:  # Provided by the runner.
        def state_dict(self) -> dict: ...

    def get_itr_snapshot(self, itr: int) -> dict:
        """Snapshot of tensors, numbers and dicts (loads with ``weights_only=True``).

        ``cum_steps`` counts the env steps of iterations ``0 .. itr``, as progress.csv's
        ``CumSteps`` does in the row of iteration ``itr``.
        """
        return dict(
            itr=itr,
            cum_steps=(itr + 1) * self.sampler.batch_size * self.world_size,
            agent_state_dict=self.agent.state_dict(),
            optimizer_state_dict=self.algo.optim_state_dict(),
            agent_spec=agent_spec(self.agent, self.sampler),
            **resume.training_state(self),
        )

    def save_itr_snapshot(self, itr: int, final: bool = False) -> list[str]:
        """Write the snapshot of iteration ``itr`` (per the snapshot mode), unless the
        agent's weights are not finite: a good earlier snapshot is never replaced by them.
        Where the mode writes nothing at ``itr`` (``"none"``, a ``"gap"`` between
        snapshots, no run directory) the snapshot is not built either.

        Returns:
            The names of the files written.
        """
        if not self.logger.snapshot_names_at(itr, final=final):
            return []
        if not self.agent_weights_finite():
            self.logger.log(f"WARNING: the agent's weights at iteration {itr} are not all finite; "
                            "no snapshot written (the last one written is kept).")
            return []
        self.logger.log("saving snapshot...")
        snapshot = self.get_itr_snapshot(itr)
        # The large side files first, under temporary names; then the snapshot; then
        # renames only, so that a kill while writing leaves the earlier files together.
        staged = resume.stage_side_files(self, itr)
        try:
            names = self.logger.save_itr_params(itr, snapshot, final=final)
        except BaseException:
            resume.discard_side_files(staged)
            raise
        if names:
            resume.commit_side_files(staged)
        else:
            resume.discard_side_files(staged)
        self.logger.log("saved")
        return names

    def agent_weights_finite(self) -> bool:
        """Whether every parameter and buffer of the agent's state holds finite values."""
        tensors = [t for _, t in iter_leaves(self.agent.state_dict())
                   if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return all(bool(torch.isfinite(t).all()) for t in tensors)

    def save_final_snapshot(self, error: BaseException) -> None:
        """The run is ending by ``error``: snapshot its last completed iteration (not in
        ``snapshot_mode="none"``) and say so in debug.log."""
        itr = getattr(self, "last_completed_itr", None)  # None before startup set it.
        run_logger = self.logger
        if itr is None or run_logger.get_snapshot_mode() == "none" or not run_logger.writes_files():
            return
        if isinstance(error, KeyboardInterrupt):
            cause = "interrupted (Ctrl-C)"
        elif isinstance(error, SystemExit):
            cause = f"stopped by a signal (exit code {error.code})"
        else:
            cause = f"stopped by {type(error).__name__}: {error}"
        # A SIGTERM or Ctrl-C now (torchrun stopping this rank after another one died,
        # say) would abort the write and lose the snapshot: they wait until it is written.
        with signals_held() as held:
            try:
                names = self.save_itr_snapshot(itr, final=True)
            except Exception as save_error:  # noqa: BLE001 - the original error matters more.
                self.logger.log(f"Training {cause}; the final snapshot failed: {save_error!r}")
                return
        if held:
            self.logger.log(f"Signal {held[0]} arrived while the final snapshot was written; "
                            "it was held until the snapshot was complete.")
        if names:
            self.logger.log(f"Training {cause}: final snapshot of iteration {itr} written "
                            f"({', '.join(names)}).")
