"""Sampler interface: builds envs and collectors, returns [T, B] batches.

Samplers keep two contracts, each stated as a :class:`~typing.Protocol` here:

* :class:`SyncSampler` (``MinibatchRl``, ``SyncRl``): ``initialize(agent, ...)``
  in the runner's process returns the examples; ``obtain_samples(itr)`` returns
  the ``[T, B]`` batch and the completed TrajInfos.
* :class:`AsyncSampler` (``AsyncRl``): ``async_initialize(agent, ...)`` in the
  runner's (master) process builds the double buffer; the sampler process then
  calls ``initialize(affinity)`` and, per batch, ``obtain_samples(itr, db_idx)``,
  which fills half ``db_idx`` and returns only the TrajInfos.

:class:`BaseSampler` (the shared constructor) implements the synchronous one;
asynchronous samplers mix :class:`~rlframe.samplers.async_.base.AsyncSamplerMixin`
in before it and replace ``initialize`` and ``obtain_samples``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from rlframe.envs.vector import check_env_backend, make_vec_env
from rlframe.samplers.collections import BatchSpec, TrajInfo
from rlframe.utils.checks import as_int, positive_int

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import Examples, Samples


class BaseSampler:
    """Common constructor of all samplers.

    Args:
        EnvCls: callable building one env: ``EnvCls(**env_kwargs)`` (a class, or
            a factory such as ``rlframe.envs.gym.make``).
        env_kwargs: keyword arguments for training envs.
        batch_T: time steps per batch.
        batch_B: parallel envs per batch.
        CollectorCls: collector class; its ``mid_batch_reset`` decides whether
            envs reset inside a batch.
        max_decorrelation_steps: max random steps taken by each env at start.
        TrajInfoCls: trajectory statistics class; every instance is built as
            ``TrajInfoCls(**traj_info_kwargs)`` with the kwargs given to ``initialize``.
        eval_n_envs: evaluation envs (0: no evaluation).
        eval_CollectorCls: evaluation collector class.
        eval_env_kwargs: keyword arguments for evaluation envs (required with eval_n_envs).
        eval_max_steps: total env steps across eval envs per evaluation.
        eval_max_trajectories: trajectories per evaluation: the first ones of each
            eval env, split evenly over the envs (6 over 4 envs: 2, 2, 1, 1), so that
            short episodes are not over-represented; the evaluation stops once they
            ended, or after ``eval_max_steps``.
        env_backend: how the B envs of a collector are stepped: ``"plain"`` (one
            ``EnvCls`` env per column, stepped in turn; the default and fastest for
            Python envs), ``"gymnasium"`` / ``"gymnasium_async"`` (gymnasium's
            Sync/AsyncVectorEnv over the env ``EnvCls`` wraps) or ``"envpool"``
            (EnvPool's C++ envs, by the env id; the ``envpool`` extra). See
            :mod:`rlframe.envs.vector`.
    """

    alternating: bool = False

    def __init__(self, EnvCls: Callable[..., Env], env_kwargs: dict | None, batch_T: int,
                 batch_B: int, CollectorCls: type, max_decorrelation_steps: int = 100,
                 TrajInfoCls: type[TrajInfo] = TrajInfo, eval_n_envs: int = 0,
                 eval_CollectorCls: type | None = None, eval_env_kwargs: dict | None = None,
                 eval_max_steps: int | None = None, eval_max_trajectories: int | None = None,
                 env_backend: str = "plain"):
        if not callable(EnvCls):
            raise TypeError(f"EnvCls must be callable (an env class or factory), got {EnvCls!r}.")
        env_kwargs = {} if env_kwargs is None else env_kwargs
        if not isinstance(env_kwargs, dict):
            raise TypeError(f"env_kwargs must be a dict, got {type(env_kwargs).__name__}.")
        self.EnvCls = EnvCls
        self.env_kwargs = env_kwargs
        self.batch_T = positive_int("batch_T", batch_T)
        self.batch_B = positive_int("batch_B", batch_B)
        self.CollectorCls = CollectorCls
        self.max_decorrelation_steps = as_int("max_decorrelation_steps",
                                              max_decorrelation_steps, minimum=0)
        self.TrajInfoCls = TrajInfoCls
        self.traj_info_kwargs: dict = {}  # Set by initialize().
        self.eval_n_envs = as_int("eval_n_envs", eval_n_envs, minimum=0)
        self.eval_CollectorCls = eval_CollectorCls
        self.eval_env_kwargs = eval_env_kwargs
        self.eval_max_steps = None if eval_max_steps is None else \
            positive_int("eval_max_steps", eval_max_steps)
        self.eval_max_trajectories = None if eval_max_trajectories is None else \
            positive_int("eval_max_trajectories", eval_max_trajectories)
        if self.eval_n_envs > 0:
            if eval_env_kwargs is None:
                raise ValueError(f"eval_env_kwargs must be given with eval_n_envs="
                                 f"{self.eval_n_envs} (use the training env_kwargs to "
                                 "evaluate on the same env).")
            if self.eval_max_steps is None:
                raise ValueError(f"eval_max_steps must be given with eval_n_envs="
                                 f"{self.eval_n_envs}.")
            if self.eval_max_steps < self.eval_n_envs:
                raise ValueError(f"eval_max_steps={self.eval_max_steps} must be at least "
                                 f"eval_n_envs={self.eval_n_envs} (one step per env).")
        self.env_backend = check_env_backend(env_backend)
        if not CollectorCls.mid_batch_reset and env_backend in ("gymnasium", "gymnasium_async"):
            raise ValueError(
                f"env_backend={env_backend!r} steps every env at once, so it cannot hold "
                f"finished envs idle as CollectorCls={CollectorCls.__name__} "
                "(mid_batch_reset=False) needs; use env_backend='plain' or 'envpool', or a "
                "collector that resets mid-batch.")
        self._check_env_ids()
        self.batch_spec = BatchSpec(self.batch_T, self.batch_B)
        self.mid_batch_reset = CollectorCls.mid_batch_reset

    def _check_env_ids(self) -> None:
        """Reject an unknown gymnasium id before any env is built."""
        from rlframe.envs.gym import check_env_id, make
        if self.EnvCls is make:
            for kwargs in (self.env_kwargs, self.eval_env_kwargs):
                if kwargs and "id" in kwargs:
                    check_env_id(kwargs["id"])

    def _set_traj_info_kwargs(self, traj_info_kwargs: dict | None) -> None:
        """Keep the keyword arguments of every TrajInfo; check that TrajInfoCls takes them."""
        self.traj_info_kwargs = dict(traj_info_kwargs or {})
        try:
            self.TrajInfoCls(**self.traj_info_kwargs)
        except TypeError as e:
            raise TypeError(
                f"TrajInfoCls={self.TrajInfoCls.__name__} must accept the keyword arguments "
                f"traj_info_kwargs={self.traj_info_kwargs}: define __init__(self, **kwargs) "
                f"and call super().__init__(**kwargs). ({e})") from e

    @property
    def batch_size(self) -> int:
        """Env steps per batch (``batch_T * batch_B``)."""
        return self.batch_spec.size

    def make_env(self, eval: bool = False) -> Env:
        """Build one training (or evaluation) env."""
        return self.EnvCls(**(self.eval_env_kwargs if eval else self.env_kwargs))

    def make_vec_env(self, n_envs: int, eval: bool = False) -> VecEnv:
        """Build ``n_envs`` training (or evaluation) envs on ``env_backend``."""
        return make_vec_env(self.env_backend, self.EnvCls,
                            self.eval_env_kwargs if eval else self.env_kwargs, n_envs)

    def check_affinity(self, affinity: dict) -> None:
        """Raise if this sampler cannot run with ``affinity`` (its part of the runner's
        affinity); runners call it before any run directory exists. Default: any fits."""

    def initialize(self, agent: BaseAgent, *, affinity: dict | None = None,
                   seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0,
                   world_size: int = 1) -> Examples:
        """Build envs, initialize ``agent`` and allocate the batch buffer (synchronous
        samplers; see :class:`SyncSampler`). Asynchronous samplers replace it with
        ``initialize(affinity)`` in the sampler process (see :class:`AsyncSampler`)."""
        raise NotImplementedError

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        raise NotImplementedError

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        raise NotImplementedError

    def diagnostics(self) -> dict[str, float]:
        """The sampler's own figures for the runner's diagnostics rows (e.g. a Ray
        sampler's ``WorkerRestarts``); none by default."""
        return {}

    def shutdown(self) -> None:
        pass


class _SamplerCommon(Protocol):
    """What runners read from every sampler, synchronous or not."""

    batch_spec: BatchSpec  # (T, B) of one batch.
    mid_batch_reset: bool  # Whether envs reset inside a batch (the collector's choice).
    TrajInfoCls: type[TrajInfo]

    def check_affinity(self, affinity: dict) -> object:
        """Raise if the sampler cannot run with its part of the runner's affinity."""
        ...

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        """Run the evaluation envs; the completed trajectories' TrajInfos."""
        ...

    def diagnostics(self) -> Mapping[str, float]:
        """The sampler's own figures for the diagnostics rows."""
        ...

    def shutdown(self) -> None:
        """Stop workers and close envs."""
        ...


class SyncSampler(_SamplerCommon, Protocol):
    """The synchronous sampler contract (``MinibatchRl``, ``SyncRl``): rlpyt's
    ``SerialSampler``, ``CpuSampler``, ``GpuSampler``, ``AlternatingSampler`` and
    ``RaySampler`` keep it.

    ``initialize`` takes the agent by position and the rest by keyword (runners
    pass them by keyword; implementations may accept them positionally too).
    """

    def initialize(self, agent: BaseAgent, *, affinity: dict | None = None,
                   seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0,
                   world_size: int = 1) -> Examples:
        """Build envs (env ``b`` seeded ``seed + b``), initialize ``agent`` with their
        spaces and allocate the ``[T, B]`` buffer; returns one step of every field."""
        ...

    def obtain_samples(self, itr: int) -> tuple[Samples, list[TrajInfo]]:
        """One ``[T, B]`` batch (torch views of the sampler's buffer, overwritten by
        the next call) and the TrajInfos of trajectories completed in it."""
        ...


class AsyncSampler(_SamplerCommon, Protocol):
    """The asynchronous sampler contract (``AsyncRl``): the ``Async*Sampler`` classes,
    built on :class:`~rlframe.samplers.async_.base.AsyncSamplerMixin`, keep it.

    The runner calls :meth:`async_initialize` in its own process, then starts
    the sampler process, which calls :meth:`initialize` once and
    :meth:`obtain_samples` per batch.
    """

    # Two numpy ``Samples`` buffers [T, B] on shared memory (set by async_initialize).
    double_buffer: tuple[Samples, ...]
    # Whether initialize() also takes a list of affinity dicts (one action server each).
    takes_affinity_list: bool

    def async_initialize(self, agent: BaseAgent, bootstrap_value: bool = False,
                         traj_info_kwargs: dict | None = None, seed: int | None = None,
                         ctx: BaseContext | None = None
                         ) -> tuple[tuple[Samples, ...], Examples]:
        """In the master: initialize ``agent`` on shared memory and allocate the double
        buffer; returns its two halves (torch views) and one step of every field."""
        ...

    def initialize(self, affinity: dict | None = None) -> None:
        """In the sampler process: pin it, build envs (or start workers)."""
        ...

    def obtain_samples(self, itr: int, db_idx: int) -> list[TrajInfo]:
        """Fill ``double_buffer[db_idx]`` with one batch; the completed TrajInfos."""
        ...
