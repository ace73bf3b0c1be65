"""Action servers of the asynchronous GPU-style samplers.

They serve actions exactly as the synchronous ones do
(:mod:`rlframe.samplers.parallel.gpu.action_server`): workers step envs, the
action server runs the agent once per time step on the whole batch. The
asynchronous ones first take the parameters the optimizer published last
(``agent.recv_shared_memory()``, a no-op when nothing new was sent), before
every batch and every evaluation; the batch goes to the half of the double
buffer the sampler points at (``samples_np`` and the workers' ``sync.db_idx``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.samplers.parallel.gpu.action_server import (ActionServer, AlternatingActionServer,
                                                        NoOverlapAlternatingActionServer)

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent


class AsyncActionServerMixin:
    """Takes the newest published parameters before serving a batch or an evaluation."""

    agent: BaseAgent

    def serve_actions(self, itr: int) -> None:
        self.agent.recv_shared_memory()
        super().serve_actions(itr)  # type: ignore[misc]

    def serve_actions_evaluation(self, itr: int) -> None:
        self.agent.recv_shared_memory()
        super().serve_actions_evaluation(itr)  # type: ignore[misc]


class AsyncActionServer(AsyncActionServerMixin, ActionServer):
    """Serves all ``batch_B`` envs at once (mixed into AsyncGpuSamplerBase)."""


class AsyncAlternatingActionServer(AsyncActionServerMixin, AlternatingActionServer):
    """Serves the two halves of the envs in turn (mixed into AsyncAlternatingSamplerBase)."""


class AsyncNoOverlapAlternatingActionServer(AsyncActionServerMixin,
                                            NoOverlapAlternatingActionServer):
    """Alternates the two halves without overlapping action selection and env stepping."""
