"""Atari training throughput on Pong: rlframe, Stable-Baselines3 and a bare-loop ceiling,
with PPO and with DQN, each run as it trains (sampling and updates together).

``benchmarks/vs_sb3_scale.py`` calls, in a fresh process per call::

    run(framework, case, steps, seed) -> dict(steps, seconds, cpu_seconds, warmup_steps, setup)

A run builds everything, trains through a warm-up, then times a window of whole
iterations holding at least ``steps`` agent steps (4 emulator frames each) and stops
right after it: ``seconds`` is the window's wall time, ``cpu_seconds`` the CPU time of
the calling process over it (``time.process_time()``: worker processes and their
threads are not in it), ``steps`` the agent steps in it, ``warmup_steps`` those before
it, ``setup`` one line naming the sampler or vec env, workers, network and frames.
Every process runs ``torch.set_num_threads(1)`` unless its set-up says otherwise.

The window opens and closes on iteration boundaries: rlframe's clock is a runner
callback (``on_iteration_end`` of the last warm-up iteration and of the last
iteration), SB3's a ``BaseCallback`` that starts at the rollout that begins at the
warm-up's step count (its updates on the warm-up are done by then) and stops at
``on_training_end`` (``learn()``'s total is warm-up + window, so it ends there).

**Envs.** Pong, 4 frames skipped per agent step (max-pooled over the last two), 84x84
grayscale frames area-resized from the whole screen, 4 stacked, rewards clipped to
their sign, a lost life ends an episode (Pong has none to lose), up to 30 no-ops and
FIRE at a reset, no sticky actions. SB3: ``make_atari_env("PongNoFrameskip-v4",
n_envs, seed=seed)`` (``AtariWrapper`` in a ``DummyVecEnv``: one process, as rl-zoo
runs it) + ``VecFrameStack(n_stack=4)``. rlframe and the ceiling: ``AtariEnv(game=
"pong", frame_shape=(84, 84), fire_on_reset=True)`` (its defaults: ``frame_skip=4``,
``num_img_obs=4``, ``clip_reward``, ``episodic_lives``, ``max_start_noops=30``, no
sticky actions, ``horizon=27000``). ``rlframe_autotuned``: the same keywords on
EnvPool's Atari (``env_backend="envpool"``).

**Network.** The Nature CNN: convs 32x8x8 stride 4, 64x4x4 stride 2, 64x3x3 stride 1,
no padding, ReLU, a 512-unit ReLU layer, then linear heads; SB3's ``CnnPolicy``
(``NatureCNN``), rlframe's ``AtariFfModel`` / ``AtariDqnModel`` with those sizes given
(``NATURE_CNN``), and a plain-torch ``Sequential`` in the ceiling.

(a) ``atari_ppo``: rl-zoo's Atari PPO. 8 envs x 128 steps (1,024 agent steps per
    iteration), 4 epochs x 4 minibatches of 256, Adam (eps 1e-5), learning rate 2.5e-4
    and clip range 0.1 both linear to 0 over the run (see below), entropy coefficient
    0.01, value coefficient 0.5 (SB3's ``vf_coef``; rlframe's ``value_loss_coeff=1``, as
    its value loss is ``0.5 * (V - R)^2``), gradient norm clip 0.5, gamma 0.99, GAE
    lambda 0.95, advantages normalised, one network with policy and value heads on a
    shared trunk. Warm-up: one iteration; window: ``steps`` rounded up to iterations.

    * ``sb3``: ``PPO("CnnPolicy", ...)`` on the CPU.
    * ``sb3_2threads``: the same with 2 torch threads, torch's own default on a
      2-core machine (SB3 sets none): SB3 as users run it here, the comparison for
      the rlframe set-ups that use both cores.
    * ``rlframe_autotuned_bf16``: ``rlframe_autotuned`` with the convolutions in
      bfloat16 (as ``rlframe_bf16``).
    * ``rlframe_bf16``: ``rlframe`` with the convolutions in bfloat16
      (``AtariFfModel(conv_autocast="bfloat16")``; weights, fully connected layers,
      outputs and losses float32). Lower precision, so not the same arithmetic as the
      others: it shows what the option buys on this CPU.
    * ``rlframe``: ``SerialSampler(batch_T=128, batch_B=8)`` (one process, like
      ``DummyVecEnv``), ``AtariFfAgent``, ``PPO(linear_lr_schedule=True, ...)``,
      ``MinibatchRl`` with ``master_torch_threads=1``, no evaluation.
    * ``rlframe_autotuned``: the set-up ``rlframe autotune ppo pong`` chose on the
      2-core machine this was written on: ``CpuSampler`` with 2 worker processes (4
      envs each) on EnvPool, B=8, 2 torch threads in the training process. Built as
      ``rlframe train --config`` builds it, by ``build_experiment`` with the autotune
      candidate's keys and the settings above in the config's ``kwargs``.
    * ``ceiling``: the same 8 ``AtariEnv`` objects stepped in a bare Python loop; per
      step one no-grad forward pass of the plain-torch network on the batch of 8 (uint8
      frames converted once per batch) and a categorical sample; then GAE and 4 epochs
      x 4 minibatches of the clipped PPO loss with fused Adam and gradient norm
      clipping. It holds the work alone: the limit a framework on these envs and this
      network (in the layout below) could reach here.

(b) ``atari_dqn``: rl-zoo's Atari DQN (whose replay holds 1e5 transitions too):
    learning rate 1e-4, Adam (eps 1e-8), batch 32, one gradient step every 4 agent
    steps, target network copied every 1,000 agent steps, gamma 0.99, Huber loss
    (threshold 1), gradient norm clip 10, epsilon 1 -> 0.01 over 1e6 steps (10% of
    the zoo's 1e7, so still about 0.99 in the window: the window measures a run's
    early phase), one env. Learning starts after 10,000 agent steps (zoo: 100,000);
    warm-up: 11,000 agent steps (learning start + 1,000); window: ``steps`` rounded up
    to whole 4-step iterations.

    * ``sb3``: ``DQN("CnnPolicy", buffer_size=100_000, optimize_memory_usage=False,
      train_freq=4, gradient_steps=1, target_update_interval=1000, ...)``.
    * ``sb3_2threads``: the same with 2 torch threads (as for PPO).
    * ``rlframe_async_bf16``: ``rlframe_async`` with the convolutions in bfloat16
      (``AtariDqnModel(conv_autocast="bfloat16")``, as ``rlframe_bf16`` for PPO).
    * ``rlframe``: ``SerialSampler(batch_T=4, batch_B=1)``, ``AtariDqnAgent``,
      ``DQN(replay_ratio=8)`` (8 * 4 / 32 = one update of 32 per iteration),
      ``target_update_interval=250`` updates (= 1,000 agent steps), ``double_dqn=False``,
      ``n_step_return=1``, ``delta_clip=1``, ``clip_grad_norm=10``, ``eps_steps=1e6``,
      ``MinibatchRl``. Its Atari replay stores each frame once (frame-based) and
      rebuilds the 4-frame stacks when it samples.
    * ``rlframe_async``: the same algorithm and agent through ``AsyncRl``: an
      ``AsyncSerialSampler`` process steps the env and acts in batches of 32 steps while
      the training process updates (8 updates of 32 per batch: the same replay ratio),
      the sampler kept within 64 steps of it (``sampler_lead_steps``); the optimizer
      has 2 torch threads, and both processes may run on both cores. Its window opens
      at the end of the first optimizer iteration that finds 11,000 steps sampled and
      closes at the end of the last; ``updates`` in the result counts the updates in it
      (one per 4 steps, as the others).
    * ``ceiling``: the ``AtariEnv`` stepped directly; a numpy replay of uint8 4-frame
      stacks, one row per step, allocated lazily (the next observation is the next
      row); epsilon-greedy with the plain-torch network (forward pass only when not
      exploring), one update of 32 every 4 steps, target copied every 1,000 steps.

Where the mapping is not exact:

* Frames: SB3's ale-py env renders the RGB screen on each of the 4 frames of a step,
  ``MaxAndSkipEnv`` max-pools the last two RGB screens and ``WarpFrame`` converts to
  gray and resizes with OpenCV; rlframe's ``AtariEnv`` reads ALE's grayscale screen on
  the last two frames only, max-pools those and area-resizes in numpy. From one
  screen both give the same 84x84 frame (checked on Pong); the max of two RGB screens
  and of two gray ones differ where an object moved. EnvPool has its own ALE build and
  OpenCV's ``INTER_AREA`` (within one gray level of ``AtariEnv``). The work per step
  differs: that is part of what is measured. SB3 stacks frames on the last axis and
  ``VecTransposeImage`` copies them to channels-first every step.
* Resets: SB3 plays 1-30 no-ops, then FIRE and UP as two whole (4-frame) steps;
  ``AtariEnv`` one no-op plus 0-30, then FIRE and UP as single frames; EnvPool as in
  ``rlframe/envs/atari/envpool_atari.py``. Time limits: 100,000 agent steps (v4's
  400,000 frames) in SB3, ``horizon=27000`` in rlframe; never reached in a window.
* Memory layout: rlframe's conv stacks keep their weights channels-last
  (``Conv2dModel(channels_last=True)``, its default) and so does the ceiling's network
  (on this CPU a training pass on 32 or 256 frames takes about 0.7x the time of the
  default layout, an acting pass on 1 or 8 frames about 1.25x); SB3 uses torch's
  default layout. rlframe's optimizer and the ceiling's are fused Adam; SB3's is
  torch's default Adam, which steps one parameter tensor at a time on the CPU.
  Initialisation (SB3: orthogonal in PPO) does not change the cost.
* PPO schedules: rlframe's ``linear_lr_schedule`` anneals over the runner's
  iterations, so all three anneal to 0 over the run (warm-up + window), not over the
  zoo's 1e7 steps (the cost of an update does not depend on it). rlframe's iteration k
  trains with ``lr * (1 - k / n)`` (the ceiling too), SB3's with ``lr * (1 - (k + 1) / n)``.
* PPO advantages: rlframe and the ceiling normalise them once over the 1,024-step
  batch (population std + 1e-6), SB3 per minibatch of 256 (sample std + 1e-8).
* PPO time limits: rlframe bootstraps episodes cut by the horizon, SB3 from the
  value of the final observation (an extra forward pass when it happens); neither
  happens in a window.
* ``rlframe_autotuned``: ``build_experiment`` builds a ``MinibatchRl`` (no evaluation:
  the config's sampler section sets ``eval_n_envs=0``); a config cannot hold callbacks,
  so its sampler, agent, algorithm and affinity are handed to a ``MinibatchRl`` with
  the clock. Its config's ``kwargs`` replace the preset's Atari PPO settings key by key
  (``value_loss_coeff=1``, not the preset's 0.5; ``normalize_advantage``, Adam eps
  1e-5), and set ``max_decorrelation_steps=0`` (the preset: 400 random steps before
  training; the other rlframe runs use 0 too). ``cpu_seconds`` counts the training
  process only, not the two workers.
* DQN acting: all three draw the exploration coin first and run the network only when
  the env exploits (rlframe's ``DqnAgent`` records NaN in ``agent_info.q`` for the other
  steps; ``q_when_exploring=True`` runs the network on every step, as rlframe did before).
  With epsilon about 0.99 in the window, about 1% of the steps run an acting forward
  pass; later in a run (epsilon 0.01) nearly every step does.
* DQN epsilon: SB3 decays it from step 0 (``exploration_fraction`` = 1e6 / the steps
  ``learn()`` is given, above 1: its ``LinearSchedule`` extrapolates), as the ceiling
  does; rlframe from learning start (10,000 steps) to ``eps_steps``. In the window:
  about 0.989 (SB3, ceiling) and 0.999 (rlframe). Before learning starts SB3 and the
  ceiling act uniformly without the network; rlframe with epsilon 1, network included.
* DQN replay: SB3 (``optimize_memory_usage=False``) stores observation and next
  observation stacks (2 x 28 KB per transition, 5.6 GB at capacity, zero pages the OS
  maps on first write); rlframe one 7 KB frame per step; the ceiling one 28 KB stack.
  Time limits: SB3 bootstraps from the stored final observation, rlframe leaves the
  cut transition out of the loss, the ceiling treats the cut as an end; none happens
  in a window.
* DQN target copies: SB3 counts env steps from 0 (copies before learning starts copy
  an unchanged network), rlframe counts updates (the first at step 10,004, so copies at
  steps 11,000, 12,000, ...): the same steps once learning runs. rlframe's default
  Adam eps (0.01 / batch, rlpyt's) and its ``AtariDqnModel`` paddings (``[0, 1, 1]``,
  rlpyt's) are replaced by torch's 1e-8 and the Nature CNN's zeros.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import time
from typing import Any, Callable

from _timing import Window, sb3_window_callback, sb3_without_log_folder

CASES = ("atari_ppo", "atari_dqn")

SB3_ENV_ID = "PongNoFrameskip-v4"
FRAME_STACK = 4
# AtariEnv's keywords matching SB3's AtariWrapper on a NoFrameskip-v4 id.
ATARI_ENV_KWARGS = dict(game="pong", frame_shape=(84, 84), num_img_obs=FRAME_STACK,
                        frame_skip=4, clip_reward=True, episodic_lives=True,
                        fire_on_reset=True, max_start_noops=30, repeat_action_probability=0.)
# The Nature CNN, in the keywords of rlframe's AtariFfModel and AtariDqnModel.
NATURE_CNN = dict(channels=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1],
                  paddings=[0, 0, 0], fc_sizes=512)
FRAMES = "Nature CNN (32-64-64 conv, 512 fc), 4 x 84x84 gray frames"

GAMMA = 0.99
PPO_T, PPO_B = 128, 8  # Steps per env per iteration, envs.
PPO_WARMUP_ITRS = 1
PPO_EPOCHS, PPO_MINIBATCHES = 4, 4
PPO_LR, PPO_CLIP = 2.5e-4, 0.1  # Both linear to 0 over the run.
PPO_ENTROPY_COEFF, PPO_MAX_GRAD_NORM, PPO_ADAM_EPS = 0.01, 0.5, 1e-5
GAE_LAMBDA = 0.95
AUTOTUNED = dict(sampler="cpu", n_parallel=2, env_backend="envpool", torch_threads=2)

DQN_TRAIN_FREQ = 4  # Agent steps per iteration (one update each).
DQN_LEARNING_STARTS = 10_000
DQN_WARMUP_STEPS = DQN_LEARNING_STARTS + 1_000
DQN_LR, DQN_BATCH, DQN_REPLAY = 1e-4, 32, 100_000
DQN_TARGET_INTERVAL = 1_000  # Agent steps.
DQN_EPS_FINAL, DQN_EPS_STEPS = 0.01, 1_000_000  # 10% of the zoo's 1e7 steps.
DQN_MAX_GRAD_NORM, DQN_ADAM_EPS = 10., 1e-8
ASYNC_DQN_T = 32  # rlframe_async: agent steps per sampler batch (8 updates of 32 each).
ASYNC_DQN_LEAD = 64  # ... and how far sampling may run ahead of the replay ratio.
# The optimizer's update (the Nature CNN's forward and backward passes) is the most work:
# it gets both cores' threads, and the sampler takes what they leave (on this 2-core
# machine 685 frames/s against 629 with make_affinity's one core each, 2,000-step windows).
ASYNC_DQN_AFFINITY = dict(
    all_cpus=(0, 1), set_affinity=True,
    optimizer=[dict(cpus=(0, 1), torch_threads=2, cuda_idx=None, set_affinity=True)],
    sampler=dict(all_cpus=(0, 1), master_cpus=(0, 1), workers_cpus=((0,), (1,)),
                 master_torch_threads=1, worker_torch_threads=1, cuda_idx=None,
                 alternating=False, set_affinity=True))


@dataclasses.dataclass(frozen=True)
class Plan:
    """The iterations of a run: ``warmup_itrs`` untimed, then ``window_itrs`` timed."""

    warmup_itrs: int
    window_itrs: int
    itr_steps: int  # Agent steps per iteration.

    @property
    def n_itr(self) -> int:
        return self.warmup_itrs + self.window_itrs

    @property
    def warmup_steps(self) -> int:
        return self.warmup_itrs * self.itr_steps

    @property
    def window_steps(self) -> int:
        return self.window_itrs * self.itr_steps

    @property
    def total_steps(self) -> int:
        return self.n_itr * self.itr_steps


class WindowClock:
    """The timed window of a :class:`Plan`: from the end of the warm-up to the end of the
    last iteration.

    Also an rlframe runner callback (``on_iteration_end``, duck-typed, so this module
    imports no rlframe at its top).
    """

    def __init__(self, plan: Plan):
        self.plan = plan
        self.window = Window()

    def iteration_done(self, itr: int) -> None:
        """Iteration ``itr`` (from 0) has sampled and trained."""
        if itr == self.plan.warmup_itrs - 1:
            self.window.open()
        if itr == self.plan.n_itr - 1:
            self.window.close()

    def on_iteration_end(self, runner: Any, itr: int, samples: Any, opt_info: Any) -> None:
        self.iteration_done(itr)

    def result(self, setup: str) -> dict:
        return self.window.result(self.plan.window_steps, self.plan.warmup_steps, setup)


def run(framework: str, case: str, steps: int, seed: int) -> dict:
    """Train ``framework`` on ``case`` through the warm-up and a window of at least
    ``steps`` agent steps; returns the window's figures (see the module docstring)."""
    if case not in FRAMEWORKS:
        raise ValueError(f"case={case!r}: the cases are {CASES}.")
    if framework not in FRAMEWORKS[case]:
        raise ValueError(f"framework={framework!r} does not run {case}; it runs "
                         f"{FRAMEWORKS[case]}.")
    if int(steps) < 1:
        raise ValueError(f"steps must be a positive number of agent steps, got {steps!r}.")
    if case == "atari_ppo":
        itr_steps, warmup_itrs = PPO_T * PPO_B, PPO_WARMUP_ITRS
    else:
        itr_steps, warmup_itrs = DQN_TRAIN_FREQ, DQN_WARMUP_STEPS // DQN_TRAIN_FREQ
    plan = Plan(warmup_itrs, -(-int(steps) // itr_steps), itr_steps)
    return RUNS[(framework, case)](plan, int(seed))


# ------------------------------------------------------------------------- rlframe

def rlframe_ppo_kwargs() -> dict:
    """rlframe ``PPO`` keywords of the settings above (JSON-able: configs take them)."""
    return dict(discount=GAMMA, gae_lambda=GAE_LAMBDA, learning_rate=PPO_LR,
                linear_lr_schedule=True, ratio_clip=PPO_CLIP, epochs=PPO_EPOCHS,
                minibatches=PPO_MINIBATCHES, value_loss_coeff=1.,
                entropy_loss_coeff=PPO_ENTROPY_COEFF, clip_grad_norm=PPO_MAX_GRAD_NORM,
                normalize_advantage=True, optim_kwargs=dict(eps=PPO_ADAM_EPS))


def train_rlframe(runner: Any, name: str, seed: int) -> None:
    """``runner.train()`` logging to a temporary directory, without snapshots."""
    from rlframe.utils.logging.context import logger_context
    with tempfile.TemporaryDirectory(prefix="scale_atari_") as tmp, \
            logger_context(os.path.join(tmp, name), seed, name, dict(seed=seed),
                           snapshot_mode="none", override_prefix=True):
        runner.train()


def rlframe_serial(plan: Plan, seed: int, algo: Any, agent: Any, batch_T: int,
                   batch_B: int, name: str) -> WindowClock:
    """Train ``algo`` and ``agent`` on ``SerialSampler`` Pong with ``MinibatchRl``."""
    from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.serial.sampler import SerialSampler
    sampler = SerialSampler(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo,
                            env_kwargs=dict(ATARI_ENV_KWARGS), batch_T=batch_T,
                            batch_B=batch_B, max_decorrelation_steps=0)
    clock = WindowClock(plan)
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=plan.total_steps,
                         log_interval_steps=plan.total_steps, seed=seed,
                         affinity=dict(master_torch_threads=1), callbacks=[clock])
    train_rlframe(runner, name, seed)
    return clock


def rlframe_atari_ppo(plan: Plan, seed: int, conv_autocast: str | None = None) -> dict:
    import torch

    from rlframe.agents.pg.atari import AtariFfAgent
    from rlframe.algos.pg.ppo import PPO
    torch.set_num_threads(1)
    model_kwargs = dict(NATURE_CNN, conv_autocast=conv_autocast)
    clock = rlframe_serial(plan, seed, PPO(**rlframe_ppo_kwargs()),
                           AtariFfAgent(model_kwargs=model_kwargs), PPO_T, PPO_B,
                           "rlframe_atari_ppo")
    return clock.result(f"SerialSampler, 1 process, {PPO_B} AtariEnv x {PPO_T} steps, "
                        f"1 torch thread; {FRAMES}{precision(conv_autocast)}")


def precision(conv_autocast: str | None) -> str:
    """What the setup line says of ``conv_autocast``."""
    return "" if conv_autocast is None else f"; convolutions in {conv_autocast}"


def autotuned_config(plan: Plan, seed: int, conv_autocast: str | None = None) -> dict:
    """The ``rlframe train --config`` config of the autotuned set-up."""
    env = {key: value for key, value in ATARI_ENV_KWARGS.items() if key != "game"}
    return dict(algo="ppo", env_id=ATARI_ENV_KWARGS["game"], sampler=AUTOTUNED["sampler"],
                n_parallel=AUTOTUNED["n_parallel"], torch_threads=AUTOTUNED["torch_threads"],
                batch_T=PPO_T, batch_B=PPO_B, n_steps=plan.total_steps,
                log_interval_steps=plan.total_steps, seed=seed,
                kwargs=dict(algo=rlframe_ppo_kwargs(),
                            agent=dict(model_kwargs=dict(NATURE_CNN,
                                                         conv_autocast=conv_autocast)),
                            # No evaluation envs: build_experiment builds a MinibatchRl.
                            sampler=dict(env_backend=AUTOTUNED["env_backend"],
                                         max_decorrelation_steps=0, eval_n_envs=0),
                            env=env))


def rlframe_autotuned_atari_ppo(plan: Plan, seed: int, conv_autocast: str | None = None) -> dict:
    from rlframe.presets.build import build_experiment
    from rlframe.runners.minibatch_rl import MinibatchRl
    built, full = build_experiment(autotuned_config(plan, seed, conv_autocast))
    clock = WindowClock(plan)
    # The same parts and runner class, with the clock (a config holds no callbacks).
    runner = MinibatchRl(algo=built.algo, agent=built.agent, sampler=built.sampler,
                         n_steps=full["n_steps"], log_interval_steps=full["log_interval_steps"],
                         seed=full["seed"], affinity=built.affinity, callbacks=[clock])
    train_rlframe(runner, "rlframe_autotuned_atari_ppo", seed)
    n = full["n_parallel"]
    return clock.result(f"CpuSampler, {n} worker processes (each acting for EnvPool with "
                        f"{PPO_B // n} envs) x {PPO_T} steps, {full['torch_threads']} torch "
                        f"threads in the training process; {FRAMES}{precision(conv_autocast)}")


def rlframe_dqn_parts(conv_autocast: str | None = None) -> tuple[Any, Any]:
    """rlframe's ``DQN`` and ``AtariDqnAgent`` with the settings above."""
    from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
    from rlframe.algos.dqn.dqn import DQN
    algo = DQN(discount=GAMMA, batch_size=DQN_BATCH, min_steps_learn=DQN_LEARNING_STARTS,
               delta_clip=1., replay_size=DQN_REPLAY,
               replay_ratio=DQN_BATCH / DQN_TRAIN_FREQ,  # One update per iteration.
               target_update_tau=1., target_update_interval=DQN_TARGET_INTERVAL // DQN_TRAIN_FREQ,
               n_step_return=1, learning_rate=DQN_LR, optim_kwargs=dict(eps=DQN_ADAM_EPS),
               clip_grad_norm=DQN_MAX_GRAD_NORM, eps_steps=DQN_EPS_STEPS, double_dqn=False)
    agent = AtariDqnAgent(model_kwargs=dict(NATURE_CNN, conv_autocast=conv_autocast),
                          eps_init=1., eps_final=DQN_EPS_FINAL)
    return algo, agent


def rlframe_atari_dqn(plan: Plan, seed: int) -> dict:
    import torch
    torch.set_num_threads(1)
    algo, agent = rlframe_dqn_parts()
    clock = rlframe_serial(plan, seed, algo, agent, DQN_TRAIN_FREQ, 1, "rlframe_atari_dqn")
    return clock.result(f"SerialSampler, 1 process, 1 AtariEnv x {DQN_TRAIN_FREQ} steps, "
                        f"frame replay of {DQN_REPLAY:,}, 1 torch thread; {FRAMES}")


class AsyncWindowClock:
    """The window of an ``AsyncRl`` run: from the end of the first optimizer iteration
    that finds the sampler past the warm-up to the end of the last one, with the env
    steps sampled and the updates made in between (the optimizer's callback reads them)."""

    def __init__(self, warmup_steps: int, batch_size: int):
        self.warmup_steps, self.batch_size = warmup_steps, batch_size
        self.opened: tuple[float, float, int, int] | None = None
        self.last: tuple[float, float, int, int] | None = None

    def on_iteration_end(self, runner: Any, itr: int, samples: Any, opt_info: Any) -> None:
        sampled = (runner.ctrl.sampler_itr.value + 1) * self.batch_size
        self.last = (time.perf_counter(), time.process_time(), sampled,
                     runner.algo.update_counter)
        if self.opened is None and sampled >= self.warmup_steps:
            self.opened = self.last

    def result(self, setup: str) -> dict:
        if self.opened is None or self.last is self.opened:
            raise RuntimeError(f"no optimizer iterations after the sampler passed the "
                               f"warm-up's {self.warmup_steps} steps.")
        (wall0, cpu0, steps0, updates0), (wall, cpu, steps, updates) = self.opened, self.last
        steps, updates = steps - steps0, updates - updates0
        return dict(steps=steps, seconds=wall - wall0, cpu_seconds=cpu - cpu0,
                    warmup_steps=steps0, updates=updates,
                    setup=f"{setup}; {updates} updates in the window, one per "
                          f"{steps / max(updates, 1):.2f} env steps")


def rlframe_async_atari_dqn(plan: Plan, seed: int, conv_autocast: str | None = None) -> dict:
    """DQN through ``AsyncRl`` on the 2 cores: a sampler process steps the env and acts
    (``AsyncSerialSampler``, batches of ``ASYNC_DQN_T``) while this process trains, kept
    within ``ASYNC_DQN_LEAD`` steps of the replay ratio."""
    import torch

    from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
    from rlframe.runners.async_rl import AsyncRl
    from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
    torch.set_num_threads(1)
    algo, agent = rlframe_dqn_parts(conv_autocast)
    sampler = AsyncSerialSampler(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo,
                                 env_kwargs=dict(ATARI_ENV_KWARGS), batch_T=ASYNC_DQN_T,
                                 batch_B=1, max_decorrelation_steps=0)
    total = plan.warmup_steps + plan.window_steps
    clock = AsyncWindowClock(plan.warmup_steps, ASYNC_DQN_T)
    runner = AsyncRl(algo=algo, agent=agent, sampler=sampler, n_steps=total,
                     log_interval_steps=total, seed=seed, sampler_lead_steps=ASYNC_DQN_LEAD,
                     affinity=ASYNC_DQN_AFFINITY, callbacks=[clock])
    train_rlframe(runner, "rlframe_async_atari_dqn", seed)
    return clock.result(f"AsyncRl: AsyncSerialSampler process (1 AtariEnv x {ASYNC_DQN_T} "
                        f"steps, 1 torch thread) and the optimizer process (2 torch "
                        f"threads), both on both cores, lead <= {ASYNC_DQN_LEAD} steps; "
                        f"frame replay of {DQN_REPLAY:,}; {FRAMES}{precision(conv_autocast)}")


# ---------------------------------------------------------------------------- SB3

def sb3_learn(model: Any, plan: Plan) -> WindowClock:
    """``model.learn`` over warm-up + window, timing the window; closes the env."""
    clock = WindowClock(plan)
    sb3_without_log_folder(model).learn(
        total_timesteps=plan.total_steps,
        callback=sb3_window_callback(clock.window, plan.warmup_steps))
    model.get_env().close()
    if model.num_timesteps != plan.total_steps:
        raise RuntimeError(f"SB3 trained {model.num_timesteps} agent steps; the plan was "
                           f"{plan.total_steps}.")
    return clock


def sb3_atari_env(n_envs: int, seed: int, env_id: str = SB3_ENV_ID, **wrapper_kwargs: Any
                  ) -> Any:
    """SB3's Atari vec env as RL Zoo builds it: ``make_atari_env`` (``AtariWrapper`` with
    ``wrapper_kwargs``, in a ``DummyVecEnv``) and ``VecFrameStack`` of 4 frames."""
    import ale_py
    import gymnasium
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack
    gymnasium.register_envs(ale_py)  # The ALE ids, PongNoFrameskip-v4 among them.
    return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed,
                                        wrapper_kwargs=wrapper_kwargs or None),
                         n_stack=FRAME_STACK)


def sb3_atari_ppo(plan: Plan, seed: int, threads: int = 1) -> dict:
    import torch
    from stable_baselines3 import PPO
    torch.set_num_threads(threads)
    model = PPO("CnnPolicy", sb3_atari_env(PPO_B, seed), n_steps=PPO_T,
                batch_size=PPO_T * PPO_B // PPO_MINIBATCHES, n_epochs=PPO_EPOCHS,
                learning_rate=lambda progress_remaining: PPO_LR * progress_remaining,
                clip_range=lambda progress_remaining: PPO_CLIP * progress_remaining,
                ent_coef=PPO_ENTROPY_COEFF, vf_coef=0.5, max_grad_norm=PPO_MAX_GRAD_NORM,
                gamma=GAMMA, gae_lambda=GAE_LAMBDA, seed=seed, device="cpu", verbose=0)
    clock = sb3_learn(model, plan)
    return clock.result(f"DummyVecEnv, 1 process, {PPO_B} envs x {PPO_T} steps + "
                        f"VecFrameStack, {threads} torch thread(s); {FRAMES}")


def sb3_atari_dqn(plan: Plan, seed: int, threads: int = 1) -> dict:
    import torch
    from stable_baselines3 import DQN
    torch.set_num_threads(threads)
    model = DQN("CnnPolicy", sb3_atari_env(1, seed), learning_rate=DQN_LR,
                buffer_size=DQN_REPLAY, learning_starts=DQN_LEARNING_STARTS,
                batch_size=DQN_BATCH, gamma=GAMMA, train_freq=DQN_TRAIN_FREQ, gradient_steps=1,
                target_update_interval=DQN_TARGET_INTERVAL,
                exploration_fraction=DQN_EPS_STEPS / plan.total_steps,
                exploration_initial_eps=1., exploration_final_eps=DQN_EPS_FINAL,
                max_grad_norm=DQN_MAX_GRAD_NORM, optimize_memory_usage=False, seed=seed,
                device="cpu", verbose=0)
    clock = sb3_learn(model, plan)
    return clock.result(f"DummyVecEnv, 1 process, 1 env x {DQN_TRAIN_FREQ} steps + "
                        f"VecFrameStack, replay of {DQN_REPLAY:,} obs/next-obs stacks, "
                        f"{threads} torch thread(s); {FRAMES}")


# ------------------------------------------------------------------------ ceiling

def ceiling_envs(n: int, seed: int) -> list:
    """``n`` rlframe ``AtariEnv`` games, env ``b`` seeded with ``seed + b``."""
    from rlframe.envs.atari.atari_env import AtariEnv
    envs = [AtariEnv(**ATARI_ENV_KWARGS) for _ in range(n)]
    for b, env in enumerate(envs):
        env.seed(seed + b)
    return envs


def nature_cnn(n_outputs: int) -> Any:
    """The Nature CNN in plain torch, weights channels-last, ``n_outputs`` linear outputs."""
    import torch
    from torch import nn
    net = nn.Sequential(nn.Conv2d(FRAME_STACK, 32, 8, stride=4), nn.ReLU(),
                        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, n_outputs))
    return net.to(memory_format=torch.channels_last)


def scaled(frames: Any) -> Any:
    """uint8 frames [N, C, H, W] as float32 in [0, 1] (one conversion for the batch)."""
    import torch
    return frames.to(torch.float32).mul_(1. / 255)


@dataclasses.dataclass
class PpoBatch:
    """One iteration's samples, torch: ``observation`` [T, B, C, H, W] uint8, ``action``,
    ``log_prob`` [T, B], ``value`` [T + 1, B] (bootstrap last); numpy (written per env):
    ``reward``, ``done`` [T, B] float32."""

    observation: Any
    action: Any
    log_prob: Any
    value: Any
    reward: Any
    done: Any

    @classmethod
    def empty(cls, T: int, B: int, obs_shape: tuple) -> PpoBatch:
        import numpy as np
        import torch
        return cls(torch.empty((T, B, *obs_shape), dtype=torch.uint8),
                   torch.empty((T, B), dtype=torch.int64), torch.empty(T, B),
                   torch.empty(T + 1, B), np.zeros((T, B), np.float32),
                   np.zeros((T, B), np.float32))


def ppo_act(net: Any, observation: Any) -> tuple:
    """Sampled actions, their log-probabilities and the values of [B, ...] frames."""
    import torch
    with torch.inference_mode():
        out = net(scaled(observation))
        log_probs = torch.log_softmax(out[:, :-1], dim=-1)
        action = torch.multinomial(log_probs.exp(), 1)
        return action.squeeze(1), log_probs.gather(1, action).squeeze(1), out[:, -1]


def ppo_rollout(envs: list, net: Any, obs: Any, batch: PpoBatch) -> None:
    """Step ``envs`` ``T`` times from ``obs`` [B, C, H, W] uint8 (updated in place)."""
    import torch
    frames = torch.from_numpy(obs)
    for t in range(batch.action.shape[0]):
        batch.observation[t] = frames
        action, batch.log_prob[t], batch.value[t] = ppo_act(net, batch.observation[t])
        batch.action[t] = action
        for b, (env, a) in enumerate(zip(envs, action.tolist())):
            step = env.step(a)
            obs[b] = env.reset() if step.env_info.traj_done else step.observation
            batch.reward[t, b] = step.reward
            batch.done[t, b] = step.done
    batch.value[-1] = ppo_act(net, frames)[2]


def gae(batch: PpoBatch) -> tuple:
    """``(advantage, return_)`` [T, B] with GAE(gamma, lambda) from ``batch``."""
    import torch
    reward, done = torch.from_numpy(batch.reward), torch.from_numpy(batch.done)
    advantage = torch.empty_like(reward)
    last = torch.zeros_like(reward[0])
    for t in reversed(range(reward.shape[0])):
        not_done = 1. - done[t]
        delta = reward[t] + GAMMA * batch.value[t + 1] * not_done - batch.value[t]
        last = delta + GAMMA * GAE_LAMBDA * not_done * last
        advantage[t] = last
    return advantage, advantage + batch.value[:-1]


def ppo_update(net: Any, optimizer: Any, batch: PpoBatch, clip: float) -> None:
    """``PPO_EPOCHS`` passes of ``PPO_MINIBATCHES`` clipped-loss steps over ``batch``."""
    import torch
    advantage, return_ = (x.reshape(-1) for x in gae(batch))
    advantage = (advantage - advantage.mean()) / (advantage.std(unbiased=False) + 1e-6)
    observation = batch.observation.reshape(-1, *batch.observation.shape[2:])
    action, old_log_prob = batch.action.reshape(-1), batch.log_prob.reshape(-1)
    n = action.shape[0]
    size = n // PPO_MINIBATCHES
    for _ in range(PPO_EPOCHS):
        perm = torch.randperm(n)
        for start in range(0, n, size):
            idx = perm[start:start + size]
            out = net(scaled(observation[idx]))
            log_probs = torch.log_softmax(out[:, :-1], dim=-1)
            ratio = torch.exp(log_probs.gather(1, action[idx, None]).squeeze(1)
                              - old_log_prob[idx])
            adv = advantage[idx]
            pi_loss = -torch.min(ratio * adv, ratio.clamp(1. - clip, 1. + clip) * adv).mean()
            value_loss = 0.5 * (out[:, -1] - return_[idx]).pow(2).mean()
            entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
            loss = pi_loss + value_loss - PPO_ENTROPY_COEFF * entropy
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), PPO_MAX_GRAD_NORM)
            optimizer.step()


def ceiling_atari_ppo(plan: Plan, seed: int) -> dict:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    envs = ceiling_envs(PPO_B, seed)
    obs = np.stack([env.reset() for env in envs])
    net = nature_cnn(envs[0].action_space.n + 1)  # Policy logits and the value.
    optimizer = torch.optim.Adam(net.parameters(), lr=PPO_LR, eps=PPO_ADAM_EPS, fused=True)
    batch = PpoBatch.empty(PPO_T, PPO_B, obs.shape[1:])
    clock = WindowClock(plan)
    for itr in range(plan.n_itr):
        anneal = (plan.n_itr - itr) / plan.n_itr  # As rlframe's linear schedules.
        for group in optimizer.param_groups:
            group["lr"] = PPO_LR * anneal
        ppo_rollout(envs, net, obs, batch)
        ppo_update(net, optimizer, batch, PPO_CLIP * anneal)
        clock.iteration_done(itr)
    return clock.result(f"bare loop, 1 process, {PPO_B} AtariEnv x {PPO_T} steps, "
                        f"1 torch thread; plain-torch {FRAMES}")


class StackReplay:
    """Uniform replay of uint8 frame stacks, one row per agent step, in numpy arrays
    whose pages the OS maps as rows are written; the next observation of row i is row
    i + 1 (its value does not count after a ``done``)."""

    def __init__(self, size: int, obs_shape: tuple):
        import numpy as np
        self.observation = np.empty((size, *obs_shape), np.uint8)
        self.action = np.empty(size, np.int64)
        self.reward = np.empty(size, np.float32)
        self.done = np.empty(size, np.float32)
        self.size, self.pos, self.full = size, 0, False

    def append(self, observation: Any, action: int, reward: float, done: bool) -> None:
        i = self.pos
        self.observation[i], self.action[i], self.reward[i], self.done[i] = (
            observation, action, reward, done)
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, rng: Any, n: int) -> tuple:
        """``n`` rows with a successor: ``(obs, action, reward, done, next_obs)``."""
        oldest, count = (self.pos, self.size) if self.full else (0, self.pos)
        idx = (oldest + rng.integers(0, count - 1, n)) % self.size
        return (self.observation[idx], self.action[idx], self.reward[idx], self.done[idx],
                self.observation[(idx + 1) % self.size])


def dqn_update(q_net: Any, target: Any, optimizer: Any, replay: StackReplay, rng: Any) -> None:
    """One Huber-loss TD step on ``DQN_BATCH`` transitions."""
    import torch
    import torch.nn.functional as F
    obs, action, reward, done, next_obs = (torch.from_numpy(x)
                                           for x in replay.sample(rng, DQN_BATCH))
    with torch.no_grad():
        y = reward + GAMMA * (1. - done) * target(scaled(next_obs)).max(dim=1).values
    q = q_net(scaled(obs)).gather(1, action[:, None]).squeeze(1)
    loss = F.smooth_l1_loss(q, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(q_net.parameters(), DQN_MAX_GRAD_NORM)
    optimizer.step()


def dqn_act(q_net: Any, obs: Any, step: int, rng: Any, n_actions: int) -> int:
    """Uniform before learning starts, then epsilon-greedy (SB3's schedule), running
    the network only when not exploring."""
    import torch
    epsilon = max(DQN_EPS_FINAL, 1. - (1. - DQN_EPS_FINAL) * step / DQN_EPS_STEPS)
    if step < DQN_LEARNING_STARTS or rng.random() < epsilon:
        return int(rng.integers(n_actions))
    with torch.inference_mode():
        return int(q_net(scaled(torch.from_numpy(obs)[None])).argmax())


def ceiling_atari_dqn(plan: Plan, seed: int) -> dict:
    import copy

    import numpy as np
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env, = ceiling_envs(1, seed)
    n_actions = env.action_space.n
    q_net = nature_cnn(n_actions)
    target = copy.deepcopy(q_net).requires_grad_(False)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=DQN_LR, eps=DQN_ADAM_EPS, fused=True)
    replay = StackReplay(DQN_REPLAY, env.observation_space.shape)
    obs = env.reset()
    clock = WindowClock(plan)
    for step in range(1, plan.total_steps + 1):  # Agent steps done after this one.
        action = dqn_act(q_net, obs, step - 1, rng, n_actions)
        env_step = env.step(action)
        replay.append(obs, action, float(env_step.reward), env_step.done)
        obs = env.reset() if env_step.env_info.traj_done else env_step.observation
        if step % DQN_TARGET_INTERVAL == 0:  # SB3 copies after the step, before training.
            target.load_state_dict(q_net.state_dict())
        if step % DQN_TRAIN_FREQ == 0:
            if step > DQN_LEARNING_STARTS:
                dqn_update(q_net, target, optimizer, replay, rng)
            clock.iteration_done(step // DQN_TRAIN_FREQ - 1)
    return clock.result(f"bare loop, 1 process, 1 AtariEnv, numpy replay of {DQN_REPLAY:,} "
                        f"stacks, 1 torch thread; plain-torch {FRAMES}")


RUNS: dict[tuple[str, str], Callable[[Plan, int], dict]] = {
    ("rlframe", "atari_ppo"): rlframe_atari_ppo,
    ("rlframe_autotuned", "atari_ppo"): rlframe_autotuned_atari_ppo,
    ("rlframe_bf16", "atari_ppo"): functools.partial(rlframe_atari_ppo,
                                                     conv_autocast="bfloat16"),
    ("rlframe_autotuned_bf16", "atari_ppo"): functools.partial(rlframe_autotuned_atari_ppo,
                                                               conv_autocast="bfloat16"),
    ("sb3", "atari_ppo"): sb3_atari_ppo,
    ("sb3_2threads", "atari_ppo"): functools.partial(sb3_atari_ppo, threads=2),
    ("ceiling", "atari_ppo"): ceiling_atari_ppo,
    ("rlframe", "atari_dqn"): rlframe_atari_dqn,
    ("rlframe_async", "atari_dqn"): rlframe_async_atari_dqn,
    ("rlframe_async_bf16", "atari_dqn"): functools.partial(rlframe_async_atari_dqn,
                                                           conv_autocast="bfloat16"),
    ("sb3", "atari_dqn"): sb3_atari_dqn,
    ("sb3_2threads", "atari_dqn"): functools.partial(sb3_atari_dqn, threads=2),
    ("ceiling", "atari_dqn"): ceiling_atari_dqn,
}

# What runs each case, in the order the driver's first round runs them.
FRAMEWORKS = {case: tuple(name for name, runs in RUNS if runs == case) for case in CASES}
