"""Deep Q-learning with experience replay (Mnih et al., 2015), with the usual extensions:
double DQN, n-step returns, prioritized replay, dueling models (through the agent's model),
soft target updates and bootstrapping through time limits.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rlframe.algos.base import RlAlgorithm
from rlframe.algos.replay_samples import (SamplesToBuffer, SamplesToBufferTl,  # noqa: F401
                                          async_replay_class, check_mid_batch_reset,
                                          check_replay_length, choose_replay_class,
                                          replay_example, replay_samples)
from rlframe.replays.non_sequence.frame import (PrioritizedReplayFrameBuffer,
                                                UniformReplayFrameBuffer)
from rlframe.replays.non_sequence.prioritized import PrioritizedReplayBuffer
from rlframe.replays.non_sequence.time_limit import (TlPrioritizedReplayBuffer,
                                                     TlUniformReplayBuffer)
from rlframe.replays.non_sequence.uniform import UniformReplayBuffer
from rlframe.utils.checks import as_int, check_number, positive_int
from rlframe.utils.logging import logger
from rlframe.utils.tensor import clip_grad_norm, select_at_indexes, valid_mean

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "tdAbsErr"])
# Default replay classes keyed by (frame stacks, time-limit aware, prioritized).
_REPLAY_CLASSES = {
    (False, False, False): UniformReplayBuffer,
    (False, False, True): PrioritizedReplayBuffer,
    (False, True, False): TlUniformReplayBuffer,
    (False, True, True): TlPrioritizedReplayBuffer,
    (True, False, False): UniformReplayFrameBuffer,
    (True, False, True): PrioritizedReplayFrameBuffer,
}


def is_frame_stack(observation: Any) -> bool:
    """Whether an example observation looks like stacked uint8 frames [C, H, W]."""
    observation = np.asarray(observation)
    return observation.dtype == np.uint8 and observation.ndim == 3


class DQN(RlAlgorithm):
    """DQN: minimize the TD error of the agent's Q-values against a target network.

    Every iteration appends the sampler's batch to the replay buffer and, once
    ``min_steps_learn`` steps were collected, makes ``updates_per_optimize``
    gradient updates on minibatches drawn from the replay::

        y = return_n + (1 - done_n) * discount^n * Q_target(s_{t+n}, a*)
        a* = argmax_a Q_target(s_{t+n}, a)        (argmax of the online Q with double_dqn)
        loss = mean(huber(y - Q(s_t, a_t)))       (0.5 * squared error if delta_clip is None)

    Needs a sampler whose collector resets envs mid-batch (the default
    ``CpuResetCollector``), so that each replay row continues the previous one.

    Args:
        discount: reward discount (gamma).
        batch_size: transitions per gradient update.
        min_steps_learn: env steps collected before the first update.
        delta_clip: Huber loss threshold; None for the squared error.
        replay_size: replay capacity in transitions.
        replay_ratio: transitions trained on per transition collected; sets
            ``updates_per_optimize = max(1, round(replay_ratio * sampler_batch / batch_size))``.
        target_update_tau: 1 copies the model into the target network; smaller
            values blend it in (Polyak averaging).
        target_update_interval: gradient updates between target updates.
        n_step_return: rewards summed before bootstrapping.
        learning_rate: optimizer step size.
        OptimCls: optimizer class.
        optim_kwargs: optimizer arguments (default ``eps=0.01 / batch_size``).
        initial_optim_state_dict: optimizer state to resume from.
        clip_grad_norm: max global gradient norm.
        eps_steps: env steps (counted from the start) at which the agent's
            exploration epsilon reaches its final value; it starts decaying at
            ``min_steps_learn``.
        double_dqn: choose the bootstrap action with the online network.
        prioritized_replay: sample in proportion to TD error (Schaul et al., 2016).
        pri_alpha: priority exponent.
        pri_beta_init, pri_beta_final: importance-sampling exponent, annealed
            linearly from the start of learning ...
        pri_beta_steps: ... to this many env steps.
        default_priority: priority of new transitions (default: ``delta_clip``, or 1).
        ReplayBufferCls: replay class to use instead of the default (built
            with the same keyword arguments).
        updates_per_sync: updates per iteration in asynchronous runners.
        bootstrap_timelimit: when the env reports ``env_info.timeout`` (gymnasium
            truncation), do not train on transitions whose n-step return was
            cut by a time limit, instead of taking the cut as the end of the
            episode. rlpyt's DQN has no such option (it behaves as False).
    """

    opt_info_fields = tuple(f for f in OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 32,
                 min_steps_learn: int = int(5e4), delta_clip: float | None = 1.,
                 replay_size: int = int(1e6), replay_ratio: float = 8,
                 target_update_tau: float = 1, target_update_interval: int = 312,
                 n_step_return: int = 1, learning_rate: float = 2.5e-4,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 10.,
                 eps_steps: int = int(1e6), double_dqn: bool = False,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta_init: float = 0.4, pri_beta_final: float = 1.,
                 pri_beta_steps: int = int(50e6), default_priority: float | None = None,
                 ReplayBufferCls: type | None = None, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True):
        self.discount = check_number("discount", discount, high=1., low_open=False)
        self._batch_size = positive_int("batch_size", batch_size)
        self.min_steps_learn = as_int("min_steps_learn", min_steps_learn, minimum=0)
        if delta_clip is not None and not delta_clip > 0:
            raise ValueError(f"delta_clip must be positive or None, got {delta_clip}.")
        self.delta_clip = delta_clip
        self.replay_size = positive_int("replay_size", replay_size)
        self._check_replay_size()
        if not replay_ratio > 0:
            raise ValueError(f"replay_ratio must be positive, got {replay_ratio}.")
        self.replay_ratio = replay_ratio
        self.target_update_tau = check_number("target_update_tau", target_update_tau,
                                                low_open=True)
        self.target_update_interval = positive_int("target_update_interval",
                                                   target_update_interval)
        self.n_step_return = positive_int("n_step_return", n_step_return)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}.")
        self.learning_rate = learning_rate
        self.OptimCls = OptimCls
        self.optim_kwargs = dict(eps=0.01 / self.batch_size) if optim_kwargs is None \
            else dict(optim_kwargs)
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = clip_grad_norm
        self.eps_steps = as_int("eps_steps", eps_steps, minimum=0)
        self.double_dqn = double_dqn
        self.prioritized_replay = prioritized_replay
        self.pri_alpha = check_number("pri_alpha", pri_alpha, low_open=False)
        self.pri_beta_init = check_number("pri_beta_init", pri_beta_init, high=1.,
                                          low_open=False)
        self.pri_beta_final = check_number("pri_beta_final", pri_beta_final, high=1.,
                                           low_open=False)
        self.pri_beta_steps = positive_int("pri_beta_steps", pri_beta_steps)
        if default_priority is None:
            default_priority = 1. if delta_clip is None else delta_clip
        if not default_priority > 0:
            raise ValueError(f"default_priority must be positive, got {default_priority}.")
        self.default_priority = default_priority
        self.ReplayBufferCls = ReplayBufferCls
        self.updates_per_sync = positive_int("updates_per_sync", updates_per_sync)
        self.bootstrap_timelimit = bootstrap_timelimit
        self.update_counter = 0
        self.min_itr_learn = 0  # Set from min_steps_learn in initialize().

    def _check_replay_size(self) -> None:
        if self.replay_size < self.batch_size:
            raise ValueError(f"replay_size={self.replay_size} is smaller than one batch "
                             f"(batch_size={self.batch_size}).")

    # ------------------------------------------------------------------ setup
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool = False,
                   examples: dict | None = None, world_size: int = 1, rank: int = 0) -> None:
        """Schedule from the sampler batch size; build the replay buffer and optimizer."""
        check_mid_batch_reset(self, mid_batch_reset)
        self.agent = agent
        self.n_itr = n_itr
        self.mid_batch_reset = mid_batch_reset
        self.sampler_bs = sampler_bs = batch_spec.size
        self.updates_per_optimize = max(1, round(self.replay_ratio * sampler_bs
                                                 / self.batch_size))
        logger.log(f"From sampler batch size {sampler_bs}, training batch size "
                   f"{self.batch_size}, and replay ratio {self.replay_ratio}, computed "
                   f"{self.updates_per_optimize} updates per iteration.")
        self._set_schedules(agent, sampler_bs)
        self.initialize_replay_buffer(examples, batch_spec)
        self.optim_initialize(rank)

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: dict, world_size: int = 1) -> Any:
        """Asynchronous runners: build the shared replay (the optimizer comes later)."""
        check_mid_batch_reset(self, mid_batch_reset)
        self.agent = agent
        self.n_itr = sampler_n_itr
        self.mid_batch_reset = mid_batch_reset
        self.sampler_bs = batch_spec.size
        self.updates_per_optimize = self.updates_per_sync
        self._set_schedules(agent, batch_spec.size)
        return self.initialize_replay_buffer(examples, batch_spec, async_=True)

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer over the agent's parameters."""
        self.rank = rank
        self._params = list(self.agent.parameters())  # Gathered once, clipped every update.
        self.optimizer = self.OptimCls(self._params, lr=self.learning_rate,
                                       **self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)

    def _set_schedules(self, agent: Any, sampler_bs: int) -> None:
        """Iteration counts of learning start, epsilon decay and beta annealing."""
        if not hasattr(agent, "set_epsilon_itr_min_max"):
            raise TypeError(f"{type(self).__name__} needs a Q-learning agent with an epsilon "
                            f"schedule (e.g. DqnAgent, built on EpsilonGreedyAgentMixin); got "
                            f"{type(agent).__name__}.")
        self.min_itr_learn = int(self.min_steps_learn // sampler_bs)
        eps_itr_max = max(1, int(self.eps_steps // sampler_bs))
        agent.set_epsilon_itr_min_max(self.min_itr_learn, eps_itr_max)
        self.pri_beta_itr = max(1, self.pri_beta_steps // sampler_bs)

    def replay_kwargs(self, examples: dict, batch_spec: Any) -> dict:
        """Constructor arguments of the replay buffer."""
        kwargs = dict(example=self.examples_to_buffer(examples), size=self.replay_size,
                      B=batch_spec.B, discount=self.discount, n_step_return=self.n_step_return)
        if self.prioritized_replay:
            kwargs.update(alpha=self.pri_alpha, beta=self.pri_beta_init,
                          default_priority=self.default_priority)
        return kwargs

    def default_replay_class(self, examples: dict, async_: bool = False) -> type:
        """Replay class for these samples: frame-storing for frame stacks, time-limit
        aware when the env reports timeouts, prioritized if asked."""
        frames = is_frame_stack(examples["observation"])
        if frames and self._timelimit:
            logger.log("Frame replay buffers have no time-limit variant: episodes cut by a "
                       "time limit are treated as ended.")
            self._timelimit = False
        ReplayCls = _REPLAY_CLASSES[(frames, self._timelimit, self.prioritized_replay)]
        return async_replay_class(ReplayCls) if async_ else ReplayCls

    def initialize_replay_buffer(self, examples: dict, batch_spec: Any,
                                 async_: bool = False) -> Any:
        """Build ``self.replay_buffer`` from one example step of the sampler."""
        self._timelimit = (self.bootstrap_timelimit
                           and hasattr(examples["env_info"], "timeout"))
        check_replay_length(self.replay_size, batch_spec.B, self.n_step_return)
        ReplayCls = choose_replay_class(self.ReplayBufferCls,
                                        lambda: self.default_replay_class(examples, async_))
        self.replay_buffer = ReplayCls(**self.replay_kwargs(examples, batch_spec))
        self._replay_T_appended = 0
        # Steps per env stored before anything can be sampled: the newest n (their
        # returns are incomplete) and the oldest (its predecessor is unknown) never are.
        self._min_replay_T = (getattr(self.replay_buffer, "off_backward", self.n_step_return)
                              + getattr(self.replay_buffer, "off_forward", 1) + 1)
        return self.replay_buffer

    def examples_to_buffer(self, examples: dict) -> Any:
        """One example step in the replay's storage layout."""
        return replay_example(examples, self._timelimit)

    def samples_to_buffer(self, samples: Any) -> Any:
        """The sampler's ``[T, B]`` batch in the replay's storage layout."""
        return replay_samples(samples, self._timelimit)

    # --------------------------------------------------------------- training
    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """Store ``samples`` [T, B]; then, from ``min_itr_learn`` on, train on replay."""
        itr = itr if sampler_itr is None else sampler_itr  # Async: sampler's progress.
        if samples is not None:
            self.replay_buffer.append_samples(self.samples_to_buffer(samples))
            self._replay_T_appended += samples.env.reward.shape[0]
        opt_info = OptInfo(*([] for _ in OptInfo._fields))
        if itr < self.min_itr_learn or self._replay_T_appended < self._min_replay_T:
            return opt_info
        for _ in range(self.updates_per_optimize):
            samples_from_replay = self.replay_buffer.sample_batch(self.batch_size)
            self.optimizer.zero_grad()
            loss, td_abs_errors = self.loss(samples_from_replay)
            loss.backward()
            grad_norm = clip_grad_norm(self._params, self.clip_grad_norm)
            self.optimizer.step()
            if self.prioritized_replay:
                self.replay_buffer.update_batch_priorities(td_abs_errors)
            opt_info.loss.append(loss.item())
            opt_info.gradNorm.append(float(grad_norm))
            opt_info.tdAbsErr.extend(td_abs_errors[::8].tolist())  # A sample for logging.
            self.update_counter += 1
            if self.update_counter % self.target_update_interval == 0:
                self.agent.update_target(self.target_update_tau)
        self.update_itr_hyperparams(itr)
        return opt_info

    def loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """TD loss on one replay minibatch.

        Args:
            samples: ``SamplesFromReplay`` with leading [batch_size]: agent_inputs,
                action, return_, done_n, target_inputs (the observation n steps
                later), and ``is_weights`` (prioritized) / ``timeout_n`` (time limit).

        Returns:
            ``(loss, td_abs_errors [batch_size])``; the errors are clipped at
            ``delta_clip`` (zero for samples left out of the loss) and serve as
            new priorities.
        """
        qs = self.agent(*samples.agent_inputs)  # [B, A]
        q = select_at_indexes(samples.action, qs)
        with torch.no_grad():
            target_qs = self.agent.target(*samples.target_inputs)
            if self.double_dqn:
                next_a = torch.argmax(self.agent(*samples.target_inputs), dim=-1)
                target_q = select_at_indexes(next_a, target_qs)
            else:
                target_q = torch.max(target_qs, dim=-1).values
        not_done_n = 1 - samples.done_n.float()
        y = samples.return_ + not_done_n * (self.discount ** self.n_step_return) * target_q
        delta = y - q
        losses = self.elementwise_loss(delta)
        if self.prioritized_replay:
            losses = losses * samples.is_weights
        td_abs_errors = delta.detach().abs()
        if self.delta_clip is not None:
            td_abs_errors = torch.clamp(td_abs_errors, 0, self.delta_clip)
        valid = self.valid_mask(samples)
        if valid is not None:  # Untrainable samples get priority 0: never drawn again.
            td_abs_errors = td_abs_errors * valid
        return valid_mean(losses, valid), td_abs_errors

    def elementwise_loss(self, delta: torch.Tensor) -> torch.Tensor:
        """Huber loss of TD errors with threshold ``delta_clip`` (0.5 * delta^2 if None)."""
        if self.delta_clip is None:
            return 0.5 * delta ** 2
        return F.huber_loss(delta, torch.zeros_like(delta), reduction="none",
                            delta=self.delta_clip)

    def valid_mask(self, samples: Any) -> torch.Tensor | None:
        """1 for samples to train on: all of them, except (with time limits) those whose
        n-step return was cut by a truncation and so has no correct target."""
        timeout_n = getattr(samples, "timeout_n", None) if self._timelimit else None
        return None if timeout_n is None else 1 - timeout_n.float()

    def update_itr_hyperparams(self, itr: int) -> None:
        """Anneal the prioritized-replay beta from learning start to ``pri_beta_steps``."""
        if not self.prioritized_replay or itr > self.pri_beta_itr:
            return
        span = self.pri_beta_itr - self.min_itr_learn
        prog = 1. if span <= 0 else min(1., max(0., (itr - self.min_itr_learn) / span))
        beta = prog * self.pri_beta_final + (1 - prog) * self.pri_beta_init
        self.replay_buffer.set_beta(beta)
