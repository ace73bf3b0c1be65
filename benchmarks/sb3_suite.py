"""Stable-Baselines3 on a benchmark suite's MuJoCo and Atari entries, at the suite's own
budget, so that ``rlframe report`` can put both frameworks side by side.

Needs stable-baselines3 and gymnasium's MuJoCo envs, or ale-py for Atari (``pip install
stable-baselines3 "gymnasium[mujoco]" ale-py``; neither SB3 nor this script is part of
rlframe).

    python benchmarks/sb3_suite.py benchmarks/suite/mujoco_1m.json -o results/sb3 \\
        [--only sac_Hopper-v5 ...] [--evals 20] [--eval-episodes 5] [--n-steps N]
        [--seeds K]
    python benchmarks/sb3_suite.py benchmarks/suite/mujoco_1m.json -o results/sb3 \\
        --evaluate-final 50 [--eval-seed 100] [--only ...]
    rlframe report results/mujoco results/sb3 --suite benchmarks/suite/mujoco_1m.json

For each entry (PPO, SAC or TD3 on a MuJoCo env; PPO or DQN on an Atari game, named as
rlframe names it: ``breakout`` is ``BreakoutNoFrameskip-v4``) and seed, SB3 trains for
the entry's ``n_steps`` (agent steps) with RL Zoo's hyperparameters for that algorithm
and env (``ZOO`` below; rl-baselines3-zoo's ``hyperparams/*.yml`` for the -v3/-v4
MuJoCo envs and for ``atari``), and every ``n_steps / evals`` steps its policy is
evaluated for ``eval_episodes`` episodes on a separate env (:class:`Player`): MuJoCo
deterministically (PPO with the training env's observation statistics, rewards
unnormalized), Atari on whole games with the game score logged, PPO sampling its
actions and DQN greedy with rlframe's evaluation epsilon, as rlframe evaluates them. An
entry's ``stop_at_return`` ends its run at the first evaluation whose ``ReturnAverage``
reaches it, as rlframe's runs end. Each run goes to
``OUT/<label>_sb3/run_<seed>`` with a ``params.json`` (``env_id``, the hyperparameters,
SB3's version) and a ``progress.csv`` with rlframe's columns (``Diagnostics/CumSteps``,
``Diagnostics/CumTime (s)``, ``ReturnAverage``, ``ReturnStd``, ``TrajsInEval``; on Atari
``ReturnAverage`` sums the rewards clipped to their sign, and ``GameScoreAverage`` and
``GameScoreStd`` the game score), so the report groups it as a setting of its own. A
finished run holds ``suite_done.json`` and is not run again; its final model stays in
``final_model/`` (the model, and PPO's VecNormalize statistics), so that
``--evaluate-final N`` can play each finished run's final policy for N episodes, one
after another, as its evaluations did, and write ``final_policy_eval.json`` in the
layout of ``rlframe evaluate --json``: the same reading of a final policy in both
frameworks. At every evaluation a run saves
a checkpoint (``sb3_checkpoint/``: the model, its replay buffer or VecNormalize
statistics, the rows and time so far); a stopped run continues from it when the script
runs again (PPO's partial rollout and the random number generators' states are not
kept, so the continued run is not the one an uninterrupted run would have been).
Entries of other algorithms or envs are listed and left out.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import inspect
import json
import os
import re
import shutil
import sys
import time
from typing import TYPE_CHECKING

from _timing import sb3_without_log_folder

from rlframe.cli.benchmark import record_system
from rlframe.presets.suite import SuiteError, SuiteEntry, load_suite

if TYPE_CHECKING:
    import gymnasium as gym
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.vec_env import VecNormalize

    from rlframe.cli.evaluate import Episode

MUJOCO = ("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "Swimmer")
# RL Zoo's MuJoCo settings (SB3's defaults otherwise). PPO normalizes observations and
# rewards (VecNormalize); its network sizes and activation are in policy_kwargs.
ZOO: dict[tuple[str, str], dict] = {
    ("sac", "*"): dict(learning_starts=10000),
    ("td3", "*"): dict(learning_starts=10000, noise_std=0.1, train_freq=1, gradient_steps=1,
                       learning_rate=1e-3, batch_size=256, net_arch=[400, 300]),
    ("ppo", "HalfCheetah"): dict(normalize=True, n_steps=512, batch_size=64, gamma=0.98,
                                 learning_rate=2.0633e-05, ent_coef=0.000401762,
                                 clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                                 max_grad_norm=0.8, vf_coef=0.58096, log_std_init=-2.),
    ("ppo", "Hopper"): dict(normalize=True, n_steps=512, batch_size=32, gamma=0.999,
                            learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2,
                            n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
                            log_std_init=-2.),
}
# RL Zoo's Atari settings (``hyperparams/{ppo,dqn}.yml``, ``atari``): AtariWrapper and 4
# stacked frames. PPO's ``linear`` values fall linearly to 0 over the run ("lin_" in the
# zoo). DQN's epsilon falls over the first ``exploration_steps`` agent steps: the zoo's
# exploration_fraction 0.1 of its 10M steps, whatever the budget (as rlframe's preset).
ZOO.update({
    ("ppo", "atari"): dict(n_envs=8, n_steps=128, n_epochs=4, batch_size=256,
                           learning_rate=2.5e-4, clip_range=0.1, vf_coef=0.5, ent_coef=0.01,
                           linear=["learning_rate", "clip_range"]),
    ("dqn", "atari"): dict(buffer_size=100_000, learning_rate=1e-4, batch_size=32,
                           learning_starts=100_000, target_update_interval=1000,
                           train_freq=4, gradient_steps=1, exploration_steps=1_000_000,
                           exploration_final_eps=0.01, optimize_memory_usage=False),
})
DONE_FILE = "suite_done.json"
COLUMNS = ["Diagnostics/Iteration", "Diagnostics/CumSteps", "Diagnostics/CumTime (s)",
           "ReturnAverage", "ReturnStd", "TrajsInEval"]
ATARI_COLUMNS = COLUMNS + ["GameScoreAverage", "GameScoreStd"]


def atari_id(entry: SuiteEntry) -> str | None:
    """The ALE id (``BreakoutNoFrameskip-v4``) of an entry whose env is an Atari game by
    rlframe's name (``breakout``, ``space_invaders``), else None."""
    if not re.fullmatch(r"[a-z][a-z_]*", entry.env_id):
        return None
    return "".join(part.capitalize() for part in entry.env_id.split("_")) + "NoFrameskip-v4"


def zoo_settings(entry: SuiteEntry) -> dict | None:
    """RL Zoo's settings for the entry's algorithm and env, or None where there are none."""
    if atari_id(entry) is not None:
        return ZOO.get((entry.algo, "atari"))
    family = entry.env_id.split("-")[0]
    if family not in MUJOCO:
        return None
    return ZOO.get((entry.algo, family), ZOO.get((entry.algo, "*")))


def sb3_class(algo: str) -> type:
    """SB3's class of a suite algorithm (``ppo``, ``sac``, ``td3``)."""
    import stable_baselines3 as sb3
    return {"ppo": sb3.PPO, "sac": sb3.SAC, "td3": sb3.TD3, "dqn": sb3.DQN}[algo]


def make_env(entry: SuiteEntry, seed: int, settings: dict, evaluation: bool = False):
    """The entry's SB3 vec env: MuJoCo's (one env), or Atari's as RL Zoo builds it (its
    ``n_envs``; for evaluation one env playing whole games, rewards unclipped)."""
    from stable_baselines3.common.env_util import make_vec_env

    gym_id = atari_id(entry)
    if gym_id is None:
        return make_vec_env(entry.env_id, n_envs=1, seed=seed)
    from _scale_atari import sb3_atari_env
    if evaluation:
        return sb3_atari_env(1, seed, gym_id, terminal_on_life_loss=False, clip_reward=False)
    return sb3_atari_env(settings.get("n_envs", 1), seed, gym_id)


def make_model(entry: SuiteEntry, seed: int, settings: dict):
    """The SB3 model of ``entry`` with ``settings`` and its training env."""
    import numpy as np
    import torch
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize

    kwargs = dict(settings)
    env = make_env(entry, seed, settings)
    if atari_id(entry) is not None:
        kwargs.pop("n_envs", None)
        for name in kwargs.pop("linear", []):
            kwargs[name] = linear_schedule(kwargs[name])
        if "exploration_steps" in kwargs:
            kwargs["exploration_fraction"] = min(1., kwargs.pop("exploration_steps") /
                                                 entry.n_steps)
        return sb3_class(entry.algo)("CnnPolicy", env, seed=seed, device="cpu", verbose=0,
                                     **kwargs), env
    if kwargs.pop("normalize", False):
        env = VecNormalize(env, gamma=kwargs.get("gamma", 0.99))
    if entry.algo == "td3":
        n_actions = env.action_space.shape[0]
        std = kwargs.pop("noise_std")
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n_actions), std * np.ones(n_actions))
        kwargs["policy_kwargs"] = dict(net_arch=kwargs.pop("net_arch"))
    if entry.algo == "ppo":
        kwargs["policy_kwargs"] = dict(log_std_init=kwargs.pop("log_std_init"), ortho_init=False,
                                       activation_fn=torch.nn.ReLU,
                                       net_arch=dict(pi=[256, 256], vf=[256, 256]))
    return sb3_class(entry.algo)("MlpPolicy", env, seed=seed, device="cpu", verbose=0,
                                 **kwargs), env


def linear_schedule(start: float):
    """``start`` falling linearly to 0 over the run (SB3 passes the progress remaining)."""
    def schedule(progress_remaining: float) -> float:
        return start * progress_remaining
    return schedule


CHECKPOINT = "sb3_checkpoint"  # The model (with its replay or VecNormalize) at the last evaluation.
FINAL = "final_model"  # A finished run's model (with PPO's VecNormalize statistics).
FINAL_EVAL = "final_policy_eval.json"


def save_checkpoint(model, env, run_dir: str, steps: int, elapsed: float,
                    rows: list[list]) -> None:
    """Write the model, its replay buffer (SAC, TD3) or observation statistics (PPO), and
    the rows and time so far, replacing the previous checkpoint only once all is written."""
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.vec_env import VecNormalize

    final = os.path.join(run_dir, CHECKPOINT)
    partial = final + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    model.save(os.path.join(partial, "model.zip"))
    if isinstance(model, OffPolicyAlgorithm):
        model.save_replay_buffer(os.path.join(partial, "replay.pkl"))
    if isinstance(env, VecNormalize):
        env.save(os.path.join(partial, "vecnormalize.pkl"))
    with open(os.path.join(partial, "state.json"), "w") as f:
        json.dump(dict(steps=steps, elapsed=elapsed, rows=rows), f)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)


def load_checkpoint(entry: SuiteEntry, seed: int, run_dir: str, settings: dict):
    """``(model, env, state)`` from the run's checkpoint, or None without one."""
    from stable_baselines3.common.vec_env import VecNormalize

    folder = os.path.join(run_dir, CHECKPOINT)
    if not os.path.isfile(os.path.join(folder, "state.json")):
        return None
    with open(os.path.join(folder, "state.json")) as f:
        state = json.load(f)
    env = make_env(entry, seed + 1_000 * len(state["rows"]), settings)
    if settings.get("normalize"):
        env = VecNormalize.load(os.path.join(folder, "vecnormalize.pkl"), env)
    model = sb3_class(entry.algo).load(os.path.join(folder, "model.zip"), env=env,
                                       device="cpu")
    if os.path.isfile(os.path.join(folder, "replay.pkl")):
        model.load_replay_buffer(os.path.join(folder, "replay.pkl"))
    return model, env, state


class Player:
    """Plays evaluation episodes of a model's policy: on MuJoCo the deterministic policy in
    a gymnasium env (observations normalized by ``normalizer``, a VecNormalize, where
    training normalized them), as RL Zoo evaluates; on Atari, in one env playing whole
    games (all lives) with unclipped rewards, whose sum is the game score, PPO's sampled
    actions (as RL Zoo evaluates) and DQN's greedy ones with the epsilon rlframe's DQN
    agents evaluate with, ``DqnAgent``'s ``eps_eval`` (SB3's
    ``predict(deterministic=False)`` would act with the training epsilon, still 0.5
    halfway through its annealing).
    """

    def __init__(self, entry: SuiteEntry, model: BaseAlgorithm,
                 normalizer: VecNormalize | None = None) -> None:
        import gymnasium as gym
        self.model, self.normalizer = model, normalizer
        self.atari = atari_id(entry) is not None
        self.deterministic = not self.atari
        self.epsilon = None
        if self.atari and entry.algo == "dqn":
            from rlframe.agents.dqn.dqn_agent import DqnAgent
            self.epsilon = inspect.signature(DqnAgent).parameters["eps_eval"].default
        self.env = (make_env(entry, 0, {}, evaluation=True) if self.atari
                    else gym.make(entry.env_id))

    def play(self, seed: int) -> Episode:
        """One episode, its env reset with ``seed``: its return (on Atari the sum of the
        rewards clipped to their sign, as rlframe logs ``ReturnAverage``, and the game
        score), length and whether a time limit cut it."""
        import numpy as np

        from rlframe.cli.evaluate import Episode

        if self.atari:
            self.env.seed(seed)
            obs = self.env.reset()
            rng = np.random.default_rng(seed)
            clipped, score, length, done = 0., 0., 0, False
            while not done:
                if self.epsilon is None:
                    action, _ = self.model.predict(obs, deterministic=False)
                elif rng.random() < self.epsilon:
                    action = np.array([rng.integers(self.env.action_space.n)])
                else:
                    action, _ = self.model.predict(obs, deterministic=True)
                obs, rewards, dones, infos = self.env.step(action)
                reward, done, length = float(rewards[0]), bool(dones[0]), length + 1
                clipped, score = clipped + float(np.sign(reward)), score + reward
            return Episode(return_=clipped, length=length, game_score=score,
                           timeout=bool(infos[0].get("TimeLimit.truncated", False)))
        obs, _ = self.env.reset(seed=seed)
        total, length, terminated, truncated = 0., 0, False, False
        while not (terminated or truncated):
            if self.normalizer is not None:
                obs = self.normalizer.normalize_obs(obs)
            action, _ = self.model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            total, length = total + float(reward), length + 1
        return Episode(return_=total, length=length, timeout=bool(truncated))

    def close(self) -> None:
        self.env.close()


def train_run(entry: SuiteEntry, seed: int, run_dir: str, evals: int, episodes: int) -> None:
    """Train one SB3 run, evaluating ``evals`` times, and write its run directory; a run
    with a checkpoint continues from it."""
    import numpy as np
    import stable_baselines3 as sb3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecNormalize

    settings = zoo_settings(entry)
    resumed = load_checkpoint(entry, seed, run_dir, settings)
    if resumed is None:
        model, env = make_model(entry, seed, settings)
        done_steps, elapsed, rows = 0, 0., []
    else:
        model, env, state = resumed
        done_steps, elapsed, rows = state["steps"], state["elapsed"], state["rows"]
        print(f"  continuing from its checkpoint at {done_steps:,} steps", flush=True)
    os.makedirs(run_dir, exist_ok=True)
    record_system(run_dir, "new" if resumed is None else "resume")  # Machine and commit.
    with open(os.path.join(run_dir, "params.json"), "w") as f:
        json.dump(dict(env_id=entry.env_id, algo=f"sb3_{entry.algo}", seed=seed, run_ID=seed,
                       n_steps=entry.n_steps, framework=f"stable-baselines3 {sb3.__version__}",
                       torch_threads=torch.get_num_threads(), hyperparameters=settings), f,
                  indent=1)
    player = Player(entry, model, env if isinstance(env, VecNormalize) else None)
    interval = max(1, entry.n_steps // evals)
    stop = entry.config.get("stop_at_return")  # Ends the run at the first evaluation >= it.
    stopped_at: list[int] = []
    start = time.perf_counter() - elapsed
    progress = open(os.path.join(run_dir, "progress.csv"), "w", newline="")
    writer = csv.writer(progress)
    writer.writerow(ATARI_COLUMNS if player.atari else COLUMNS)
    writer.writerows(rows)
    progress.flush()  # A resumed run's earlier rows are readable before its next one.

    def evaluate(steps: int, row: int) -> None:
        played = [player.play(10_000 * (seed + 1) + episode) for episode in range(episodes)]
        returns = [episode.return_ for episode in played]
        rows.append([row, steps, time.perf_counter() - start, float(np.mean(returns)),
                     float(np.std(returns)), len(returns)])
        if player.atari:
            scores = [episode.game_score for episode in played]
            rows[-1] += [float(np.mean(scores)), float(np.std(scores))]
        writer.writerow(rows[-1])
        progress.flush()

    class Evaluations(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % interval == 0:
                evaluate(self.num_timesteps, self.num_timesteps // interval - 1)
                if stop is not None and rows[-1][3] >= stop:
                    stopped_at.append(self.num_timesteps)
                    return False
                if self.num_timesteps < entry.n_steps:
                    save_checkpoint(model, env, run_dir, self.num_timesteps,
                                    time.perf_counter() - start, rows)
            return True

    try:
        sb3_without_log_folder(model).learn(
            total_timesteps=entry.n_steps - done_steps, callback=Evaluations(),
            reset_num_timesteps=resumed is None)
        if entry.n_steps % interval and not stopped_at:
            evaluate(entry.n_steps, entry.n_steps // interval)
    finally:
        progress.close()
        player.close()
        env.close()
    final = os.path.join(run_dir, FINAL)
    os.makedirs(final, exist_ok=True)
    model.save(os.path.join(final, "model.zip"))
    if isinstance(env, VecNormalize):
        env.save(os.path.join(final, "vecnormalize.pkl"))
    with open(os.path.join(run_dir, DONE_FILE), "w") as f:
        json.dump(dict(n_steps=stopped_at[0] if stopped_at else entry.n_steps,
                       seconds=time.perf_counter() - start,
                       stopped_at_return=stop if stopped_at else None), f)
    shutil.rmtree(os.path.join(run_dir, CHECKPOINT), ignore_errors=True)


def evaluate_final(entry: SuiteEntry, run_dir: str, episodes: int, seed: int) -> dict:
    """Play the final policy of a finished run for ``episodes`` episodes, one after another,
    as its evaluations did (:class:`Player`); returns and writes (``final_policy_eval.json``)
    each episode's return and length (and game score) and their summary, in the layout of
    ``rlframe evaluate --json``.

    Episode ``i`` resets the env with seed ``seed + i``. SB3's PPO finishes the rollout it
    is in when it reaches ``n_steps``, and learns from it, so its final policy has seen up to
    one rollout more than the policy of the run's last evaluation (TD3's and SAC's have not).
    """
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rlframe.cli.evaluate import summarize

    folder = os.path.join(run_dir, FINAL)
    model = sb3_class(entry.algo).load(os.path.join(folder, "model.zip"), device="cpu")
    normalizer = None
    if os.path.isfile(os.path.join(folder, "vecnormalize.pkl")):
        normalizer = VecNormalize.load(os.path.join(folder, "vecnormalize.pkl"),
                                       DummyVecEnv([lambda: gym.make(entry.env_id)]))
    player = Player(entry, model, normalizer)
    try:
        results = [player.play(seed + episode) for episode in range(episodes)]
    finally:
        player.close()
    with open(os.path.join(run_dir, DONE_FILE)) as f:
        n_steps = json.load(f)["n_steps"]
    out = dict(snapshot=os.path.join(folder, "model.zip"), cum_steps=n_steps,
               deterministic=player.deterministic, seed=seed, summary=summarize(results),
               episodes=[episode.to_dict() for episode in results])
    with open(os.path.join(run_dir, FINAL_EVAL), "w") as f:
        json.dump(out, f, indent=2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="suite file (JSON)")
    parser.add_argument("-o", "--out", required=True, help="directory of the SB3 runs")
    parser.add_argument("--only", nargs="+", metavar="LABEL", help="entries to run, by label")
    parser.add_argument("--evals", type=int, default=20, help="evaluations per run")
    parser.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation")
    parser.add_argument("--n-steps", type=int, default=None,
                        help="train every run for this many steps instead (a check of the "
                             "script; the report then compares other budgets)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="run only the first SEEDS seeds of each entry")
    parser.add_argument("--evaluate-final", type=int, default=None, metavar="EPISODES",
                        help="train nothing: play each finished run's final policy for "
                             "EPISODES episodes and write its final_policy_eval.json")
    parser.add_argument("--eval-seed", type=int, default=100,
                        help="with --evaluate-final: episode i resets the env with seed "
                             "EVAL_SEED + i (default: 100)")
    args = parser.parse_args()
    if min(args.evals, args.eval_episodes, args.n_steps or 1, args.seeds or 1,
           1 if args.evaluate_final is None else args.evaluate_final) < 1:
        parser.error("--evals, --eval-episodes, --n-steps, --seeds and --evaluate-final "
                     "must be positive")
    try:
        import stable_baselines3  # noqa: F401
    except ImportError as e:
        print(f"benchmarks/sb3_suite.py runs Stable-Baselines3, which could not be imported "
              f"({e}). It is not a dependency of rlframe:\n\n    pip install "
              "stable-baselines3\n", file=sys.stderr)
        sys.exit(2)
    try:
        suite = load_suite(args.suite, check_experiments=False)
    except SuiteError as e:
        parser.error(f"{args.suite}: {e}")
    labels = [entry.label for entry in suite.entries]
    unknown = sorted(set(args.only or []) - set(labels))
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: not in the suite; its labels: "
                     f"{', '.join(labels)}")
    for entry in suite.entries:
        if args.only and entry.label not in args.only:
            continue
        if zoo_settings(entry) is None:
            print(f"{entry.label}: left out (no RL Zoo settings for {entry.algo} on "
                  f"{entry.env_id} here)", flush=True)
            continue
        if args.n_steps is not None:
            entry = dataclasses.replace(entry, n_steps=args.n_steps)
        for seed in entry.seeds[:args.seeds]:
            run_dir = os.path.join(args.out, f"{entry.label}_sb3", f"run_{seed}")
            if args.evaluate_final is not None:
                if not all(os.path.isfile(os.path.join(run_dir, name))
                           for name in (DONE_FILE, os.path.join(FINAL, "model.zip"))):
                    print(f"{entry.label}_sb3/run_{seed}: no final model (not finished, or "
                          f"finished before runs kept {FINAL}/)", flush=True)
                    continue
                result = evaluate_final(entry, run_dir, args.evaluate_final, args.eval_seed)
                ret = result["summary"]["return"]
                print(f"{entry.label}_sb3/run_{seed}: final policy, {args.evaluate_final} "
                      f"episodes: return {ret['mean']:.1f} +- {ret['std']:.1f} (min "
                      f"{ret['min']:.1f}, max {ret['max']:.1f}), mean length "
                      f"{result['summary']['length']['mean']:.1f}", flush=True)
                continue
            if os.path.isfile(os.path.join(run_dir, DONE_FILE)):
                print(f"{entry.label}_sb3/run_{seed}: done", flush=True)
                continue
            print(f"{entry.label}_sb3/run_{seed}: training {entry.n_steps:,} steps", flush=True)
            train_run(entry, seed, run_dir, args.evals, args.eval_episodes)


if __name__ == "__main__":
    main()
