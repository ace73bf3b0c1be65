"""Single-process training runners: sample a batch, optimize, log, repeat.

The loop is :meth:`MinibatchRlBase.train`; snapshots come from
:mod:`rlframe.runners.snapshots`, the log points (statistics, diagnostics rows,
``state_dict()``) from :mod:`rlframe.runners.log_points`, which builds each row with
:mod:`rlframe.runners.diagnostics`, and evaluation (``MinibatchRlEval``, or any runner
given ``evaluation=``) from :mod:`rlframe.runners.evaluation`.
"""
from __future__ import annotations

import signal
import threading
import warnings
from types import FrameType
from typing import TYPE_CHECKING, Any, Sequence

import psutil

from rlframe.runners import resume
from rlframe.runners.base import BaseRunner
from rlframe.runners.callbacks import Callback, check_callbacks
from rlframe.runners.diagnostics import sampler_diagnostics
from rlframe.runners.evaluation import Evaluation
from rlframe.runners.log_points import LogPointsMixin
from rlframe.runners.snapshots import SnapshotMixin
from rlframe.runners.stopping import IterationStop, stop_error
from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.utils.checks import as_int, positive_int
from rlframe.utils.launching.pinning import (check_affinity, check_cuda_device, pin_master,
                                             set_torch_threads)
from rlframe.utils.prog_bar import ProgBarCounter
from rlframe.utils.seed import make_seed, set_seed

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.algos.base import RlAlgorithm
    from rlframe.samplers.base import BaseSampler
    from rlframe.samplers.collections import TrajInfo

__all__ = ["MinibatchRlBase", "MinibatchRl", "MinibatchRlEval", "sampler_diagnostics"]


def _raise_system_exit(signum: int, frame: FrameType | None) -> None:
    raise stop_error(signum)


class MinibatchRlBase(LogPointsMixin, SnapshotMixin, BaseRunner):
    """The train loop, startup and shutdown shared by minibatch runners.

    Subclasses differ only in two hooks: :meth:`before_training` (e.g. evaluate
    the untrained agent) and :meth:`at_log_point` (what is logged every
    ``log_interval_itrs`` iterations); both follow ``evaluation`` when one is given.

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
        evaluation: an :class:`~rlframe.runners.evaluation.Evaluation`: evaluate the
            agent at every log point and log the evaluation episodes (the rows of
            ``MinibatchRlEval``); None: log the training episodes.
    """

    _async = False  # True in the asynchronous runners, which take asynchronous samplers.
    rank: int = 0  # This process's rank among the runner's ranks (SyncRl, AsyncRl).
    world_size: int = 1
    log_traj_window: int | None = None  # Training trajectories in the window (MinibatchRl).
    # The longest a Ctrl-C or SIGTERM during an iteration waits for it to end (0: stop at
    # once); the final snapshot then holds the whole iteration. Under SyncRl ranks stop at
    # once: a rank that waited could wait for a peer that has already stopped.
    stop_wait_s: float = 2.

    def __init__(self, algo: RlAlgorithm, agent: BaseAgent, sampler: BaseSampler,
                 n_steps: int | float, seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int | float = 1e5,
                 callbacks: Sequence[Callback] | None = None,
                 evaluation: Evaluation | None = None):
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
        if evaluation is not None and not isinstance(evaluation, Evaluation):
            raise TypeError(f"{type(self).__name__}: evaluation must be an Evaluation (from "
                            "rlframe.runners.evaluation) or None, got "
                            f"{type(evaluation).__name__}.")
        self.evaluation = evaluation
        self.last_completed_itr: int | None = None
        self.pbar: ProgBarCounter | None = None
        self._check_sampler_setup()
        self._check_agent_env()
        if evaluation is not None:
            evaluation.check(self)

    @property
    def _eval(self) -> bool:
        """Whether the runner logs evaluation episodes (rlpyt's flag)."""
        return self.evaluation is not None

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
        last completed iteration is written first. Ctrl-C or SIGTERM during an
        iteration's sampling and update lets that iteration end first (at most
        ``stop_wait_s`` seconds; in one process only), so that the snapshot holds it
        whole and a resumed run continues exactly.
        """
        self.bind_logger()
        stop = IterationStop(self.stop_wait_s if self.world_size == 1 else 0., self.logger.log)
        try:
            n_itr = self.startup()
            self.before_training()
            with stop:
                for itr in range(self.start_itr, n_itr):
                    if self.stop_requested:
                        break
                    self.logger.set_iteration(itr)
                    with self.logger.prefix(f"itr #{itr} "):
                        with stop.iteration(itr):
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
            if stop.note is not None:
                self.logger.log(stop.note)
            self.save_final_snapshot(error)
            raise
        finally:
            self.shutdown()

    def before_training(self) -> None:
        """Hook run once after startup, before the first iteration: the evaluation's
        row of the untrained agent, when evaluating; in a resumed run, the row of its
        snapshot's log point if the run stopped before writing it."""
        if self.evaluation is not None:
            self.evaluation.before_training(self)
        if self.resumed_row_missing():
            self.log_resumed_row()
        elif self.resumed_at_log_point():
            self.stats.start_row()  # Its row was written: the next row starts afresh.

    def resumed_at_log_point(self) -> bool:
        """Whether the run resumed from the snapshot of a log point (the snapshot is
        taken before that log point's row is written)."""
        return self.start_itr > 0 and self.start_itr % self.log_interval_itrs == 0

    def resumed_row_missing(self) -> bool:
        """Whether the run resumed from the snapshot of a log point whose row it never
        wrote (stopped between the two, e.g. during that log point's evaluation)."""
        return (self.resumed_at_log_point()
                and self.logger.resume_row_missing(self.start_itr - 1))

    def log_resumed_row(self) -> None:
        """Write the missing row of the snapshot's log point (evaluating again, when
        evaluating) before training goes on."""
        itr = self.start_itr - 1
        self.logger.log(f"The run stopped before writing the row of iteration {itr}; "
                        "writing it now.")
        self.writing_resumed_row = True
        try:
            with self.logger.prefix(f"itr #{itr} "):
                self.at_log_point(itr)
        finally:
            self.writing_resumed_row = False

    def at_log_point(self, itr: int) -> None:
        """Hook run every ``log_interval_itrs`` iterations: write a diagnostics row (of
        an evaluation, when evaluating)."""
        if self.evaluation is not None:
            self.evaluation.at_log_point(self, itr)
        else:
            self.log_diagnostics(itr)

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
        self.last_completed_itr = None
        if not self.logger.writes_files() and self.rank == 0:  # Rank 0 logs.
            message = (f"{type(self).__name__}.train() runs outside logger_context: nothing "
                       "(progress.csv, debug.log, snapshots) will be saved. Wrap it in "
                       "`with logger_context(log_dir, run_ID, name, config): runner.train()`.")
            warnings.warn(message, stacklevel=3)
            self.logger.log(f"WARNING: {message}")
        self._install_sigterm_handler()
        p = psutil.Process()
        pin_master(self.affinity)
        cpu_affin = p.cpu_affinity() if hasattr(p, "cpu_affinity") else "UNAVAILABLE"
        self.logger.log(f"Runner {self.rank} master CPU affinity: {cpu_affin}.")
        n_threads = set_torch_threads(self.affinity.get("master_torch_threads"),
                                      "master_torch_threads")
        self.logger.log(f"Runner {self.rank} master Torch threads: {n_threads}.")
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        rank, world_size = self.rank, self.world_size
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
        resume_from = self.logger.get_resume_snapshot()
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
        if 0 < n_itr <= learn_itr and self.rank == 0:
            steps = getattr(self.algo, "min_steps_learn", None)
            message = (f"the run takes {n_itr * self.itr_batch_size} env steps ({n_itr} "
                       f"iterations), but {type(self.algo).__name__} starts learning only after "
                       f"min_steps_learn={steps} env steps: the agent will not be trained. "
                       "Raise n_steps or lower min_steps_learn.")
            warnings.warn(message, stacklevel=4)
            self.logger.log(f"WARNING: {message}")

    def get_n_itr(self) -> int:
        """Iterations: ``n_steps // itr_batch_size`` rounded up to whole log intervals."""
        log_interval_itrs = max(self.log_interval_steps // self.itr_batch_size, 1)
        n_itr = self.n_steps // self.itr_batch_size
        if n_itr % log_interval_itrs > 0:
            n_itr += log_interval_itrs - n_itr % log_interval_itrs
        self.log_interval_itrs = log_interval_itrs
        self.n_itr = n_itr
        if n_itr * self.itr_batch_size != self.n_steps and self.rank == 0:
            message = (f"n_steps={self.n_steps} is not a whole number of log intervals of "
                       f"{log_interval_itrs} iteration(s) of {self.itr_batch_size} env steps: "
                       f"training for {n_itr * self.itr_batch_size} env steps ({n_itr} "
                       "iterations) instead.")
            warnings.warn(message, stacklevel=4)  # At the caller of train().
            self.logger.log(f"WARNING: {message}")
        self.logger.log(f"Running {n_itr} iterations of minibatch RL.")
        return n_itr

    def shutdown(self) -> None:
        """Stop the progress bar, callbacks and sampler (also after errors and Ctrl-C)."""
        if self.stop_requested:
            self.logger.log("Training stopped by a callback.")
        elif getattr(self, "_completed", False):
            self.logger.log("Training complete.")
        else:
            self.logger.log("Training stopped early; shutting down.")
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

class MinibatchRl(MinibatchRlBase):
    """Logs the online performance of the training trajectories.

    Args:
        log_traj_window: completed training trajectories kept for statistics.
        **kwargs: :class:`MinibatchRlBase` arguments, by keyword (with
            ``evaluation=Evaluation()`` it logs as :class:`MinibatchRlEval`).
    """

    def __init__(self, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(**kwargs)
        self.log_traj_window = positive_int("log_traj_window", log_traj_window)


class MinibatchRlEval(MinibatchRlBase):
    """Logs offline performance: evaluation episodes run at every log interval
    (a :class:`MinibatchRlBase` with an :class:`~rlframe.runners.evaluation.Evaluation`).

    The first row evaluates the untrained agent; it has ``Iteration`` -1 and
    ``CumSteps`` 0 (rows of training iterations count from 0).
    """

    evaluation: Evaluation

    def __init__(self, *args: Any, evaluation: Evaluation | None = None, **kwargs: Any):
        super().__init__(*args, evaluation=Evaluation() if evaluation is None else evaluation,
                         **kwargs)

    def evaluate_agent(self, itr: int) -> tuple[list[TrajInfo], float]:
        """Run the sampler's evaluation; returns ``(traj_infos, seconds)``."""
        return self.evaluation.evaluate(self, itr)

    def log_diagnostics(self, itr: int, eval_traj_infos: Sequence[TrajInfo] | None = None,
                        eval_time: float = 0, prefix: str = "Diagnostics/") -> dict[str, Any]:
        return super().log_diagnostics(itr, eval_traj_infos, eval_time, prefix=prefix)
