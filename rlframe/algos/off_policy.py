"""The replay loop shared by every off-policy algorithm (DQN family, DDPG, TD3, SAC).

Each iteration :meth:`OffPolicyAlgorithm.optimize_agent` appends the sampler's
``[T, B]`` batch to the replay and, once ``min_steps_learn`` env steps were
collected and the replay can be sampled, makes gradient updates on
minibatches drawn from it. An algorithm subclass supplies only its update on
one minibatch (:meth:`OffPolicyAlgorithm.update`); the loop around it draws
the batch, reports new priorities, counts updates, moves the target networks
and gathers the logged statistics.

``replay_ratio`` means the same for every algorithm: the transitions trained
on per transition collected, i.e. ``replay_ratio * sampler_batch / batch_size``
updates per iteration. A fractional number carries over between iterations
(0.25 makes one update every fourth iteration), so the long-run ratio is exact.

Time limits (``bootstrap_timelimit``): an episode cut by a time limit ends
with ``done`` and ``env_info.timeout`` set, and the observation after its last
step was never stored (the env was reset). Training toward ``return_`` alone
there would treat the cut as the end of the world, so these samples (whose
n-step window hit a time limit before any termination: ``timeout_n``) are
left out of the losses; every other step of a truncated episode bootstraps
as usual.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import torch

from rlframe.algos.base import RlAlgorithm, check_compile, read_stats
from rlframe.replays.layouts import SequenceLayout, TransitionLayout
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling, UniformSampling
from rlframe.replays.targets import NStepTargets
from rlframe.utils.buffer import buffer_to
from rlframe.utils.checks import as_int, check_bool, check_number, positive_int
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from typing import NamedTuple, TypeAlias

    import numpy.typing as npt

    from rlframe.agents.base import BaseAgent
    from rlframe.replays.layouts import SamplesFromReplay, SequenceSamplesFromReplay
    from rlframe.samplers.collections import BatchSpec, Examples, Samples
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    SamplesToBuffer: TypeAlias = NamedArrayTuple
    SamplesToBufferTl: TypeAlias = NamedArrayTuple
else:
    SamplesToBuffer = namedarraytuple("SamplesToBuffer",
                                      ["observation", "action", "reward", "done"])
    SamplesToBufferTl = namedarraytuple("SamplesToBufferTl",
                                        ["observation", "action", "reward", "done", "timeout"])


def is_frame_stack(observation: npt.ArrayLike) -> bool:
    """Whether an example observation looks like stacked uint8 frames [C, H, W]."""
    observation = np.asarray(observation)
    return observation.dtype == np.uint8 and observation.ndim == 3


class OffPolicyAlgorithm(RlAlgorithm):
    """Replay buffer, learning schedule and update loop of off-policy algorithms.

    Subclasses define ``OptInfoCls`` (a namedtuple of the logged statistics),
    :meth:`optim_initialize` and :meth:`update`, and may override
    :meth:`replay_layout`, :meth:`examples_to_buffer`, :meth:`samples_to_buffer`
    and :meth:`agent_setup`.

    Contract, beyond :class:`RlAlgorithm`'s: :meth:`initialize_replay_buffer` builds
    ``replay_buffer`` from the sampler's examples; :meth:`optimize_agent` appends
    :meth:`samples_to_buffer` of each batch to it, then trains on minibatches of it.
    With an asynchronous runner (:class:`~rlframe.algos.base.AsyncAlgorithm`),
    :meth:`async_initialize` builds a shared replay that memory copiers fill, and
    :meth:`optim_initialize` runs in the optimizer process.

    Args:
        discount: reward discount (gamma), also used inside the n-step return.
        batch_size: transitions per update.
        min_steps_learn: env steps collected before the first update.
        replay_size: replay capacity in transitions.
        replay_ratio: transitions trained on per transition collected.
        target_update_tau: 1 copies the model into the target network; smaller
            values blend it in (Polyak averaging).
        target_update_interval: updates between target updates.
        n_step_return: rewards summed before bootstrapping.
        clip_grad_norm: max global gradient norm of each network.
        updates_per_sync: updates per call in asynchronous runners.
        bootstrap_timelimit: leave samples cut by a time limit out of the losses
            (needs ``env_info.timeout``; without it, cuts count as terminations).
        ReplayBufferCls: replay class instead of the default composed replay,
            built with rlpyt's keyword arguments (see :meth:`replay_kwargs`).
        prioritized_replay: sample in proportion to priority (Schaul et al., 2016).
        pri_alpha: priority exponent.
        pri_beta_init, pri_beta_final: importance-sampling exponent, annealed
            linearly from the start of learning ...
        pri_beta_steps: ... to this many env steps.
        default_priority: priority of new samples.
        compile: run the losses (with the models) through ``torch.compile``, built
            at the first update; a RuntimeError names this argument if torch
            cannot compile here (see :meth:`RlAlgorithm.compiled`).
        checkpoint_replay: with every snapshot, also write the replay buffer's contents
            to ``replay_buffer.pkl`` beside it, so that a resumed run (see
            ``logger_context(resume=True)``) continues with the same replay. Off by
            default: the file is as large as the replay (an Atari replay of 1M steps
            takes about 8 GB) and is rewritten at every snapshot. Without it, a resumed
            run refills an empty replay.
    """

    OptInfoCls: type
    replay_buffer: ReplayBuffer  # Built by initialize() (or async_initialize()).
    sequence_replay: bool = False  # Items are sequences (replay_size need not hold a batch).

    def __init__(self, discount: float, batch_size: int, min_steps_learn: int | float,
                 replay_size: int | float, replay_ratio: float, target_update_tau: float,
                 target_update_interval: int, n_step_return: int, clip_grad_norm: float,
                 updates_per_sync: int, bootstrap_timelimit: bool,
                 ReplayBufferCls: type | None, prioritized_replay: bool = False,
                 pri_alpha: float = 0.6, pri_beta_init: float = 0.4, pri_beta_final: float = 1.,
                 pri_beta_steps: int | float = int(50e6), default_priority: float = 1.,
                 compile: bool = False, checkpoint_replay: bool = False):
        self.discount = check_number("discount", discount, high=1., low_open=False)
        self._batch_size = positive_int("batch_size", batch_size)
        self.min_steps_learn = as_int("min_steps_learn", min_steps_learn, minimum=0)
        self.replay_size = positive_int("replay_size", replay_size)
        if not self.sequence_replay and self.replay_size < self._batch_size:
            raise ValueError(f"replay_size={self.replay_size} is smaller than one batch "
                             f"(batch_size={self._batch_size}).")
        self.replay_ratio = check_number("replay_ratio", replay_ratio)
        self.target_update_tau = check_number("target_update_tau", target_update_tau, high=1.)
        self.target_update_interval = positive_int("target_update_interval",
                                                   target_update_interval)
        self.n_step_return = positive_int("n_step_return", n_step_return)
        self.clip_grad_norm = check_number("clip_grad_norm", clip_grad_norm)
        self.updates_per_sync = positive_int("updates_per_sync", updates_per_sync)
        self.bootstrap_timelimit = check_bool("bootstrap_timelimit", bootstrap_timelimit)
        if ReplayBufferCls is not None and not isinstance(ReplayBufferCls, type):
            raise TypeError(f"ReplayBufferCls must be a replay buffer class or None, got "
                            f"{ReplayBufferCls!r}.")
        self.ReplayBufferCls = ReplayBufferCls
        self.prioritized_replay = bool(prioritized_replay)
        self.pri_alpha = check_number("pri_alpha", pri_alpha, low_open=False)
        self.pri_beta_init = check_number("pri_beta_init", pri_beta_init, high=1.,
                                          low_open=False)
        self.pri_beta_final = check_number("pri_beta_final", pri_beta_final, high=1.,
                                           low_open=False)
        self.pri_beta_steps = positive_int("pri_beta_steps", pri_beta_steps)
        self.default_priority = check_number("default_priority", default_priority)
        self.compile = check_compile(compile)
        self.checkpoint_replay = bool(checkpoint_replay)
        self.update_counter = 0
        self.min_itr_learn = 0  # Set from min_steps_learn in initialize().
        self.updates_per_optimize = 0.  # Set from the sampler batch in initialize().
        self._update_credit = Fraction(0)
        self._async = False
        self._timelimit = False  # Whether the replay keeps timeouts: decided with the replay.

    # ------------------------------------------------------------------ setup
    def initialize(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
                   mid_batch_reset: bool = False, examples: Examples | None = None,
                   world_size: int = 1, rank: int = 0) -> None:
        """Schedule from the sampler batch size; build the replay buffer and optimizers."""
        self._setup(agent, n_itr, batch_spec, mid_batch_reset, examples)
        logger.log(f"From sampler batch size {batch_spec.size}, training batch size "
                   f"{self.batch_size}, and replay ratio {self.replay_ratio}, computed "
                   f"{float(self.updates_per_optimize):g} updates per iteration.")
        self.initialize_replay_buffer(examples, batch_spec)
        self.optim_initialize(rank)

    def async_initialize(self, agent: BaseAgent, sampler_n_itr: int, batch_spec: BatchSpec,
                         mid_batch_reset: bool, examples: Examples,
                         world_size: int = 1) -> ReplayBuffer:
        """Asynchronous runners: build the shared replay (optimizers come later, in the
        optimizer process); every call then makes ``updates_per_sync`` updates."""
        self._setup(agent, sampler_n_itr, batch_spec, mid_batch_reset, examples)
        self._async = True
        return self.initialize_replay_buffer(examples, batch_spec, async_=True)

    def _setup(self, agent: BaseAgent, n_itr: int, batch_spec: BatchSpec,
               mid_batch_reset: bool, examples: Examples | None) -> None:
        if not mid_batch_reset:
            # A waiting env records zeros with done=True until the batch ends: each such
            # step reaches the replay as a zero-reward terminal transition from a blank
            # observation. Real transitions are unaffected (their returns stop at the
            # done before), so the cost is the share of updates those steps take.
            logger.log(f"WARNING: {type(self).__name__} with a collector that holds finished "
                       "envs until the batch ends (mid_batch_reset=False): the held steps, at "
                       f"most batch_T - 1 = {batch_spec.T - 1} per episode, are stored as "
                       "zero-reward terminal transitions from an all-zero observation and take "
                       "a share of the updates. A reset collector (mid_batch_reset=True, e.g. "
                       "CpuResetCollector, GpuResetCollector) stores none.")
        if examples is None:
            raise ValueError(f"{type(self).__name__}.initialize needs the sampler's examples "
                             "(one step of every field) to build its replay buffer.")
        self.agent = agent
        self.n_itr = n_itr
        self.mid_batch_reset = mid_batch_reset
        self.sampler_bs = sampler_bs = batch_spec.size
        self.min_itr_learn = int(self.min_steps_learn // sampler_bs)
        # Exact (decimal) ratio, so that e.g. 0.1 adds up to whole updates exactly.
        ratio = Fraction(repr(float(self.replay_ratio)))
        self._updates_per_itr = ratio * sampler_bs / self.batch_size
        self.updates_per_optimize = float(self._updates_per_itr)
        self.pri_beta_itr = max(1, self.pri_beta_steps // sampler_bs)
        self.agent_setup(agent, sampler_bs)

    def agent_setup(self, agent: BaseAgent, sampler_bs: int) -> None:
        """Give the agent its schedules (e.g. when learning starts); called in initialize."""

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizers over the agent's parameters."""
        raise NotImplementedError

    # ----------------------------------------------------------------- replay
    def replay_layout(self) -> TransitionLayout | SequenceLayout:
        """What one replayed item is (single steps here; sequences for recurrent agents)."""
        return TransitionLayout()

    def initialize_replay_buffer(self, examples: Examples, batch_spec: BatchSpec,
                                 async_: bool = False) -> ReplayBuffer:
        """Build ``self.replay_buffer`` from one example step of the sampler.

        The default replay stores frame stacks one frame per step, keeps
        time-limit flags when bootstrapping through time limits, and samples by
        priority if asked, in shared memory for asynchronous runners.
        """
        has_timeout = hasattr(examples["env_info"], "timeout")
        if self.bootstrap_timelimit and not has_timeout:
            logger.log(f"WARNING: {type(self).__name__}(bootstrap_timelimit=True) found no "
                       f"env_info.timeout (fields: {getattr(examples['env_info'], '_fields', None)})"
                       ": episodes cut by a time limit are treated as ended. Wrap the env with "
                       "GymEnvWrapper, or set bootstrap_timelimit=False to silence this.")
        self._timelimit = self.bootstrap_timelimit and has_timeout
        replay_T = math.ceil(self.replay_size / batch_spec.B)
        if replay_T <= self.n_step_return + 1:
            raise ValueError(
                f"replay_size={self.replay_size} over B={batch_spec.B} envs holds only {replay_T} "
                f"steps per env; n_step_return={self.n_step_return} needs more than "
                f"{self.n_step_return + 1} (raise replay_size).")
        example = self.examples_to_buffer(examples)
        if self.ReplayBufferCls is not None:
            logger.log(f"WARNING: ignoring the default replay buffer class; using "
                       f"{self.ReplayBufferCls.__name__} as given.")
            self.replay_buffer = self.ReplayBufferCls(**self.replay_kwargs(example, batch_spec))
            return self.replay_buffer
        sampling = UniformSampling()
        if self.prioritized_replay:
            sampling = PrioritizedSampling(alpha=self.pri_alpha, beta=self.pri_beta_init,
                                           default_priority=self.default_priority,
                                           **self.input_priority_kwargs())
        self.replay_buffer = ReplayBuffer(
            example, self.replay_size, batch_spec.B,
            targets=NStepTargets(self.discount, self.n_step_return, time_limit=self._timelimit),
            sampling=sampling, layout=self.replay_layout(),
            frames=is_frame_stack(examples["observation"]), shared=async_)
        return self.replay_buffer

    def input_priority_kwargs(self) -> dict:
        """Input-priority arguments of prioritized sampling (none by default)."""
        return {}

    def replay_kwargs(self, example: SamplesToBuffer, batch_spec: BatchSpec) -> dict:
        """rlpyt's constructor arguments for a given ``ReplayBufferCls``."""
        kwargs = dict(example=example, size=self.replay_size, B=batch_spec.B,
                      discount=self.discount, n_step_return=self.n_step_return)
        if self.prioritized_replay:
            kwargs.update(alpha=self.pri_alpha, beta=self.pri_beta_init,
                          default_priority=self.default_priority, **self.input_priority_kwargs())
        return kwargs

    def examples_to_buffer(self, examples: Examples) -> SamplesToBuffer:
        """One example step (the sampler's ``examples`` dict) in the replay's layout."""
        fields = dict(observation=examples["observation"], action=examples["action"],
                      reward=examples["reward"], done=examples["done"])
        if self._timelimit:
            return SamplesToBufferTl(**fields, timeout=examples["env_info"].timeout)
        return SamplesToBuffer(**fields)

    def samples_to_buffer(self, samples: Samples) -> SamplesToBuffer:
        """The sampler's ``[T, B]`` batch in the replay's layout (views, no copies)."""
        fields = dict(observation=samples.env.observation, action=samples.agent.action,
                      reward=samples.env.reward, done=samples.env.done)
        if self._timelimit:
            return SamplesToBufferTl(**fields, timeout=samples.env.env_info.timeout)
        return SamplesToBuffer(**fields)

    @property
    def replay_batch_B(self) -> int:
        """Items drawn from the replay per update (transitions, or sequences)."""
        return self.batch_size

    # --------------------------------------------------------------- training
    def optimize_agent(self, itr: int, samples: Samples | None = None,
                       sampler_itr: int | None = None) -> NamedTuple:
        """Store ``samples`` [T, B]; then, from ``min_itr_learn`` on, train on replay.

        Returns:
            ``OptInfoCls`` of lists, one value (or a few) per update.
        """
        itr = itr if sampler_itr is None else sampler_itr  # Async: the sampler's progress.
        if samples is not None:
            self.replay_buffer.append_samples(self.samples_to_buffer(samples))
        stats: dict[str, list] = {field: [] for field in self.OptInfoCls._fields}
        if itr < self.min_itr_learn or not self.replay_buffer.can_sample():
            return self.OptInfoCls(**stats)
        to_device = self.agent.device.type != "cpu"
        replay, batch_B = self.replay_buffer, self.replay_batch_B
        for _ in range(self.updates_this_iteration()):
            batch = replay.sample_batch(batch_B)
            if to_device:
                batch = buffer_to(batch, device=self.agent.device)
            info, priorities = self.update(batch)
            if not self.check_update(batch):  # Skipped by the non-finite guard.
                continue
            if priorities is not None:
                replay.update_batch_priorities(priorities)
            self.update_counter += 1
            if self.update_counter % self.target_update_interval == 0:
                self.agent.update_target(self.target_update_tau)
            for field, value in info.items():
                stats[field].append(value)
        self.update_itr_hyperparams(itr)
        return self.OptInfoCls(**read_stats(stats))  # One read from the device per iteration.

    def state_dict(self) -> dict:
        """Counters and the fraction of an update carried to the next iteration."""
        credit = self._update_credit
        return dict(super().state_dict(), update_credit=[credit.numerator, credit.denominator])

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        numerator, denominator = state_dict["update_credit"]
        self._update_credit = Fraction(int(numerator), int(denominator))

    def updates_this_iteration(self) -> int:
        """Whole updates owed now; the fraction left carries over to the next iteration."""
        if self._async:
            return self.updates_per_sync
        self._update_credit += self._updates_per_itr
        n = math.floor(self._update_credit)
        self._update_credit -= n
        return n

    def update(self, samples: SamplesFromReplay | SequenceSamplesFromReplay
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """One gradient update on a replay minibatch.

        Returns:
            ``(stats, priorities)``: logged values keyed by ``OptInfoCls`` field
            (tensors or numbers, any shape; each is flattened into its list),
            and new priorities of the batch's items (None unless prioritized).
        """
        raise NotImplementedError

    def valid_mask(self, samples: SamplesFromReplay) -> torch.Tensor | None:
        """[batch] weights of the samples in the losses: 0 where a time limit cut the
        n-step return (with ``bootstrap_timelimit``), else 1; None when all count."""
        if not self._timelimit or not samples.timeout_n.any():
            return None  # Every sample of this batch counts.
        return 1 - samples.timeout_n.float()

    def bootstrap_weight(self, samples: SamplesFromReplay) -> torch.Tensor:
        """``discount^n * (1 - done_n)``: the weight of the target value."""
        return (self.discount ** self.n_step_return) * (1 - samples.done_n.float())

    def update_itr_hyperparams(self, itr: int) -> None:
        """Anneal the prioritized-replay beta from learning start to ``pri_beta_steps``."""
        if not self.prioritized_replay or itr > self.pri_beta_itr:
            return
        span = self.pri_beta_itr - self.min_itr_learn
        prog = 1. if span <= 0 else min(1., max(0., (itr - self.min_itr_learn) / span))
        beta = prog * self.pri_beta_final + (1 - prog) * self.pri_beta_init
        self.replay_buffer.set_beta(beta)
