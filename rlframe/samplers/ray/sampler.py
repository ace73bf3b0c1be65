"""Synchronous sampler on Ray actors: the same batches as SerialSampler, from any machine.

``n_workers`` Ray actors each hold ``batch_B / n_workers`` envs and a CPU copy
of the agent, and step them with the project's collectors. Every iteration the
master puts the agent's parameters in Ray's object store once (with a version
number; a worker loads them only when the version changed), each actor fills
its columns of the ``[T, B]`` batch and returns them as numpy arrays, and the
master writes them into its sample buffer, the same structure the other
samplers return.
"""
from __future__ import annotations

import logging
import math
import socket
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlframe.samplers.base import BaseSampler
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.collections import TrajInfo
from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector
from rlframe.samplers.ray.worker import RaySamplerWorker
from rlframe.samplers.serial.collectors import SerialEvalCollector
from rlframe.utils.checks import positive_int
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Examples, Samples

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
CONNECT_TIMEOUT_S = 10.  # To reach a cluster's address before ray.init is tried.
PLACEMENT_TIMEOUT_S = 60.  # For the cluster to grant every worker's resources.
INSTALL_HINT = 'RaySampler needs Ray: pip install "rlframe[ray]"'


def import_ray() -> Any:
    """Import Ray, or raise ImportError saying how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error}).") from error
    return ray


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
    """

    def __init__(self, EnvCls: Callable[..., Env], env_kwargs: dict | None, batch_T: int,
                 batch_B: int, CollectorCls: type = CpuResetCollector,
                 max_decorrelation_steps: int = 100, TrajInfoCls: type[TrajInfo] = TrajInfo,
                 eval_n_envs: int = 0, eval_CollectorCls: type = SerialEvalCollector,
                 eval_env_kwargs: dict | None = None, eval_max_steps: int | None = None,
                 eval_max_trajectories: int | None = None, env_backend: str = "plain", *,
                 n_workers: int = 1, ray_address: str | None = None, num_cpus: float = 1,
                 num_gpus: float = 0, placement_strategy: str = "PACK",
                 worker_torch_threads: int = 1):
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
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.placement_strategy = placement_strategy
        self.worker_torch_threads = positive_int("worker_torch_threads", worker_torch_threads)
        self.B_per_worker = self.batch_spec.B // self.n_workers
        self.workers: list = []
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
                worker ``w`` seeds its RNGs with ``seed + w`` (as in CpuSampler).
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

    def _connect(self, ray: Any) -> None:
        """Start a local Ray (``ray_address=None``) or join the cluster at ``ray_address``."""
        quiet = dict(include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
        if self.ray_address is None:
            if ray.is_initialized():
                return  # The caller's Ray: use it, leave it running.
            n_cpus = max(1, math.ceil(self.n_workers * self.num_cpus))
            n_gpus = math.ceil(self.n_workers * self.num_gpus)
            # "local": a new Ray of its own, even where `ray start` left a cluster to find.
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
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
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
        WorkerActor = ray.remote(RaySamplerWorker)
        agent_ref = ray.put(self.agent)  # One copy for all workers.
        eval_n_envs_per, eval_max_T, eval_max_trajs = self._eval_split()
        self.workers = []
        for w in range(self.n_workers):
            start = w * self.B_per_worker
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._placement_group, placement_group_bundle_index=w)
            self.workers.append(WorkerActor.options(
                num_cpus=self.num_cpus, num_gpus=self.num_gpus, scheduling_strategy=strategy,
                max_restarts=0).remote(
                rank=w, agent=agent_ref, EnvCls=self.EnvCls, env_kwargs=self.env_kwargs,
                env_backend=self.env_backend, n_envs=self.B_per_worker,
                batch_T=self.batch_spec.T, examples=self.examples,
                bootstrap_value=bootstrap_value, CollectorCls=self.CollectorCls,
                TrajInfoCls=self.TrajInfoCls, traj_info_kwargs=self.traj_info_kwargs,
                seed=seed + w, env_seed=seed + start,
                env_ranks=list(range(env_rank_offset + start,
                                     env_rank_offset + start + self.B_per_worker)),
                global_B=self.global_B, max_decorrelation_steps=self.max_decorrelation_steps,
                eval_n_envs=eval_n_envs_per, eval_env_kwargs=self.eval_env_kwargs,
                eval_CollectorCls=self.eval_CollectorCls, eval_max_T=eval_max_T,
                eval_max_trajectories=eval_max_trajs, eval_env_seed=seed + w * eval_n_envs_per,
                torch_threads=torch_threads))
        self._get([worker.ready.remote() for worker in self.workers])

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
        state = {k: v.detach().cpu() for k, v in self.agent.state_dict().items()}
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

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        """Run one batch in the workers; returns ``(samples [T, B] torch, completed
        TrajInfos)``. The same buffer object is returned every call and overwritten."""
        version, params_ref = self._publish_params()
        results = self._get([worker.sample.remote(itr, version, params_ref)
                             for worker in self.workers])
        traj_infos: list[TrajInfo] = []
        for w, (samples_w, completed) in enumerate(results):
            start = w * self.B_per_worker
            self.samples_np[:, start:start + self.B_per_worker] = samples_w
            traj_infos.extend(completed)
        return self.samples_pyt, traj_infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers; returns every worker's completed TrajInfos."""
        version, params_ref = self._publish_params()
        results = self._get([worker.evaluate.remote(itr, version, params_ref)
                             for worker in self.workers])
        return [info for completed in results for info in completed]

    def shutdown(self) -> None:
        """Kill the workers, free their resources and stop the local Ray this sampler
        started (also after errors; safe to call twice)."""
        if not (self.workers or self._placement_group is not None or self._owns_ray):
            return
        import ray
        if ray.is_initialized():
            for worker in self.workers:
                ray.kill(worker)
            if self._placement_group is not None:
                from ray.util.placement_group import remove_placement_group
                remove_placement_group(self._placement_group)
        self.workers, self._placement_group = [], None
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        logger.log(f"{type(self).__name__} shut down.")
