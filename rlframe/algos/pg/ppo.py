"""Proximal Policy Optimization with a clipped likelihood-ratio objective."""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

import torch

from rlframe.agents.base import AgentInputs
from rlframe.algos.base import check_compile, check_optimizer, read_stats
from rlframe.algos.pg.base import LossInputs, OptInfo, PolicyGradientAlgo
from rlframe.utils.buffer import buffer_method
from rlframe.utils.checks import check_number, positive_int
from rlframe.utils.tensor import minibatch_indexes, valid_mean, valid_standardize

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple


# rlpyt's four statistics, and two of the ratio: the share of each minibatch's steps the
# clip bounded, and an estimate of KL(old || new), the mean of (r - 1) - log r.
PpoOptInfo = namedtuple("PpoOptInfo", [*OptInfo._fields, "clipFraction", "approxKl"])


class PPO(PolicyGradientAlgo):
    """PPO: several epochs of minibatch updates per batch of on-policy samples.

    Args:
        discount: reward discount (gamma).
        learning_rate: initial optimizer step size.
        value_loss_coeff: weight of the value regression loss.
        entropy_loss_coeff: weight of the entropy bonus.
        OptimCls: optimizer class.
        optim_kwargs: extra optimizer arguments.
        clip_grad_norm: max global gradient norm.
        initial_optim_state_dict: optimizer state to resume from.
        gae_lambda: GAE lambda (1: discounted returns).
        minibatches: minibatches per epoch (recurrent agents split over B only).
        epochs: passes over each batch.
        ratio_clip: likelihood-ratio clip range epsilon.
        linear_lr_schedule: anneal learning rate and ratio_clip linearly to 0
            over the run's iterations.
        normalize_advantage: standardize advantages over the whole batch (True, as
            rlpyt does) or over each minibatch as it is used ("minibatch", as
            CleanRL and SB3 do); False keeps them as they are.
        bootstrap_timelimit: bootstrap episodes cut by a time limit (envs that
            report ``env_info.timeout``) instead of treating them as terminal.
        compile: run :meth:`loss` (with the model) through ``torch.compile``, built
            at the first update; a RuntimeError names this argument if torch
            cannot compile here (see :meth:`RlAlgorithm.compiled`).
        normalize_reward: divide rewards by the running standard deviation of each
            env's discounted return and clip them to [-10, 10] before computing returns
            and advantages (:class:`~rlframe.algos.pg.base.RewardScale`; as
            gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize`` do in the env).
        value_clip: clip the value loss as OpenAI Baselines' and CleanRL's PPO do: the
            larger of the squared errors of the new value and of the sampling-time value
            moved toward it by at most ``value_clip`` (not annealed); None: no clipping.
        target_kl: end an iteration's updates at the first minibatch whose approximate
            KL divergence from the sampling policy, measured before its step, exceeds
            ``1.5 * target_kl``, as SB3 does (that minibatch takes no step); None: all
            ``epochs`` always run.
    """

    normalize_advantage_choices = (False, True, "minibatch")
    opt_info_fields = PpoOptInfo._fields

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 1., entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1., initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, minibatches: int = 4, epochs: int = 4,
                 ratio_clip: float = 0.1, linear_lr_schedule: bool = True,
                 normalize_advantage: bool | str = False, bootstrap_timelimit: bool = True,
                 compile: bool = False, normalize_reward: bool = False,
                 value_clip: float | None = None, target_kl: float | None = None):
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        self.optim_kwargs = check_optimizer(OptimCls, optim_kwargs)
        self.clip_grad_norm = clip_grad_norm
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.minibatches = positive_int("minibatches", minibatches)
        self.epochs = positive_int("epochs", epochs)
        self.ratio_clip = check_number("ratio_clip", ratio_clip)
        self.linear_lr_schedule = linear_lr_schedule
        self.normalize_advantage = normalize_advantage
        self.bootstrap_timelimit = bootstrap_timelimit
        self.compile = check_compile(compile)
        self.normalize_reward = normalize_reward
        self.value_clip = None if value_clip is None else check_number("value_clip", value_clip)
        self.target_kl = None if target_kl is None else check_number("target_kl", target_kl)
        self.update_counter = 0
        self._ratio_clip = self.ratio_clip  # Base value for the linear schedule.
        # 1 -+ ratio_clip, refreshed every iteration. float64: a float32 ratio is clipped
        # at exactly the float32 bounds it would get from Python floats.
        self._ratio_bounds = torch.zeros(2, dtype=torch.float64)
        self._check_common_args()

    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        super().initialize(agent, n_itr, batch_spec, mid_batch_reset=mid_batch_reset,
                           examples=examples, world_size=world_size, rank=rank)
        self.check_batch_spec(self.batch_spec, self.agent.recurrent)
        self._batch_size = self.batch_spec.size // self.minibatches
        if self.linear_lr_schedule:
            n_itr = max(self.n_itr, 1)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer=self.optimizer, lr_lambda=lambda itr: max(n_itr - itr, 0) / n_itr)

    def check_batch_spec(self, batch_spec: BatchSpec, recurrent: bool = False) -> None:
        """Every minibatch needs at least one sample (recurrent agents: one env)."""
        T, B = batch_spec.T, batch_spec.B
        if recurrent and self.minibatches > B:
            raise ValueError(
                f"PPO minibatches={self.minibatches} exceeds batch_B={B}: a recurrent agent "
                "trains on whole [T] sequences, so minibatches split the envs only. Use "
                f"minibatches <= {B}, or more envs (batch_B).")
        if not recurrent and self.minibatches > T * B:
            raise ValueError(
                f"PPO minibatches={self.minibatches} exceeds batch_T * batch_B = {T} * {B} = "
                f"{T * B} samples per batch: every minibatch needs at least one sample. Use "
                f"minibatches <= {T * B}, or a larger batch_T or batch_B.")

    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> PpoOptInfo:
        """``epochs`` passes of shuffled minibatch updates over samples [T, B] (fewer
        where ``target_kl`` stops them)."""
        recurrent = self.agent.recurrent
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        return_, advantage, valid = self.process_returns(samples)
        loss_inputs = LossInputs(agent_inputs=agent_inputs, action=samples.agent.action,
                                 return_=return_, advantage=advantage, valid=valid,
                                 old_dist_info=samples.agent.agent_info.dist_info)
        init_rnn_state = samples.agent.agent_info.prev_rnn_state[0] if recurrent else None
        old_value = samples.agent.agent_info.value  # [T, B]: only value_clip reads it.
        if not recurrent:  # Minibatches of single steps: [T, B] -> [T * B] (views).
            loss_inputs = buffer_method(loss_inputs, "flatten", 0, 1)
            old_value = old_value.flatten(0, 1)
        # Recurrent agents train on whole [T] sequences, so minibatches split B only.
        n_split = samples.env.reward.shape[1] if recurrent else samples.env.reward.numel()
        self._ratio_bounds[0].fill_(1. - self.ratio_clip)
        self._ratio_bounds[1].fill_(1. + self.ratio_clip)
        loss_fn = self.compiled("loss")
        stats: dict[str, list] = {field: [] for field in PpoOptInfo._fields}
        # Each epoch's shuffle is drawn as the epoch begins.
        minibatches = (idxs for _epoch in range(self.epochs)
                       for idxs in minibatch_indexes(n_split, self.minibatches))
        for idxs in minibatches:
            minibatch = loss_inputs[:, idxs] if recurrent else loss_inputs[idxs]
            if self.normalize_advantage == "minibatch":
                minibatch = minibatch._replace(
                    advantage=valid_standardize(minibatch.advantage, minibatch.valid))
            rnn_state = init_rnn_state[idxs] if recurrent else None
            # Sampling-time values only with value_clip: a subclass's loss of rlpyt's
            # signature (no old_value) runs unchanged without it.
            clip_to = {} if self.value_clip is None else dict(
                old_value=old_value[:, idxs] if recurrent else old_value[idxs])
            # A loss returning rlpyt's three values leaves the ratio's statistics unlogged.
            loss, entropy, perplexity, *ratio_stats = loss_fn(*minibatch, rnn_state, **clip_to)
            if self.target_kl is not None and self.kl_exceeded(ratio_stats):
                break
            grad_norm, = self.gradient_step(loss, (self.optimizer, self._params))
            if not self.check_update(samples):  # Skipped by the non-finite guard.
                continue
            for field, value in zip(PpoOptInfo._fields,
                                    (loss, grad_norm, entropy, perplexity, *ratio_stats)):
                stats[field].append(value.detach())
            self.update_counter += 1
        # The observation statistics take in this batch after the epochs: the batch was
        # sampled (and its old_dist_info computed) with the statistics before it, so the
        # ratio starts at 1 and the clip bounds the policy change alone.
        self.agent.update_obs_rms(agent_inputs.observation)
        if self.linear_lr_schedule:
            # Iteration itr + 1 runs at (n_itr - itr - 1) / n_itr of both the learning rate
            # and the clip range (rlpyt's clip lagged the learning rate by an iteration).
            self.lr_scheduler.step()
            self.ratio_clip = self._ratio_clip * max(self.n_itr - itr - 1, 0) / max(self.n_itr, 1)
        return PpoOptInfo(**read_stats(stats))  # One read from the device per iteration.

    def kl_exceeded(self, ratio_stats: list[torch.Tensor]) -> bool:
        """Whether a minibatch's approximate KL (``loss``'s last value) passes
        ``1.5 * target_kl``: a read from the device at every update. Over several ranks
        (SyncRl) their mean decides, so that all stop at the same minibatch: DDP's
        gradient reduction waits for every rank."""
        if len(ratio_stats) != 2:
            raise TypeError(f"PPO target_kl={self.target_kl} reads the approximate KL that "
                            f"{type(self).__name__}.loss returns as its fifth value, but it "
                            f"returned {3 + len(ratio_stats)} values; return PPO.loss's "
                            "(loss, entropy, perplexity, clip_fraction, approx_kl), or give "
                            "target_kl=None")
        kl = ratio_stats[1].detach()
        if self.world_size > 1:
            kl = kl.clone()
            torch.distributed.all_reduce(kl)  # A sum: gloo has no average.
            kl = kl / self.world_size
        return float(kl) > 1.5 * self.target_kl

    def state_dict(self) -> dict:
        """Counters, the annealed ``ratio_clip`` and the learning-rate schedule's step."""
        state = dict(super().state_dict(), ratio_clip=float(self.ratio_clip))
        if self.linear_lr_schedule:
            state["lr_last_epoch"] = int(self.lr_scheduler.last_epoch)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.ratio_clip = float(state_dict["ratio_clip"])
        if self.linear_lr_schedule and "lr_last_epoch" in state_dict:
            # The learning rate itself comes back with the optimizer's state.
            self.lr_scheduler.last_epoch = int(state_dict["lr_last_epoch"])

    def loss(self, agent_inputs: AgentInputs, action: torch.Tensor, return_: torch.Tensor,
             advantage: torch.Tensor, valid: torch.Tensor | None,
             old_dist_info: NamedArrayTuple, init_rnn_state: TensorTree | None = None,
             old_value: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, ...]:
        """Clipped surrogate + value + entropy loss on one minibatch.

        The ratio is clipped to ``1 -+ ratio_clip`` as it was at the start of the
        iteration (held in tensors, so a compiled loss is not rebuilt as it anneals).

        Args:
            agent_inputs: AgentInputs with leading [T, B] (recurrent) or [M] dims.
            action, return_, advantage, valid: matching leading dims.
            old_dist_info: the sampling policy's distribution parameters.
            init_rnn_state: [B, N, H] recurrent state at the sequence starts.
            old_value: the sampling-time values, matching leading dims; given with
                ``value_clip`` only.

        Returns:
            ``(loss, entropy, perplexity, clip_fraction, approx_kl)`` scalars, all but
            the loss detached: the share of valid steps whose ratio the clip bounded, and
            the mean of ``(r - 1) - log r``, an estimate of KL(old || new) that is never
            negative. (rlpyt's loss returned the first three; a subclass's loss may too.)
        """
        dist_info, value = self.forward(agent_inputs, init_rnn_state)
        ratio = self.agent.distribution.likelihood_ratio(action, old_dist_info=old_dist_info,
                                                         new_dist_info=dist_info)
        surr_1 = ratio * advantage
        clipped_ratio = torch.clamp(ratio, self._ratio_bounds[0], self._ratio_bounds[1])
        surr_2 = clipped_ratio * advantage
        pi_loss = -valid_mean(torch.min(surr_1, surr_2), valid)
        loss, entropy, perplexity = self.value_entropy_loss(
            pi_loss, dist_info, value, return_, valid, old_value=old_value,
            value_clip=self.value_clip)
        ratio = ratio.detach()
        clip_fraction = valid_mean((clipped_ratio.detach() != ratio).type(ratio.dtype), valid)
        approx_kl = valid_mean(ratio - 1 - torch.log(ratio), valid)
        return loss, entropy, perplexity, clip_fraction, approx_kl
