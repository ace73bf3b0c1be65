"""Replay handling and the update loop shared by DDPG, TD3 and SAC.

Each iteration appends the sampler's ``[T, B]`` batch to a uniform n-step
replay; once ``min_steps_learn`` env steps were collected, each iteration makes
``updates_per_optimize`` updates on minibatches of ``batch_size`` transitions
drawn from it (the subclass's :meth:`QpgAlgoBase.train_step`).

Time limits (``bootstrap_timelimit``): an episode cut by a time limit ends
with ``done`` and ``env_info.timeout`` set, and the observation after its last
step was never stored (the env was reset). Training toward ``return_`` alone
there would treat the cut as the end of the world, so with
``bootstrap_timelimit`` these transitions (``timeout_n``: the n-step window
hit a time limit before any true termination) are left out of the losses.
Every other step of a truncated episode bootstraps as usual, while the last
step of a terminated episode is trained toward its reward alone.
"""
from __future__ import annotations

from typing import Any

import torch

from rlframe.algos.base import RlAlgorithm
from rlframe.algos.replay_samples import (SamplesToBuffer, SamplesToBufferTl,  # noqa: F401
                                          async_replay_class, check_mid_batch_reset,
                                          check_replay_length, choose_replay_class,
                                          replay_example, replay_samples)
from rlframe.replays.non_sequence.time_limit import TlUniformReplayBuffer
from rlframe.replays.non_sequence.uniform import UniformReplayBuffer
from rlframe.utils.buffer import buffer_to
from rlframe.utils.checks import as_int, check_number, positive_int
from rlframe.utils.logging import logger

class QpgAlgoBase(RlAlgorithm):
    """Base of DDPG, TD3 and SAC: replay buffer, schedule and update loop.

    Subclasses set the attributes checked in :meth:`_check_common_args`, and
    define :meth:`compute_updates_per_optimize`, :meth:`optim_initialize` and
    :meth:`train_step`.
    """

    OptInfoCls: type

    def _check_common_args(self) -> None:
        self.discount = check_number("discount", self.discount, high=1., low_open=False)
        self._batch_size = positive_int("batch_size", self._batch_size)
        self.min_steps_learn = as_int("min_steps_learn", self.min_steps_learn, minimum=0)
        self.replay_size = positive_int("replay_size", self.replay_size)
        if self.replay_size < self._batch_size:
            raise ValueError(f"replay_size={self.replay_size} is smaller than one batch "
                             f"(batch_size={self._batch_size}).")
        self.replay_ratio = check_number("replay_ratio", self.replay_ratio)
        self.target_update_tau = check_number("target_update_tau", self.target_update_tau,
                                              high=1.)
        self.target_update_interval = positive_int("target_update_interval",
                                                   self.target_update_interval)
        self.n_step_return = positive_int("n_step_return", self.n_step_return)
        self.clip_grad_norm = check_number("clip_grad_norm", self.clip_grad_norm)
        self.updates_per_sync = positive_int("updates_per_sync", self.updates_per_sync)
        if self.ReplayBufferCls is not None and not isinstance(self.ReplayBufferCls, type):
            raise TypeError(f"ReplayBufferCls must be a replay buffer class or None, got "
                            f"{self.ReplayBufferCls!r}.")

    # ------------------------------------------------------------------ setup
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool = False,
                   examples: dict | None = None, world_size: int = 1, rank: int = 0) -> None:
        """Schedule from the sampler batch size; build the replay buffer and optimizers."""
        self._setup(agent, n_itr, batch_spec, mid_batch_reset, examples)
        self.updates_per_optimize = self.compute_updates_per_optimize(batch_spec.size)
        logger.log(f"From sampler batch size {batch_spec.size}, training batch size "
                   f"{self.batch_size}, and replay ratio {self.replay_ratio}, computed "
                   f"{self.updates_per_optimize} updates per iteration.")
        self.initialize_replay_buffer(examples, batch_spec)
        self.optim_initialize(rank)

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: dict, world_size: int = 1) -> Any:
        """Asynchronous runners: build the shared replay (optimizers come later)."""
        self._setup(agent, sampler_n_itr, batch_spec, mid_batch_reset, examples)
        self.updates_per_optimize = self.updates_per_sync
        return self.initialize_replay_buffer(examples, batch_spec, async_=True)

    def _setup(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
               examples: dict | None) -> None:
        check_mid_batch_reset(self, mid_batch_reset)
        if examples is None:
            raise ValueError(f"{type(self).__name__}.initialize needs the sampler's examples "
                             "(one step of every field) to build its replay buffer.")
        self.agent = agent
        self.n_itr = n_itr
        self.mid_batch_reset = mid_batch_reset
        self.sampler_bs = batch_spec.size
        self.min_itr_learn = int(self.min_steps_learn // batch_spec.size)
        if hasattr(agent, "give_min_itr_learn"):
            agent.give_min_itr_learn(self.min_itr_learn)

    def compute_updates_per_optimize(self, sampler_bs: int) -> int:
        """Gradient updates per iteration for this sampler batch size."""
        return max(1, round(self.replay_ratio * sampler_bs / self.batch_size))

    def initialize_replay_buffer(self, examples: dict, batch_spec: Any,
                                 async_: bool = False) -> Any:
        """Build ``self.replay_buffer`` from one example step of the sampler."""
        has_timeout = hasattr(examples["env_info"], "timeout")
        if self.bootstrap_timelimit and not has_timeout:
            raise ValueError(
                f"{type(self).__name__}(bootstrap_timelimit=True) needs env_info.timeout "
                "(time-limit truncation flags, which GymEnvWrapper provides); this env's "
                f"env_info has fields {getattr(examples['env_info'], '_fields', None)}. "
                "Set bootstrap_timelimit=False for envs without time limits.")
        check_replay_length(self.replay_size, batch_spec.B, self.n_step_return)

        def default() -> type:
            ReplayCls = TlUniformReplayBuffer if self.bootstrap_timelimit else UniformReplayBuffer
            return async_replay_class(ReplayCls) if async_ else ReplayCls

        ReplayCls = choose_replay_class(self.ReplayBufferCls, default)
        self.replay_buffer = ReplayCls(example=self.examples_to_buffer(examples),
                                       size=self.replay_size, B=batch_spec.B,
                                       discount=self.discount, n_step_return=self.n_step_return)
        self._replay_T_appended = 0
        return self.replay_buffer

    def examples_to_buffer(self, examples: dict) -> Any:
        """One example step in the replay's storage layout."""
        return replay_example(examples, self.bootstrap_timelimit)

    def samples_to_buffer(self, samples: Any) -> Any:
        """The sampler's ``[T, B]`` batch in the replay's storage layout."""
        return replay_samples(samples, self.bootstrap_timelimit)

    def optim_initialize(self, rank: int = 0) -> None:
        raise NotImplementedError

    # --------------------------------------------------------------- training
    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> Any:
        """Store ``samples`` [T, B]; then, from ``min_itr_learn`` on, train on replay."""
        itr = itr if sampler_itr is None else sampler_itr  # Async: the sampler's progress.
        if samples is not None:
            self.replay_buffer.append_samples(self.samples_to_buffer(samples))
            self._replay_T_appended += samples.env.reward.shape[0]
        opt_info = self.OptInfoCls(*([] for _ in self.OptInfoCls._fields))
        # An n-step target needs n + 1 stored steps per env before anything can be sampled.
        if itr < self.min_itr_learn or self._replay_T_appended <= self.n_step_return + 1:
            return opt_info
        on_cpu = self.agent.device.type == "cpu"
        for _ in range(self.updates_per_optimize):
            samples_from_replay = self.replay_buffer.sample_batch(self.batch_size)
            if not on_cpu:
                samples_from_replay = buffer_to(samples_from_replay, device=self.agent.device)
            self.train_step(samples_from_replay, opt_info)
        return opt_info

    def train_step(self, samples: Any, opt_info: Any) -> None:
        """One gradient update on a replay minibatch, recording into ``opt_info``.

        Increments ``update_counter`` and updates the target networks every
        ``target_update_interval`` updates.
        """
        raise NotImplementedError

    def valid_mask(self, samples: Any) -> torch.Tensor | None:
        """[batch_size] weights of the samples in the losses: 0 where a time limit cut
        the n-step return (``bootstrap_timelimit``), else 1; None when all count."""
        if not self.bootstrap_timelimit:
            return None
        return 1 - samples.timeout_n.float()

    def _bootstrap_discount(self, samples: Any) -> torch.Tensor:
        """``discount^n * (1 - done_n)`` [batch_size]: the weight of the target value."""
        return (self.discount ** self.n_step_return) * (1 - samples.done_n.float())
