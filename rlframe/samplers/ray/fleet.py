"""The Ray sampler's workers: placing them, starting them, and replacing failed ones.

:class:`RayWorkerFleet` holds the actors of :class:`~rlframe.samplers.ray.RaySampler`
(and of its asynchronous subclass), their placement group and their restart counts.
How one worker's actor is built (its envs, seeds and columns of the batch) stays
with the sampler, which hands the fleet its ``make_worker`` method.
"""
from __future__ import annotations

import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.ray.cluster import error_summary, error_text
from rlframe.samplers.ray.worker import RaySamplerWorker
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorClass, ActorHandle
    from ray.util.placement_group import PlacementGroup

__all__ = ["PLACEMENT_STRATEGIES", "PLACEMENT_TIMEOUT_S", "BUNDLE_WAIT_S",
           "RESTART_SEED_OFFSET", "MakeWorker", "RayWorkerFleet"]

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
PLACEMENT_TIMEOUT_S = 60.  # For the cluster to grant every worker's resources.
# A restarted worker first waits this long on its placement group bundle (which Ray
# moves off a lost node only when another node has room), then is placed anywhere.
BUNDLE_WAIT_S = 20.
# Restart r (1, 2, ...) of a worker adds r * RESTART_SEED_OFFSET to each of its seeds,
# so the new envs do not replay the lost ones' episodes.
RESTART_SEED_OFFSET = 1_000_003

class MakeWorker(Protocol):
    """Starts the actor of worker ``w`` (see :meth:`RaySampler._make_worker`)."""

    def __call__(self, w: int, restart: int = 0,
                 in_placement_group: bool = True) -> ActorHandle: ...


class RayWorkerFleet:
    """The actors of one sampler, in a placement group, restarted after failures.

    Args:
        n_workers: actors, worker ``w`` at index ``w``.
        num_cpus, num_gpus: Ray resources each worker reserves.
        placement_strategy: one of :data:`PLACEMENT_STRATEGIES`.
        max_worker_restarts: replacements allowed per worker.
        make_worker: builds worker ``w``'s actor (with :meth:`start_actor`).

    Attributes:
        workers: the actor handles.
        worker_nodes: the Ray node id of each worker (updated at restarts).
        worker_restarts: restarts so far, all workers together.
        restarts_of: restarts so far, per worker.
    """

    def __init__(self, n_workers: int, num_cpus: float, num_gpus: float,
                 placement_strategy: str, max_worker_restarts: int,
                 make_worker: MakeWorker):
        self.n_workers = n_workers
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.placement_strategy = placement_strategy
        self.max_worker_restarts = max_worker_restarts
        self.make_worker = make_worker
        self.workers: list[ActorHandle] = []
        self.worker_nodes: list[str] = []
        self.worker_restarts = 0
        self.restarts_of = [0] * n_workers
        self.placement_group: PlacementGroup | None = None
        self._actor_cls: ActorClass | None = None

    def reserve(self, ray: ModuleType) -> None:
        """Reserve every worker's resources (one placement group bundle each) and wait."""
        from ray.util.placement_group import placement_group
        bundle = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        bundle = {k: v for k, v in bundle.items() if v > 0}
        self.placement_group = placement_group([bundle] * self.n_workers,
                                               strategy=self.placement_strategy)
        try:
            ray.get(self.placement_group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"The Ray cluster did not grant {self.n_workers} workers x {bundle} within "
                f"{PLACEMENT_TIMEOUT_S:.0f} s (placement_strategy="
                f"{self.placement_strategy!r}); available: {ray.available_resources()}."
            ) from None

    def start(self) -> None:
        """Start every worker's actor and wait until each answers.

        Raises:
            WorkerError: a worker failed while starting (with its traceback).
        """
        self.workers = [self.make_worker(w) for w in range(self.n_workers)]
        self.worker_nodes = self.get([worker.node_id.remote() for worker in self.workers])

    def start_actor(self, w: int, in_placement_group: bool,
                    worker_args: dict[str, Any]) -> ActorHandle:
        """Start a :class:`RaySamplerWorker` actor with worker ``w``'s resources.

        Args:
            w: the worker index (its bundle of the placement group).
            in_placement_group: in bundle ``w``; False: wherever the cluster has room.
            worker_args: the actor's constructor arguments.
        """
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=self.placement_group, placement_group_bundle_index=w) \
            if in_placement_group else "DEFAULT"
        if self._actor_cls is None:  # Ray registers each remote class: make it once.
            self._actor_cls = ray.remote(RaySamplerWorker)
        return self._actor_cls.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus,
                                       scheduling_strategy=strategy,
                                       max_restarts=0).remote(**worker_args)

    def get(self, futures: list[ObjectRef]) -> list[Any]:
        """``ray.get`` the workers' answers.

        Raises:
            WorkerError: a worker failed (with its traceback).
        """
        import ray
        try:
            return ray.get(futures)
        except ray.exceptions.RayError as error:
            raise WorkerError(f"Ray sampler worker failed:\n{error}") from None

    def call(self, method: str, itr: int, version: int,
             params_ref: list[ObjectRef]) -> list[Any]:
        """``method(itr, version, params_ref)`` (:class:`RaySamplerWorker`'s ``sample``
        or ``evaluate``) on every worker; the answers in worker order. A worker
        that fails is restarted (:meth:`restart`) and called again; the answers of
        the others are kept."""
        import ray
        pending = {getattr(worker, method).remote(itr, version, params_ref): w
                   for w, worker in enumerate(self.workers)}
        results: list[Any] = [None] * self.n_workers
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            w = pending.pop(done[0])
            try:
                results[w] = ray.get(done[0])
            except ray.exceptions.RayError as error:
                self.restart(w, error)
                # The new actor loads the parameters at this call (it has version 0).
                pending[getattr(self.workers[w], method).remote(itr, version, params_ref)] = w
        return results

    def restart(self, w: int, error: BaseException) -> None:
        """Replace failed worker ``w`` by a fresh, ready actor, or raise past the limit.

        Kills the old actor (if it still lives), starts a new one (``make_worker(w,
        restart)``) and waits until it is ready: first in the worker's placement
        group bundle (for up to ``BUNDLE_WAIT_S``; Ray moves a lost node's bundle
        when another node has room), then anywhere the cluster has the resources.
        Logs a warning and counts the restart. A new actor that fails while
        starting uses another restart.

        Raises:
            WorkerError: worker ``w`` already used ``max_worker_restarts`` restarts;
                the message holds the worker's traceback.
        """
        import ray
        while True:
            node = self.worker_nodes[w] if w < len(self.worker_nodes) else "unknown"
            if self.restarts_of[w] >= self.max_worker_restarts:
                raise WorkerError(
                    f"Ray sampler worker {w} (node {node}) failed after "
                    f"{self.restarts_of[w]} restarts (max_worker_restarts="
                    f"{self.max_worker_restarts}):\n{error_text(error)}") from None
            self.restarts_of[w] += 1
            self.worker_restarts += 1
            message = (f"Ray sampler worker {w} on node {node} failed ({error_summary(error)}); "
                       f"restarting it with new envs (restart {self.restarts_of[w]} of "
                       f"max_worker_restarts={self.max_worker_restarts}).")
            logger.log(f"WARNING: {message}")
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            _kill_quietly(ray, self.workers[w])  # An actor lost with its node cannot be.
            try:
                self.workers[w], self.worker_nodes[w] = self._start_replacement(w)
                return
            except ray.exceptions.RayError as start_error:
                error = start_error

    def _start_replacement(self, w: int) -> tuple[ActorHandle, str]:
        """Start worker ``w``'s next actor and wait until it is ready; returns
        ``(actor, node id)``. Raises the actor's error if its start fails."""
        import ray
        restart = self.restarts_of[w]
        actor = self.make_worker(w, restart)
        deadline = BUNDLE_WAIT_S
        for in_group in (True, False):
            if not in_group:
                ray.kill(actor)
                logger.log(f"Worker {w}'s placement group bundle was not granted within "
                           f"{BUNDLE_WAIT_S:.0f} s; placing it anywhere with the resources.")
                actor = self.make_worker(w, restart, in_placement_group=False)
                deadline = PLACEMENT_TIMEOUT_S
            try:
                return actor, ray.get(actor.node_id.remote(), timeout=deadline)
            except ray.exceptions.GetTimeoutError:
                continue
            except BaseException:  # Its start failed, or Ctrl-C: it is not in self.workers.
                _kill_quietly(ray, actor)
                raise
        ray.kill(actor)
        raise ray.exceptions.RayError(
            f"no node had the resources of worker {w} ({self.num_cpus} CPUs, "
            f"{self.num_gpus} GPUs) within {PLACEMENT_TIMEOUT_S:.0f} s; available: "
            f"{ray.available_resources()}.")

    def shutdown(self) -> None:
        """Kill the actors and free their placement group (safe to call twice)."""
        import ray
        if ray.is_initialized():
            for worker in self.workers:
                _kill_quietly(ray, worker)
            if self.placement_group is not None:
                from ray.util.placement_group import remove_placement_group
                remove_placement_group(self.placement_group)
        self.workers, self.placement_group = [], None


def _kill_quietly(ray: ModuleType, actor: ActorHandle) -> None:
    """``ray.kill(actor)``; an actor lost with its node, or gone already, is left."""
    try:
        ray.kill(actor)
    except Exception:  # noqa: BLE001 - nothing left to stop.
        pass
