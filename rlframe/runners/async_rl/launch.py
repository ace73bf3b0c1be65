"""Startup of an asynchronous run: the double buffer and the replay, the child
processes, and the optimizer ranks' process group (a part of :class:`AsyncRlBase`)."""
from __future__ import annotations

import math
import os
from multiprocessing.process import BaseProcess

import psutil
import torch
import torch.distributed as dist

from rlframe.runners import resume
from rlframe.runners.async_rl.children import (memory_copier, run_async_sampler,
                                               run_async_sampler_eval)
from rlframe.runners.async_rl.control import POLL_S, build_ctrl
from rlframe.runners.async_rl.optimizer import AsyncOptWorker, prepare_optimizer_rank
from rlframe.runners.async_rl.schedule import async_n_itr, throttle_schedule
from rlframe.runners.minibatch_rl import MinibatchRlBase
from rlframe.samplers.async_.base import N_DOUBLE_BUFFER
from rlframe.samplers.ray.sampler import RaySampler, ray_used_here
from rlframe.utils.distributed import init_process_group_watched, master_store
from rlframe.utils.launching.pinning import set_cpu_affinity, set_torch_threads
from rlframe.utils.processes import ChildSupervisor
from rlframe.utils.seed import make_seed, set_seed
from rlframe.utils.synchronize import (autograd_fork_problem, cuda_fork_problem,
                                      process_context, start_method_without_fork)


class AsyncRlLaunch(MinibatchRlBase):
    """Startup of :class:`AsyncRlBase` (seeding, children, optimizer ranks); not a runner
    by itself."""

    def startup(self) -> tuple[int, float]:  # type: ignore[override]
        """Seed, build the double buffer and the replay, start the children, then set up
        the optimizer here; returns ``(throttle_itr, delta_throttle_itr)``."""
        self._completed = False
        self._stop_reason = None
        self._callbacks_started = False
        self._failure = None
        self._supervisor: ChildSupervisor | None = None  # An earlier run's reports go.
        self.rank_digests, self.rank_optimize_calls = [], []
        self.last_completed_itr: int | None = None
        if not self.logger.writes_files():
            message = (f"{type(self).__name__}.train() runs outside logger_context: nothing "
                       "(progress.csv, debug.log, snapshots) will be saved.")
            self.logger.log(f"WARNING: {message}")
        self._install_sigterm_handler()
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        self.ctx = process_context(self._children_start_method())
        double_buffer, examples = self.sampler.async_initialize(
            agent=self.agent, bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), seed=self.seed, ctx=self.ctx)
        self.sampler_batch_size = self.sampler.batch_spec.size
        self.itr_batch_size = self.sampler_batch_size
        n_itr = self.get_n_itr()
        self.replay_buffer = self.algo.async_initialize(
            agent=self.agent, sampler_n_itr=n_itr, batch_spec=self.sampler.batch_spec,
            mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
            world_size=self.world_size)
        self.throttle_itr, self.delta_throttle_itr = throttle_schedule(
            getattr(self.algo, "min_steps_learn", 0), self.algo.batch_size,
            self.algo.updates_per_sync, self.sampler_batch_size, self.algo.replay_ratio,
            self.world_size)
        self.sampler_lead_itrs = None if self.sampler_lead_steps is None else max(
            1, math.ceil(self.sampler_lead_steps / self.sampler_batch_size))
        self._learn_start_itr = self.throttle_itr  # The optimizer's first call may come here.
        self._ratio_warned = False
        self.warn_if_never_learning(n_itr, self.throttle_itr - 1)
        resume_from = self.logger.get_resume_snapshot()
        snapshot = None if resume_from is None else resume.load_async_snapshot(self, resume_from)
        self._start_sampler_itr = 0 if snapshot is None else snapshot["sampler_itr"] + 1
        self.launch_workers(n_itr)
        throttle = self.optim_startup()
        # A resumed run's throttle came with the snapshot, before the children started.
        self.start_itr = 0 if snapshot is None else resume.restore_async(self, snapshot,
                                                                         resume_from)
        self._callbacks_started = True
        self._call_callbacks("on_startup")
        return throttle

    def _children_start_method(self) -> str | None:
        """``start_method``, or ``"forkserver"`` in place of a default fork (logged) where
        a forked child would fail: a Ray sampler in a process that used Ray (a notebook,
        a script that ran a RaySampler first), children on a GPU when this process has
        initialized CUDA, or optimizer ranks 1.. when a backward pass here started
        autograd's device threads (torch sees a GPU).

        Raises:
            RuntimeError: ``start_method="fork"`` was asked for in such a process.
        """
        why = None
        if isinstance(self.sampler, RaySampler) and ray_used_here():
            why = (f"this process (pid {os.getpid()}) used Ray, and Ray cannot start in a "
                   f"process forked from it (for {type(self.sampler).__name__})")
        else:
            sampler_affinity = self.affinity["sampler"]
            servers = sampler_affinity if isinstance(sampler_affinity, (list, tuple)) \
                else [sampler_affinity]
            cuda_idxs = [server.get("cuda_idx") for server in servers]
            cuda_idxs += [opt.get("cuda_idx") for opt in self.affinity["optimizer"][1:]]
            why = cuda_fork_problem(cuda_idxs)
            if why is None and len(self.affinity["optimizer"]) > 1:
                why = autograd_fork_problem()  # Optimizer ranks 1.. run backward passes.
        return start_method_without_fork(self.start_method, type(self).__name__, why)

    def get_n_itr(self) -> int:
        """Sampler iterations; see :func:`async_n_itr`."""
        self.log_interval_itrs, self.n_itr = async_n_itr(self.n_steps, self.log_interval_steps,
                                                         self.sampler_batch_size)
        self.logger.log(f"Running {self.n_itr} sampler iterations.")
        return self.n_itr

    def launch_workers(self, n_itr: int) -> None:
        """Start the sampler process, the two memory copiers, the optimizer ranks 1..
        (several optimizer dicts) and the watchdog of them all."""
        ctx = self.ctx
        self.traj_infos_queue = ctx.Queue()
        supervisor = self._supervisor = self._new_supervisor(ctx)
        self.error_queue = supervisor.error_queue
        self.ctrl = ctrl = build_ctrl(self.world_size, ctx)
        self._set_sample_limit(self.throttle_itr)
        common = dict(error_queue=self.error_queue, parent_pid=os.getpid())
        sampler_kwargs = dict(sampler=self.sampler, affinity=self.affinity["sampler"], ctrl=ctrl,
                              traj_infos_queue=self.traj_infos_queue, n_itr=n_itr, **common)
        if self._eval:
            sampler_kwargs["eval_itrs"] = self.log_interval_itrs
        if self._start_sampler_itr > 0:  # A resumed run.
            sampler_kwargs["start_itr"] = self._start_sampler_itr
            ctrl.sampler_itr.value = self._start_sampler_itr - 1
        target = run_async_sampler_eval if self._eval else run_async_sampler
        # Not a daemon: an AsyncCpuSampler starts worker processes of its own.
        supervisor.add("sampler", target, kwargs=sampler_kwargs, process_name="AsyncRl-sampler",
                       daemon=False)
        for i in range(N_DOUBLE_BUFFER):
            name = f"memory copier {i}"
            supervisor.add(name, memory_copier, process_name=f"AsyncRl-copier{i}",
                           args=(self.sampler.double_buffer[i], self.algo.samples_to_buffer,
                                 self.replay_buffer, ctrl.copier(i)),
                           kwargs=dict(name=name, **common))
        opt_names = self._add_optimizer_ranks(n_itr, common)
        self.processes = supervisor.children
        self._training = True
        supervisor.start()
        self.logger.log("Started the sampler and memory copier processes (pids "
                        f"{[p.pid for name, p in self.processes.items() if name not in opt_names]}"
                        ").")
        if opt_names:
            self.logger.log(f"Started optimizer ranks 1..{self.world_size - 1} (pids "
                            f"{[self.processes[name].pid for name in opt_names]}); process group "
                            f"at {self._init_method}.")
        self._start_watchdog()

    def _add_optimizer_ranks(self, n_itr: int, common: dict) -> list[str]:
        """Add the (unstarted) processes of optimizer ranks 1.. to the supervisor;
        returns their names."""
        if self.world_size == 1:
            return []
        opt_affinities = self.affinity["optimizer"]
        first_cpu = opt_affinities[0]["cpus"]
        first_cpu = first_cpu if isinstance(first_cpu, int) else first_cpu[0]
        # Listening before ranks 1.. start: they cannot meet another run's rank 0.
        self._master_store = master_store(first_cpu % 100, self.world_size, self.pg_timeout)
        port = self._master_store.port
        self._init_method = f"tcp://127.0.0.1:{port}"
        names = []
        for rank in range(1, self.world_size):
            pin = (self.affinity.get("set_affinity", True)
                   and opt_affinities[rank].get("set_affinity", True))
            worker = AsyncOptWorker(rank, self.world_size, self.algo, self.agent, n_itr,
                                    affinity={**opt_affinities[rank], "set_affinity": pin},
                                    seed=self.seed + 100, ctrl=self.ctrl, port=port,
                                    pg_timeout=self.pg_timeout, **common)
            worker.resume_snapshot = self.logger.get_resume_snapshot()
            self._supervisor.add(worker.name, worker.optimize, process_name=f"AsyncRl-opt{rank}")
            names.append(worker.name)
        return names

    def optim_startup(self) -> tuple[int, float]:
        """Pin this process to the optimizer's CPUs, join the other optimizer ranks (if
        any), place the agent, build the optimizer; returns ``(throttle_itr,
        delta_throttle_itr)``."""
        opt_affinity = self.affinity["optimizer"][0]
        process = psutil.Process()
        if hasattr(process, "cpu_affinity"):
            self._original_cpus = process.cpu_affinity()
        if self.affinity.get("set_affinity", True) and opt_affinity.get("set_affinity", True):
            set_cpu_affinity(opt_affinity["cpus"])
        n_threads = set_torch_threads(opt_affinity.get("torch_threads"),
                                      "affinity['optimizer'][0]['torch_threads']")
        self.logger.log(f"Optimizer CPUs {opt_affinity['cpus']}, Torch threads {n_threads}.")
        cuda_idx = opt_affinity.get("cuda_idx")
        if self.world_size > 1:
            self._opt_group = self._join_optimizer_ranks(cuda_idx)
        # A private copy: the sampler reads the shared model only as send_shared_memory()
        # writes it (under its lock), never mid-update.
        prepare_optimizer_rank(self.algo, self.agent, 0, self.world_size, cuda_idx,
                               self._opt_group)
        self.min_itr_learn = getattr(self.algo, "min_itr_learn", 0)
        self.initialize_logging()
        return self.throttle_itr, self.delta_throttle_itr

    def _join_optimizer_ranks(self, cuda_idx: int | None) -> dist.ProcessGroup | None:
        """Join the optimizer ranks' process group as rank 0; returns the gloo group for
        objects (None: the default group is gloo). Joins in a thread, so that a child
        failing meanwhile stops the run instead of leaving this process waiting for
        ``pg_timeout``."""
        if dist.is_initialized():
            raise RuntimeError(f"{type(self).__name__} with {self.world_size} optimizer ranks "
                               "starts a torch.distributed process group of its own, but this "
                               "process already has one; destroy it first.")
        backend = "gloo" if cuda_idx is None else "nccl"
        if cuda_idx is not None:
            torch.cuda.set_device(cuda_idx)
        store, self._master_store = self._master_store, None  # The group keeps it now.
        group = init_process_group_watched(backend, 0, self.world_size, self._init_method,
                                           self.pg_timeout, self._raise_if_failed, POLL_S,
                                           store=store)
        self._joined_ranks = True
        self.logger.log(f"Joined the process group of {self.world_size} optimizer ranks as rank 0 "
                        f"(backend {backend}).")
        return group

    def _may_optimize(self, throttle_itr: float) -> bool:
        """Whether the sampler passed ``throttle_itr``; with several optimizer ranks, also
        whether the replay can be sampled: then every rank trains in the coming call (the
        replay only fills), where DistributedDataParallel needs all of them in each update."""
        if self.ctrl.sampler_itr.value < throttle_itr:
            return False
        return self.world_size == 1 or self.replay_buffer.can_sample()

    def _meet_optimizer_ranks(self) -> None:
        """With several optimizer ranks: wait until every rank is ready for the next call."""
        if self.ctrl.opt_throttle is not None:
            self.ctrl.opt_throttle.wait(0, check=self._raise_if_failed)

    def _optimizer_ranks(self) -> list[tuple[str, BaseProcess]]:
        """``(name, process)`` of optimizer ranks 1.."""
        return [(name, p) for name, p in self.processes.items()
                if name.startswith("optimizer rank")]

    def _set_sample_limit(self, throttle_itr: float) -> None:
        """Let the sampler run up to ``sampler_lead_itrs`` past the optimizer's next mark."""
        if self.sampler_lead_itrs is not None:
            self.ctrl.sample_limit_itr.value = throttle_itr + self.sampler_lead_itrs
