"""The asynchronous runners: :class:`AsyncRlBase` (checks, the train loop) and its two
logging styles, :class:`AsyncRl` and :class:`AsyncRlEval`."""
from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from rlframe.runners.async_rl.diagnostics import AsyncRlDiagnostics
from rlframe.runners.async_rl.launch import AsyncRlLaunch
from rlframe.runners.async_rl.optimizer import _check_optimizer_devices
from rlframe.runners.async_rl.schedule import OPT_POLL_S, THROTTLE_WAIT, _poll_until
from rlframe.runners.async_rl.supervise import (FAILURE_GRACE_S, JOIN_TIMEOUT_S, AsyncRlError,
                                                AsyncRlSupervision, _broke_ranks)
from rlframe.runners.callbacks import Callback
from rlframe.runners.evaluation import AsyncEvaluation
from rlframe.utils.checks import positive_int
from rlframe.utils.launching.pinning import check_async_affinity
from rlframe.utils.synchronize import check_start_method, drain_queue

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    import torch.distributed as dist

    from rlframe.agents.base import BaseAgent
    from rlframe.algos.base import RlAlgorithm
    from rlframe.runners.async_rl.control import AsyncControl
    from rlframe.samplers.base import BaseSampler

ALGO_ASYNC_ATTRIBUTES = ("async_initialize", "optim_initialize", "samples_to_buffer",
                         "optimize_agent", "updates_per_sync", "replay_ratio", "batch_size",
                         "min_steps_learn")


class AsyncRlBase(AsyncRlLaunch, AsyncRlSupervision, AsyncRlDiagnostics):
    """Sampling in its own process, optimization (and logging) in this one.

    Args:
        algo: an off-policy algorithm with ``async_initialize`` (a replay on shared
            memory), ``optim_initialize``, ``samples_to_buffer``, ``updates_per_sync``,
            ``replay_ratio``, ``batch_size`` and ``min_steps_learn``.
        agent: the agent.
        sampler: an asynchronous sampler (:class:`AsyncSerialSampler`,
            :class:`AsyncCpuSampler`, :class:`AsyncGpuSampler`,
            :class:`AsyncAlternatingSampler`).
        n_steps: env steps to sample (rounded up to whole log intervals).
        affinity: the asynchronous layout, e.g. ``make_affinity(n_cpu_core=2,
            n_gpu=0, cpu_per_run=2, async_sample=True)``: ``optimizer`` (a list with
            one dict per optimizer rank, each with ``cpus``; either every dict has
            an int ``cuda_idx``, one GPU per rank, or none has, and the ranks train
            on CPUs; rank 0 is this process) and ``sampler`` (a dict; for the
            GPU-style samplers also a list of dicts, one action-server process each).
        seed: random seed (None: a fresh one); the sampler process uses it too.
        log_interval_steps: sampled env steps between diagnostics rows.
        callbacks: :class:`~rlframe.runners.callbacks.Callback` objects;
            ``on_iteration_end`` receives ``samples=None``.
        start_method: how the children start (``"fork"``, ``"forkserver"``,
            ``"spawn"``; None: the multiprocessing default, except that a Ray
            sampler in a process that already used Ray gets ``"forkserver"``,
            as Ray cannot start in a forked child). Under spawn and
            forkserver the sampler and the algorithm must pickle.
        sampler_lead_steps: env steps the sampler may run ahead of the point
            where ``replay_ratio`` puts the optimizer (rounded up to whole
            sampler batches, at least one); the sampler waits beyond it. None
            (default, as rlpyt): the sampler runs free, so a slow env never
            waits for the optimizer; on envs that step faster than the
            optimizer trains, far fewer updates are made than ``replay_ratio``
            asks for, which the ``ReplayRatio`` column shows and a warning
            names. Set it (e.g. 8 sampler batches) to keep ``replay_ratio``.
        pg_timeout: seconds a collective of several optimizer ranks may wait for
            the others before it fails.
    """

    _async = True

    def __init__(self, algo: RlAlgorithm, agent: BaseAgent, sampler: BaseSampler,
                 n_steps: int | float, affinity: dict, seed: int | None = None,
                 log_interval_steps: int | float = 1e5,
                 callbacks: Sequence[Callback] | None = None, start_method: str | None = None,
                 sampler_lead_steps: int | float | None = None, pg_timeout: float = 1800.,
                 evaluation: AsyncEvaluation | None = None):
        name = type(self).__name__
        if evaluation is not None and not isinstance(evaluation, AsyncEvaluation):
            raise TypeError(f"{name}: evaluation must be an AsyncEvaluation (from "
                            "rlframe.runners.evaluation; the sampler process evaluates) or "
                            f"None, got {type(evaluation).__name__}.")
        if not isinstance(affinity, dict) or "optimizer" not in affinity:
            raise TypeError(f"{name}: affinity must be an asynchronous affinity dict with "
                            "'optimizer' and 'sampler' entries, e.g. make_affinity(n_cpu_core=2, "
                            f"n_gpu=0, cpu_per_run=2, async_sample=True); got {affinity!r}.")
        check_async_affinity(affinity)
        if not isinstance(affinity["sampler"], dict) and not getattr(
                sampler, "takes_affinity_list", False):
            raise TypeError(
                f"{name}: affinity['sampler'] is a list of {len(affinity['sampler'])} dicts "
                f"(one action server per entry), but {type(sampler).__name__} takes one "
                "dict; use AsyncGpuSampler or an AsyncAlternatingSampler, or build the "
                "affinity with sample_gpu_per_run=0 (one sampler dict).")
        _check_optimizer_devices(affinity["optimizer"], name)
        missing = [a for a in ALGO_ASYNC_ATTRIBUTES if not hasattr(algo, a)]
        if missing:
            raise TypeError(
                f"{name} trains off-policy algorithms from a replay buffer the sampler fills "
                f"(DQN, CategoricalDQN, R2D1, DDPG, TD3, SAC); algo={type(algo).__name__} "
                f"lacks {missing}. On-policy algorithms (A2C, PPO) train on each fresh batch: "
                "run them with MinibatchRl or SyncRl.")
        for method in ("async_initialize", "initialize", "obtain_samples", "evaluate_agent",
                       "shutdown"):
            if not callable(getattr(sampler, method, None)):
                raise TypeError(f"{name} needs an asynchronous sampler (e.g. AsyncSerialSampler "
                                f"or AsyncCpuSampler); {type(sampler).__name__} has no "
                                f"{method}().")
        self.start_method = check_start_method(start_method)
        if sampler_lead_steps is not None and not (
                isinstance(sampler_lead_steps, (int, float)) and sampler_lead_steps > 0
                and math.isfinite(sampler_lead_steps)):
            raise ValueError(f"sampler_lead_steps must be a positive number of env steps or "
                             f"None (the sampler runs free), got {sampler_lead_steps!r}.")
        self.sampler_lead_steps = sampler_lead_steps
        if not (isinstance(pg_timeout, (int, float)) and pg_timeout > 0):
            raise ValueError(f"pg_timeout must be a positive number of seconds, got "
                             f"{pg_timeout!r}.")
        self.pg_timeout = float(pg_timeout)
        super().__init__(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                         affinity=affinity, log_interval_steps=log_interval_steps,
                         callbacks=callbacks, evaluation=evaluation)
        self.ctrl: AsyncControl | None = None
        self.processes: dict[str, BaseProcess] = {}
        self.traj_infos_queue: Any = None
        self.error_queue: Any = None
        self._failure: str | None = None
        self._training = False
        self._monitor: threading.Thread | None = None
        self._original_cpus: list[int] | None = None
        self.rank, self.world_size = 0, len(affinity["optimizer"])  # Optimizer ranks.
        self._init_method: str | None = None  # Where optimizer ranks 1.. meet rank 0.
        self._master_store: dist.TCPStore | None = None  # Listening there until rank 0 joins.
        self._opt_group: Any = None  # Gloo group of the ranks' objects (None: the default).
        self._joined_ranks = False  # This process joined the optimizer ranks' process group.
        self.rank_digests: list[str] = []  # Parameter digests of the ranks at a run's end.
        self.rank_optimize_calls: list[int] = []  # optimize_agent calls made by each rank.

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        """Optimize while the sampler runs, until it has sampled ``n_itr`` batches.

        Raises:
            AsyncRlError: a child process failed (an exception, whose traceback
                the message holds, or killed); the message names it.
        """
        self.bind_logger()
        try:
            self.startup()  # Sets throttle_itr and delta_throttle_itr (and returns them).
            self.before_training()
            throttle_time, itr = 0., self.start_itr
            log_counter = self._start_sampler_itr // self.log_interval_itrs
            ctrl = self.ctrl
            while not self.stop_requested:
                self.logger.set_iteration(itr)
                with self.logger.prefix(f"opt_itr #{itr} "):
                    throttle_time += self._wait_for_sampler(self.throttle_itr)
                    self._raise_if_failed()
                    if ctrl.quit.value:
                        break
                    self.throttle_itr += self.delta_throttle_itr  # In snapshots, for resuming.
                    self._set_sample_limit(self.throttle_itr)
                    self._meet_optimizer_ranks()
                    opt_info = self.algo.optimize_agent(itr, sampler_itr=ctrl.sampler_itr.value)
                    self.agent.send_shared_memory()
                    sampler_itr = ctrl.sampler_itr.value
                    traj_infos = [] if self._eval else drain_queue(self.traj_infos_queue)
                    self.last_completed_itr = itr
                    self.store_diagnostics(itr, sampler_itr, traj_infos, opt_info)
                    self._call_callbacks("on_iteration_end", itr, None, opt_info)
                    if sampler_itr // self.log_interval_itrs > log_counter:
                        self.at_log_point(itr, sampler_itr, throttle_time)
                        log_counter += 1
                        throttle_time = 0.
                itr += 1
            if not self.stop_requested:
                self._final_log(throttle_time)
            self._completed = True
        except BaseException as error:  # Ctrl-C, SIGTERM, a child's failure, ...
            self._training = False
            if self.world_size > 1 and _broke_ranks(error):
                self._wait_for_failure(FAILURE_GRACE_S)  # Which rank broke them?
            self.save_final_snapshot(error)
            if self._failure is not None:
                raise AsyncRlError(self._failure) from error
            raise
        finally:
            self.shutdown()

    def _wait_for_sampler(self, throttle_itr: float) -> float:
        """Sleep until the sampler reaches ``throttle_itr`` (or the run quits), checking
        on the children every ``THROTTLE_WAIT`` s; returns the seconds waited."""
        ctrl = self.ctrl

        def check_children() -> bool:
            self._raise_if_failed()
            return False
        _, waited = _poll_until(lambda: self._may_optimize(throttle_itr) or ctrl.quit.value,
                                OPT_POLL_S, THROTTLE_WAIT, check_children)
        return waited

    def _final_log(self, throttle_time: float) -> None:
        """The sampler finished: log what arrived since the last row."""
        sampler = self.processes.get("sampler")
        if sampler is not None:  # Its last TrajInfos are flushed once it has exited.
            deadline = time.time() + JOIN_TIMEOUT_S
            while sampler.is_alive() and time.time() < deadline:
                sampler.join(0.05)
            # A failing sampler's report may trail its exit.
            self._raise_if_failed(wait_s=0.5 if sampler.exitcode else 0.)
        traj_infos = drain_queue(self.traj_infos_queue)
        if traj_infos or not self._eval:
            itr = 0 if self.last_completed_itr is None else self.last_completed_itr
            self.store_diagnostics(itr, self.ctrl.sampler_itr.value,
                                   [] if self._eval else traj_infos, None)
            if self.evaluation is not None:
                self.evaluation.traj_infos.extend(traj_infos)
            self.log_diagnostics(itr, self.ctrl.sampler_itr.value, throttle_time)

    def before_training(self) -> None:
        """Evaluating: log the evaluation of the untrained agent (sampler iteration 0;
        not when the run resumes)."""
        if self.evaluation is None or self.start_itr > 0:
            return
        while self.ctrl.sampler_itr.value < 1 and not self.ctrl.quit.value:
            self._raise_if_failed()
            time.sleep(THROTTLE_WAIT)
        self.evaluation.traj_infos.extend(self._drain_one_evaluation())
        self.log_diagnostics(-1, 0, 0.)

    def at_log_point(self, itr: int, sampler_itr: int,  # type: ignore[override]
                     throttle_time: float) -> None:
        """Write a diagnostics row (evaluating, after taking one evaluation's TrajInfos)."""
        if self.evaluation is not None:
            with self.ctrl.sampler_itr.get_lock():
                self.evaluation.traj_infos.extend(self._drain_one_evaluation())
        self.log_diagnostics(itr, sampler_itr, throttle_time)


class AsyncRl(AsyncRlBase):
    """Logs the online performance of the training trajectories (with
    ``evaluation=AsyncEvaluation()``, the rows of :class:`AsyncRlEval`).

    Args:
        log_traj_window: completed training trajectories kept for statistics.
        **kwargs: :class:`AsyncRlBase` arguments.
    """

    def __init__(self, *args: Any, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.log_traj_window = positive_int("log_traj_window", log_traj_window)


class AsyncRlEval(AsyncRlBase):
    """Logs offline performance: the sampler process evaluates the agent every
    ``log_interval_itrs`` sampler iterations (from iteration 0); an
    :class:`AsyncRlBase` with an :class:`~rlframe.runners.evaluation.AsyncEvaluation`.

    The first row, from the evaluation before any training, has ``Iteration`` -1
    (as in :class:`MinibatchRlEval`, every row's ``Iteration`` is unique).
    """

    evaluation: AsyncEvaluation

    def __init__(self, *args: Any, evaluation: AsyncEvaluation | None = None, **kwargs: Any):
        super().__init__(*args, evaluation=AsyncEvaluation() if evaluation is None
                         else evaluation, **kwargs)
