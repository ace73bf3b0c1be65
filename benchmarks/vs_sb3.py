"""rlframe against Stable-Baselines3 on the same machine: sampling speed and time to solve.

Needs stable-baselines3 (``pip install stable-baselines3``), which is not a dependency
of rlframe; without it the script says so and exits with status 2.

    python benchmarks/vs_sb3.py [--only sampling ppo dqn sac] [--seeds 5] [--json out.json]
    python benchmarks/vs_sb3.py --only sampling ppo --seeds 1 --ppo_steps 20480   # quick check

Every run (and the sampling section) runs in a fresh subprocess with
``torch.set_num_threads(1)``, so runs share no state and each has its own peak RSS,
read from the kernel when the parent reaps it (``os.wait4``; the parent imports
nothing heavy, because Linux carries a parent's RSS high-water mark into its child
across ``exec``). The frameworks alternate run by run (rlframe seed 0, SB3 seed 0,
rlframe seed 1, ...), so machine load affects both alike.

Sections:

(a) **sampling**: env steps per second on CartPole-v1 with B envs (``--batch_B``,
    default 8 and 64) and the same policy: two 64x64 tanh MLPs (policy and value).
    rlframe: ``SerialSampler(batch_T=32)`` with ``CategoricalPgAgent`` (its default
    ``CategoricalPgMlpModel``) collecting batches of 32 x B steps, as for PPO
    (with the bootstrap value). SB3: ``PPO.collect_rollouts`` with ``n_steps=32``
    (the same 32 x B steps per batch; it also stores log-probabilities and computes
    GAE). Ceiling: the same B gymnasium envs stepped in a bare Python loop with one
    no-grad forward pass of plain-torch policy and value MLPs of the same shapes on the
    batch of B observations and a categorical sample per step. Rounds alternate
    between the three; medians of wall-clock rates are printed with the ratios
    rlframe/ceiling (target >= 0.8 at batch_B=8) and rlframe/SB3 (target >= 2.5), and
    ceiling/SB3: the most any sampler with this policy could gain over SB3 here.

(b) **ppo**: PPO on CartPole-v1 to a mean evaluation return of 475, rl-zoo's
    hyperparameters: 8 envs, n_steps 32, batch 256 (one minibatch), 20 epochs,
    gamma 0.98, GAE lambda 0.8, no entropy bonus, learning rate 1e-3 and clip range
    0.2 both linear to 0 over 1e5 steps (rounded up here to 100,352, a whole number of
    evaluation intervals, for both), gradient norm clip 0.5, separate 64x64 tanh
    policy and value MLPs with orthogonal initialisation, Adam eps 1e-5, advantages
    normalised. The schedules always span those 100,352 steps, so a run cannot learn
    past them: that is also the cap (``--ppo_steps`` may set a smaller one for quick
    checks; it only cuts runs short).

(c) **dqn**: DQN on CartPole-v1 to 475, rl-zoo's hyperparameters: one env, learning
    rate 2.3e-3, batch 64, replay 100,000, learning starts 1,000, gamma 0.99, 128
    gradient steps every 256 env steps, epsilon 1.0 -> 0.04 over 8,000 steps (0.16 of
    the zoo's 5e4), target copied every 10 env steps, [256, 256] ReLU MLP, Huber loss,
    gradient norm clip 10, Adam eps 1e-8. rlframe: ``batch_T=256``, ``batch_B=1``,
    ``replay_ratio=32`` (32 * 256 / 64 = 128 updates per iteration),
    ``target_update_interval=128`` updates (see below), ``eps_steps=8000``. Cap: 2 x
    5e4 steps (rounded up to whole evaluation intervals; ``--dqn_steps``).

(d) **sac**: SAC on Pendulum-v1 to -200, rl-zoo's hyperparameters: learning rate 1e-3
    and SB3's SAC defaults otherwise (replay 1e6, batch 256, tau 0.005, gamma 0.99,
    one update per env step, learning starts 100, [256, 256] ReLU MLPs for policy and
    twin critics, learned temperature starting at 1 with target entropy -dim(A)).
    rlframe: ``batch_T=1``, ``batch_B=1``, ``replay_ratio=256``. Cap: 2 x 2e4 steps
    (``--sac_steps``).

Time to solve (b-d) is training wall time, from building the objects (envs, model,
algorithm, runner) to the end of the first evaluation whose mean return reaches the
threshold, minus the time spent evaluating. Both frameworks evaluate at the same env
step counts (PPO and DQN every 2,048 steps, SAC every 1,000), after the updates on
those steps, on a separate env, with greedy actions: 10 episodes on CartPole, 5 on
Pendulum, one after another. rlframe: ``MinibatchRlEval`` with
``log_interval_steps`` = the interval, ``eval_n_envs=1``, ``eval_max_trajectories``
= the episodes, ``StopAtReturn`` to stop, and a callback that reads the clock at
every row and subtracts the runner's own ``Diagnostics/CumEvalTime`` (the time in
``sampler.evaluate_agent``, the untrained agent's evaluation included). SB3: a
callback that runs ``evaluate_policy(deterministic=True)`` at the start of the first
rollout at or past each evaluation point, times it, and stops ``learn()``.
Steps-to-solve (env steps at the solving evaluation) are printed beside the times.
Medians count unsolved runs as slower than any solved one. Targets: rlframe/SB3
median time-to-solve <= 0.6 (PPO, DQN) and <= 0.8 (SAC); peak RSS of PPO runs
rlframe <= SB3.

Where the mapping is not exact:

* PPO evaluation: ``CategoricalPgAgent`` samples its actions in eval mode too and has
  no switch for greedy ones, so the rlframe side uses a subclass that takes the most
  probable action in eval mode (as SB3's ``evaluate_policy`` does by default).
* PPO schedules: rlframe steps its linear schedules after each iteration (iteration k
  trains with ``lr * (1 - k / n)``; the clip range lags one iteration more), SB3
  before training (rollout k trains with ``lr * (1 - (k + 1) / n)``), 1/392 apart.
* PPO value loss: rlframe's is ``0.5 * (V - R)^2``, SB3's ``(V - R)^2``, so
  ``value_loss_coeff=1`` is SB3's ``vf_coef=0.5`` (exact). Advantages are normalised
  with the population std + 1e-6 (SB3: sample std + 1e-8).
* PPO time limits: both bootstrap episodes cut at 500 steps; SB3 from the value of the
  final observation, rlframe from the value of the last observation it has.
* DQN target network: SB3 copies it every 10 env steps, but only while collecting, when
  the online network does not change, so in effect once per 128 updates, just before
  each training phase; rlframe's ``target_update_interval`` counts updates, and 128
  copies at the end of each training phase: the same targets.
* DQN epsilon: SB3 decays it from step 0 to 8,000 (its ``exploration_fraction`` is a
  fraction of ``learn()``'s total steps, so it is passed as 8,000 / cap), rlframe from
  the iteration where learning starts (768 steps) to 7,936 steps, one value per
  256-step batch. Both act uniformly at random for (about) the first 1,000 steps.
* DQN/SAC time limits: SB3's replay stores the observation after a time-limit cut and
  bootstraps from it; rlframe's replay does not have it and leaves the transitions
  whose return reaches the cut out of the loss (one in 500 on CartPole, one in 200 on
  Pendulum). rlframe's DQN default Adam eps (0.01 / batch) is replaced by torch's 1e-8.
* SAC warm-up: SB3 acts uniformly at random for the first 100 steps, rlframe samples the
  untrained policy with a fixed pre-squash std (``pretrain_std=0.75``; there is no
  uniform option). rlframe's critics take actions in the env's range ([-2, 2]), SB3's
  rescaled to [-1, 1]. (The update order differs in form only: both use the temperature
  of the previous update in the losses and the policy before its step in the
  temperature's loss.)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from _timing import run_reaped, sb3_without_log_folder, warn_if_cpus_busy

# The parent process imports only the standard library: heavy imports would show up
# in every child's peak RSS (see the module docstring).

SECTIONS = ("sampling", "ppo", "dqn", "sac")
FRAMEWORKS = ("rlframe", "sb3")
LABELS = {"rlframe": "rlframe", "sb3": "SB3"}
INSTALL_MESSAGE = (
    "benchmarks/vs_sb3.py compares rlframe with Stable-Baselines3, which could not be "
    "imported{detail}.\nStable-Baselines3 is not a dependency of rlframe; install it in "
    "this environment to run the comparison:\n\n    pip install stable-baselines3\n")
SAMPLING_T = 32  # rlframe batch_T = SB3 n_steps in the sampling section.
SAMPLING_TARGETS = {"ceiling": 0.8, "sb3": 2.5}  # rlframe/... at batch_B=8.
PPO_RSS_TARGET = 1.0  # rlframe/SB3 median peak RSS of the PPO runs.


@dataclass(frozen=True)
class Task:
    """One time-to-solve task, the same for both frameworks."""
    name: str
    title: str
    env_id: str
    threshold: float
    zoo_steps: int  # rl-zoo's n_timesteps.
    default_cap_factor: int  # Cap = zoo_steps x this (rounded up to whole intervals).
    eval_interval: int  # Env steps between evaluations.
    eval_episodes: int
    max_episode_steps: int  # The env's time limit (bounds an evaluation's steps).
    target_ratio: float  # Target for rlframe/SB3 median time-to-solve.


TASKS = {
    "ppo": Task("ppo", "PPO CartPole-v1", "CartPole-v1", 475., 100_000, 1, 2048, 10, 500, 0.6),
    "dqn": Task("dqn", "DQN CartPole-v1", "CartPole-v1", 475., 50_000, 2, 2048, 10, 500, 0.6),
    "sac": Task("sac", "SAC Pendulum-v1", "Pendulum-v1", -200., 20_000, 2, 1000, 5, 200, 0.8),
}


def round_up(steps: int, interval: int) -> int:
    return -(-int(steps) // interval) * interval


def ppo_horizon() -> int:
    """Env steps the PPO schedules span: 1e5 rounded up to whole evaluation intervals."""
    task = TASKS["ppo"]
    return round_up(task.zoo_steps, task.eval_interval)


def task_cap(task: Task, steps: float | None) -> int:
    """The step cap of a task's runs: ``steps`` or the default, whole intervals."""
    cap = round_up(task.zoo_steps * task.default_cap_factor if steps is None else steps,
                   task.eval_interval)
    if task.name == "ppo":
        cap = min(cap, ppo_horizon())  # The schedules end there: nothing to learn after.
    return cap


# --------------------------------------------------------------------------- runs
# Each function below runs inside a worker subprocess and imports its framework only.

class EvalRecord:
    """Evaluations of one run: ``(env steps, mean return, training seconds)`` each."""

    def __init__(self, task: Task, cap: int, start: float):
        self.task = task
        self.cap = cap
        self.start = start
        self.evals: list[tuple[int, float, float]] = []

    def add(self, steps: int, mean_return: float, train_time: float) -> bool:
        """Record one evaluation; returns whether the run should go on."""
        self.evals.append((int(steps), float(mean_return), float(train_time)))
        return not (mean_return >= self.task.threshold or steps >= self.cap)

    def result(self, eval_time: float) -> dict:
        solving = next((e for e in self.evals if e[1] >= self.task.threshold), None)
        last = self.evals[-1] if self.evals else (0, math.nan, math.nan)
        return dict(evals=self.evals, solved=solving is not None,
                    steps_to_solve=solving[0] if solving else None,
                    time_to_solve=solving[2] if solving else None,
                    steps=last[0], train_time=last[2], eval_time=eval_time,
                    best_return=max((e[1] for e in self.evals), default=math.nan))


class RlframeClock:
    """Runner callback: training time at every evaluation row; stops the run at the cap.

    The runner measures its evaluations (``Diagnostics/CumEvalTime``), so the training
    time is the time since the objects were built minus that. A plain object with
    ``on_log`` is a valid callback, so this module needs no rlframe import at the top
    (SB3's workers must not load rlframe, nor rlframe's SB3).
    """

    def __init__(self, record: EvalRecord):
        self.record = record
        self.eval_time = 0.

    def on_log(self, runner, itr: int, diagnostics: dict) -> bool | None:
        now = time.perf_counter()
        self.eval_time = float(diagnostics["Diagnostics/CumEvalTime"])
        if itr < 0:  # The untrained agent's evaluation: its time counts, the row not.
            return None
        return self.record.add(int(diagnostics["Diagnostics/CumSteps"]),
                               float(diagnostics["ReturnAverage"]),
                               now - self.record.start - self.eval_time)


def run_rlframe(task: Task, seed: int, cap: int) -> dict:
    import torch

    from rlframe.agents.base import AgentStep
    from rlframe.agents.dqn.dqn_agent import DqnAgent
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.agents.qpg.sac_agent import SacAgent
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.algos.pg.ppo import PPO
    from rlframe.algos.qpg.sac import SAC
    from rlframe.envs.gym import make as gym_make
    from rlframe.runners.callbacks import StopAtReturn
    from rlframe.runners.minibatch_rl import MinibatchRlEval
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.logging.context import logger_context

    class GreedyEvalCategoricalPgAgent(CategoricalPgAgent):
        """Takes the most probable action in eval mode (CategoricalPgAgent samples)."""

        _greedy = False

        def eval_mode(self, itr: int) -> None:
            super().eval_mode(itr)
            self._greedy = True

        def sample_mode(self, itr: int) -> None:
            super().sample_mode(itr)
            self._greedy = False

        def step(self, observation, prev_action, prev_reward) -> AgentStep:
            agent_step = super().step(observation, prev_action, prev_reward)
            if not self._greedy:
                return agent_step
            greedy = agent_step.agent_info.dist_info.prob.argmax(dim=-1)
            return AgentStep(action=greedy.to(agent_step.action.dtype),
                             agent_info=agent_step.agent_info)

    torch.set_num_threads(1)
    start = time.perf_counter()
    record = EvalRecord(task, cap, start)
    batch_T, batch_B = dict(ppo=(32, 8), dqn=(256, 1), sac=(1, 1))[task.name]
    sampler = SerialSampler(
        EnvCls=gym_make, env_kwargs=dict(id=task.env_id), eval_env_kwargs=dict(id=task.env_id),
        batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0,
        eval_n_envs=1, eval_max_steps=task.eval_episodes * task.max_episode_steps,
        eval_max_trajectories=task.eval_episodes)
    n_steps = cap
    if task.name == "ppo":
        algo = PPO(discount=0.98, gae_lambda=0.8, epochs=20, minibatches=1,
                   learning_rate=1e-3, linear_lr_schedule=True, ratio_clip=0.2,
                   clip_grad_norm=0.5, entropy_loss_coeff=0., value_loss_coeff=1.,
                   normalize_advantage=True, optim_kwargs=dict(eps=1e-5))
        agent = GreedyEvalCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64]))
        n_steps = ppo_horizon()  # The schedules' span; the clock stops the run at the cap.
    elif task.name == "dqn":
        algo = DQN(discount=0.99, batch_size=64, min_steps_learn=1000, delta_clip=1.,
                   replay_size=100_000, replay_ratio=32, target_update_tau=1.,
                   target_update_interval=128, n_step_return=1, learning_rate=2.3e-3,
                   optim_kwargs={}, clip_grad_norm=10., eps_steps=8000)
        agent = DqnAgent(model_kwargs=dict(hidden_sizes=[256, 256]), eps_init=1.,
                         eps_final=0.04, eps_eval=0.)
    else:
        algo = SAC(discount=0.99, batch_size=256, min_steps_learn=100, replay_size=1_000_000,
                   replay_ratio=256, target_update_tau=0.005, target_update_interval=1,
                   learning_rate=1e-3, target_entropy="auto")
        agent = SacAgent(model_kwargs=dict(hidden_sizes=[256, 256]),
                         q_model_kwargs=dict(hidden_sizes=[256, 256]))
    clock = RlframeClock(record)
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                             log_interval_steps=task.eval_interval, seed=seed,
                             affinity=dict(master_torch_threads=1),
                             callbacks=[clock, StopAtReturn(task.threshold)])
    with logger_context("vs_sb3", seed, f"{task.name}_{task.env_id}", dict(seed=seed, cap=cap),
                        snapshot_mode="none"):
        runner.train()
    return record.result(clock.eval_time)


def run_sb3(task: Task, seed: int, cap: int) -> dict:
    import torch
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class EvalClock(BaseCallback):
        """Evaluates at the start of the first rollout at or past each evaluation point
        (after the updates on the steps before it), times it, and stops ``learn()``."""

        def __init__(self, record: EvalRecord, eval_env):
            super().__init__()
            self.record = record
            self.eval_env = eval_env
            self.next_eval = task.eval_interval
            self.eval_time = 0.
            self.go_on = True

        def _evaluate(self) -> None:
            steps = self.model.num_timesteps
            begin = time.perf_counter()
            mean_return, _ = evaluate_policy(self.model, self.eval_env, deterministic=True,
                                             n_eval_episodes=task.eval_episodes)
            train_time = begin - self.record.start - self.eval_time
            self.eval_time += time.perf_counter() - begin
            while self.next_eval <= steps:
                self.next_eval += task.eval_interval
            self.go_on = self.record.add(steps, mean_return, train_time)

        def _on_rollout_start(self) -> None:
            if self.go_on and self.model.num_timesteps >= self.next_eval:
                self._evaluate()

        def _on_step(self) -> bool:
            return self.go_on

        def _on_training_end(self) -> None:  # learn() reached its total steps.
            if self.go_on and self.model.num_timesteps >= self.next_eval:
                self._evaluate()

    torch.set_num_threads(1)
    start = time.perf_counter()
    record = EvalRecord(task, cap, start)
    n_envs = 8 if task.name == "ppo" else 1
    env = make_vec_env(task.env_id, n_envs=n_envs, seed=seed)
    eval_env = make_vec_env(task.env_id, n_envs=1, seed=seed + 10_000)
    common = dict(seed=seed, device="cpu", verbose=0)
    total_steps = cap
    if task.name == "ppo":
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
                    gae_lambda=0.8, ent_coef=0., vf_coef=0.5, max_grad_norm=0.5,
                    learning_rate=lambda progress_remaining: 1e-3 * progress_remaining,
                    clip_range=lambda progress_remaining: 0.2 * progress_remaining,
                    policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                       activation_fn=torch.nn.Tanh),
                    **common)
        total_steps = ppo_horizon()  # The schedules' span; the callback stops at the cap.
    elif task.name == "dqn":
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10,
                    train_freq=256, gradient_steps=128,
                    exploration_fraction=0.16 * task.zoo_steps / cap,
                    exploration_initial_eps=1., exploration_final_eps=0.04, max_grad_norm=10,
                    policy_kwargs=dict(net_arch=[256, 256]), **common)
    else:
        model = SAC("MlpPolicy", env, learning_rate=1e-3, buffer_size=1_000_000,
                    learning_starts=100, batch_size=256, tau=0.005, gamma=0.99, train_freq=1,
                    gradient_steps=1, ent_coef="auto", target_entropy="auto",
                    policy_kwargs=dict(net_arch=[256, 256]), **common)
    clock = EvalClock(record, eval_env)
    sb3_without_log_folder(model).learn(total_timesteps=total_steps, callback=clock)
    return record.result(clock.eval_time)


def run_sampling(batch_Bs: list[int], steps: int, rounds: int) -> list[dict]:
    """Env steps per second of the ceiling, rlframe and SB3 at each batch_B."""
    import gymnasium as gym
    import numpy as np
    import torch
    from _timing import median_rates
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.envs.gym import make as gym_make
    from rlframe.samplers.serial.sampler import SerialSampler

    torch.set_num_threads(1)
    env_id = "CartPole-v1"
    rows = []
    for B in batch_Bs:
        n_batches = max(steps // (SAMPLING_T * B), 1)

        # rlframe: the sampler as PPO's runner drives it.
        sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id=env_id), batch_T=SAMPLING_T,
                                batch_B=B, max_decorrelation_steps=0)
        agent = CategoricalPgAgent()
        sampler.initialize(agent, seed=0, bootstrap_value=True)
        itr = [0]

        def rlframe_batches() -> None:
            for _ in range(n_batches):
                agent.sample_mode(itr[0])
                sampler.obtain_samples(itr[0])
                itr[0] += 1

        # SB3: PPO's rollout collection, without training.
        model = PPO("MlpPolicy", make_vec_env(env_id, n_envs=B, seed=0), n_steps=SAMPLING_T,
                    batch_size=SAMPLING_T * B, seed=0, device="cpu", verbose=0)
        # What learn() does before its first rollout: reset the envs, make a callback.
        _, callback = sb3_without_log_folder(model)._setup_learn(total_timesteps=10 ** 9)

        def sb3_batches() -> None:
            for _ in range(n_batches):
                model.collect_rollouts(model.env, callback, model.rollout_buffer,
                                       n_rollout_steps=SAMPLING_T)

        # Ceiling: bare gymnasium envs, one forward pass and a categorical sample per step.
        envs = [gym.make(env_id) for _ in range(B)]
        obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)]).astype(np.float32)
        obs_size, n_actions = obs.shape[1], envs[0].action_space.n

        def mlp(out_size: int) -> torch.nn.Module:
            return torch.nn.Sequential(torch.nn.Linear(obs_size, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, out_size))
        pi, v = mlp(n_actions), mlp(1)

        def ceiling_batches() -> None:
            for _ in range(n_batches * SAMPLING_T):
                with torch.inference_mode():  # As rlframe's collectors act.
                    x = torch.from_numpy(obs)
                    probs = torch.softmax(pi(x), dim=-1)
                    v(x)
                    actions = torch.multinomial(probs, 1).squeeze(-1).numpy()
                for b, env in enumerate(envs):
                    ob, _, terminated, truncated, _ = env.step(int(actions[b]))
                    if terminated or truncated:
                        ob, _ = env.reset()
                    obs[b] = ob

        cases = dict(ceiling=ceiling_batches, rlframe=rlframe_batches, sb3=sb3_batches)
        rates = median_rates(cases, rounds, n_batches * SAMPLING_T * B)
        rows.append(dict(batch_B=B, steps_per_round=n_batches * SAMPLING_T * B, **rates))
        sampler.shutdown()
        model.env.close()
        for env in envs:
            env.close()
    return rows


def worker_main(spec: dict) -> None:
    """Run what ``spec`` asks for and write its result (JSON) to ``spec["result_path"]``."""
    if spec["what"] == "sampling":
        result = run_sampling(spec["batch_B"], spec["steps"], spec["rounds"])
    else:
        run = run_rlframe if spec["what"] == "rlframe" else run_sb3
        result = run(TASKS[spec["task"]], spec["seed"], spec["cap"])
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)


# ------------------------------------------------------------------------- parent

def in_subprocess(spec: dict) -> tuple[object, float]:
    """Run a worker in a fresh process in a temporary working directory.

    Returns:
        ``(result, peak RSS in MiB)`` of the worker process.
    """
    with tempfile.TemporaryDirectory(prefix="vs_sb3_") as tmp:
        spec = dict(spec, result_path=os.path.join(tmp, "result.json"))
        env = dict(os.environ, RLFRAME_PROGRESS="0", RLFRAME_DATA_DIR=os.path.join(tmp, "data"))
        log_path = os.path.join(tmp, "worker.log")
        code, peak_mib = run_reaped(
            [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
            tmp, env, log_path)
        if code != 0:
            with open(log_path) as log:
                tail = log.read()[-4000:]
            raise SystemExit(f"worker {spec['what']} {spec.get('task', '')} seed "
                             f"{spec.get('seed', '')} failed (exit code {code}):\n"
                             f"{tail}")
        with open(spec["result_path"]) as f:
            return json.load(f), peak_mib


def sb3_versions() -> dict:
    """Versions of SB3, rlframe, torch and gymnasium, read in a child process (the
    parent stays small), or ``{"error": last line of the traceback}`` if one does not
    import."""
    code = ("import stable_baselines3, json, gymnasium, torch, rlframe; print(json.dumps(dict("
            "sb3=stable_baselines3.__version__, torch=torch.__version__, "
            "gymnasium=gymnasium.__version__, rlframe=rlframe.__version__, "
            "rlframe_path=rlframe.__path__[0])))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return dict(error=lines[-1] if lines else f"exit code {proc.returncode}")
    return json.loads(proc.stdout)


def ratio_text(ratio: float, target: float | None, at_least: bool) -> str:
    if math.isnan(ratio):
        return "n/a"
    if target is None:
        return f"{ratio:.2f}"
    met = ratio >= target if at_least else ratio <= target
    sign = ">=" if at_least else "<="
    return f"{ratio:.2f} (target {sign} {target}: {'met' if met else 'NOT met'})"


def sampling_section(args: argparse.Namespace) -> list[dict]:
    print(f"\n(a) Sampling, CartPole-v1: env steps per second (wall clock), median of "
          f"{args.rounds} alternating rounds of about {args.sampling_steps:,} steps; "
          f"batch_T = n_steps = {SAMPLING_T}; policy and value 64x64 tanh MLPs", flush=True)
    rows, _ = in_subprocess(dict(what="sampling", batch_B=args.batch_B,
                                 steps=args.sampling_steps, rounds=args.rounds))
    print(f"{'batch_B':>8} {'ceiling':>10} {'rlframe':>10} {'SB3':>10}   "
          f"{'rlframe/ceiling':<32} {'rlframe/SB3':<32} ceiling/SB3")
    for row in rows:
        wall = row["wall"]
        targets = SAMPLING_TARGETS if row["batch_B"] == 8 else {}
        vs_ceiling = wall["rlframe"] / wall["ceiling"]
        vs_sb3 = wall["rlframe"] / wall["sb3"]
        ceiling_vs_sb3 = wall["ceiling"] / wall["sb3"]
        row["ratios"] = dict(rlframe_over_ceiling=vs_ceiling, rlframe_over_sb3=vs_sb3,
                             ceiling_over_sb3=ceiling_vs_sb3)
        print(f"{row['batch_B']:>8} {wall['ceiling']:>10,.0f} {wall['rlframe']:>10,.0f} "
              f"{wall['sb3']:>10,.0f}   "
              f"{ratio_text(vs_ceiling, targets.get('ceiling'), True):<32} "
              f"{ratio_text(vs_sb3, targets.get('sb3'), True):<32} {ceiling_vs_sb3:.2f}")
    return rows


def run_line(task: Task, framework: str, seed: int, run: dict) -> str:
    head = f"  {task.name} {LABELS[framework]:<7} seed {seed}:"
    tail = (f"(evaluation {run['eval_time']:.1f} s excluded), "
            f"peak RSS {run['peak_rss_mib']:.0f} MiB")
    if run["solved"]:
        return (f"{head} solved at {run['steps_to_solve']:,} steps in "
                f"{run['time_to_solve']:.1f} s {tail}")
    return (f"{head} UNSOLVED after {run['steps']:,} steps in {run['train_time']:.1f} s, "
            f"best evaluation {run['best_return']:.1f} {tail}")


def summarize(runs: list[dict]) -> dict:
    """Medians and ranges; an unsolved run counts as slower than any solved one (inf)."""
    times = [r["time_to_solve"] if r["solved"] else math.inf for r in runs]
    steps = [r["steps_to_solve"] if r["solved"] else math.inf for r in runs]
    rss = [r["peak_rss_mib"] for r in runs]
    return dict(runs=len(runs), solved=sum(r["solved"] for r in runs),
                time_median=statistics.median(times), time_min=min(times), time_max=max(times),
                steps_median=statistics.median(steps), steps_min=min(steps),
                steps_max=max(steps), rss_median=statistics.median(rss), rss_max=max(rss))


def spread(median: float, low: float, high: float, thousands: bool = False) -> str:
    """``median [low - high]``, with "unsolved" for infinite values."""
    if math.isinf(low):
        return "none solved"

    def text(x: float) -> str:
        if math.isinf(x):
            return "unsolved"
        return f"{x:,.0f}" if thousands else f"{x:.1f}"
    return f"{text(median)} [{text(low)} - {text(high)}]"


def task_section(task: Task, args: argparse.Namespace, cap: int) -> dict:
    print(f"\n({'bcd'[list(TASKS).index(task.name)]}) {task.title}: time to a mean "
          f"evaluation return >= {task.threshold:g} ({task.eval_episodes} greedy episodes "
          f"every {task.eval_interval:,} env steps; cap {cap:,} steps; {args.seeds} seed(s) "
          "each, frameworks alternating)", flush=True)
    runs: dict[str, list[dict]] = {framework: [] for framework in FRAMEWORKS}
    for seed in range(args.seeds):
        for framework in FRAMEWORKS:
            run, peak_mib = in_subprocess(dict(what=framework, task=task.name, seed=seed,
                                               cap=cap))
            run.update(seed=seed, peak_rss_mib=peak_mib)
            runs[framework].append(run)
            print(run_line(task, framework, seed, run), flush=True)
    summary = {framework: summarize(runs[framework]) for framework in FRAMEWORKS}
    print(f"\n  {task.title} summary (median [min - max]; unsolved runs count as slowest)")
    print(f"  {'':<9} {'solved':>6}   {'time to solve (s)':<28} {'steps to solve':<34} "
          "peak RSS MiB (median, max)")
    for framework in FRAMEWORKS:
        s = summary[framework]
        times = spread(s["time_median"], s["time_min"], s["time_max"])
        steps = spread(s["steps_median"], s["steps_min"], s["steps_max"], thousands=True)
        print(f"  {LABELS[framework]:<9} {s['solved']:>3}/{s['runs']:<2}   {times:<28} "
              f"{steps:<34} {s['rss_median']:.0f}, {s['rss_max']:.0f}")
    rl, sb = summary["rlframe"], summary["sb3"]
    time_ratio = (rl["time_median"] / sb["time_median"]
                  if math.isfinite(rl["time_median"]) and math.isfinite(sb["time_median"])
                  else math.nan)
    steps_ratio = (rl["steps_median"] / sb["steps_median"]
                   if math.isfinite(rl["steps_median"]) and math.isfinite(sb["steps_median"])
                   else math.nan)
    rss_ratio = rl["rss_median"] / sb["rss_median"]
    print(f"  rlframe/SB3 median time to solve: "
          f"{ratio_text(time_ratio, task.target_ratio, False)}")
    print(f"  rlframe/SB3 median steps to solve: {ratio_text(steps_ratio, None, False)}")
    rss_target = PPO_RSS_TARGET if task.name == "ppo" else None
    print(f"  rlframe/SB3 median peak RSS: {ratio_text(rss_ratio, rss_target, False)}",
          flush=True)
    return dict(cap=cap, runs=runs, summary=summary,
                ratios=dict(time_to_solve=time_ratio, steps_to_solve=steps_ratio,
                            peak_rss=rss_ratio),
                targets=dict(time_to_solve=task.target_ratio, peak_rss=rss_target))


def jsonable(value: object) -> object:
    """Replace inf/nan (not JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="sections to run")
    parser.add_argument("--seeds", type=int, default=5, help="runs per framework and task")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--batch_B", type=int, nargs="+", default=[8, 64],
                        help="sampling: numbers of envs")
    parser.add_argument("--sampling_steps", type=int, default=16384,
                        help="sampling: env steps per round and case")
    parser.add_argument("--rounds", type=int, default=5, help="sampling: alternating rounds")
    for name in TASKS:
        task = TASKS[name]
        default = task_cap(task, None)
        parser.add_argument(f"--{name}_steps", type=float, default=None,
                            help=f"{task.title}: cap in env steps (default {default:,}; "
                                 f"rounded up to whole {task.eval_interval}-step intervals)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker_main(json.loads(args.worker))
        return
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.

    versions = sb3_versions()
    if "error" in versions:
        sys.stderr.write(INSTALL_MESSAGE.format(detail=f" ({versions['error']})"))
        sys.exit(2)
    print(f"rlframe {versions['rlframe']} ({versions['rlframe_path']}) vs stable-baselines3 "
          f"{versions['sb3']}; torch {versions['torch']}, gymnasium {versions['gymnasium']}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("Each run in a fresh subprocess with torch.set_num_threads(1); peak RSS per run "
          "process; frameworks alternate run by run.")
    print("Command: " + shlex.join(["python", "benchmarks/vs_sb3.py", *sys.argv[1:]]))
    results: dict = dict(versions=versions, cpus=os.cpu_count(), torch_threads=1,
                         seeds=args.seeds)
    if "sampling" in args.only:
        results["sampling"] = sampling_section(args)
    for name, task in TASKS.items():
        if name in args.only:
            results[name] = task_section(task, args, task_cap(task, getattr(args, f"{name}_steps")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(jsonable(results), f, indent=2)
        print(f"\nResults written to {args.json}")


if __name__ == "__main__":
    main()
