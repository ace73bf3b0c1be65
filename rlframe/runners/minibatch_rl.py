"""Single-process training runners: sample a batch, optimize, log, repeat."""
from __future__ import annotations

import signal
import threading
import time
import warnings
from collections import deque
from typing import Any, Sequence

import psutil
import torch

from rlframe.runners import resume
from rlframe.runners.base import BaseRunner
from rlframe.runners.callbacks import Callback, check_callbacks
from rlframe.runners.loading import agent_spec
from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.utils.checks import as_int, positive_int
from rlframe.utils.launching.pinning import (check_affinity, check_cuda_device, pin_master,
                                             set_torch_threads)
from rlframe.utils.collections import iter_leaves
from rlframe.utils.logging import logger
from rlframe.utils.prog_bar import ProgBarCounter
from rlframe.utils.seed import make_seed, set_seed


def sampler_diagnostics(sampler: Any) -> dict[str, float]:
    """The sampler's ``diagnostics()`` (``{}`` for samplers without the method)."""
    diagnostics = getattr(sampler, "diagnostics", None)
    return {} if diagnostics is None else dict(diagnostics())


def _raise_system_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class MinibatchRlBase(BaseRunner):
    """The train loop, startup, diagnostics and snapshots shared by minibatch runners.

    Subclasses differ only in two hooks: :meth:`before_training` (e.g. evaluate
    the untrained agent) and :meth:`at_log_point` (what is logged every
    ``log_interval_itrs`` iterations).

    Args:
        algo: the algorithm (``initialize``/``optimize_agent``).
        agent: the agent.
        sampler: the sampler (``batch_spec``, ``obtain_samples``).
        n_steps: total env steps to train for (rounded to whole log intervals).
        seed: random seed (None: made from the clock and the process id).
        affinity: e.g. ``dict(master_cpus=[0], master_torch_threads=1, cuda_idx=None)``.
        log_interval_steps: env steps between diagnostics rows.
        callbacks: :class:`~rlframe.runners.callbacks.Callback` objects (or any
            objects with some of its methods), called in list order.
    """

    _eval = False
    _async = False  # True in the asynchronous runners, which take asynchronous samplers.

    def __init__(self, algo: Any, agent: Any, sampler: Any, n_steps: int | float,
                 seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int | float = 1e5,
                 callbacks: Sequence[Callback] | None = None):
        if not self._async and isinstance(sampler, AsyncSamplerMixin):
            raise TypeError(
                f"{type(self).__name__} drives synchronous samplers, but sampler="
                f"{type(sampler).__name__} is asynchronous (it samples in its own process "
                "beside the optimizer): use AsyncRl or AsyncRlEval with it, or a synchronous "
                "sampler (SerialSampler, CpuSampler, GpuSampler) here.")
        for name, value in (("algo", algo), ("agent", agent), ("sampler", sampler)):
            if value is None:
                raise TypeError(f"{type(self).__name__} needs {name}, got None.")
        self.algo = algo
        self.agent = agent
        self.sampler = sampler
        self.n_steps = positive_int("n_steps", n_steps)
        self.seed = None if seed is None else as_int("seed", seed, minimum=0)
        self.affinity = check_affinity(affinity)
        check_cuda_device(self.affinity.get("cuda_idx"))
        self.log_interval_steps = positive_int("log_interval_steps", log_interval_steps)
        self.min_itr_learn = getattr(algo, "min_itr_learn", 0)
        self.callbacks = check_callbacks(callbacks)
        self._stop_reason: str | None = None
        self._callbacks_started = False
        self._check_sampler_setup()
        self._check_agent_env()

    def _check_sampler_setup(self) -> None:
        """Before any run directory exists: the sampler's workers fit the affinity, and
        the algorithm can train on the sampler's batches."""
        check_agent = getattr(self.algo, "check_agent", None)
        if check_agent is not None:
            check_agent(self.agent)
        affinity = self.affinity.get("sampler") if self._async else self.affinity
        check_affinity = getattr(self.sampler, "check_affinity", None)
        if check_affinity is not None and isinstance(affinity, dict):
            check_affinity(affinity)
        batch_spec = getattr(self.sampler, "batch_spec", None)
        check_batch_spec = getattr(self.algo, "check_batch_spec", None)
        if batch_spec is not None and check_batch_spec is not None:
            check_batch_spec(batch_spec, recurrent=getattr(self.agent, "recurrent", False))

    def _check_eval_sampler(self) -> None:
        """Evaluating runners need a sampler with evaluation envs."""
        eval_n_envs = getattr(self.sampler, "eval_n_envs", 0)
        if eval_n_envs < 1:
            name = type(self).__name__
            raise ValueError(
                f"{name} evaluates the agent at every log point, but the sampler has "
                f"eval_n_envs={eval_n_envs}; give the sampler eval_n_envs >= 1 (with "
                "eval_max_steps or eval_max_trajectories), or use "
                f"{name.removesuffix('Eval') or 'a runner without Eval'}, which logs the "
                "training episodes instead.")

    def _check_agent_env(self) -> None:
        """Build one env and ask the agent whether it (and its model) can act in it,
        before any run directory exists."""
        make_env = getattr(self.sampler, "make_env", None)
        if make_env is None:
            return
        try:
            env = make_env()
        except TypeError as error:  # Keywords that do not fit EnvCls (or none given).
            sampler = self.sampler
            env_cls = getattr(sampler, "EnvCls", None)
            raise TypeError(
                f"{type(sampler).__name__}: EnvCls={getattr(env_cls, '__name__', env_cls)} "
                f"could not be called with env_kwargs={getattr(sampler, 'env_kwargs', None)!r}: "
                f"{error}.") from error
        try:
            self.agent.check_env_spaces(env.spaces)
            self.agent.check_model(env.spaces)
            check_initial = getattr(self.agent, "check_initial_state_dicts", None)
            if check_initial is not None:
                check_initial(env.spaces)
        finally:
            env.close()

    def train(self) -> None:
        """Run ``n_itr`` iterations of sample → optimize, logging every interval.

        A callback's ``on_log`` returning False ends the run after that log
        point; ``shutdown()`` runs however the loop ends. When the loop ends by
        an exception (Ctrl-C, SIGTERM, a worker's error), a final snapshot of the
        last completed iteration is written first.
        """
        try:
            n_itr = self.startup()
            self.before_training()
            for itr in range(self.start_itr, n_itr):
                if self.stop_requested:
                    break
                logger.set_iteration(itr)
                with logger.prefix(f"itr #{itr} "):
                    self.agent.sample_mode(itr)
                    samples, traj_infos = self.sampler.obtain_samples(itr)
                    self.agent.train_mode(itr)
                    opt_info = self.algo.optimize_agent(itr, samples)
                    self.last_completed_itr = itr
                    self.store_diagnostics(itr, traj_infos, opt_info)
                    self._call_callbacks("on_iteration_end", itr, samples, opt_info)
                    if (itr + 1) % self.log_interval_itrs == 0:
                        self.at_log_point(itr)
            self._completed = True
        except BaseException as error:  # Ctrl-C, SIGTERM, a worker's error, ...
            self.save_final_snapshot(error)
            raise
        finally:
            self.shutdown()

    def before_training(self) -> None:
        """Hook run once after startup, before the first iteration (default: nothing)."""

    def at_log_point(self, itr: int) -> None:
        """Hook run every ``log_interval_itrs`` iterations: write a diagnostics row."""
        raise NotImplementedError

    @property
    def stop_requested(self) -> bool:
        """Whether a callback asked to end the run at the last log point."""
        return self._stop_reason is not None

    def _call_callbacks(self, method: str, *args: Any) -> list[Callback]:
        """Call ``method(self, *args)`` on every callback; returns those that returned False."""
        returned_false = []
        for callback in self.callbacks:
            fn = getattr(callback, method, None)
            if fn is not None and fn(self, *args) is False:
                returned_false.append(callback)
        return returned_false

    def startup(self) -> int:
        """Pin, seed, initialize sampler, agent and algo, start callbacks; returns n_itr."""
        self._completed = False
        self._stop_reason = None
        self._callbacks_started = False
        self.last_completed_itr: int | None = None
        if not logger.writes_files() and getattr(self, "rank", 0) == 0:  # Rank 0 logs.
            message = (f"{type(self).__name__}.train() runs outside logger_context: nothing "
                       "(progress.csv, debug.log, snapshots) will be saved. Wrap it in "
                       "`with logger_context(log_dir, run_ID, name, config): runner.train()`.")
            warnings.warn(message, stacklevel=3)
            logger.log(f"WARNING: {message}")
        self._install_sigterm_handler()
        p = psutil.Process()
        pin_master(self.affinity)
        cpu_affin = p.cpu_affinity() if hasattr(p, "cpu_affinity") else "UNAVAILABLE"
        logger.log(f"Runner {getattr(self, 'rank', '')} master CPU affinity: {cpu_affin}.")
        n_threads = set_torch_threads(self.affinity.get("master_torch_threads"))
        logger.log(f"Runner {getattr(self, 'rank', '')} master Torch threads: {n_threads}.")
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        self.rank = rank = getattr(self, "rank", 0)
        self.world_size = world_size = getattr(self, "world_size", 1)
        examples = self.sampler.initialize(
            agent=self.agent, affinity=self.affinity, seed=self.seed + 1,
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), rank=rank, world_size=world_size)
        self.itr_batch_size = self.sampler.batch_spec.size * world_size
        n_itr = self.get_n_itr()
        self.agent.to_device(self.affinity.get("cuda_idx", None))
        if world_size > 1:
            self.agent.data_parallel()
        self.algo.initialize(agent=self.agent, n_itr=n_itr, batch_spec=self.sampler.batch_spec,
                             mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
                             world_size=world_size, rank=rank)
        # Algorithms set min_itr_learn in initialize(); read it only now.
        self.min_itr_learn = getattr(self.algo, "min_itr_learn", 0)
        self.warn_if_never_learning(n_itr, self.min_itr_learn)
        self.initialize_logging()
        resume_from = logger.get_resume_snapshot()
        self.start_itr = 0 if resume_from is None else resume.restore(self, resume_from)
        self._callbacks_started = True
        self._call_callbacks("on_startup")
        return n_itr

    def get_traj_info_kwargs(self) -> dict:
        """Keyword arguments of every TrajInfo the sampler builds (``discount``)."""
        return dict(discount=getattr(self.algo, "discount", 1))

    def warn_if_never_learning(self, n_itr: int, learn_itr: int) -> None:
        """Warn (rank 0) when the run ends before the algorithm's first update.

        Args:
            n_itr: sampler iterations of the run.
            learn_itr: the first iteration after which the algorithm updates (off-policy
                algorithms wait for ``min_steps_learn`` env steps).
        """
        if 0 < n_itr <= learn_itr and getattr(self, "rank", 0) == 0:
            steps = getattr(self.algo, "min_steps_learn", None)
            message = (f"the run takes {n_itr * self.itr_batch_size} env steps ({n_itr} "
                       f"iterations), but {type(self.algo).__name__} starts learning only after "
                       f"min_steps_learn={steps} env steps: the agent will not be trained. "
                       "Raise n_steps or lower min_steps_learn.")
            warnings.warn(message, stacklevel=4)
            logger.log(f"WARNING: {message}")

    def get_n_itr(self) -> int:
        """Iterations: ``n_steps // itr_batch_size`` rounded up to whole log intervals."""
        log_interval_itrs = max(self.log_interval_steps // self.itr_batch_size, 1)
        n_itr = self.n_steps // self.itr_batch_size
        if n_itr % log_interval_itrs > 0:
            n_itr += log_interval_itrs - n_itr % log_interval_itrs
        self.log_interval_itrs = log_interval_itrs
        self.n_itr = n_itr
        if n_itr * self.itr_batch_size != self.n_steps and getattr(self, "rank", 0) == 0:
            message = (f"n_steps={self.n_steps} is not a whole number of log intervals of "
                       f"{log_interval_itrs} iteration(s) of {self.itr_batch_size} env steps: "
                       f"training for {n_itr * self.itr_batch_size} env steps ({n_itr} "
                       "iterations) instead.")
            warnings.warn(message, stacklevel=4)  # At the caller of train().
            logger.log(f"WARNING: {message}")
        logger.log(f"Running {n_itr} iterations of minibatch RL.")
        return n_itr

    def initialize_logging(self) -> None:
        self._opt_infos = {k: [] for k in self.algo.opt_info_fields}
        self._start_time = self._last_time = time.time()
        self._cum_time = 0.
        self._cum_completed_trajs = 0
        self._last_update_counter = 0
        self.pbar: ProgBarCounter | None = None

    def shutdown(self) -> None:
        """Stop the progress bar, callbacks and sampler (also after errors and Ctrl-C)."""
        if self.stop_requested:
            logger.log("Training stopped by a callback.")
        elif getattr(self, "_completed", False):
            logger.log("Training complete.")
        else:
            logger.log("Training stopped early; shutting down.")
        self._stop_pbar()
        try:
            if self._callbacks_started:
                self._callbacks_started = False
                self._call_callbacks("on_shutdown")
        finally:
            try:
                self.sampler.shutdown()
            finally:
                self._restore_sigterm_handler()

    def _install_sigterm_handler(self) -> None:
        """Turn SIGTERM into SystemExit so that shutdown() runs and stops workers."""
        self._prev_sigterm = None
        if threading.current_thread() is threading.main_thread():
            self._prev_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)

    def _restore_sigterm_handler(self) -> None:
        if getattr(self, "_prev_sigterm", None) is not None:
            signal.signal(signal.SIGTERM, self._prev_sigterm)
            self._prev_sigterm = None

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

        Returns:
            The names of the files written.
        """
        if not self.agent_weights_finite():
            logger.log(f"WARNING: the agent's weights at iteration {itr} are not all finite; "
                       "no snapshot written (the last one written is kept).")
            return []
        logger.log("saving snapshot...")
        names = logger.save_itr_params(itr, self.get_itr_snapshot(itr), final=final)
        if names:
            resume.write_side_files(self, itr)
        logger.log("saved")
        return names

    def agent_weights_finite(self) -> bool:
        """Whether every parameter and buffer of the agent's state holds finite values."""
        tensors = [t for _, t in iter_leaves(self.agent.state_dict())
                   if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return all(bool(torch.isfinite(t).all()) for t in tensors)

    def save_final_snapshot(self, error: BaseException) -> None:
        """The run is ending by ``error``: snapshot its last completed iteration (not in
        ``snapshot_mode="none"``) and say so in debug.log."""
        itr = getattr(self, "last_completed_itr", None)
        if itr is None or logger.get_snapshot_mode() == "none" or not logger.writes_files():
            return
        if isinstance(error, KeyboardInterrupt):
            cause = "interrupted (Ctrl-C)"
        elif isinstance(error, SystemExit):
            cause = f"stopped by a signal (exit code {error.code})"
        else:
            cause = f"stopped by {type(error).__name__}: {error}"
        try:
            names = self.save_itr_snapshot(itr, final=True)
        except Exception as save_error:  # noqa: BLE001 - the original error matters more.
            logger.log(f"Training {cause}; the final snapshot failed: {save_error!r}")
            return
        if names:
            logger.log(f"Training {cause}: final snapshot of iteration {itr} written "
                       f"({', '.join(names)}).")

    def _start_pbar(self) -> None:
        self.pbar = ProgBarCounter(self.log_interval_itrs)

    def _stop_pbar(self) -> None:
        if getattr(self, "pbar", None) is not None:
            self.pbar.stop()
            self.pbar = None

    def store_diagnostics(self, itr: int, traj_infos: list, opt_info: Any) -> None:
        self._cum_completed_trajs += len(traj_infos)
        for k, v in self._opt_infos.items():
            new_v = getattr(opt_info, k, [])
            v.extend(new_v if isinstance(new_v, list) else [new_v])
        if self.pbar is not None:
            self.pbar.update((itr % self.log_interval_itrs) + 1)

    def log_diagnostics(self, itr: int, traj_infos: list | None = None, eval_time: float = 0,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        """Save the snapshot, write one diagnostics row and hand it to the callbacks.

        Args:
            itr: the iteration just completed, or -1 for a row logged before any
                training (``MinibatchRlEval``'s evaluation of the untrained agent).

        Returns:
            the row, keyed like progress.csv's columns.
        """
        self._stop_pbar()
        if 0 <= itr and itr >= self.min_itr_learn - 1:
            self.save_itr_snapshot(itr)
        new_time = time.time()
        self._cum_time = new_time - self._start_time
        train_time_elapsed = new_time - self._last_time - eval_time
        new_updates = self.algo.update_counter - self._last_update_counter
        new_samples = self.sampler.batch_size * self.world_size * self.log_interval_itrs
        cum_steps = (itr + 1) * self.sampler.batch_size * self.world_size
        nan = float("nan")  # Rates of a row before training.
        updates_per_second = nan if itr < 0 else new_updates / train_time_elapsed
        samples_per_second = nan if itr < 0 else new_samples / train_time_elapsed
        replay_ratio = nan if itr < 0 else (new_updates * self.algo.batch_size * self.world_size
                                            / new_samples)
        cum_replay_ratio = nan if itr < 0 else (self.algo.batch_size * self.algo.update_counter
                                                / ((itr + 1) * self.sampler.batch_size))

        with logger.tabular_prefix(prefix):
            if self._eval:
                logger.record_tabular("CumTrainTime", self._cum_time - self._cum_eval_time)
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("CumTime (s)", self._cum_time)
            logger.record_tabular("CumSteps", cum_steps)
            logger.record_tabular("CumCompletedTrajs", self._cum_completed_trajs)
            logger.record_tabular("CumUpdates", self.algo.update_counter)
            logger.record_tabular("StepsPerSecond", samples_per_second)
            logger.record_tabular("UpdatesPerSecond", updates_per_second)
            logger.record_tabular("ReplayRatio", replay_ratio)
            logger.record_tabular("CumReplayRatio", cum_replay_ratio)
            logger.record_tabular("NonFiniteUpdates", self.algo.non_finite_updates)
            for key, value in sampler_diagnostics(self.sampler).items():
                logger.record_tabular(key, value)
        self._log_infos(traj_infos)
        diagnostics = logger.dump_tabular(with_prefix=False)

        self._last_time = new_time
        self._last_update_counter = self.algo.update_counter
        stopped_by = self._call_callbacks("on_log", itr, diagnostics)
        if stopped_by:
            names = ", ".join(repr(callback) for callback in stopped_by)
            self._stop_reason = f"{names} returned False from on_log at iteration {itr}"
            logger.log(f"Stopping the run: {self._stop_reason}.")
        elif itr < self.n_itr - 1:
            logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")
            self._start_pbar()
        return diagnostics

    def _log_infos(self, traj_infos: list | None = None) -> None:
        """Misc stats of every trajectory field and every opt-info field."""
        if traj_infos is None:
            traj_infos = self._traj_infos
        # With no completed trajectory, log NaN columns so progress.csv keeps one schema.
        keys = (traj_infos[0].keys() if traj_infos
                else self.sampler.TrajInfoCls(**self.sampler.traj_info_kwargs).keys())
        for k in keys:
            if not k.startswith("_"):
                logger.record_tabular_misc_stat(k, [info[k] for info in traj_infos])
        for k, v in self._opt_infos.items():
            logger.record_tabular_misc_stat(k, v)
        self._opt_infos = {k: [] for k in self._opt_infos}


class MinibatchRl(MinibatchRlBase):
    """Logs the online performance of the training trajectories.

    Args:
        log_traj_window: completed training trajectories kept for statistics.
        **kwargs: :class:`MinibatchRlBase` arguments, by keyword.
    """

    def __init__(self, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(**kwargs)
        self.log_traj_window = positive_int("log_traj_window", log_traj_window)

    def at_log_point(self, itr: int) -> None:
        """Log the window of recent training trajectories."""
        self.log_diagnostics(itr)

    def initialize_logging(self) -> None:
        self._traj_infos = deque(maxlen=self.log_traj_window)
        self._new_completed_trajs = 0
        logger.log(f"Optimizing over {self.log_interval_itrs} iterations.")
        super().initialize_logging()
        self._start_pbar()

    def store_diagnostics(self, itr: int, traj_infos: list, opt_info: Any) -> None:
        self._new_completed_trajs += len(traj_infos)
        self._traj_infos.extend(traj_infos)
        super().store_diagnostics(itr, traj_infos, opt_info)

    def log_diagnostics(self, itr: int, prefix: str = "Diagnostics/") -> dict[str, Any]:
        with logger.tabular_prefix(prefix):
            logger.record_tabular("NewCompletedTrajs", self._new_completed_trajs)
            logger.record_tabular("StepsInTrajWindow",
                                  sum(info["Length"] for info in self._traj_infos))
        self._new_completed_trajs = 0
        return super().log_diagnostics(itr, list(self._traj_infos), prefix=prefix)


class MinibatchRlEval(MinibatchRlBase):
    """Logs offline performance: evaluation episodes run at every log interval.

    The first row evaluates the untrained agent; it has ``Iteration`` -1 and
    ``CumSteps`` 0 (rows of training iterations count from 0).
    """

    _eval = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._check_eval_sampler()

    def before_training(self) -> None:
        """Evaluate the untrained agent: the first row, with ``Iteration`` -1 (and
        ``CumSteps`` 0), so that every row's ``Iteration`` is unique (not when the run
        resumes: that row exists)."""
        if self.start_itr > 0:
            return
        with logger.prefix("itr #0 "):
            eval_traj_infos, eval_time = self.evaluate_agent(0)
            self.log_diagnostics(-1, eval_traj_infos, eval_time)

    def at_log_point(self, itr: int) -> None:
        """Evaluate the agent and log its evaluation trajectories."""
        eval_traj_infos, eval_time = self.evaluate_agent(itr)
        self.log_diagnostics(itr, eval_traj_infos, eval_time)

    def evaluate_agent(self, itr: int) -> tuple[list, float]:
        """Run the sampler's evaluation; returns ``(traj_infos, seconds)``."""
        self._stop_pbar()
        if itr > 0 and itr < self.min_itr_learn - 1:
            return [], 0.0
        logger.log("Evaluating agent...")
        self.agent.eval_mode(itr)
        eval_time = -time.time()
        traj_infos = self.sampler.evaluate_agent(itr)
        eval_time += time.time()
        logger.log("Evaluation runs complete.")
        return traj_infos, eval_time

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._cum_eval_time = 0.

    def log_diagnostics(self, itr: int, eval_traj_infos: list, eval_time: float,
                        prefix: str = "Diagnostics/") -> dict[str, Any]:
        if not eval_traj_infos:
            logger.log("WARNING: had no complete trajectories in eval.")
        steps_in_eval = sum(info["Length"] for info in eval_traj_infos)
        with logger.tabular_prefix(prefix):
            logger.record_tabular("StepsInEval", steps_in_eval)
            logger.record_tabular("TrajsInEval", len(eval_traj_infos))
            self._cum_eval_time += eval_time
            logger.record_tabular("CumEvalTime", self._cum_eval_time)
        return super().log_diagnostics(itr, eval_traj_infos, eval_time, prefix=prefix)


