"""What every asynchronous sampler does in the master process: build the double buffer.

An asynchronous runner calls :meth:`AsyncSamplerMixin.async_initialize` in its
own (master) process, then starts one sampler process, which calls
``initialize(affinity)`` and then, once per iteration, ``obtain_samples(itr,
db_idx)``; the batch goes to half ``db_idx`` of the double buffer, and only the
completed TrajInfos come back. :class:`AsyncParallelSamplerMixin` holds what the
parallel ones (worker processes on columns of the double buffer) share.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import TYPE_CHECKING

import torch

from rlframe.samplers.buffer import build_samples_buffer
from rlframe.utils.buffer import torchify_buffer
from rlframe.utils.launching.pinning import check_workers_cpus, pin_master
from rlframe.utils.seed import make_seed, set_seed
from rlframe.utils.synchronize import process_context

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import BatchSpec, Examples, Samples, TrajInfo
    from rlframe.utils.collections import AttrDict

N_DOUBLE_BUFFER = 2  # The halves of the double buffer.


def check_db_idx(db_idx: int, name: str = "db_idx") -> int:
    """``db_idx`` as an int, if it names a half of the double buffer (0 or 1).

    Raises:
        ValueError: naming ``name`` and the value.
    """
    db_idx = int(db_idx)
    if not 0 <= db_idx < N_DOUBLE_BUFFER:
        raise ValueError(f"{name} must be 0 or 1 (a half of the double buffer), got "
                         f"{db_idx!r}.")
    return db_idx


class AsyncSamplerMixin:
    """Master-side initialization shared by the asynchronous samplers.

    Subclasses add ``initialize(affinity)`` (in the sampler process),
    ``obtain_samples(itr, db_idx)`` (returns the completed TrajInfos; the batch
    goes to ``double_buffer[db_idx]``), ``evaluate_agent(itr)`` and ``shutdown()``:
    together, the contract :class:`~rlframe.samplers.base.AsyncSampler` states.

    Attributes (set by :meth:`async_initialize`):
        agent: the agent, its model on shared memory.
        seed: base seed of the sampler process and its envs.
        double_buffer: two numpy ``Samples`` buffers ``[T, B]`` on shared memory.
        double_buffer_pyt: torch views of the same two buffers.
        examples: one step of every field (sizes the replay buffer).
    """

    batch_spec: BatchSpec
    agent: BaseAgent
    seed: int
    global_B: int
    double_buffer: tuple[Samples, ...]
    double_buffer_pyt: tuple[Samples, ...]
    examples: Examples
    # Whether initialize() also takes a list of affinity dicts (one action server
    # per entry) as the runner's affinity["sampler"].
    takes_affinity_list: bool = False

    def async_initialize(self, agent: BaseAgent, bootstrap_value: bool = False,
                         traj_info_kwargs: dict | None = None, seed: int | None = None,
                         ctx: BaseContext | None = None) -> tuple[tuple[Samples, ...], Examples]:
        """Initialize the agent on shared memory and allocate the double buffer.

        Args:
            agent: the agent, initialized here with ``share_memory=True``.
            bootstrap_value: store the value of the state after each batch.
            traj_info_kwargs: keyword arguments of every TrajInfo (e.g. ``discount``).
            seed: base seed (None: a fresh one).
            ctx: multiprocessing context of the processes that will share the
                agent's parameter hand-over lock (default: the default context).

        Returns:
            ``(double_buffer, examples)``: two torch ``Samples`` buffers ``[T, B]``
            on shared memory, and one step of every field.
        """
        self.seed = make_seed() if seed is None else int(seed)
        self._set_traj_info_kwargs(traj_info_kwargs)  # type: ignore[attr-defined]
        B = self.batch_spec.B
        self.global_B = B
        env = self.make_vec_env(1)  # type: ignore[attr-defined]
        try:
            agent.initialize(env.spaces, share_memory=True, global_B=B, env_ranks=list(range(B)))
            buffers = []
            examples = None
            for _ in range(N_DOUBLE_BUFFER):
                _, samples_np, examples = build_samples_buffer(
                    agent, env, self.batch_spec, bootstrap_value, agent_shared=True,
                    env_shared=True, subprocess=True, examples=examples)
                buffers.append(samples_np)
        finally:
            env.close()
        agent.make_async_handles(self._handles_context(ctx))
        self.agent = agent
        self.double_buffer = tuple(buffers)
        self.double_buffer_pyt = tuple(torchify_buffer(b) for b in buffers)
        self.examples = examples
        return self.double_buffer_pyt, examples

    def _handles_context(self, ctx: BaseContext | None) -> BaseContext:
        """The context for the agent's hand-over lock and counter: the runner's, unless
        it forks and this sampler starts its own processes otherwise (a lock made in a
        fork context cannot be sent to a spawned or forkserver child; one made in those
        contexts also works in forked children)."""
        ctx = mp.get_context() if ctx is None else ctx
        own = getattr(self, "start_method", None)
        if own is not None and ctx.get_start_method() == "fork":
            own_ctx = process_context(own)
            if own_ctx.get_start_method() != "fork":
                return own_ctx
        return ctx

    def __getstate__(self) -> dict:
        # Torch views of the shared numpy buffers are rebuilt after unpickling (spawn,
        # forkserver): pickled themselves, they would become copies.
        state = dict(self.__dict__)
        for name in ("double_buffer_pyt", "samples_pyt"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if getattr(self, "double_buffer", None) is not None:
            self.double_buffer_pyt = tuple(torchify_buffer(b) for b in self.double_buffer)

    check_db_idx = staticmethod(check_db_idx)


class AsyncParallelSamplerMixin(AsyncSamplerMixin):
    """Sampler-process side of the asynchronous parallel samplers: worker processes
    write their columns of half ``db_idx`` of the double buffer.

    Mixed in before a :class:`~rlframe.samplers.parallel.base.ParallelSamplerBase`
    subclass, whose machinery starts, drives and stops the workers. A shared
    ``sync.db_idx`` tells the workers' double-buffer collectors which half to write.

    Attributes:
        env_offset: global index of this sampler's first env (batch column): an
            action server of :class:`AsyncGpuSampler` serves a slice of the batch.
        worker_offset: workers of the action servers before this one; worker ``w``
            is seeded ``seed + worker_offset + w`` and env ``b`` (global)
            ``seed + b``, so the numbering does not depend on how envs are split.
        affinity_name: how errors name this sampler's affinity dict.
    """

    env_offset: int = 0
    worker_offset: int = 0
    affinity_name: str = "affinity['sampler']"
    # Set by the ParallelSamplerBase this is mixed into.
    alternating: bool
    start_method: str | None
    sync: AttrDict  # Shared values of the sampler and its workers.
    ctx: BaseContext
    eval_n_envs_per: int

    def _prepare_sampler_process(self, affinity: dict) -> list[tuple[int, ...]]:
        """In the sampler process, before any torch work: check the workers' CPUs, pin
        this process, use one torch thread, seed.

        A forked process that runs torch's thread pool as its parent did can hang,
        so the thread count is set first.

        Args:
            affinity: ``master_cpus`` (this process), ``workers_cpus`` (one entry
                per worker) and ``set_affinity`` are read.

        Returns:
            one tuple of CPU ids per worker.
        """
        torch.set_num_threads(1)
        # Checked against the CPUs this process may use before it is pinned.
        workers_cpus = check_workers_cpus(affinity, alternating=self.alternating,
                                          name=self.affinity_name)
        B, n_worker = self.batch_spec.B, len(workers_cpus)
        if B % n_worker != 0:
            raise ValueError(f"batch_B={B} (envs of this sampler) must be a multiple of the "
                             f"number of workers (len({self.affinity_name}['workers_cpus'])="
                             f"{n_worker}).")
        pin_master(affinity)
        set_seed(self.seed + self.worker_offset)
        return workers_cpus

    def _start_async_workers(self, affinity: dict, workers_cpus: list[tuple[int, ...]]
                             ) -> None:
        """Start the workers (after :meth:`_prepare_sampler_process`) and wait until
        they are ready; ``worker_torch_threads`` is read from ``affinity``."""
        self.n_worker = len(workers_cpus)
        self.B_per_worker = self.batch_spec.B // self.n_worker
        self.world_size, self.rank = 1, 0
        self.ctx = process_context(self.start_method)
        self.master_pid = os.getpid()
        self.samples_np, self.samples_pyt = self.double_buffer[0], self.double_buffer_pyt[0]
        self._start_workers(affinity, workers_cpus, self.seed,  # type: ignore[attr-defined]
                            env_rank_offset=self.env_offset)

    def _build_parallel_ctrl(self, n_worker: int) -> None:
        super()._build_parallel_ctrl(n_worker)  # type: ignore[misc]
        self.sync.db_idx = self.ctx.RawValue("i", 0)

    def _worker_samples(self, slice_B: slice) -> tuple[Samples, ...]:
        return tuple(buffer[:, slice_B] for buffer in self.double_buffer)

    def _assemble_workers_kwargs(self, affinity: dict, workers_cpus: list, seed: int,
                                 env_rank_offset: int) -> list:
        workers_kwargs = super()._assemble_workers_kwargs(  # type: ignore[misc]
            affinity, workers_cpus, seed, env_rank_offset)
        for kwargs in workers_kwargs:  # Numbered over every action server's workers and envs.
            kwargs["seed"] += self.worker_offset
            kwargs["env_seed"] += env_rank_offset
            kwargs["eval_env_seed"] += self.worker_offset * self.eval_n_envs_per
        return workers_kwargs

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:  # type: ignore[override]
        """Run one batch in the workers into ``double_buffer[db_idx]``.

        Returns:
            the TrajInfos of trajectories completed in this batch.
        """
        db_idx = self.check_db_idx(db_idx)
        self.sync.db_idx.value = db_idx
        self.samples_np, self.samples_pyt = self.double_buffer[db_idx], \
            self.double_buffer_pyt[db_idx]
        _, traj_infos = super().obtain_samples(itr)  # type: ignore[misc]
        return traj_infos
