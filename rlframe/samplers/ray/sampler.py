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
"""
from __future__ import annotations

import logging
import math
import os
import re
import socket
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from rlframe.samplers.base import BaseSampler
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.collections import TrajInfo
from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector
from rlframe.samplers.ray.worker import RaySamplerWorker
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.utils.checks import as_int, positive_int
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Examples, Samples

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
CONNECT_TIMEOUT_S = 10.  # To reach a cluster's address before ray.init is tried.
PLACEMENT_TIMEOUT_S = 60.  # For the cluster to grant every worker's resources.
# A restarted worker first waits this long on its placement group bundle (which Ray
# moves off a lost node only when another node has room), then is placed anywhere.
BUNDLE_WAIT_S = 20.
# Restart r (1, 2, ...) of a worker adds r * RESTART_SEED_OFFSET to each of its seeds,
# so the new envs do not replay the lost ones' episodes.
RESTART_SEED_OFFSET = 1_000_003
_RAY_USED_BY_PID: int | None = None  # The process that connected to Ray (forks inherit it).
INSTALL_HINT = 'RaySampler needs Ray: pip install "rlframe[ray]"'


def import_ray() -> Any:
    """Import Ray, or raise ImportError saying how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error}).") from error
    return ray


def note_ray_in_use() -> None:
    """Record this process as one that uses Ray, if it is connected to one (Ray is not
    imported here when nothing imported it): processes forked from it cannot start Ray."""
    global _RAY_USED_BY_PID
    if _RAY_USED_BY_PID is not None:
        return  # Known already, or a fork of a process that used Ray: no Ray call here.
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        _RAY_USED_BY_PID = os.getpid()


def ray_used_here() -> bool:
    """Whether this process used Ray (it is connected to one, or a Ray sampler connected
    it before): a process forked from it cannot start Ray."""
    note_ray_in_use()
    return _RAY_USED_BY_PID == os.getpid()


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ConnectionError unless something listens at ``address`` ("host:port")."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ray_address={address!r} must be None, 'auto' or 'host:port'.")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ConnectionError(
            f"No Ray cluster reachable at ray_address={address!r} ({error}). Start one with "
            "`ray start --head` and pass the address it prints, or ray_address=None for "
            "a local Ray.") from None


def error_text(error: BaseException) -> str:
    """A Ray error's message (a worker's traceback) without terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(error))


def error_summary(error: BaseException) -> str:
    """One line saying what failed: the exception raised in the worker's code, else
    the first line of the Ray error."""
    cause = getattr(error, "cause", None)  # Set on RayTaskError: the worker's exception.
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {error_text(cause)}".splitlines()[0]
    lines = [line.strip() for line in error_text(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _cpu_state(state: Any) -> Any:
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
        self.workers: list = []
        self.worker_nodes: list[str] = []  # Ray node id of each worker.
        self.worker_restarts = 0
        self._restarts_of = [0] * self.n_workers
        self._worker_kwargs: dict[str, Any] = {}
        self._actor_cls: Any = None
        self._placement_group: Any = None
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
        self.worker_restarts = 0
        self._restarts_of = [0] * self.n_workers
        try:
            self._connect(ray)
            self._start_workers(ray, seed, env_rank_offset, bootstrap_value, threads)
        except BaseException:
            self.shutdown()
            raise
        logger.log(f"{type(self).__name__} initialized: {self.n_workers} Ray workers, "
                   f"{self.B_per_worker} envs each.")
        return examples

    def _connect(self, ray: Any) -> None:
        """Start a local Ray (``ray_address=None``) or join the cluster at ``ray_address``."""
        global _RAY_USED_BY_PID
        if _RAY_USED_BY_PID not in (None, os.getpid()):
            # Ray's client state (gRPC threads) does not survive a fork: a process forked
            # from one that used Ray hangs in ray.init.
            raise RuntimeError(
                f"{type(self).__name__}: this process was forked from one (pid "
                f"{_RAY_USED_BY_PID}) that had used Ray, and Ray cannot start in such a "
                "process. Start the runner's processes with start_method='forkserver' or "
                "'spawn', or build the Ray samplers before anything uses Ray.")
        quiet = dict(include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
        _RAY_USED_BY_PID = os.getpid()
        if self.ray_address is None:
            if ray.is_initialized():
                return  # The caller's Ray: use it, leave it running.
            n_cpus = max(1, math.ceil(self.n_workers * self.num_cpus))
            n_gpus = math.ceil(self.n_workers * self.num_gpus)
            # "local": a new Ray, never one found through RAY_ADDRESS or the machine's
            # last started cluster (someone else's, on a shared machine).
            ray.init(address="local", num_cpus=n_cpus, num_gpus=n_gpus or None, **quiet)
            self._owns_ray = True
            return
        if ray.is_initialized():
            raise RuntimeError(f"ray_address={self.ray_address!r}: this process is already "
                               "connected to a Ray; pass ray_address=None to use it.")
        if self.ray_address != "auto":
            check_reachable(self.ray_address)
        try:
            ray.init(address=self.ray_address, **quiet)
        except ConnectionError as error:
            raise ConnectionError(f"Could not join the Ray cluster at ray_address="
                                  f"{self.ray_address!r}: {error}") from None

    def _start_workers(self, ray: Any, seed: int, env_rank_offset: int,
                       bootstrap_value: bool, torch_threads: int) -> None:
        """Reserve the workers' resources, start the actors and wait until they are ready."""
        from ray.util.placement_group import placement_group
        bundle = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        bundle = {k: v for k, v in bundle.items() if v > 0}
        self._placement_group = placement_group([bundle] * self.n_workers,
                                                strategy=self.placement_strategy)
        try:
            ray.get(self._placement_group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"The Ray cluster did not grant {self.n_workers} workers x {bundle} within "
                f"{PLACEMENT_TIMEOUT_S:.0f} s (placement_strategy="
                f"{self.placement_strategy!r}); available: {ray.available_resources()}."
            ) from None
        self._worker_kwargs = dict(
            seed=seed, env_rank_offset=env_rank_offset, bootstrap_value=bootstrap_value,
            torch_threads=torch_threads,
            agent_ref=ray.put(self._agent_for_workers()))  # One copy for all, restarts too.
        self.workers = [self._make_worker(w) for w in range(self.n_workers)]
        self.worker_nodes = self._get([worker.node_id.remote() for worker in self.workers])

    def _make_worker(self, w: int, restart: int = 0, in_placement_group: bool = True) -> Any:
        """Start the actor of worker ``w`` (it is ready once a call to it answers).

        Used at start-up and by :meth:`_restart_worker`; subclasses that start
        workers must build them here.

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
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        kw = self._worker_kwargs
        eval_n_envs_per, eval_max_T, eval_max_trajs = self._eval_split()
        seed = kw["seed"] + restart * RESTART_SEED_OFFSET
        start = w * self.B_per_worker
        env_start = kw["env_rank_offset"] + start
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=self._placement_group, placement_group_bundle_index=w) \
            if in_placement_group else "DEFAULT"
        if self._actor_cls is None:  # Ray registers each remote class: make it once.
            self._actor_cls = ray.remote(RaySamplerWorker)
        return self._actor_cls.options(
            num_cpus=self.num_cpus, num_gpus=self.num_gpus, scheduling_strategy=strategy,
            max_restarts=0).remote(
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
            torch_threads=kw["torch_threads"])

    def _restart_worker(self, w: int, error: BaseException) -> None:
        """Replace failed worker ``w`` by a fresh, ready actor, or stop past the limit.

        Kills the old actor (if it still lives), starts a new one for the same
        columns with new envs (see :meth:`_make_worker`) and waits until it is
        ready: first in the worker's placement group bundle (for up to
        ``BUNDLE_WAIT_S``; Ray moves a lost node's bundle when another node has
        room), then anywhere the cluster has the resources. Logs a warning and
        counts the restart in ``worker_restarts``. The caller repeats the failed
        worker's call. A new actor that fails while starting uses another restart.

        Args:
            w: the failed worker's index.
            error: what its call raised (a Ray error).

        Raises:
            WorkerError: worker ``w`` already used ``max_worker_restarts``
                restarts; the sampler is shut down first. The message holds
                the worker's traceback.
        """
        import ray
        while True:
            node = self.worker_nodes[w] if w < len(self.worker_nodes) else "unknown"
            if self._restarts_of[w] >= self.max_worker_restarts:
                self.shutdown()
                raise WorkerError(
                    f"Ray sampler worker {w} (node {node}) failed after "
                    f"{self._restarts_of[w]} restarts (max_worker_restarts="
                    f"{self.max_worker_restarts}):\n{error_text(error)}") from None
            self._restarts_of[w] += 1
            self.worker_restarts += 1
            message = (f"Ray sampler worker {w} on node {node} failed ({error_summary(error)}); "
                       f"restarting it with new envs (restart {self._restarts_of[w]} of "
                       f"max_worker_restarts={self.max_worker_restarts}).")
            logger.log(f"WARNING: {message}")
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            try:
                ray.kill(self.workers[w])
            except Exception:  # noqa: BLE001 - an actor lost with its node cannot be killed.
                pass
            try:
                self.workers[w], self.worker_nodes[w] = self._start_replacement(w)
                return
            except ray.exceptions.RayError as start_error:
                error = start_error

    def _start_replacement(self, w: int) -> tuple[Any, str]:
        """Start worker ``w``'s next actor and wait until it is ready; returns
        ``(actor, node id)``. Raises the actor's error if its start fails."""
        import ray
        restart = self._restarts_of[w]
        actor = self._make_worker(w, restart)
        deadline = BUNDLE_WAIT_S
        for in_group in (True, False):
            if not in_group:
                ray.kill(actor)
                logger.log(f"Worker {w}'s placement group bundle was not granted within "
                           f"{BUNDLE_WAIT_S:.0f} s; placing it anywhere with the resources.")
                actor = self._make_worker(w, restart, in_placement_group=False)
                deadline = PLACEMENT_TIMEOUT_S
            try:
                return actor, ray.get(actor.node_id.remote(), timeout=deadline)
            except ray.exceptions.GetTimeoutError:
                continue
            except BaseException:  # Its start failed, or Ctrl-C: it is not in self.workers.
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone.
                    pass
                raise
        ray.kill(actor)
        raise ray.exceptions.RayError(
            f"no node had the resources of worker {w} ({self.num_cpus} CPUs, "
            f"{self.num_gpus} GPUs) within {PLACEMENT_TIMEOUT_S:.0f} s; available: "
            f"{ray.available_resources()}.")

    def _agent_for_workers(self) -> BaseAgent:
        """The agent every worker gets a copy of (pickled once into the object store)."""
        return self.agent

    def _eval_split(self) -> tuple[int, int, int | None]:
        """Per worker: evaluation envs, time steps and trajectories to stop at."""
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

    def _publish_params(self) -> tuple[int, list[Any]]:
        """Put the agent's current parameters in the object store once, for every worker;
        returns ``(version, [ObjectRef])``."""
        import ray
        state = _cpu_state(self.agent.state_dict())
        self._params_version += 1
        return self._params_version, [ray.put(state)]

    def _get(self, futures: list[Any]) -> list[Any]:
        """``ray.get`` the workers' answers; a worker's failure stops every worker and
        raises WorkerError with its traceback."""
        import ray
        try:
            return ray.get(futures)
        except ray.exceptions.RayError as error:
            self.shutdown()
            raise WorkerError(f"Ray sampler worker failed:\n{error}") from None

    def _call_workers(self, method: str, itr: int) -> list[Any]:
        """Call ``method(itr, version, params_ref)`` on every worker with the agent's
        current parameters; returns the answers in worker order. A worker that fails
        is restarted (:meth:`_restart_worker`) and called again; the answers of the
        others are kept."""
        import ray
        version, params_ref = self._publish_params()
        pending = {getattr(worker, method).remote(itr, version, params_ref): w
                   for w, worker in enumerate(self.workers)}
        results: list[Any] = [None] * self.n_workers
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            w = pending.pop(done[0])
            try:
                results[w] = ray.get(done[0])
            except ray.exceptions.RayError as error:
                self._restart_worker(w, error)
                # The new actor loads the parameters at this call (it has version 0).
                pending[getattr(self.workers[w], method).remote(itr, version, params_ref)] = w
        return results

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
        if not (self.workers or self._placement_group is not None or self._owns_ray):
            return
        import ray
        if ray.is_initialized():
            for worker in self.workers:
                try:
                    ray.kill(worker)
                except Exception:  # noqa: BLE001 - lost with its node; nothing to stop.
                    pass
            if self._placement_group is not None:
                from ray.util.placement_group import remove_placement_group
                remove_placement_group(self._placement_group)
        self.workers, self._placement_group = [], None
        self._worker_kwargs = {}  # Frees the agent's copy in the object store.
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        logger.log(f"{type(self).__name__} shut down.")
