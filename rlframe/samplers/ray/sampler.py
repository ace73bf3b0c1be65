"""Synchronous sampler on Ray actors: the same batches as SerialSampler, from any machine.

``n_workers`` Ray actors each hold ``batch_B / n_workers`` envs and a CPU copy
of the agent, and step them with the project's collectors. Every iteration the
master puts the agent's parameters in Ray's object store once (with a version
number; a worker loads them only when the version changed), each actor fills
its columns of the ``[T, B]`` batch and returns them as numpy arrays, and the
master writes them into its sample buffer, the same structure the other
samplers return.

A worker that fails (its node is lost, its process dies, or its env or agent
code raises) is replaced by a fresh actor with new envs, and its part of the
iteration is sampled again, up to ``max_worker_restarts`` times per worker.

The connection to Ray lives in :mod:`~rlframe.samplers.ray.cluster`, the workers'
placement and restarts in :mod:`~rlframe.samplers.ray.fleet`, and what one worker
does in :mod:`~rlframe.samplers.ray.worker`; their names stay importable from here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np
import torch

from rlframe.samplers.base import BaseSampler
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.collections import TrajInfo
from rlframe.samplers.collectors import eval_env_quotas
from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector
from rlframe.samplers.ray.cluster import (  # noqa: F401  (kept importable from here)
    CONNECT_TIMEOUT_S, INSTALL_HINT, check_reachable, connect, error_summary, error_text,
    import_ray, note_ray_in_use, ray_used_here,
)
from rlframe.samplers.ray.fleet import (  # noqa: F401  (kept importable from here)
    BUNDLE_WAIT_S, PLACEMENT_STRATEGIES, PLACEMENT_TIMEOUT_S, RESTART_SEED_OFFSET,
    RayWorkerFleet,
)
from rlframe.samplers.ray.worker import RaySamplerWorker  # noqa: F401
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.utils.checks import as_int, positive_int
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Examples, Samples

_State = TypeVar("_State")  # A state dict, a nested dict of them, or one of its values.


def _cpu_state(state: _State) -> _State:
    """A state dict's tensors on the CPU, detached; nested dicts (an agent's several
    models, e.g. DqnAgent's ``{"model": ..., "target": ...}``) are walked."""
    if isinstance(state, Mapping):
        return {k: _cpu_state(v) for k, v in state.items()}
    return state.detach().cpu() if isinstance(state, torch.Tensor) else state


class RaySampler(BaseSampler):
    """Steps the batch's envs in ``n_workers`` Ray actors, on this machine or a cluster.

    A drop-in for CpuSampler (no ``workers_cpus`` needed in the affinity).
    Constructor arguments are those of :class:`BaseSampler`, plus:

    Args:
        n_workers: Ray actors; each steps ``batch_B / n_workers`` envs.
        ray_address: None starts a local Ray that :meth:`shutdown` stops (an
            already initialized Ray is used and left running); ``"auto"`` or
            ``"host:port"`` joins a running cluster (never shut down here).
        num_cpus, num_gpus: Ray resources each worker reserves.
        placement_strategy: how the workers' resources are placed on the
            cluster's nodes: ``"PACK"`` (few nodes) or ``"SPREAD"`` (many), or
            their ``STRICT_`` forms.
        worker_torch_threads: torch threads in each worker.
        max_worker_restarts: how many times each worker is replaced after a
            failure (its node lost, its process killed, an exception in its env
            or agent code). The replacement is a fresh actor with new envs for
            the same columns of the batch, seeded as the first one plus
            ``r * RESTART_SEED_OFFSET`` at its ``r``-th restart; the failed
            worker's part of the current batch (or evaluation) is collected
            again and the other workers' parts are kept. Each restart logs a
            warning; :meth:`diagnostics` counts them (``WorkerRestarts`` in
            progress.csv). One more failure of a worker that used them all stops
            the sampler and raises WorkerError with the worker's traceback; 0
            stops at the first failure. A worker failing while the sampler
            initializes is not restarted (its envs cannot be built).

    Attributes:
        workers: the actors, worker ``w`` at index ``w``.
        worker_nodes: the Ray node id of each worker (updated at restarts).
        worker_restarts: restarts so far, all workers together.
    """

    def __init__(self, EnvCls: Callable[..., Env], env_kwargs: dict | None, batch_T: int,
                 batch_B: int, CollectorCls: type = CpuResetCollector,
                 max_decorrelation_steps: int = 100, TrajInfoCls: type[TrajInfo] = TrajInfo,
                 eval_n_envs: int = 0, eval_CollectorCls: type = SerialEvalCollector,
                 eval_env_kwargs: dict | None = None, eval_max_steps: int | None = None,
                 eval_max_trajectories: int | None = None, env_backend: str = "plain", *,
                 n_workers: int = 1, ray_address: str | None = None, num_cpus: float = 1,
                 num_gpus: float = 0, placement_strategy: str = "PACK",
                 worker_torch_threads: int = 1, max_worker_restarts: int = 3):
        super().__init__(EnvCls, env_kwargs, batch_T, batch_B, CollectorCls,
                         max_decorrelation_steps, TrajInfoCls, eval_n_envs, eval_CollectorCls,
                         eval_env_kwargs, eval_max_steps, eval_max_trajectories, env_backend)
        self.n_workers = positive_int("n_workers", n_workers)
        if self.batch_spec.B % self.n_workers != 0:
            raise ValueError(f"batch_B={self.batch_spec.B} must be a multiple of "
                             f"n_workers={self.n_workers} (each worker steps as many envs).")
        if ray_address is not None and not isinstance(ray_address, str):
            raise TypeError(f"ray_address must be None, 'auto' or 'host:port', "
                            f"got {ray_address!r}.")
        if not num_cpus >= 0 or not num_gpus >= 0 or num_cpus + num_gpus <= 0:
            raise ValueError(f"num_cpus={num_cpus} and num_gpus={num_gpus} must be >= 0, "
                             "and one of them > 0.")
        if placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(f"placement_strategy={placement_strategy!r} must be one of "
                             f"{PLACEMENT_STRATEGIES}.")
        self.ray_address = ray_address
        note_ray_in_use()  # A script's own Ray, before the runner forks.
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.placement_strategy = placement_strategy
        self.worker_torch_threads = positive_int("worker_torch_threads", worker_torch_threads)
        self.max_worker_restarts = as_int("max_worker_restarts", max_worker_restarts,
                                          minimum=0)
        self.B_per_worker = self.batch_spec.B // self.n_workers
        self._fleet: RayWorkerFleet | None = None  # Built in initialize().
        self._worker_kwargs: dict[str, Any] = {}
        self._owns_ray = False
        self._params_version = 0

    # ---- start-up ----------------------------------------------------------------------

    def initialize(self, agent: BaseAgent, affinity: dict | None = None, seed: int | None = None,
                   bootstrap_value: bool = False, traj_info_kwargs: dict | None = None,
                   world_size: int = 1, rank: int = 0) -> Examples:
        """Connect to Ray, build the sample buffer and start the worker actors.

        Args:
            agent: the agent (initialized here; each worker acts with a CPU copy).
            affinity: only ``worker_torch_threads`` is read (it overrides the
                constructor's); ``workers_cpus`` is not needed.
            seed: env ``b`` of the batch is seeded ``seed + b`` (as in SerialSampler);
                worker ``w`` seeds its RNGs with ``seed + w`` (as in CpuSampler);
                restarted workers add ``r * RESTART_SEED_OFFSET``.
            bootstrap_value, traj_info_kwargs, world_size, rank: as SerialSampler.

        Returns:
            examples dict (one step's outputs).
        """
        ray = import_ray()
        self._set_traj_info_kwargs(traj_info_kwargs)
        affinity = {} if affinity is None else affinity
        seed = int(np.random.randint(2 ** 31)) if seed is None else seed
        self.seed, self.world_size, self.rank = seed, world_size, rank
        B = self.batch_spec.B
        self.global_B = B * world_size
        env_rank_offset = rank * B

        env = self.make_vec_env(1)  # For the spaces and one example step.
        try:
            agent.initialize(env.spaces, share_memory=False, global_B=self.global_B,
                             env_ranks=list(range(env_rank_offset, env_rank_offset + B)))
            self.samples_pyt, self.samples_np, examples = build_samples_buffer(
                agent, env, self.batch_spec, bootstrap_value, agent_shared=False,
                env_shared=False)
        finally:
            env.close()
        self.agent = agent
        self.examples = examples
        threads = int(affinity.get("worker_torch_threads", self.worker_torch_threads))
        try:
            self._connect(ray)
            self._start_workers(ray, seed, env_rank_offset, bootstrap_value, threads)
        except BaseException:
            self.shutdown()
            raise
        logger.log(f"{type(self).__name__} initialized: {self.n_workers} Ray workers, "
                   f"{self.B_per_worker} envs each.")
        return examples

    def _connect(self, ray: ModuleType) -> None:
        """Start a local Ray (``ray_address=None``) or join the cluster at ``ray_address``."""
        owns = connect(ray, self.ray_address, self.n_workers * self.num_cpus,
                       self.n_workers * self.num_gpus, type(self).__name__)
        self._owns_ray = self._owns_ray or owns

    def _start_workers(self, ray: ModuleType, seed: int, env_rank_offset: int,
                       bootstrap_value: bool, torch_threads: int) -> None:
        """Reserve the workers' resources, start the actors and wait until they are ready."""
        self._fleet = RayWorkerFleet(self.n_workers, self.num_cpus, self.num_gpus,
                                     self.placement_strategy, self.max_worker_restarts,
                                     self._make_worker)
        self._fleet.reserve(ray)
        self._worker_kwargs = dict(
            seed=seed, env_rank_offset=env_rank_offset, bootstrap_value=bootstrap_value,
            torch_threads=torch_threads,
            agent_ref=ray.put(self._agent_for_workers()))  # One copy for all, restarts too.
        self._fleet.start()  # A worker failing here raises WorkerError (not restarted).

    def _make_worker(self, w: int, restart: int = 0,
                     in_placement_group: bool = True) -> ActorHandle:
        """Start the actor of worker ``w`` (it is ready once a call to it answers).

        Used at start-up and at restarts (:class:`RayWorkerFleet` calls it); subclasses
        that start workers must build them here.

        Args:
            w: worker index; the actor steps columns ``w * B_per_worker`` to
                ``(w + 1) * B_per_worker`` of the batch.
            restart: how many times worker ``w`` was restarted (0: the first
                actor); every seed of the actor is its first one plus
                ``restart * RESTART_SEED_OFFSET``.
            in_placement_group: reserve the actor's resources in bundle ``w`` of
                the sampler's placement group; False: wherever the cluster has them.

        Returns:
            the actor handle.
        """
        kw = self._worker_kwargs
        eval_n_envs_per, eval_max_T, eval_max_trajs = self._eval_split()
        seed = kw["seed"] + restart * RESTART_SEED_OFFSET
        start = w * self.B_per_worker
        env_start = kw["env_rank_offset"] + start
        return self._fleet.start_actor(w, in_placement_group, dict(
            rank=w, agent=kw["agent_ref"], EnvCls=self.EnvCls, env_kwargs=self.env_kwargs,
            env_backend=self.env_backend, n_envs=self.B_per_worker,
            batch_T=self.batch_spec.T, examples=self.examples,
            bootstrap_value=kw["bootstrap_value"], CollectorCls=self.CollectorCls,
            TrajInfoCls=self.TrajInfoCls, traj_info_kwargs=self.traj_info_kwargs,
            seed=seed + w, env_seed=seed + start,
            env_ranks=list(range(env_start, env_start + self.B_per_worker)),
            global_B=self.global_B, max_decorrelation_steps=self.max_decorrelation_steps,
            eval_n_envs=eval_n_envs_per, eval_env_kwargs=self.eval_env_kwargs,
            eval_CollectorCls=self.eval_CollectorCls, eval_max_T=eval_max_T,
            eval_max_trajectories=eval_max_trajs, eval_env_seed=seed + w * eval_n_envs_per,
            eval_env_quota=eval_env_quotas(self.eval_max_trajectories,
                                           eval_n_envs_per * self.n_workers,
                                           w * eval_n_envs_per, eval_n_envs_per),
            torch_threads=kw["torch_threads"]))

    def _restart_worker(self, w: int, error: BaseException) -> None:
        """Replace failed worker ``w`` (see :meth:`RayWorkerFleet.restart`); the caller
        repeats the failed worker's call.

        Raises:
            WorkerError: worker ``w`` already used ``max_worker_restarts`` restarts;
                the sampler is shut down first. The message holds the worker's traceback.
        """
        try:
            self._fleet.restart(w, error)
        except WorkerError:
            self.shutdown()
            raise

    # Worker fleet state, read where the sampler's users read it.
    @property
    def workers(self) -> list[ActorHandle]:
        """The actors, worker ``w`` at index ``w`` (empty before initialize and after shutdown)."""
        return [] if self._fleet is None else self._fleet.workers

    @property
    def worker_nodes(self) -> list[str]:
        """The Ray node id of each worker (updated at restarts)."""
        return [] if self._fleet is None else self._fleet.worker_nodes

    @property
    def worker_restarts(self) -> int:
        """Restarts so far, all workers together."""
        return 0 if self._fleet is None else self._fleet.worker_restarts

    def _agent_for_workers(self) -> BaseAgent:
        """The agent every worker gets a copy of (pickled once into the object store)."""
        return self.agent

    def _eval_split(self) -> tuple[int, int, int | None]:
        """Per worker: evaluation envs, time steps and trajectories to stop at (its
        envs' quotas, :func:`~rlframe.samplers.collectors.eval_env_quotas`, say which)."""
        if self.eval_n_envs == 0:
            return 0, 0, None
        n_envs = max(1, self.eval_n_envs // self.n_workers)
        if n_envs * self.n_workers != self.eval_n_envs:
            logger.log(f"Total parallel evaluation envs: {n_envs * self.n_workers} "
                       f"({n_envs} per worker).")
        max_T = max(1, self.eval_max_steps // (n_envs * self.n_workers))
        max_trajs = None if self.eval_max_trajectories is None else \
            math.ceil(self.eval_max_trajectories / self.n_workers)
        return n_envs, max_T, max_trajs

    # ---- sampling ----------------------------------------------------------------------

    def _publish_params(self) -> tuple[int, list[ObjectRef]]:
        """Put the agent's current parameters in the object store once, for every worker;
        returns ``(version, [ObjectRef])``."""
        import ray
        state = _cpu_state(self.agent.state_dict())
        self._params_version += 1
        return self._params_version, [ray.put(state)]

    def _call_workers(self, method: str, itr: int) -> list[Any]:
        """Call ``method(itr, version, params_ref)`` on every worker with the agent's
        current parameters; returns the answers in worker order. A worker that fails
        is restarted and called again (a new actor loads the parameters at that call:
        it has version 0); past ``max_worker_restarts`` the sampler shuts down and
        WorkerError is raised."""
        version, params_ref = self._publish_params()
        try:
            return self._fleet.call(method, itr, version, params_ref)
        except WorkerError:
            self.shutdown()
            raise

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        """Run one batch in the workers; returns ``(samples [T, B] torch, completed
        TrajInfos)``. The same buffer object is returned every call and overwritten."""
        traj_infos: list[TrajInfo] = []
        for w, (samples_w, completed) in enumerate(self._call_workers("sample", itr)):
            start = w * self.B_per_worker
            self.samples_np[:, start:start + self.B_per_worker] = samples_w
            traj_infos.extend(completed)
        return self.samples_pyt, traj_infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers; returns every worker's completed TrajInfos."""
        return [info for completed in self._call_workers("evaluate", itr)
                for info in completed]

    def diagnostics(self) -> dict[str, float]:
        """``{"WorkerRestarts": restarts so far}``, logged with every diagnostics row."""
        return {"WorkerRestarts": self.worker_restarts}

    def shutdown(self) -> None:
        """Kill the workers, free their resources and stop the local Ray this sampler
        started (also after errors; safe to call twice)."""
        if not (self.workers or (self._fleet is not None and self._fleet.placement_group
                                 is not None) or self._owns_ray):
            return
        if self._fleet is not None:
            self._fleet.shutdown()
        self._worker_kwargs = {}  # Frees the agent's copy in the object store.
        if self._owns_ray:
            import ray
            ray.shutdown()
            self._owns_ray = False
        logger.log(f"{type(self).__name__} shut down.")
