"""Recurrent replay distributed DQN (R2D1/R2D2, Kapturowski et al., 2019).

Trains a recurrent Q-network on replayed sequences. Each sequence starts from
the RNN state the sampler recorded, runs ``warmup_T`` burn-in steps without
gradient to refresh that state, then trains on ``batch_T`` steps with n-step
double-Q targets computed in a rescaled value space.
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlframe.agents.base import AgentInputs
from rlframe.algos.dqn.dqn import DQN, SamplesToBuffer, SamplesToBufferTl
from rlframe.algos.returns import discount_return_n_step, valid_from_done
from rlframe.replays.layouts import SequenceLayout
from rlframe.utils.buffer import buffer_func, buffer_method, buffer_to, torchify_buffer
from rlframe.utils.checks import as_int, check_number, positive_int
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import select_at_indexes, valid_mean

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.agents.base import BaseAgent
    from rlframe.agents.dqn.r2d1_agent import R2d1AgentBase
    from rlframe.replays.layouts import SequenceSamplesFromReplay
    from rlframe.replays.replay_buffer import ReplayBuffer
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.collections import NamedArrayTuple

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "tdAbsErr", "priority"])
if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    SamplesToBufferRnn: TypeAlias = NamedArrayTuple
    SamplesToBufferTlRnn: TypeAlias = NamedArrayTuple
    PrioritiesSamplesToBuffer: TypeAlias = NamedArrayTuple
else:
    SamplesToBufferRnn = namedarraytuple("SamplesToBufferRnn",
                                         SamplesToBuffer._fields + ("prev_rnn_state",))
    SamplesToBufferTlRnn = namedarraytuple("SamplesToBufferTlRnn",
                                           SamplesToBufferTl._fields + ("prev_rnn_state",))
    PrioritiesSamplesToBuffer = namedarraytuple("PrioritiesSamplesToBuffer",
                                                ["priorities", "samples"])


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x``: squashes large returns."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x


def inv_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Exact inverse of :func:`value_rescale`.

    Solving ``eps * s^2 + s - (1 + eps + |x|) = 0`` for ``s = sqrt(|h^-1(x)| + 1)``
    gives ``s = 2 (1 + eps + |x|) / (1 + sqrt(1 + 4 eps (1 + eps + |x|)))``, a
    form without cancellation for small ``eps`` (and valid for ``eps = 0``).
    """
    c = 1 + eps + x.abs()
    s = 2 * c / (1 + torch.sqrt(1 + 4 * eps * c))
    return torch.sign(x) * (s ** 2 - 1)


class R2D1(DQN):
    """Recurrent DQN on ``[warmup_T + batch_T, batch_B]`` replayed sequences.

    For a sequence starting at ``t`` (where an RNN state was stored)::

        state = burn_in(recorded_state, steps t .. t+warmup_T-1)       (no grad)
        y_k = h(return_n + (1 - done_n) * discount^n * h^-1(Q_target(s_{k+n}, a*)))
        loss = mean over valid k of 0.5 * (y_k - Q(s_k, a_k))^2        (Huber with delta_clip)

    with ``h`` the value rescaling (:func:`value_rescale`), ``a*`` the online
    network's argmax (double DQN), and ``k`` over the ``batch_T`` training
    steps up to the first episode end (and, with ``bootstrap_timelimit``,
    without those whose n-step window a time limit cut). A sequence's new priority is
    ``pri_eta * max_k |delta_k| + (1 - pri_eta) * mean_k |delta_k|``.

    Needs a recurrent agent (e.g. ``R2d1Agent``) whose ``agent_info`` records
    ``q`` and ``prev_rnn_state``, and a sampler that resets envs mid-batch.
    With prioritized replay the sampler's ``batch_T`` must be a multiple of
    ``store_rnn_state_interval``.

    Args:
        discount: reward discount.
        batch_T: training steps per sequence.
        batch_B: sequences per update.
        warmup_T: burn-in steps before the training steps.
        store_rnn_state_interval: keep the sampler's RNN state every this many
            steps; sequences start there (0: never, sequences start from zeros).
        min_steps_learn: env steps collected before the first update.
        delta_clip: Huber threshold (None: squared error).
        replay_size: replay capacity in transitions.
        replay_ratio: trained-on steps (burn-in included) per collected step.
        target_update_interval: updates between target network copies.
        n_step_return: rewards summed before bootstrapping.
        learning_rate, OptimCls, optim_kwargs (default ``eps=1e-3``),
            initial_optim_state_dict, clip_grad_norm: the optimizer.
        eps_steps: env steps at which the exploration epsilon is final.
        double_dqn: bootstrap with the online network's greedy action.
        prioritized_replay: sample sequences by priority.
        pri_alpha, pri_beta_init, pri_beta_final, pri_beta_steps: priority
            exponent and annealed importance-sampling exponent.
        pri_eta: weight of the max (vs. the mean) TD error in a sequence's priority.
        default_priority: priority of new sequences (default ``delta_clip or 1``).
        input_priorities: give new sequences priorities from the TD errors of
            the Q-values recorded while sampling (no extra forward pass).
        input_priority_shift: stored-state intervals by which input priorities
            move back, so they land on the sequence whose training steps they
            describe (default ``warmup_T // store_rnn_state_interval``).
        value_scale_eps: the ``eps`` of the value rescaling.
        ReplayBufferCls: replay class instead of the default sequence buffer.
        updates_per_sync: updates per iteration in asynchronous runners.
        bootstrap_timelimit: leave training steps whose n-step window was cut by
            a time limit out of the loss (needs ``env_info.timeout``); rlpyt's
            R2D1 has no such option (it behaves as False).
        compile: run :meth:`loss` through ``torch.compile`` (see :class:`DQN`).
    """

    agent: R2d1AgentBase
    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)
    sequence_replay = True

    def __init__(self, discount: float = 0.997, batch_T: int = 80, batch_B: int = 64,
                 warmup_T: int = 40, store_rnn_state_interval: int = 40,
                 min_steps_learn: int = int(1e5), delta_clip: float | None = None,
                 replay_size: int = int(1e6), replay_ratio: float = 1,
                 target_update_interval: int = 2500, n_step_return: int = 5,
                 learning_rate: float = 1e-4, OptimCls: type = torch.optim.Adam,
                 optim_kwargs: dict | None = None, initial_optim_state_dict: dict | None = None,
                 clip_grad_norm: float = 80., eps_steps: int = int(1e6), double_dqn: bool = True,
                 prioritized_replay: bool = True, pri_alpha: float = 0.6,
                 pri_beta_init: float = 0.9, pri_beta_final: float = 0.9,
                 pri_beta_steps: int = int(50e6), pri_eta: float = 0.9,
                 default_priority: float | None = None, input_priorities: bool = True,
                 input_priority_shift: int | None = None, value_scale_eps: float = 1e-3,
                 ReplayBufferCls: type | None = None, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, compile: bool = False,
                 checkpoint_replay: bool = False):
        self.batch_T = positive_int("batch_T", batch_T)
        self.batch_B = positive_int("batch_B", batch_B)
        self.warmup_T = as_int("warmup_T", warmup_T, minimum=0)
        self.store_rnn_state_interval = as_int("store_rnn_state_interval",
                                               store_rnn_state_interval, minimum=0)
        if optim_kwargs is None:
            optim_kwargs = dict(eps=1e-3)
        if default_priority is None:
            default_priority = delta_clip or 1.
        super().__init__(
            discount=discount, batch_size=(self.batch_T + self.warmup_T) * self.batch_B,
            min_steps_learn=min_steps_learn, delta_clip=delta_clip, replay_size=replay_size,
            replay_ratio=replay_ratio, target_update_tau=1,
            target_update_interval=target_update_interval, n_step_return=n_step_return,
            learning_rate=learning_rate, OptimCls=OptimCls, optim_kwargs=optim_kwargs,
            initial_optim_state_dict=initial_optim_state_dict, clip_grad_norm=clip_grad_norm,
            eps_steps=eps_steps, double_dqn=double_dqn, prioritized_replay=prioritized_replay,
            pri_alpha=pri_alpha, pri_beta_init=pri_beta_init, pri_beta_final=pri_beta_final,
            pri_beta_steps=pri_beta_steps, default_priority=default_priority,
            ReplayBufferCls=ReplayBufferCls, updates_per_sync=updates_per_sync,
            bootstrap_timelimit=bootstrap_timelimit, compile=compile,
            checkpoint_replay=checkpoint_replay)
        self.pri_eta = check_number("pri_eta", pri_eta, high=1., low_open=False)
        self.input_priorities = input_priorities
        if input_priority_shift is None:
            input_priority_shift = (self.warmup_T // self.store_rnn_state_interval
                                    if self.store_rnn_state_interval > 0 else 0)
        self.input_priority_shift = as_int("input_priority_shift", input_priority_shift,
                                           minimum=0)
        if not value_scale_eps >= 0:
            raise ValueError(f"value_scale_eps must be >= 0, got {value_scale_eps}.")
        self.value_scale_eps = value_scale_eps

    # ------------------------------------------------------------------ setup
    def agent_setup(self, agent: BaseAgent, sampler_bs: int) -> None:
        if not agent.recurrent:
            raise TypeError(f"R2D1 needs a recurrent agent (e.g. R2d1Agent); got "
                            f"{type(agent).__name__}.")
        super().agent_setup(agent, sampler_bs)

    @property
    def replay_batch_B(self) -> int:
        """Sequences drawn per update."""
        return self.batch_B

    def replay_layout(self) -> SequenceLayout:
        """Sequences of ``warmup_T + batch_T`` steps from states stored every
        ``store_rnn_state_interval`` steps."""
        return SequenceLayout(self.store_rnn_state_interval, self.batch_T + self.warmup_T)

    def input_priority_kwargs(self) -> dict:
        return dict(input_priorities=self.input_priorities,
                    input_priority_shift=self.input_priority_shift)

    def replay_kwargs(self, example: SamplesToBuffer, batch_spec: BatchSpec) -> dict:
        return dict(super().replay_kwargs(example, batch_spec),
                    rnn_state_interval=self.store_rnn_state_interval,
                    batch_T=self.batch_T + self.warmup_T)

    def initialize_replay_buffer(self, examples: Examples, batch_spec: BatchSpec,
                                 async_: bool = False) -> ReplayBuffer:
        """Check that the agent records what the replay needs and chunks align."""
        rsi, seq_T = self.store_rnn_state_interval, self.batch_T + self.warmup_T
        u = max(1, rsi)
        replay_T = u * math.ceil(math.ceil(self.replay_size / batch_spec.B) / u)
        # A sequence, its n-step targets, the oldest step (never sampled) and up to
        # u - 1 steps to reach an aligned start must fit.
        needed_T = seq_T + self.n_step_return + u
        if replay_T < needed_T:
            raise ValueError(
                f"batch_T + warmup_T = {self.batch_T} + {self.warmup_T} is longer than the replay "
                f"holds: replay_size={self.replay_size} over B={batch_spec.B} envs keeps "
                f"{replay_T} steps per env, and sequences with n_step_return="
                f"{self.n_step_return} and store_rnn_state_interval={rsi} need {needed_T} "
                f"(replay_size >= {needed_T * batch_spec.B}).")
        if self.prioritized_replay and rsi > 1 and batch_spec.T % rsi:
            raise ValueError(f"With prioritized replay the sampler's batch_T={batch_spec.T} "
                             f"must be a multiple of store_rnn_state_interval={rsi}.")
        agent_info_fields = getattr(examples["agent_info"], "_fields", ())
        if rsi > 0 and "prev_rnn_state" not in agent_info_fields:
            raise TypeError("store_rnn_state_interval > 0 needs an agent whose agent_info has "
                            "prev_rnn_state (e.g. R2d1Agent).")
        if self.input_priorities and "q" not in agent_info_fields:
            raise TypeError("input_priorities=True needs an agent whose agent_info records q "
                            "(e.g. R2d1Agent); or set input_priorities=False.")
        return super().initialize_replay_buffer(examples, batch_spec, async_=async_)

    def examples_to_buffer(self, examples: Examples) -> SamplesToBuffer:
        example = super().examples_to_buffer(examples)
        if self.store_rnn_state_interval > 0:
            Cls = SamplesToBufferTlRnn if self._timelimit else SamplesToBufferRnn
            example = Cls(*example, prev_rnn_state=examples["agent_info"].prev_rnn_state)
        return example

    def samples_to_buffer(self, samples: Samples
                          ) -> SamplesToBuffer | PrioritiesSamplesToBuffer:
        """Sampler batch -> replay layout (+ RNN states, + input priorities)."""
        to_buffer = super().samples_to_buffer(samples)
        if self.store_rnn_state_interval > 0:
            Cls = SamplesToBufferTlRnn if self._timelimit else SamplesToBufferRnn
            to_buffer = Cls(*to_buffer, prev_rnn_state=samples.agent.agent_info.prev_rnn_state)
        if self.prioritized_replay and self.input_priorities:
            to_buffer = PrioritiesSamplesToBuffer(
                priorities=self.compute_input_priorities(samples), samples=to_buffer)
        return to_buffer

    def compute_input_priorities(self, samples: Samples) -> np.ndarray:
        """One priority per env [B] for a new sampler batch [T, B].

        Uses the Q-values the agent recorded while acting: n-step TD errors of
        the steps whose n-step return lies inside the batch, reduced over time
        like the training priorities. Approximate (online instead of target
        network, no burn-in), but cheap and better than a constant.
        """
        samples = torchify_buffer(samples)
        n, reward, done = self.n_step_return, samples.env.reward, samples.env.done
        if reward.shape[0] <= n:  # No step has its whole n-step return here.
            return np.full(reward.shape[1], self.default_priority, dtype=np.float64)
        q = samples.agent.agent_info.q.float()
        q_at_a = select_at_indexes(samples.agent.action, q)[:-n]
        q_max = torch.max(q, dim=-1).values[n:]  # Bootstrap Q of step t + n.
        return_n, done_n = discount_return_n_step(reward, done, n, self.discount)
        return_n, done_n = return_n[:-1], done_n[:-1].float()  # Steps 0 .. T-n-1.
        y = self.value_scale(return_n + (1 - done_n) * self.discount ** n
                             * self.inv_value_scale(q_max))
        delta = (y - q_at_a).abs()
        if self.delta_clip is not None:
            delta = delta.clamp(0, self.delta_clip)
        valid = valid_from_done(done[:-n])
        return self.sequence_priorities(delta, valid).numpy().astype(np.float64)

    # --------------------------------------------------------------- training
    def update(self, samples: SequenceSamplesFromReplay) -> tuple[dict, torch.Tensor | None]:
        """One step on a batch of sequences; returns the logged values and priorities."""
        loss, td_abs_errors, priorities = self.compiled("loss")(samples)
        grad_norm, = self.gradient_step(loss, (self.optimizer, self._params))
        stats = dict(loss=loss.detach(), gradNorm=grad_norm, tdAbsErr=td_abs_errors[::8],
                     priority=priorities)
        return stats, priorities if self.prioritized_replay else None

    def loss(self, samples: SequenceSamplesFromReplay
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequence TD loss.

        Args:
            samples: sequence ``SamplesFromReplay``: ``all_observation``,
                ``all_action``, ``all_reward`` [warmup_T + batch_T + n, batch_B, ...]
                (actions and rewards one step behind, i.e. the previous ones),
                ``return_``, ``done``, ``done_n`` [warmup_T + batch_T, batch_B],
                ``init_rnn_state`` [batch_B, N, H] (or None), ``is_weights`` [batch_B].

        Returns:
            ``(loss, td_abs_errors [batch_T, batch_B] (zero where invalid),
            priorities [batch_B])``.
        """
        wT, bT, n = self.warmup_T, self.batch_T, self.n_step_return
        all_observation, all_action, all_reward = samples.all_observation, \
            samples.all_action, samples.all_reward

        def inputs(time_slice: slice) -> AgentInputs:
            return AgentInputs(observation=all_observation[time_slice],
                               prev_action=all_action[time_slice],
                               prev_reward=all_reward[time_slice])

        init_rnn_state = samples.init_rnn_state
        if init_rnn_state is not None:  # Stored batch-first; the LSTM wants [N, B, H].
            init_rnn_state = buffer_method(buffer_method(init_rnn_state, "transpose", 0, 1),
                                           "contiguous")
            init_rnn_state = buffer_to(init_rnn_state, device=self.agent.device)
        target_rnn_state = init_rnn_state
        if wT > 0:
            with torch.no_grad():
                _, target_rnn_state = self.agent.target(*inputs(slice(0, wT)), init_rnn_state)
                _, init_rnn_state = self.agent(*inputs(slice(0, wT)), init_rnn_state)
            # After an episode end inside the burn-in, the state belongs to the
            # old episode: start the training steps from zeros instead.
            new_episode = samples.done[:wT].any(dim=0).to(self.agent.device)
            if new_episode.any():
                keep = (~new_episode).float().view(1, -1, 1)
                init_rnn_state = buffer_func(init_rnn_state, torch.mul, keep)
                target_rnn_state = buffer_func(target_rnn_state, torch.mul, keep)

        action = all_action[wT + 1:wT + 1 + bT]  # all_action[k] is the action of step k - 1.
        return_ = samples.return_[wT:wT + bT]
        done_n = samples.done_n[wT:wT + bT].float()
        qs, _ = self.agent(*inputs(slice(wT, wT + bT)), init_rnn_state)  # [bT, B, A]
        q = select_at_indexes(action, qs)
        with torch.no_grad():
            target_inputs = inputs(slice(wT, None))  # bT + n steps from the same start.
            target_qs, _ = self.agent.target(*target_inputs, target_rnn_state)
            if self.double_dqn:
                next_qs, _ = self.agent(*target_inputs, init_rnn_state)
                next_a = torch.argmax(next_qs, dim=-1)
                target_q = select_at_indexes(next_a, target_qs)
            else:
                target_q = torch.max(target_qs, dim=-1).values
            target_q = target_q[n:]  # Step k bootstraps from step k + n.
            y = self.value_scale(return_ + (1 - done_n) * self.discount ** n
                                 * self.inv_value_scale(target_q))
        losses = self.elementwise_loss(q, y)
        if self.prioritized_replay:
            losses = losses * samples.is_weights.unsqueeze(0)
        # Steps after an episode end continue with the next episode under a
        # state that never saw it: leave them out.
        valid = valid_from_done(samples.done[wT:wT + bT])
        if self._timelimit:  # And those whose n-step target a time limit cut.
            valid = valid * (1 - samples.timeout_n[wT:wT + bT].float())
        loss = valid_mean(losses, valid)
        td_abs_errors = (y - q.detach()).abs()
        if self.delta_clip is not None:
            td_abs_errors = td_abs_errors.clamp(0, self.delta_clip)
        priorities = self.sequence_priorities(td_abs_errors, valid)
        return loss, td_abs_errors * valid, priorities

    def sequence_priorities(self, td_abs_errors: torch.Tensor,
                            valid: torch.Tensor) -> torch.Tensor:
        """``pri_eta * max + (1 - pri_eta) * mean`` of valid |TD| over time: [T, B] -> [B]."""
        max_d = torch.max(td_abs_errors * valid, dim=0).values
        mean_d = valid_mean(td_abs_errors, valid, dim=0)
        return self.pri_eta * max_d + (1 - self.pri_eta) * mean_d

    def value_scale(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`value_rescale` with ``value_scale_eps``."""
        return value_rescale(x, self.value_scale_eps)

    def inv_value_scale(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`inv_value_rescale` with ``value_scale_eps``."""
        return inv_value_rescale(x, self.value_scale_eps)
