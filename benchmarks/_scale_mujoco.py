"""MuJoCo cases of the scale comparison: SAC and PPO on HalfCheetah-v5, timed per env step.

``run(framework, case, steps, seed)`` builds one run, trains it through a warm-up, then
times a window of at least ``steps`` env steps of training (sampling and updates
together, as in normal training) and stops right after the window. It returns
``dict(steps, seconds, cpu_seconds, warmup_steps, setup)``: the env steps in the window,
its wall-clock seconds, this process's CPU seconds over it (``time.process_time``), the
env steps trained before it, and a one-line description of what ran. Each call belongs
in a fresh process (the benchmark driver makes one per call). Every run uses the CPU and
one torch thread (``torch.set_num_threads(1)``) unless its name says 2 threads; this
module imports torch, gymnasium, stable_baselines3 and rlframe only inside the functions
that need them, so importing it is cheap.

The window opens at the end of the iteration that completes the warm-up (after its
updates) and closes at the end of the last iteration (after its updates), in all three
frameworks:

* rlframe: a runner callback (``on_iteration_end``) reads the clocks; the runner's
  ``n_steps`` is warm-up + window, and its ``log_interval_steps`` the same, so its only
  diagnostics row is written after the window (a shorter interval would round
  ``n_steps`` up to whole intervals).
* SB3: a ``BaseCallback`` reads the clocks in ``_on_rollout_start`` (the first one at
  ``num_timesteps`` = warm-up comes after the warm-up's last updates) and in
  ``_on_training_end``; ``learn(total_timesteps=warm-up + window)`` stops after the
  window's last updates. (``_on_step`` runs in the middle of an iteration, after the
  env step but before the transition is stored and trained on, so a window read there
  would hold the warm-up's last updates and leave out its own last ones: for PPO a
  whole iteration of 160 updates, the optimizer's first ones among them.)
* ceiling: the same boundaries in its own loop.

Cases and frameworks (all on ``gymnasium.make("HalfCheetah-v5")``, 17-dim observations,
6-dim actions in [-1, 1], episodes of 1,000 steps cut by the time limit and never
terminated):

**mujoco_sac**: rl-zoo's SAC HalfCheetah hyperparameters: learning starts 10,000 and
SB3's SAC defaults otherwise: replay 1e6, batch 256, learning rate 3e-4 (Adam, every
network), tau 0.005 every update, gamma 0.99, one gradient step per env step, learned
temperature starting at 1 with target entropy -dim(A) = -6, [256, 256] ReLU MLPs for
the policy (a tanh-squashed Gaussian, log std bounded to [-20, 2]) and each of the twin
critics, target critics. Warm-up: 11,000 env steps (the 10,000 before learning starts
and 1,000 with updates); window: ``steps`` env steps and as many updates.

* ``rlframe``: ``SerialSampler(EnvCls=rlframe.envs.gym.make, env_kwargs=dict(id=
  "HalfCheetah-v5"), batch_T=1, batch_B=1, max_decorrelation_steps=0)``, ``SacAgent``
  with ``hidden_sizes=[256, 256]`` for the policy and the critics, ``SAC(discount=0.99,
  batch_size=256, min_steps_learn=10_000, replay_size=int(1e6), replay_ratio=256,
  target_update_tau=0.005, target_update_interval=1, learning_rate=3e-4,
  target_entropy="auto")`` (one update per iteration of one step), ``MinibatchRl`` (no
  evaluation) with ``affinity=dict(master_torch_threads=1)``, inside ``logger_context``
  with ``snapshot_mode="none"`` in a temporary directory.
* ``rlframe_2threads``: the same with ``master_torch_threads=2`` (the update's matrix
  products split over both cores; the env steps between updates).
* ``sb3``: ``SAC("MlpPolicy", make_vec_env("HalfCheetah-v5", n_envs=1, seed=seed),
  learning_starts=10_000, buffer_size=int(1e6), batch_size=256, learning_rate=3e-4,
  tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto",
  target_entropy="auto", policy_kwargs=dict(net_arch=[256, 256]), device="cpu")``.
* ``sb3_2threads``: the same with 2 torch threads, torch's own default on a 2-core
  machine (SB3 sets none): SB3 as users run it here.
* ``ceiling``: no framework: the gymnasium env stepped in a bare loop; a preallocated
  numpy replay of 1e6 transitions (observation, action, reward, next observation,
  terminated) sampled with ``Generator.integers`` and handed to torch without copies;
  a minimal SAC in plain torch written here: the same networks, one Adam for both
  critics, one for the policy and one for ``log_alpha`` (torch's fused CPU kernel,
  ``fused=True``, as rlframe builds its Adams); the policy's loss does not
  backpropagate into the critics' weights; targets blended with ``torch._foreach_lerp_``.
  Uniform random actions before learning starts, the policy's samples after.
* ``ceiling_2threads``: the same with 2 torch threads (the bound for the set-ups that
  use both cores).

Where the SAC mapping is not exact:

* Warm-up actions: SB3 and the ceiling act uniformly at random for the first 10,000
  steps, without a network pass; rlframe samples its untrained policy with a fixed
  pre-squash std (``SacAgent(pretrain_std=0.75)``; there is no uniform option), one
  policy forward per step. This is outside the window, which starts after 1,000 steps
  of updates: there all three sample their policy, one forward per step.
* Action range: HalfCheetah's actions span [-1, 1], so SB3's rescaling of actions to
  [-1, 1] and rlframe's squash to the env's bound are the same map here (on Pendulum
  they are not; see ``vs_sb3.py``).
* Time limits: SB3's replay stores the observation after a time-limit cut (gymnasium's
  final observation, from ``terminal_observation``) and bootstraps from it; the ceiling
  stores every next observation, so the same holds. rlframe's replay stores each
  observation once ([T, B] layout, the next observation read from the next row) and
  has none after a cut; it leaves the transitions whose return reaches the cut out of
  the loss (one in 1,000 here), which costs a mask in the batches that hold one.
* Replay layout: SB3 (``optimize_memory_usage=False``) and the ceiling store next
  observations separately; rlframe reads them from the next row. Each converts a
  numpy batch to torch per update.
* Per-update extras in rlframe: gradient norms of the three networks
  (``clip_grad_norm_`` with its default ``clip_grad_norm=1e9``: no clipping, as in SB3,
  but the norms are computed), the non-finite guard (the loss and norms are read back
  and a non-finite update is skipped), and statistics of each update (every 10th q
  value, the policy's mean and log std, ...), read once per iteration. SB3 reads its
  losses and temperature back with ``.item()`` per update. The ceiling does none of it.
* Update order: SB3 steps the temperature first, then the critics, then the policy;
  rlframe and the ceiling the critics, the policy, then the temperature. All three use
  the previous update's temperature in both losses and the critics after their step in
  the policy's loss, so they differ in form only. SB3's policy step also computes
  gradients for the critics' weights (unused, cleared before the next critic step);
  rlframe (``SacAgent.q_for_pi``) and the ceiling do not.
* Networks: SB3's policy has separate mean and log-std output layers on the 256-unit
  features, rlframe's and the ceiling's one layer of 12 outputs split in two (the same
  arithmetic). SB3 and the ceiling step both critics with one Adam, rlframe with one
  Adam per critic after one backward pass.
* Adam kernels: rlframe builds every Adam with ``fused=True``
  (``rlframe.algos.base.make_optimizer``), and so does the ceiling; SB3 uses torch's
  default, which on the CPU steps one parameter tensor at a time. The same arithmetic
  up to rounding, at a different speed (this holds for PPO too).
* Loop overhead: rlframe runs one runner iteration per env step (logger iteration and
  prefix, the diagnostics store of the batch, callbacks, the agent's mode switches);
  SB3 one ``collect_rollouts`` and one ``train`` call per step and, with ``verbose=0``,
  records its (silent) logs every 4 episodes. rlframe's terminal progress bar is off
  (``RLFRAME_PROGRESS=0``, set by this module), as SB3's is.
* Envs: SB3's ``make_vec_env`` wraps the env in ``Monitor`` and a ``DummyVecEnv``;
  rlframe in ``GymEnvWrapper`` (HalfCheetah's four info values become a namedtuple each
  step); the ceiling steps the env ``gymnasium.make`` returns.
* Random streams differ between the frameworks: the same seed gives other episodes.

**mujoco_ppo**: rl-zoo's PPO HalfCheetah hyperparameters: observations and rewards
normalized (SB3: ``VecNormalize(gamma=0.98)``), one env, 512 steps per iteration,
minibatches of 64 (8 per epoch), 20 epochs, gamma 0.98, GAE lambda 0.92, constant
learning rate 2.0633e-05 (Adam, eps 1e-5), entropy coefficient 0.000401762, constant
clip range 0.1, gradient norm clip 0.8, value coefficient 0.58096, separate [256, 256]
ReLU MLPs for the policy mean (linear output) and the value, a state-independent log
std initialised to -2, PyTorch's default initialisation (``ortho_init=False``),
advantages normalized. Warm-up: one iteration (512 env steps and its 160 updates);
window: ``steps`` rounded up to whole 512-step iterations.

* ``rlframe``: ``SerialSampler(batch_T=512, batch_B=1, max_decorrelation_steps=0)``,
  ``MujocoFfAgent`` with ``MujocoFfModel(hidden_sizes=[256, 256],
  hidden_nonlinearity=ReLU, mu_nonlinearity=None, init_log_std=-2,
  normalize_observation=True)`` (separate mean and value MLPs),
  ``PPO(discount=0.98, gae_lambda=0.92, epochs=20, minibatches=8,
  learning_rate=2.0633e-05, linear_lr_schedule=False, ratio_clip=0.1,
  entropy_loss_coeff=0.000401762, value_loss_coeff=2 * 0.58096, clip_grad_norm=0.8,
  normalize_advantage=True, optim_kwargs=dict(eps=1e-5))``, ``MinibatchRl`` as for SAC.
* ``sb3``: ``PPO("MlpPolicy", VecNormalize(make_vec_env("HalfCheetah-v5", n_envs=1,
  seed=seed), gamma=0.98), n_steps=512, batch_size=64, n_epochs=20, gamma=0.98,
  gae_lambda=0.92, learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1,
  max_grad_norm=0.8, vf_coef=0.58096, policy_kwargs=dict(log_std_init=-2,
  ortho_init=False, activation_fn=ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256])),
  device="cpu")``.
* ``sb3_2threads``: the same with 2 torch threads, torch's own default on a 2-core
  machine (SB3 sets none): SB3 as users run it here.
* ``ceiling``: no framework: the gymnasium env stepped in a bare loop; observations
  normalized by a bare numpy running mean and variance (updated once per iteration,
  clipped to [-10, 10]); plain-torch policy-mean and value MLPs of the same sizes and a
  log-std parameter; 512 steps collected with no-grad forwards into numpy arrays,
  actions clipped to [-1, 1] for the env; GAE in a numpy loop; 20 epochs of 8 shuffled
  minibatches of 64 with the clipped surrogate, value and entropy losses, one fused
  Adam, ``clip_grad_norm_``.

Where the PPO mapping is not exact:

* Observation normalization: SB3's ``VecNormalize`` updates its running mean and
  variance at every env step and the rollout stores the normalized observations, which
  the updates reuse. rlframe's ``MujocoFfModel`` normalizes inside the model: the raw
  observations are stored, the statistics are updated once per iteration with its 512
  observations (at the start of ``PPO.optimize_agent``), and the training passes
  normalize again with the updated statistics (the sampling passes used the previous
  ones; the first iteration samples unnormalized, with mean 0 and variance 1). The
  ceiling updates once per iteration and stores normalized observations. Variance
  floor: SB3 and the ceiling add 1e-8, rlframe clamps it at 1e-6.
* Reward normalization: SB3 divides rewards by a running std of the discounted return
  (gamma 0.98, clipped to [-10, 10]). rlframe has no reward normalization (not in the
  library), so it trains on the raw rewards, and so does the ceiling. The time this
  leaves out is one small numpy update per env step.
* Value loss: rlframe's is ``0.5 * (V - R)^2``, SB3's ``(V - R)^2``, so
  ``value_loss_coeff = 2 * 0.58096`` is SB3's ``vf_coef=0.58096`` (exact); the ceiling
  uses SB3's form.
* Advantages: SB3 normalizes them per minibatch of 64 (sample std + 1e-8), rlframe
  once per batch of 512 (population std + 1e-6), the ceiling once per batch (sample
  std + 1e-8).
* Actions: SB3 and the ceiling clip the sampled action to [-1, 1] before the env step
  (the unclipped one is trained on). rlframe hands the unclipped Gaussian sample to the
  env; MuJoCo clamps the control to its range, but HalfCheetah's control cost is
  computed from the action as given, so rewards differ slightly (the time does not).
* Time limits: SB3 and the ceiling add ``gamma * V(final observation)`` to the reward
  of a step cut by the time limit (one more value pass per episode); rlframe
  bootstraps from the value of the last observation it has (``V(s_t)`` for
  ``V(s_{t+1})``).
* Per-minibatch extras: SB3 computes the clip fraction and an approximate KL and reads
  several values back with ``.item()``, and records (silent) logs every iteration;
  rlframe computes the gradient norm (as clipping does anyway), the non-finite guard's
  checks and its statistics (loss, gradient norm, entropy, perplexity), read once per
  iteration; the ceiling none of these.
* Networks: SB3's ``MlpPolicy`` with ``net_arch=dict(pi=..., vf=...)`` runs separate
  policy and value MLPs, then an action and a value layer; rlframe's and the ceiling's
  mean and value MLPs end in those layers: the same shapes and arithmetic.
* Envs, Adam kernels and seeds: as for SAC (``Monitor`` + ``DummyVecEnv`` +
  ``VecNormalize`` in SB3, ``GymEnvWrapper`` in rlframe, the bare env in the ceiling;
  fused Adam in rlframe and the ceiling, torch's default in SB3; different random
  streams).
"""
from __future__ import annotations

import copy
import functools
import math
import numbers
import os
import tempfile
from typing import TYPE_CHECKING, Callable

from _timing import Window, sb3_window_callback, sb3_without_log_folder

if TYPE_CHECKING:
    import numpy as np
    import torch

CASES = ("mujoco_sac", "mujoco_ppo")
ENV_ID = "HalfCheetah-v5"
HIDDEN = [256, 256]
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

# SAC: rl-zoo's HalfCheetah settings (learning_starts) over SB3's SAC defaults.
SAC_LEARNING_STARTS = 10_000
SAC_WARMUP = SAC_LEARNING_STARTS + 1_000  # Env steps before the window.
SAC_REPLAY = int(1e6)
SAC_BATCH = 256
SAC_LR = 3e-4
SAC_TAU = 0.005
SAC_GAMMA = 0.99
SAC_LOG_STD_BOUNDS = (-20., 2.)

# PPO: rl-zoo's HalfCheetah settings.
PPO_N_STEPS = 512  # Env steps per iteration (one env); also the warm-up.
PPO_BATCH = 64
PPO_MINIBATCHES = PPO_N_STEPS // PPO_BATCH
PPO_EPOCHS = 20
PPO_GAMMA = 0.98
PPO_GAE_LAMBDA = 0.92
PPO_LR = 2.0633e-05
PPO_ENT_COEF = 0.000401762
PPO_CLIP = 0.1
PPO_MAX_GRAD_NORM = 0.8
PPO_VF_COEF = 0.58096
PPO_LOG_STD_INIT = -2.
ADAM_EPS_PPO = 1e-5  # SB3's policies give Adam eps 1e-5.
OBS_CLIP = 10.  # VecNormalize's clip_obs (and MujocoFfModel's norm_obs_clip).

WARMUP_STEPS = {"mujoco_sac": SAC_WARMUP, "mujoco_ppo": PPO_N_STEPS}


def window_steps(case: str, steps: int) -> int:
    """Env steps of the timed window: ``steps``, for PPO rounded up to whole iterations."""
    if case == "mujoco_ppo":
        return -(-steps // PPO_N_STEPS) * PPO_N_STEPS
    return steps


def run(framework: str, case: str, steps: int, seed: int) -> dict:
    """Train ``framework`` on ``case`` through the warm-up, then time at least ``steps``
    env steps of training and stop.

    Returns:
        ``dict(steps, seconds, cpu_seconds, warmup_steps, setup)`` (see the module
        docstring).
    """
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}.")
    if framework not in FRAMEWORKS[case]:
        raise ValueError(f"framework must be one of {FRAMEWORKS[case]} for case {case!r}, "
                         f"got {framework!r}.")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}.")
    import torch
    torch.set_num_threads(1)
    window = window_steps(case, int(steps))
    clock, setup = RUNS[(framework, case)](seed, window)
    return clock.result(window, WARMUP_STEPS[case], setup)


# ------------------------------------------------------------------------- rlframe

class RlframeClock:
    """Runner callback (any object with ``on_iteration_end`` is one): opens the window
    at the end of the iteration that completes the warm-up, closes it at the end of the
    last one."""

    def __init__(self, warmup_steps: int, total_steps: int):
        self.window = Window()
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def on_iteration_end(self, runner, itr: int, samples, opt_info) -> None:
        steps = (itr + 1) * runner.itr_batch_size
        if steps == self.warmup_steps:
            self.window.open()
        if steps == self.total_steps:
            self.window.close()


def rlframe_train(case: str, algo, agent, batch_T: int, seed: int, window: int,
                  threads: int = 1) -> Window:
    """Train with a serial sampler (one env) and ``MinibatchRl`` for warm-up + window,
    ``threads`` torch threads."""
    from rlframe.envs.gym import make as gym_make
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.logging.context import logger_context

    os.environ["RLFRAME_PROGRESS"] = "0"  # No terminal progress bar (SB3 shows none).
    total = WARMUP_STEPS[case] + window
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=ENV_ID), batch_T=batch_T,
                            batch_B=1, max_decorrelation_steps=0)
    clock = RlframeClock(WARMUP_STEPS[case], total)
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=total,
                         log_interval_steps=total, seed=seed,
                         affinity=dict(master_torch_threads=threads), callbacks=[clock])
    with tempfile.TemporaryDirectory(prefix="scale_mujoco_") as tmp:
        with logger_context(os.path.join(tmp, case), seed, case,
                            dict(case=case, seed=seed, window=window),
                            snapshot_mode="none", override_prefix=True):
            runner.train()
    return clock.window


def rlframe_sac(seed: int, window: int, threads: int = 1) -> tuple[Window, str]:
    from rlframe.agents.qpg.sac_agent import SacAgent
    from rlframe.algos.qpg.sac import SAC

    algo = SAC(discount=SAC_GAMMA, batch_size=SAC_BATCH, min_steps_learn=SAC_LEARNING_STARTS,
               replay_size=SAC_REPLAY, replay_ratio=SAC_BATCH, target_update_tau=SAC_TAU,
               target_update_interval=1, learning_rate=SAC_LR, target_entropy="auto")
    agent = SacAgent(model_kwargs=dict(hidden_sizes=HIDDEN),
                     q_model_kwargs=dict(hidden_sizes=HIDDEN))
    setup = ("SerialSampler(batch_T=1, batch_B=1) + MinibatchRl; SacAgent pi/q1/q2 "
             "[256, 256] ReLU, fused Adam; SAC batch 256, replay 1e6, replay_ratio 256 "
             f"(1 update/step); {threads} torch thread(s)")
    return rlframe_train("mujoco_sac", algo, agent, 1, seed, window, threads), setup


def rlframe_ppo(seed: int, window: int) -> tuple[Window, str]:
    import torch

    from rlframe.agents.pg.mujoco import MujocoFfAgent
    from rlframe.algos.pg.ppo import PPO

    algo = PPO(discount=PPO_GAMMA, gae_lambda=PPO_GAE_LAMBDA, epochs=PPO_EPOCHS,
               minibatches=PPO_MINIBATCHES, learning_rate=PPO_LR, linear_lr_schedule=False,
               ratio_clip=PPO_CLIP, entropy_loss_coeff=PPO_ENT_COEF,
               value_loss_coeff=2 * PPO_VF_COEF, clip_grad_norm=PPO_MAX_GRAD_NORM,
               normalize_advantage=True, optim_kwargs=dict(eps=ADAM_EPS_PPO))
    agent = MujocoFfAgent(model_kwargs=dict(
        hidden_sizes=HIDDEN, hidden_nonlinearity=torch.nn.ReLU, mu_nonlinearity=None,
        init_log_std=PPO_LOG_STD_INIT, normalize_observation=True))
    setup = ("SerialSampler(batch_T=512, batch_B=1) + MinibatchRl; MujocoFfAgent mu/v "
             "[256, 256] ReLU, obs normalized in the model, fused Adam; PPO 20 epochs x 8 "
             "minibatches of 64")
    return rlframe_train("mujoco_ppo", algo, agent, PPO_N_STEPS, seed, window), setup


# --------------------------------------------------------------------------- SB3

def sb3_learn(model, case: str, window: int) -> Window:
    """``model.learn`` for warm-up + window steps, timing the window."""
    clock = Window()
    sb3_without_log_folder(model).learn(
        total_timesteps=WARMUP_STEPS[case] + window,
        callback=sb3_window_callback(clock, WARMUP_STEPS[case]))
    return clock


def sb3_sac(seed: int, window: int, threads: int = 1) -> tuple[Window, str]:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(threads)
    model = SAC("MlpPolicy", make_vec_env(ENV_ID, n_envs=1, seed=seed),
                learning_starts=SAC_LEARNING_STARTS, buffer_size=SAC_REPLAY,
                batch_size=SAC_BATCH, learning_rate=SAC_LR, tau=SAC_TAU, gamma=SAC_GAMMA,
                train_freq=1, gradient_steps=1, ent_coef="auto", target_entropy="auto",
                policy_kwargs=dict(net_arch=HIDDEN), seed=seed, device="cpu", verbose=0)
    setup = ("make_vec_env(n_envs=1) (DummyVecEnv + Monitor); SAC MlpPolicy actor/critics "
             "[256, 256] ReLU; batch 256, buffer 1e6, train_freq 1, gradient_steps 1; "
             f"{threads} torch thread(s)")
    return sb3_learn(model, "mujoco_sac", window), setup


def sb3_ppo(seed: int, window: int, threads: int = 1) -> tuple[Window, str]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(threads)
    env = VecNormalize(make_vec_env(ENV_ID, n_envs=1, seed=seed), gamma=PPO_GAMMA)
    model = PPO("MlpPolicy", env, n_steps=PPO_N_STEPS, batch_size=PPO_BATCH,
                n_epochs=PPO_EPOCHS, gamma=PPO_GAMMA, gae_lambda=PPO_GAE_LAMBDA,
                learning_rate=PPO_LR, ent_coef=PPO_ENT_COEF, clip_range=PPO_CLIP,
                max_grad_norm=PPO_MAX_GRAD_NORM, vf_coef=PPO_VF_COEF,
                policy_kwargs=dict(log_std_init=PPO_LOG_STD_INIT, ortho_init=False,
                                   activation_fn=torch.nn.ReLU,
                                   net_arch=dict(pi=HIDDEN, vf=HIDDEN)),
                seed=seed, device="cpu", verbose=0)
    setup = ("make_vec_env(n_envs=1) + VecNormalize(obs, reward); PPO MlpPolicy pi/vf "
             f"[256, 256] ReLU; n_steps 512, 20 epochs x 8 minibatches of 64; {threads} "
             "torch thread(s)")
    return sb3_learn(model, "mujoco_ppo", window), setup


# ----------------------------------------------------------------------- ceiling
# Plain torch and the bare gymnasium env: what the same work costs without a framework.

def mlp(input_size: int, output_size: int) -> torch.nn.Sequential:
    """[256, 256] ReLU MLP with a linear output layer."""
    import torch

    sizes = [input_size, *HIDDEN]
    layers: list[torch.nn.Module] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], output_size))


def optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


class NumpyReplay:
    """Preallocated transitions (next observations stored too), drawn uniformly."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, seed: int):
        import numpy as np

        self.observation = np.empty((size, obs_dim), np.float32)
        self.action = np.empty((size, act_dim), np.float32)
        self.reward = np.empty(size, np.float32)
        self.next_observation = np.empty((size, obs_dim), np.float32)
        self.terminated = np.empty(size, np.float32)
        self.size, self.pos, self.filled = size, 0, 0
        self.rng = np.random.default_rng(seed)

    def add(self, observation: np.ndarray, action: np.ndarray, reward: float,
            next_observation: np.ndarray, terminated: bool) -> None:
        i = self.pos
        self.observation[i] = observation
        self.action[i] = action
        self.reward[i] = reward
        self.next_observation[i] = next_observation
        self.terminated[i] = terminated
        self.pos = (i + 1) % self.size
        self.filled = min(self.filled + 1, self.size)

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """``(observation, action, reward, next_observation, terminated)``, [batch_size] each."""
        import torch

        idx = self.rng.integers(self.filled, size=batch_size)
        return tuple(torch.from_numpy(a[idx]) for a in (
            self.observation, self.action, self.reward, self.next_observation, self.terminated))


class PlainSac:
    """Minimal SAC: tanh-Gaussian policy, twin critics with Polyak targets, learned
    temperature; critics, then policy, then temperature each update."""

    def __init__(self, obs_dim: int, act_dim: int):
        import torch

        self.act_dim = act_dim
        self.pi = mlp(obs_dim, 2 * act_dim)
        self.q1, self.q2 = mlp(obs_dim + act_dim, 1), mlp(obs_dim + act_dim, 1)
        self.target_q1, self.target_q2 = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.q_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.target_params = [*self.target_q1.parameters(), *self.target_q2.parameters()]
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.pi_optimizer = torch.optim.Adam(self.pi.parameters(), lr=SAC_LR, fused=True)
        self.q_optimizer = torch.optim.Adam(self.q_params, lr=SAC_LR, fused=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=SAC_LR, fused=True)
        self.target_entropy = -float(act_dim)

    def sample(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action [N, A] in [-1, 1] and its log-density [N]."""
        import torch
        import torch.nn.functional as F

        mean, log_std = self.pi(observation).split(self.act_dim, dim=-1)
        log_std = log_std.clamp(*SAC_LOG_STD_BOUNDS)
        noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        log_prob = (-0.5 * noise ** 2 - log_std - HALF_LOG_2PI).sum(-1)
        # log(1 - tanh(u)^2), written stably.
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def act(self, observation: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            action, _ = self.sample(torch.as_tensor(observation, dtype=torch.float32))
        return action.numpy()

    def update(self, observation: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
               next_observation: torch.Tensor, terminated: torch.Tensor) -> None:
        """One update on a batch: [N, obs], [N, A], [N], [N, obs], [N]."""
        import torch

        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.sample(next_observation)
            next_input = torch.cat([next_observation, next_action], dim=-1)
            target_q = torch.min(self.target_q1(next_input), self.target_q2(next_input))
            y = reward + SAC_GAMMA * (1 - terminated) * (target_q.squeeze(-1)
                                                         - alpha * next_log_prob)
        q_input = torch.cat([observation, action], dim=-1)
        q_loss = 0.5 * (((self.q1(q_input).squeeze(-1) - y) ** 2).mean()
                        + ((self.q2(q_input).squeeze(-1) - y) ** 2).mean())
        optimizer_step(self.q_optimizer, q_loss)
        new_action, log_prob = self.sample(observation)
        pi_input = torch.cat([observation, new_action], dim=-1)
        for p in self.q_params:  # The policy's loss reaches the action, not the critics.
            p.requires_grad_(False)
        q_new = torch.min(self.q1(pi_input), self.q2(pi_input)).squeeze(-1)
        for p in self.q_params:
            p.requires_grad_(True)
        optimizer_step(self.pi_optimizer, (alpha * log_prob - q_new).mean())
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        optimizer_step(self.alpha_optimizer, alpha_loss)
        with torch.no_grad():
            torch._foreach_lerp_(self.target_params, self.q_params, SAC_TAU)


def ceiling_sac(seed: int, window: int, threads: int = 1) -> tuple[Window, str]:
    import gymnasium as gym
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    learner = PlainSac(obs_dim, act_dim)
    replay = NumpyReplay(SAC_REPLAY, obs_dim, act_dim, seed)
    clock = Window()
    observation, _ = env.reset(seed=seed)
    for step in range(1, SAC_WARMUP + window + 1):
        learning = step > SAC_LEARNING_STARTS  # As SB3: random actions until then.
        action = learner.act(observation) if learning else env.action_space.sample()
        next_observation, reward, terminated, truncated, _ = env.step(action)
        replay.add(observation, action, reward, next_observation, terminated)
        observation = env.reset()[0] if terminated or truncated else next_observation
        if learning:
            learner.update(*replay.sample(SAC_BATCH))
        if step == SAC_WARMUP:
            clock.open()
    clock.close()
    env.close()
    setup = ("bare gymnasium env; numpy replay 1e6 (next obs stored); plain-torch SAC "
             "pi/q1/q2 [256, 256] ReLU, fused Adam, 1 update of 256 per step; "
             f"{threads} torch thread(s)")
    return clock, setup


class RunningNorm:
    """Running mean and variance of observations (numpy), updated per batch."""

    def __init__(self, dim: int):
        import numpy as np

        self.mean = np.zeros(dim)
        self.var = np.ones(dim)
        self.count = 0

    def __call__(self, observation: np.ndarray) -> np.ndarray:
        import numpy as np

        normalized = (observation - self.mean) / np.sqrt(self.var + 1e-8)
        return np.clip(normalized, -OBS_CLIP, OBS_CLIP).astype(np.float32)

    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` [N, dim] in (Chan et al.'s combination of two summaries)."""
        n, total = len(batch), self.count + len(batch)
        delta = batch.mean(axis=0) - self.mean
        m2 = self.var * self.count + batch.var(axis=0) * n + delta ** 2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = m2 / total
        self.count = total


class PlainPpo:
    """Minimal PPO: Gaussian policy (MLP mean, state-independent log std) and value MLP."""

    def __init__(self, obs_dim: int, act_dim: int):
        import torch

        self.pi = mlp(obs_dim, act_dim)
        self.v = mlp(obs_dim, 1)
        self.log_std = torch.nn.Parameter(torch.full((act_dim,), PPO_LOG_STD_INIT))
        self.params = [*self.pi.parameters(), *self.v.parameters(), self.log_std]
        self.optimizer = torch.optim.Adam(self.params, lr=PPO_LR, eps=ADAM_EPS_PPO, fused=True)

    def log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log-density [N] of ``action`` [N, A]."""
        z = (action - mean) / self.log_std.exp()
        return (-0.5 * z ** 2 - self.log_std - HALF_LOG_2PI).sum(-1)

    def act(self, observation: np.ndarray) -> tuple[np.ndarray, float, float]:
        """``(action [A], log-density, value)`` for one normalized observation."""
        import torch

        with torch.no_grad():
            x = torch.from_numpy(observation)
            mean = self.pi(x)
            action = mean + self.log_std.exp() * torch.randn_like(mean)
            return action.numpy(), float(self.log_prob(mean, action)), float(self.v(x))

    def value(self, observation: np.ndarray) -> float:
        import torch

        with torch.no_grad():
            return float(self.v(torch.from_numpy(observation)))

    def update(self, observation: torch.Tensor, action: torch.Tensor, old_log_prob: torch.Tensor,
               advantage: torch.Tensor, return_: torch.Tensor) -> None:
        """``PPO_EPOCHS`` passes of shuffled minibatches over one batch ([N, ...] each)."""
        import torch

        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        entropy_const = 0.5 + HALF_LOG_2PI
        for _ in range(PPO_EPOCHS):
            for idx in torch.randperm(len(advantage)).split(PPO_BATCH):
                obs, adv = observation[idx], advantage[idx]
                ratio = torch.exp(self.log_prob(self.pi(obs), action[idx]) - old_log_prob[idx])
                pi_loss = -torch.min(ratio * adv,
                                     ratio.clamp(1 - PPO_CLIP, 1 + PPO_CLIP) * adv).mean()
                value_loss = ((self.v(obs).squeeze(-1) - return_[idx]) ** 2).mean()
                entropy = (self.log_std + entropy_const).sum()
                loss = pi_loss + PPO_VF_COEF * value_loss - PPO_ENT_COEF * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.params, PPO_MAX_GRAD_NORM)
                self.optimizer.step()


def gae(reward: np.ndarray, value: np.ndarray, done: np.ndarray,
        last_value: float) -> tuple[np.ndarray, np.ndarray]:
    """``(advantage [T], return [T])``; ``done[t]``: the episode ended at step t."""
    import numpy as np

    advantage = np.empty_like(reward)
    next_value, next_advantage = last_value, 0.
    for t in reversed(range(len(reward))):
        not_done = 1. - done[t]
        delta = reward[t] + PPO_GAMMA * next_value * not_done - value[t]
        next_advantage = delta + PPO_GAMMA * PPO_GAE_LAMBDA * not_done * next_advantage
        advantage[t] = next_advantage
        next_value = value[t]
    return advantage, advantage + value


class PlainRollout:
    """Collects one env's ``PPO_N_STEPS`` steps with no-grad forwards into numpy arrays."""

    def __init__(self, env, learner: PlainPpo, seed: int):
        import numpy as np

        obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
        self.env, self.learner = env, learner
        self.norm = RunningNorm(obs_dim)
        self.raw = np.empty((PPO_N_STEPS, obs_dim))
        self.observation = np.empty((PPO_N_STEPS, obs_dim), np.float32)
        self.action = np.empty((PPO_N_STEPS, act_dim), np.float32)
        self.log_prob, self.value, self.reward, self.done = (
            np.empty(PPO_N_STEPS, np.float32) for _ in range(4))
        self.last_raw, _ = env.reset(seed=seed)

    def collect(self) -> tuple[torch.Tensor, ...]:
        """One batch: ``(observation, action, log_prob, advantage, return_)`` tensors."""
        import numpy as np
        import torch

        env, learner, norm = self.env, self.learner, self.norm
        for t in range(PPO_N_STEPS):
            self.raw[t] = self.last_raw
            self.observation[t] = norm(self.last_raw)
            action, self.log_prob[t], self.value[t] = learner.act(self.observation[t])
            self.action[t] = action
            raw, reward, terminated, truncated, _ = env.step(np.clip(action, -1., 1.))
            if truncated and not terminated:  # Bootstrap through the time limit.
                reward += PPO_GAMMA * learner.value(norm(raw))
            self.reward[t], self.done[t] = reward, terminated or truncated
            self.last_raw = env.reset()[0] if terminated or truncated else raw
        advantage, return_ = gae(self.reward, self.value, self.done,
                                 learner.value(norm(self.last_raw)))
        norm.update(self.raw)
        return tuple(torch.from_numpy(a) for a in (
            self.observation, self.action, self.log_prob, advantage, return_))


def ceiling_ppo(seed: int, window: int) -> tuple[Window, str]:
    import gymnasium as gym
    import torch

    torch.manual_seed(seed)
    env = gym.make(ENV_ID)
    learner = PlainPpo(env.observation_space.shape[0], env.action_space.shape[0])
    rollout = PlainRollout(env, learner, seed)
    clock = Window()
    for itr in range((PPO_N_STEPS + window) // PPO_N_STEPS):
        if itr == 1:
            clock.open()
        learner.update(*rollout.collect())
    clock.close()
    env.close()
    setup = ("bare gymnasium env, numpy running obs normalization; plain-torch mu/v "
             "[256, 256] ReLU, fused Adam; 512 steps, 20 epochs x 8 minibatches of 64")
    return clock, setup


RUNS: dict[tuple[str, str], Callable[[int, int], tuple[Window, str]]] = {
    ("rlframe", "mujoco_sac"): rlframe_sac,
    ("rlframe_2threads", "mujoco_sac"): functools.partial(rlframe_sac, threads=2),
    ("sb3", "mujoco_sac"): sb3_sac,
    ("sb3_2threads", "mujoco_sac"): functools.partial(sb3_sac, threads=2),
    ("ceiling", "mujoco_sac"): ceiling_sac,
    ("ceiling_2threads", "mujoco_sac"): functools.partial(ceiling_sac, threads=2),
    ("rlframe", "mujoco_ppo"): rlframe_ppo,
    ("sb3", "mujoco_ppo"): sb3_ppo,
    ("sb3_2threads", "mujoco_ppo"): functools.partial(sb3_ppo, threads=2),
    ("ceiling", "mujoco_ppo"): ceiling_ppo,
}

# What runs each case, in the order the driver's first round runs them.
FRAMEWORKS = {case: tuple(name for name, runs in RUNS if runs == case) for case in CASES}
