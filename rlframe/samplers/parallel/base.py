"""Parallel samplers: worker processes step slices of the batch's envs.

The master allocates the ``[T, B]`` sample buffer on shared memory; worker
``w`` writes columns ``w * B_w : (w + 1) * B_w`` in place. Each iteration the
master releases every worker's ``step_in`` semaphore and collects one
``step_out`` release per worker. While waiting it polls the workers, so a
crashed worker surfaces as a :class:`WorkerError` carrying its traceback
within a second, and every process is stopped on shutdown, on errors and on
Ctrl-C.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlframe.samplers.base import BaseSampler
from rlframe.samplers.buffer import build_samples_buffer
from rlframe.samplers.collectors import eval_env_quotas
from rlframe.samplers.parallel.worker import POLL_S, sampling_process
from rlframe.utils.collections import AttrDict
from rlframe.utils.launching.pinning import check_workers_cpus
from rlframe.utils.logging import logger
from rlframe.utils.processes import ChildSupervisor
from rlframe.utils.synchronize import check_start_method, drain_queue, process_context

if TYPE_CHECKING:
    from multiprocessing.synchronize import Semaphore

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import EnvSpaces
    from rlframe.samplers.collections import Examples, Samples, TrajInfo

JOIN_TIMEOUT_S = 5.  # Workers ending by themselves at shutdown, before SIGTERM.
TERMINATE_S = 1.  # After SIGTERM, before SIGKILL.


class WorkerError(RuntimeError):
    """A sampler worker process failed; the message holds its traceback."""


class ParallelSamplerBase(BaseSampler):
    """Common machinery of CpuSampler and the GPU-style samplers.

    Extra keyword argument (beyond :class:`BaseSampler`):
        start_method: multiprocessing start method for workers ("fork",
            "forkserver" or "spawn"; None: the multiprocessing default). With
            "spawn"/"forkserver", ``EnvCls`` and the agent must be picklable
            (module-level classes and functions).
    """

    gpu: bool = False
    worker_label: str = "Sampler worker"  # How errors name a worker process.
    # Workers are daemons (they end with this process); daemons may not start
    # processes, so samplers whose workers start their own set this False.
    daemon_workers: bool = True

    def __init__(self, *args: Any, start_method: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.start_method = check_start_method(start_method)
        self.workers: list[BaseProcess] = []
        self._supervisor: ChildSupervisor | None = None
        self.ctrl: AttrDict | None = None
        # Where this sampler's evaluation envs sit among the evaluation's (an action
        # server's are a part); None: they are all of them. Sets the envs' quotas.
        self.eval_env_offset = 0
        self.eval_env_total: int | None = None
        self._check_picklable_for_workers()

    def _check_picklable_for_workers(self) -> None:
        """Under spawn and forkserver, what builds the workers' envs travels to them by
        pickle: check it now, with a clear error, rather than when workers start."""
        method = self.start_method or mp.get_context().get_start_method()
        if method == "fork":
            return
        for name in ("EnvCls", "env_kwargs", "eval_env_kwargs", "TrajInfoCls", "CollectorCls",
                     "eval_CollectorCls"):
            value = getattr(self, name, None)
            try:
                pickle.dumps(value)
            except Exception as error:  # noqa: BLE001 - any pickling failure reads the same.
                raise TypeError(
                    f"{type(self).__name__}: {name}={value!r} cannot be sent to worker "
                    f"processes started with {method!r} ({type(error).__name__}: {error}). "
                    "Define it at module level (a lambda, or a function defined inside "
                    "another function, cannot be pickled), or use start_method='fork' on "
                    "Linux.") from None

    def check_affinity(self, affinity: dict, name: str | None = None
                       ) -> list[tuple[int, ...]]:
        """Check ``affinity['workers_cpus']`` (one entry per worker) and that the workers
        split ``batch_B`` evenly; returns one tuple of CPU ids per worker.

        Args:
            affinity: the sampler's affinity dict.
            name: how to name ``affinity`` in errors (default ``"affinity"``, or the
                sampler's ``affinity_name``).

        Raises:
            ValueError: ``workers_cpus`` is missing or wrong, or ``batch_B`` is not a
                multiple of the number of workers.
        """
        name = name or getattr(self, "affinity_name", "affinity")
        workers_cpus = check_workers_cpus(affinity, alternating=self.alternating, name=name)
        n_worker, B = len(workers_cpus), self.batch_spec.B
        if B % n_worker != 0:
            divisors = [k for k in range(1, B + 1) if B % k == 0
                        and (k % 2 == 0 or not self.alternating)]
            larger = -(-B // n_worker) * n_worker
            groups = ", in two groups of alternating workers" if self.alternating else ""
            raise ValueError(
                f"{type(self).__name__}: batch_B={B} must be a multiple of the number of "
                f"workers, {n_worker} (len({name}['workers_cpus']): one worker per entry"
                f"{groups}), since each worker steps as many envs. Use batch_B={larger}, or "
                f"workers_cpus with {_or_list(divisors)} entries.")
        return workers_cpus

    def initialize(self, agent: BaseAgent, affinity: dict | None = None, seed: int | None = None,
                   bootstrap_value: bool = False, traj_info_kwargs: dict | None = None,
                   world_size: int = 1, rank: int = 0,
                   worker_process: Callable[..., None] | None = None) -> Examples:
        """Build the shared buffers, start the workers and wait until they are ready.

        Args:
            agent: the agent; CpuSampler workers act with a shared-memory copy.
            affinity: needs ``workers_cpus`` (one entry per worker: an int or a
                tuple of ints); optional ``worker_torch_threads`` (default 1),
                ``set_affinity`` (default True).
            seed: env ``b`` of the batch is seeded ``seed + b`` (as in SerialSampler);
                worker ``w`` seeds its RNGs with ``seed + w``.
            bootstrap_value, traj_info_kwargs, world_size, rank: as SerialSampler.

        Returns:
            examples dict (one step's outputs).
        """
        affinity = {} if affinity is None else affinity
        self._set_traj_info_kwargs(traj_info_kwargs)
        workers_cpus = self.check_affinity(affinity)
        n_worker = len(workers_cpus)
        B = self.batch_spec.B
        self.n_worker = n_worker
        self.B_per_worker = B // n_worker
        seed = int(np.random.randint(2 ** 31)) if seed is None else seed
        self.seed = seed
        self.world_size, self.rank = world_size, rank
        self.global_B = B * world_size
        env_rank_offset = rank * B
        self.ctx = process_context(self.start_method)
        self.master_pid = os.getpid()

        env = self.make_vec_env(1)  # For the spaces and one example step.
        try:
            self._agent_init(agent, env.spaces, global_B=self.global_B,
                             env_ranks=list(range(env_rank_offset, env_rank_offset + B)))
            samples_pyt, samples_np, examples = build_samples_buffer(
                agent, env, self.batch_spec, bootstrap_value, agent_shared=True,
                env_shared=True, subprocess=False)
        finally:
            env.close()
        self.agent = agent
        self.samples_pyt, self.samples_np = samples_pyt, samples_np
        self.examples = examples

        self._start_workers(affinity, workers_cpus, seed, env_rank_offset, worker_process)
        return examples

    def _start_workers(self, affinity: dict, workers_cpus: list, seed: int,
                       env_rank_offset: int,
                       worker_process: Callable[..., None] | None = None) -> None:
        """Size evaluation, build the control objects and queues, start the workers and
        wait until every one has built and decorrelated its envs."""
        n_worker = self.n_worker
        self.eval_n_envs_per = 0
        if self.eval_n_envs > 0:
            self.eval_n_envs_per = max(1, self.eval_n_envs // n_worker)
            eval_n_envs = self.eval_n_envs_per * n_worker
            if eval_n_envs != self.eval_n_envs:
                logger.log(f"Total parallel evaluation envs: {eval_n_envs} "
                           f"({self.eval_n_envs_per} per worker).")
            self.eval_max_T = max(1, self.eval_max_steps // eval_n_envs)

        self.ctrl = AttrDict(
            quit=self.ctx.RawValue("b", False),
            do_eval=self.ctx.RawValue("b", False),
            itr=self.ctx.RawValue("l", 0),
            step_in=[self.ctx.Semaphore(0) for _ in range(n_worker)],
            step_out=self.ctx.Semaphore(0),
            # Completed trajectories each worker queued in the last batch: the queue's
            # feeder thread may still be flushing them when the worker reports done.
            n_completed=self.ctx.RawArray("l", n_worker),
        )
        self.traj_infos_queue = self.ctx.Queue()
        self.eval_traj_infos_queue = self.ctx.Queue()
        # Any exit of a worker before shutdown is a failure (an error, a kill).
        self._supervisor = ChildSupervisor(
            self.ctx, title=lambda name: f"{self.worker_label} {name}",
            exit_too_early=lambda name: True)
        self.error_queue = self._supervisor.error_queue
        self.sync = AttrDict(stop_eval=self.ctx.RawValue("b", False))
        self._build_parallel_ctrl(n_worker)

        common_kwargs = self._assemble_common_kwargs(affinity, self.traj_info_kwargs)
        workers_kwargs = self._assemble_workers_kwargs(affinity, workers_cpus, seed,
                                                       env_rank_offset)
        target = sampling_process if worker_process is None else worker_process
        for w, w_kwargs in enumerate(workers_kwargs):
            self._supervisor.add(str(w), target, daemon=self.daemon_workers,
                                 process_name=f"{type(self).__name__}-worker{w}",
                                 kwargs=dict(common_kwargs=common_kwargs, worker_kwargs=w_kwargs))
        self.workers = list(self._supervisor.children.values())
        try:
            self._supervisor.start()
            self.wait_workers()  # Workers built envs and decorrelated them.
        except BaseException:
            self.shutdown()
            raise
        logger.log(f"{type(self).__name__} initialized: {n_worker} workers, "
                   f"{self.B_per_worker} envs each.")

    def _agent_init(self, agent: BaseAgent, env_spaces: EnvSpaces, global_B: int,
                    env_ranks: list[int]) -> None:
        agent.initialize(env_spaces, share_memory=not self.gpu, global_B=global_B,
                         env_ranks=env_ranks)

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        """Extra control objects (GPU-style samplers add per-step semaphores)."""

    def _assemble_common_kwargs(self, affinity: dict, traj_info_kwargs: dict | None) -> dict:
        return dict(
            EnvCls=self.EnvCls,
            env_kwargs=self.env_kwargs,
            env_backend=self.env_backend,
            agent=None if self.gpu else self.agent,
            batch_T=self.batch_spec.T,
            CollectorCls=self.CollectorCls,
            TrajInfoCls=self.TrajInfoCls,
            traj_info_kwargs=traj_info_kwargs,
            traj_infos_queue=self.traj_infos_queue,
            eval_traj_infos_queue=self.eval_traj_infos_queue,
            error_queue=self.error_queue,
            ctrl=self.ctrl,
            max_decorrelation_steps=self.max_decorrelation_steps,
            torch_threads=affinity.get("worker_torch_threads", 1),
            global_B=self.global_B,
            eval_n_envs=self.eval_n_envs_per,
            eval_CollectorCls=self.eval_CollectorCls,
            eval_env_kwargs=self.eval_env_kwargs,
            eval_max_T=getattr(self, "eval_max_T", 0),
            master_pid=self.master_pid,
        )

    def _assemble_workers_kwargs(self, affinity: dict, workers_cpus: list, seed: int,
                                 env_rank_offset: int) -> list:
        set_affinity = affinity.get("set_affinity", True)
        workers_kwargs = []
        for w in range(self.n_worker):
            slice_B = slice(w * self.B_per_worker, (w + 1) * self.B_per_worker)
            env_ranks = list(range(env_rank_offset + slice_B.start,
                                   env_rank_offset + slice_B.stop))
            workers_kwargs.append(dict(
                rank=w,
                seed=seed + w,
                env_seed=seed + slice_B.start,
                eval_env_seed=seed + w * self.eval_n_envs_per,
                eval_env_quota=self._eval_env_quota(w),
                cpus=workers_cpus[w] if set_affinity else None,
                n_envs=self.B_per_worker,
                env_ranks=env_ranks,
                samples_np=self._worker_samples(slice_B),
                sync=self.sync,
                **self._worker_extra_kwargs(w, slice_B),
            ))
        return workers_kwargs

    def _eval_env_quota(self, w: int) -> np.ndarray | None:
        """Trajectories each evaluation env of worker ``w`` contributes (None: no
        ``eval_max_trajectories``, or no evaluation)."""
        if self.eval_n_envs_per == 0:
            return None
        total = self.eval_env_total or self.eval_n_envs_per * self.n_worker
        return eval_env_quotas(self.eval_max_trajectories, total,
                               self.eval_env_offset + w * self.eval_n_envs_per,
                               self.eval_n_envs_per)

    def _worker_extra_kwargs(self, w: int, slice_B: slice) -> dict:
        return {}

    def _worker_samples(self, slice_B: slice) -> Samples | tuple[Samples, ...]:
        """The sample buffer columns ``slice_B`` a worker writes."""
        return self.samples_np[:, slice_B]

    # ---- master-side synchronization ------------------------------------------------

    def check_workers(self) -> None:
        """Raise WorkerError if a worker reported an error or died (the message names
        it, with its traceback or how it died); every worker is stopped first."""
        failure = None if self._supervisor is None else self._supervisor.find_failure()
        if failure is None:
            return
        self.shutdown()
        raise WorkerError(failure)

    def acquire(self, semaphore: Semaphore) -> None:
        """Acquire ``semaphore`` while polling the workers' health."""
        while not semaphore.acquire(timeout=POLL_S):
            self.check_workers()
        if not self.error_queue.empty():
            self.check_workers()

    def wait_workers(self) -> None:
        """Wait until every worker released ``step_out`` once."""
        for _ in range(self.n_worker):
            self.acquire(self.ctrl.step_out)

    def release_workers(self) -> None:
        for step_in in self.ctrl.step_in:
            step_in.release()

    # ---- sampling --------------------------------------------------------------------

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        """Run one batch in the workers; returns ``(samples [T, B], completed TrajInfos)``."""
        self.ctrl.itr.value = itr
        self.release_workers()
        self.serve_actions(itr)
        self.wait_workers()
        return self.samples_pyt, self._get_traj_infos(sum(self.ctrl.n_completed))

    def _get_traj_infos(self, n: int) -> list[TrajInfo]:
        """Take exactly ``n`` TrajInfos off the training queue."""
        traj_infos = []
        while len(traj_infos) < n:
            try:
                traj_infos.append(self.traj_infos_queue.get(timeout=POLL_S))
            except queue.Empty:
                self.check_workers()
        return traj_infos

    def serve_actions(self, itr: int) -> None:
        """GPU-style samplers select actions here while workers step envs."""

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers; returns completed eval TrajInfos.

        With ``eval_max_trajectories``, workers are told to stop once that many
        trajectories arrived; each worker ends its report with a ``None``.
        """
        self.ctrl.itr.value = itr
        self.ctrl.do_eval.value = True
        self.sync.stop_eval.value = False
        self._eval_traj_infos, self._eval_sentinels = [], 0
        self.release_workers()
        self.serve_actions_evaluation(itr)
        while self._eval_sentinels < self.n_worker:
            self.poll_eval_queue(timeout=POLL_S)
        self.wait_workers()
        self.ctrl.do_eval.value = False
        return self._eval_traj_infos

    def poll_eval_queue(self, timeout: float | None = None) -> None:
        """Move finished eval TrajInfos off the queue (waiting up to ``timeout``)."""
        try:
            while True:
                info = self.eval_traj_infos_queue.get(timeout=timeout) if timeout \
                    else self.eval_traj_infos_queue.get_nowait()
                timeout = None
                if info is None:
                    self._eval_sentinels += 1
                    continue
                self._eval_traj_infos.append(info)
                if (self.eval_max_trajectories is not None
                        and len(self._eval_traj_infos) >= self.eval_max_trajectories):
                    self.sync.stop_eval.value = True
        except queue.Empty:
            self.check_workers()

    def serve_actions_evaluation(self, itr: int) -> None:
        """GPU-style samplers select eval actions here."""

    def shutdown(self) -> None:
        """Stop every worker (politely, then by force) and free control objects."""
        if not self.workers:
            return
        if self.ctrl is not None:
            self.ctrl.quit.value = True
            self.release_workers()
            self._release_extra()
        queues = (self.traj_infos_queue, self.eval_traj_infos_queue)

        def drain() -> None:  # A child blocked flushing a queue cannot exit.
            for q in queues:
                drain_queue(q)
        self._supervisor.stop(join_s=JOIN_TIMEOUT_S, terminate_s=TERMINATE_S, drain=drain)
        self.workers = []
        for q in queues:
            q.close()
            q.join_thread()
        # Drop the control objects: named semaphores (spawn/forkserver) are unlinked
        # when collected.
        self.ctrl = self.sync = None
        logger.log(f"{type(self).__name__} shut down.")

    def _release_extra(self) -> None:
        """GPU-style samplers unblock workers waiting for actions."""


def _or_list(numbers: list[int]) -> str:
    """``[1, 2, 4]`` -> ``"1, 2 or 4"``."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
