"""Asynchronous sampler on Ray actors, for :class:`~rlframe.runners.async_rl.AsyncRl`.

The runner's sampler process drives ``n_workers`` Ray actors (on this machine
or a cluster), each stepping ``batch_B / n_workers`` envs with a CPU copy of
the agent, as :class:`~rlframe.samplers.ray.RaySampler` does. Here the actors
sample continuously: each has up to ``max_batches_in_flight`` sample calls
queued, so it steps its envs while the sampler process waits for the
optimizer. One iteration takes the oldest finished chunk ``[T, B / n_workers]``
of every worker, writes them side by side into half ``db_idx`` of the shared
double buffer (a replay column stays one env, contiguous in time), and queues
the next call of every worker with the newest parameters.

Parameters go through Ray's object store by version: before queuing calls the
sampler process takes the optimizer's newest parameters from the shared-memory
model; only when they changed is one state dict put in the object store, and a
worker loads it only when the version it is handed differs from its own.
"""
from __future__ import annotations

import collections
import copy
import os
import subprocess
from typing import TYPE_CHECKING, Any

import psutil
import torch

from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.samplers.ray.cluster import STOP_TIMEOUT_S  # noqa: F401  (kept importable)
from rlframe.samplers.ray.cluster import import_ray
from rlframe.samplers.ray.cluster import stop_processes as _stop
from rlframe.samplers.ray.cluster import stop_ray_on_sigterm as _stop_ray_on_sigterm
from rlframe.samplers.ray.cluster import with_descendants as _with_descendants
from rlframe.samplers.ray.reaper import (isolate_session, session_processes, start_reaper,
                                         stop_reaper)
from rlframe.samplers.ray.sampler import RaySampler
from rlframe.utils.checks import positive_int
from rlframe.utils.launching.pinning import pin_master, set_cpu_affinity
from rlframe.utils.logging import logger
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import Examples, Samples, TrajInfo


class AsyncRaySampler(AsyncSamplerMixin, RaySampler):
    """Ray actors sample continuously; finished batches go to the double buffer.

    Constructor arguments are those of :class:`RaySampler` (``n_workers``,
    ``ray_address``, ``num_cpus``, ``num_gpus``, ``placement_strategy``,
    ``worker_torch_threads``; the affinity needs no ``workers_cpus``), plus:

    Args:
        max_batches_in_flight: sample calls queued on each worker (at least 1).
            A worker never waits for the optimizer while it has one queued;
            the cost is staleness: a call carries the parameters of the moment
            it was queued, so a batch may come from parameters up to
            ``max_batches_in_flight`` sampler iterations older than those the
            optimizer had published when the batch was returned (parameters sent
            after ``obtain_samples(k)`` first act in the batch returned by
            ``obtain_samples(k + max_batches_in_flight + 1)``).

    ``ray_address=None`` starts a local Ray in the sampler process, which
    :meth:`shutdown` stops, every process of it; so does SIGTERM in the runner's
    sampler process (which gets it when the main process dies). There the
    sampler process first leads a new session, which Ray's processes join, and
    starts a watchdog (:mod:`~rlframe.samplers.ray.reaper`) that kills whatever
    is left of the session once the sampler process or the main process is
    gone, however it ended. Worker
    ``w`` is seeded ``seed + w``, env ``b`` of the batch ``seed + b``.
    """

    def __init__(self, *args: Any, max_batches_in_flight: int = 2, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_batches_in_flight = positive_int("max_batches_in_flight", max_batches_in_flight)
        # Per worker: (itr, ObjectRef) of its queued sample calls, oldest first.
        self._in_flight: list[collections.deque] = []
        self._params: tuple[int, list[Any]] | None = None  # (version, [ObjectRef]) published.
        self._published_recv_count = -1  # The agent's hand-over count at the last publish.
        self._restarts: Any = None  # Shared with the master's copy (diagnostics).
        self._master_pid: int | None = None
        self._ray_daemons: list[psutil.Process] = []  # Of the local Ray started here.
        self._ray_processes: list[psutil.Process] = []  # All of them, once workers are ready.
        self._reaper: subprocess.Popen | None = None  # The session's watchdog (see reaper).

    # ---- master process ----------------------------------------------------------------

    def async_initialize(self, agent: BaseAgent, bootstrap_value: bool = False,
                         traj_info_kwargs: dict | None = None, seed: int | None = None,
                         ctx: BaseContext | None = None) -> tuple[tuple[Samples, ...], Examples]:
        """As :meth:`AsyncSamplerMixin.async_initialize` (shared agent, double buffer);
        also creates the worker-restart count the master's copy reports."""
        result = super().async_initialize(agent, bootstrap_value=bootstrap_value,
                                          traj_info_kwargs=traj_info_kwargs, seed=seed, ctx=ctx)
        self.bootstrap_value = bootstrap_value
        self._master_pid = os.getpid()
        self._restarts = self._handles_context(ctx).RawValue("l", 0)
        return result

    def diagnostics(self) -> dict[str, int]:
        """``{"WorkerRestarts": n}``: workers replaced after a failure (readable from the
        master's copy while the sampler process runs)."""
        return {"WorkerRestarts": 0 if self._restarts is None else int(self._restarts.value)}

    # ---- sampler process ---------------------------------------------------------------

    def initialize(self, affinity: dict | None = None) -> None:  # type: ignore[override]
        """In the sampler process: connect to Ray, start the actors and wait until ready.

        Args:
            affinity: the runner's ``affinity["sampler"]``: ``master_cpus`` (this
                process), ``all_cpus`` (the processes of a local Ray started here),
                ``worker_torch_threads`` and ``set_affinity`` are read;
                ``workers_cpus`` is not needed (Ray places the workers).
        """
        ray = import_ray()
        affinity = {} if affinity is None else affinity
        torch.set_num_threads(1)  # This process only moves batches and parameters.
        set_seed(self.seed)
        pinned = affinity.get("set_affinity", True)
        self.world_size, self.rank = 1, 0
        self.agent.async_cpu(share_memory=False)  # A private copy, which recv fills.
        threads = int(affinity.get("worker_torch_threads", self.worker_torch_threads))
        try:
            if pinned and self.ray_address is None and not ray.is_initialized():
                # A local Ray's processes inherit this process's CPUs.
                set_cpu_affinity(affinity.get("all_cpus"))
            in_sampler_process = os.getpid() != self._master_pid
            if (in_sampler_process and self.ray_address is None and not ray.is_initialized()
                    and isolate_session()):
                # Before ray.init: every process of the local Ray joins this session.
                self._reaper = start_reaper(self._master_pid)
            children = {p.pid for p in psutil.Process().children()}
            self._connect(ray)
            if self._owns_ray:  # Its daemons are this process's new children.
                self._ray_daemons = [p for p in psutil.Process().children()
                                     if p.pid not in children]
            if in_sampler_process:  # After ray.init, which sets a handler too.
                _stop_ray_on_sigterm(lambda: _with_descendants(self._ray_daemons),
                                     lambda: self._ray_processes,
                                     None if self._reaper is None else self._reaper.pid)
            pin_master(affinity)
            self._start_workers(ray, self.seed, 0, self.bootstrap_value, threads)
            # The raylet's agents and the actors are up by now.
            self._ray_processes = _with_descendants(self._ray_daemons)
        except BaseException:
            self.shutdown()
            raise
        self._in_flight = [collections.deque() for _ in range(self.n_workers)]
        logger.log(f"{type(self).__name__} initialized (pid {os.getpid()}): {self.n_workers} "
                   f"Ray workers, {self.B_per_worker} envs each, up to "
                   f"{self.max_batches_in_flight} batches in flight per worker.")

    def _agent_for_workers(self) -> BaseAgent:
        # The hand-over lock and counter belong to this machine's processes; workers
        # load parameters from the object store instead.
        agent = copy.copy(self.agent)
        agent.shared_model = None
        agent._send_count = agent._rw_lock = None
        return agent

    def _newest_params(self) -> tuple[int, list[Any]]:
        """Take the optimizer's newest parameters; put them in the object store only
        if they changed since the last publish. Returns ``(version, [ObjectRef])``."""
        self.agent.recv_shared_memory()
        received = self.agent.recv_count
        if self._params is None or received != self._published_recv_count:
            self._params = self._publish_params()
            self._published_recv_count = received
        return self._params

    def _submit(self, w: int, itr: int) -> None:
        """Queue one sample call of batch ``itr`` on worker ``w``, with the newest parameters."""
        version, params_ref = self._newest_params()
        self._in_flight[w].append((itr, self.workers[w].sample.remote(itr, version, params_ref)))

    def _oldest_result(self, w: int) -> tuple[Samples, list[TrajInfo]]:
        """Wait for worker ``w``'s oldest queued sample call and take it off the queue."""
        import ray
        while True:
            _, ref = self._in_flight[w][0]
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as error:
                self._on_worker_failure(w, error)
                continue  # The handler returned: worker w and its queued calls are new.
            self._in_flight[w].popleft()
            return result

    def _on_worker_failure(self, w: int, error: BaseException) -> None:
        """Worker ``w``'s call failed: replace it (:meth:`RaySampler._restart_worker`,
        which raises WorkerError with the worker's traceback past
        ``max_worker_restarts``) and queue its lost sample calls again on the new
        actor, with the newest parameters. The new actor's envs start new episodes,
        so the replay's columns of this worker continue with a fresh trajectory."""
        self._restart_worker(w, error)
        self._restarts.value = self.worker_restarts  # What the master's copy reports.
        lost = [itr for itr, _ in self._in_flight[w]]
        self._in_flight[w].clear()
        for itr in lost:
            self._submit(w, itr)

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Write the oldest finished batch of every worker into ``double_buffer[db_idx]``
        (worker ``w``: columns ``w * B / n_workers`` on) and queue each worker's next call.

        The first call queues ``max_batches_in_flight`` calls per worker, of batches
        ``itr, itr + 1, ...``; every call then queues batch ``itr + max_batches_in_flight``.

        Returns:
            the TrajInfos of trajectories completed in the returned batch.
        """
        db_idx = self.check_db_idx(db_idx)
        if not self.workers:
            raise RuntimeError(f"{type(self).__name__}.obtain_samples: no workers; call "
                               "initialize() first (after shutdown() a sampler is spent).")
        for w in range(self.n_workers):
            for k in range(len(self._in_flight[w]), self.max_batches_in_flight):
                self._submit(w, itr + k)
        buffer = self.double_buffer[db_idx]
        traj_infos: list[TrajInfo] = []
        for w in range(self.n_workers):
            samples_w, completed = self._oldest_result(w)
            start = w * self.B_per_worker
            buffer[:, start:start + self.B_per_worker] = samples_w
            traj_infos.extend(completed)
        for w in range(self.n_workers):
            self._submit(w, itr + self.max_batches_in_flight)
        return traj_infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run evaluation in the workers with the newest parameters (after each worker's
        queued sample calls: an actor runs its calls in order); returns the TrajInfos."""
        if not self.workers:
            raise RuntimeError(f"{type(self).__name__}.evaluate_agent: no workers; call "
                               "initialize() first.")
        import ray
        version, params_ref = self._newest_params()
        refs = [worker.evaluate.remote(itr, version, params_ref) for worker in self.workers]
        traj_infos: list[TrajInfo] = []
        for w, ref in enumerate(refs):
            while True:
                try:
                    traj_infos.extend(ray.get(ref))
                    break
                except ray.exceptions.RayError as error:
                    self._on_worker_failure(w, error)  # Raises past the restart limit.
                    version, params_ref = self._newest_params()
                    ref = self.workers[w].evaluate.remote(itr, version, params_ref)
        return traj_infos

    def shutdown(self) -> None:
        """Drop the queued calls, kill the workers, free their resources and stop the
        local Ray this sampler started, every process of it (also after errors; safe
        to call twice)."""
        self._in_flight = []
        self._params = None
        ray_processes = _with_descendants(self._ray_daemons)
        self._ray_daemons, self._ray_processes = [], []
        try:
            super().shutdown()
        finally:
            # ray.shutdown() stops the daemons it started; processes those started in
            # turn (the raylet's agents) may take a minute to notice, if still starting.
            if self._reaper is not None:
                ray_processes += session_processes(os.getpid(),
                                                   {os.getpid(), self._reaper.pid})
            _stop(ray_processes)
            if self._reaper is not None:  # It kills what is left of the session, and ends.
                stop_reaper(self._reaper)
                self._reaper = None

    def __getstate__(self) -> dict:
        if self.workers:
            raise RuntimeError(f"{type(self).__name__} holds Ray actors once initialized; "
                               "send it to the sampler process before initialize().")
        return super().__getstate__()

