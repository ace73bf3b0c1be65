"""``rlframe evaluate``: episodes of a trained run, its JSON results, videos and user errors."""
import json
import os
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
import torch

from conftest import REPO
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.cli import main
from rlframe.cli.evaluate import play_episode
from rlframe.envs.base import Env, EnvStep
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context

CARTPOLE = dict(id="CartPole-v1")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny PPO CartPole run with its last snapshot."""
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, eval_env_kwargs=CARTPOLE,
                            batch_T=32, batch_B=4, max_decorrelation_steps=0, eval_n_envs=1,
                            eval_max_steps=200)
    runner = MinibatchRlEval(algo=PPO(),
                             agent=CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[32])),
                             sampler=sampler, n_steps=2048, log_interval_steps=1024, seed=1,
                             affinity=dict(master_torch_threads=1))
    root = tmp_path_factory.mktemp("evaluate")
    with logger_context(str(root), 0, "ppo", {}, snapshot_mode="last",
                        override_prefix=True) as path:
        runner.train()
    return path


def evaluate(*argv):
    """``rlframe evaluate *argv`` in this process; returns the exit status."""
    return main(["evaluate", *map(str, argv)])


def evaluate_json(run_dir, path, *argv):
    assert evaluate(run_dir, "--json", path, *argv) == 0
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_json_holds_each_episode_and_the_summary(run_dir, tmp_path, capsys):
    results = evaluate_json(run_dir, tmp_path / "r.json", "--episodes", 3, "--seed", 0)
    episodes = results["episodes"]
    assert len(episodes) == 3
    returns = [e["return"] for e in episodes]
    assert returns == [e["length"] for e in episodes]  # CartPole: +1 a step.
    assert results["summary"]["return"]["mean"] == pytest.approx(np.mean(returns))
    assert results["summary"]["length"]["max"] == max(returns)
    assert results["seed"] == 0 and results["deterministic"] is False
    out = capsys.readouterr().out
    assert "episode 3/3: return" in out and "mean" in out


def test_deterministic_with_a_seed_repeats(run_dir, tmp_path):
    argv = ("--episodes", 2, "--deterministic", "--seed", 5)
    first = evaluate_json(run_dir, tmp_path / "a.json", *argv)
    second = evaluate_json(run_dir, tmp_path / "b.json", *argv)
    assert first["deterministic"] is True
    assert first["episodes"] == second["episodes"]


def test_gif_videos_one_per_episode(run_dir, tmp_path, capsys):
    pytest.importorskip("pygame")  # gymnasium draws CartPole with it.
    Image = pytest.importorskip("PIL.Image")
    videos = tmp_path / "videos"
    results = evaluate_json(run_dir, tmp_path / "r.json", "--episodes", 3, "--seed", 0,
                            "--video", videos, "--video-format", "gif")
    paths = sorted(os.listdir(videos))
    assert paths == ["episode_001.gif", "episode_002.gif", "episode_003.gif"]
    assert results["videos"] == [str(videos / p) for p in paths]
    for path in paths:
        with Image.open(videos / path) as image:
            assert image.format == "GIF" and image.n_frames > 1
    assert f"Video: {videos / paths[0]}" in capsys.readouterr().out


def test_mp4_videos_of_the_first_episodes(run_dir, tmp_path):
    pytest.importorskip("pygame")
    pytest.importorskip("imageio_ffmpeg")
    import imageio

    videos = tmp_path / "videos"
    results = evaluate_json(run_dir, tmp_path / "r.json", "--episodes", 2, "--seed", 0,
                            "--deterministic", "--video", videos, "--video-episodes", 1)
    assert os.listdir(videos) == ["episode_001.mp4"]
    reader = imageio.get_reader(videos / "episode_001.mp4")
    try:  # A frame after the reset and one after each step.
        assert reader.count_frames() == results["episodes"][0]["length"] + 1
    finally:
        reader.close()


def test_python_m_rlframe_evaluate(run_dir):
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-m", "rlframe", "evaluate", run_dir, "--episodes",
                           "1"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "episode 1/1: return" in done.stdout


@pytest.mark.parametrize("argv, message", [
    (["{missing}"], "No run directory or snapshot file"),
    (["{empty}"], "No snapshot (params.pkl or itr_<N>.pkl)"),
    (["{run}", "--itr", "999"], "No itr_999.pkl"),
    (["{run}", "--episodes", "0"], "--episodes: must be at least 1"),
    (["{run}", "--video-episodes", "2"], "--video-episodes needs --video DIR"),
    (["{run}", "--video", "{tmp}/v", "--fps", "0"], "--fps must be positive"),
    (["{unloadable}"], "cannot be rebuilt from its snapshot"),
])
def test_user_errors_exit_2_with_a_message(run_dir, tmp_path, capsys, argv, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = dict(missing=tmp_path / "missing", empty=empty, run=run_dir, tmp=tmp_path,
                 unloadable=_unloadable_run(run_dir, tmp_path / "unloadable"))
    assert evaluate(*[a.format(**paths) for a in argv]) == 2
    assert message in capsys.readouterr().err


def _unloadable_run(run_dir, path):
    """A copy of the run's snapshot whose agent class cannot be imported."""
    path.mkdir()
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    snapshot["agent_spec"]["agent_class"] = "rlframe.agents.nowhere.MissingAgent"
    torch.save(snapshot, path / "params.pkl")
    return path


EnvInfo = namedtuple("EnvInfo", ["traj_done", "timeout"])


class LivesEnv(Env):
    """Ends an RL episode (``done``) every 3 steps, the game (``traj_done``) at step 7."""

    def reset(self):
        self.t = 0
        return np.zeros(1, np.float32)

    def step(self, action):
        self.t += 1
        return EnvStep(np.zeros(1, np.float32), np.float32(2), self.t % 3 == 0 or self.t == 7,
                       EnvInfo(traj_done=self.t == 7, timeout=False))


class CountingAgent:
    resets = 0

    def reset(self):
        self.resets += 1

    def act(self, observation, deterministic=True, prev_reward=None):
        return 0


def test_an_episode_ends_with_the_game_not_a_life():
    agent = CountingAgent()
    episode = play_episode(LivesEnv(), agent, deterministic=True)
    assert (episode.return_, episode.length, episode.timeout) == (14.0, 7, False)
    assert agent.resets == 3  # At the start and after each of the two lost lives.
