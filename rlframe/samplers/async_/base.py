"""What every asynchronous sampler does in the master process: build the double buffer.

An asynchronous runner calls :meth:`AsyncSamplerMixin.async_initialize` in its
own (master) process, then starts one sampler process, which calls
``initialize(affinity)`` and then, once per iteration, ``obtain_samples(itr,
db_idx)``; the batch goes to half ``db_idx`` of the double buffer, and only the
completed TrajInfos come back.
"""
from __future__ import annotations

import multiprocessing as mp
from typing import TYPE_CHECKING

from rlframe.samplers.buffer import build_samples_buffer
from rlframe.utils.buffer import torchify_buffer
from rlframe.utils.seed import make_seed

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import BatchSpec, Examples, Samples

N_DOUBLE_BUFFER = 2


class AsyncSamplerMixin:
    """Master-side initialization shared by the asynchronous samplers.

    Subclasses add ``initialize(affinity)`` (in the sampler process),
    ``obtain_samples(itr, db_idx)`` (returns the completed TrajInfos; the batch
    goes to ``double_buffer[db_idx]``), ``evaluate_agent(itr)`` and ``shutdown()``.

    Attributes (set by :meth:`async_initialize`):
        agent: the agent, its model on shared memory.
        seed: base seed of the sampler process and its envs.
        double_buffer: two numpy ``Samples`` buffers ``[T, B]`` on shared memory.
        double_buffer_pyt: torch views of the same two buffers.
        examples: one step of every field (sizes the replay buffer).
    """

    batch_spec: BatchSpec

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
        agent.make_async_handles(mp.get_context() if ctx is None else ctx)
        self.agent = agent
        self.double_buffer = tuple(buffers)
        self.double_buffer_pyt = tuple(torchify_buffer(b) for b in buffers)
        self.examples = examples
        return self.double_buffer_pyt, examples

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

    @staticmethod
    def check_db_idx(db_idx: int) -> int:
        if db_idx not in (0, 1):
            raise ValueError(f"db_idx must be 0 or 1 (a half of the double buffer), got "
                             f"{db_idx!r}.")
        return int(db_idx)
