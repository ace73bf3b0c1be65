"""``rlframe evaluate RUN_DIR``: play a trained agent's episodes, report returns, record videos."""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rlframe.cli import CommandError

if TYPE_CHECKING:
    import numpy as np

    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.runners.loading import LoadedRun
    from rlframe.utils.video import VideoWriter

DESCRIPTION = """\
Load the snapshot of RUN_DIR (params.pkl, or the latest itr_<N>.pkl; --itr picks
one) and play episodes in the run's evaluation env, printing each episode's
return and length, then their mean, std, min and max.

By default the agent acts in its own evaluation mode, as the run's evaluations
did (DQN-family agents: epsilon-greedy with their eval epsilon; policy-gradient
agents: actions sampled from the policy, or its mode if built with
deterministic_eval=True; DDPG, TD3 and SAC: the policy's action without noise).
--deterministic acts greedily instead (argmax Q, the most probable action, the
Gaussian mean).

An episode ends when the game or task ends or its time limit cuts it; with
Atari's episodic lives a lost life is not the end of the episode.
"""

EPILOG = """\
examples:
  rlframe evaluate data/local/20240101/120000/ppo_CartPole-v1/run_0
  rlframe evaluate RUN_DIR --episodes 20 --deterministic --seed 1 --json results.json
  rlframe evaluate RUN_DIR --itr 99 --video videos --video-episodes 2 --fps 60
"""


@dataclass
class Episode:
    """One evaluation episode.

    Attributes:
        return_: sum of the env's rewards (clipped ones for Atari's clip_reward).
        length: agent steps.
        timeout: cut by a time limit rather than ended.
        game_score: Atari's unclipped score (None for envs that report none).
    """

    return_: float
    length: int
    timeout: bool
    game_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``return``, ``length``, ``timeout`` (and ``game_score``)."""
        data = {"return": self.return_, "length": self.length, "timeout": self.timeout,
                "game_score": self.game_score}
        return {k: v for k, v in data.items() if v is not None}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``evaluate`` subcommand.

    Args:
        subparsers: the ``rlframe`` parser's subparsers.

    Returns:
        The ``evaluate`` parser.
    """
    parser = subparsers.add_parser(
        "evaluate", help="play a trained agent's episodes; report returns, record videos",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("run_dir", metavar="RUN_DIR", help="run directory (run_<ID>) or snapshot file")
    add("--episodes", metavar="N", type=_positive_int, default=10,
        help="episodes to play (default: 10)")
    add("--itr", metavar="K", type=int, help="load itr_K.pkl (default: params.pkl or the "
        "latest itr_<N>.pkl)")
    add("--deterministic", action="store_true",
        help="act greedily (default: the agent's evaluation mode)")
    add("--seed", metavar="S", type=int, help="seed of the env and the agent's sampling "
        "(default: drawn, and printed)")
    add("--device", metavar="DEV", help="cpu (default), cuda or cuda:<idx>")
    add("--json", metavar="FILE", help="also write the results to FILE as JSON")
    add("--video", metavar="DIR", help="write a video of each episode into DIR")
    add("--video-episodes", metavar="K", type=_positive_int,
        help="record only the first K episodes (default: all)")
    add("--video-format", choices=("mp4", "gif"), help="default: mp4 where imageio-ffmpeg "
        "is installed, else gif")
    add("--fps", metavar="F", type=float, default=30.0, help="video frame rate (default: 30)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Play ``args.episodes`` episodes, print and optionally save the results.

    Raises:
        CommandError: a missing run or snapshot, an agent or env that cannot be
            rebuilt, a video that cannot be written.
    """
    from rlframe.utils.seed import make_seed, set_envs_seeds, set_seed

    video_format = _check_video_args(args)
    loaded = _load(args)
    env = _make_env(loaded, record=video_format is not None)
    try:
        frame = _frame_source(env) if video_format else None  # Before seeding: it resets.
        seed = make_seed() if args.seed is None else args.seed
        set_seed(seed)
        set_envs_seeds([env], seed)
        mode = "greedy" if args.deterministic else "the agent's eval mode"
        print(f"Evaluating {loaded.path} (itr {loaded.itr}, {loaded.cum_steps} steps "
              f"trained): {args.episodes} episodes, {mode}, seed {seed}", flush=True)
        episodes, videos = _play_all(args, loaded.agent, env, video_format, frame)
    finally:
        env.close()
    print(format_summary(episodes))
    for path in videos:
        print(f"Video: {path}")
    if args.json:
        _write_json(args.json, dict(
            snapshot=loaded.path, itr=loaded.itr, cum_steps=loaded.cum_steps,
            deterministic=args.deterministic, seed=seed, summary=summarize(episodes),
            episodes=[e.to_dict() for e in episodes], videos=videos))
        print(f"Results: {args.json}")
    return 0


def play_episode(env: Env, agent: BaseAgent, deterministic: bool,
                 video: VideoWriter | None = None,
                 frame: Callable[[], np.ndarray] | None = None) -> Episode:
    """Play one episode (to ``env_info.traj_done`` where the env reports it, else ``done``).

    Args:
        env: an rlframe env.
        agent: initialized, in the mode to act in.
        deterministic: greedy actions (see :meth:`BaseAgent.act`).
        video: gets ``frame()`` after the reset and after every step.
        frame: the env's current screen, [H, W, 3] uint8 (needed with ``video``).
    """
    agent.reset()
    observation, reward = env.reset(), None
    total, score, length = 0.0, None, 0
    if video is not None:
        video.append(frame())
    while True:
        action = agent.act(observation, deterministic=deterministic, prev_reward=reward)
        observation, reward, done, env_info = env.step(action)
        total, length = total + float(reward), length + 1
        if hasattr(env_info, "game_score"):  # Atari: the unclipped score.
            score = (score or 0.0) + float(env_info.game_score)
        if video is not None:
            video.append(frame())
        if getattr(env_info, "traj_done", done):
            return Episode(total, length, bool(getattr(env_info, "timeout", False)), score)
        if done:  # A lost life with episodic lives: the agent's episode, not the game, ends.
            agent.reset()


def summarize(episodes: list[Episode]) -> dict[str, dict[str, float]]:
    """Mean, std, min and max of each episode statistic (``return``, ``length``, ...)."""
    import numpy as np

    columns: dict[str, list[float]] = {}
    for episode in episodes:
        for key, value in episode.to_dict().items():
            if key != "timeout":
                columns.setdefault(key, []).append(value)
    return {key: dict(mean=float(np.mean(v)), std=float(np.std(v)), min=float(np.min(v)),
                      max=float(np.max(v))) for key, v in columns.items()}


def format_summary(episodes: list[Episode]) -> str:
    """A table of :func:`summarize`: one row per statistic."""
    stats = ("mean", "std", "min", "max")
    lines = [f"{len(episodes)} episodes:", f"{'':<12}" + "".join(f"{s:>12}" for s in stats)]
    for key, row in summarize(episodes).items():
        lines.append(f"{key:<12}" + "".join(f"{row[s]:>12.2f}" for s in stats))
    return "\n".join(lines)


def _play_all(args: argparse.Namespace, agent: BaseAgent, env: Env, video_format: str | None,
              frame: Callable[[], np.ndarray] | None) -> tuple[list[Episode], list[str]]:
    """Play the episodes, printing a line each and recording the first videos."""
    n_videos = min(args.episodes, args.video_episodes or args.episodes) if video_format else 0
    episodes: list[Episode] = []
    videos: list[str] = []
    for i in range(args.episodes):
        if i < n_videos:
            path = os.path.join(args.video, f"episode_{i + 1:03d}.{video_format}")
            with _open_video(path, video_format, args.fps) as video:
                episode = play_episode(env, agent, args.deterministic, video, frame)
            videos.append(path)
        else:
            episode = play_episode(env, agent, args.deterministic)
        episodes.append(episode)
        print(_episode_line(i, args.episodes, episode), flush=True)
    return episodes, videos


def _episode_line(i: int, n: int, episode: Episode) -> str:
    line = f"episode {i + 1:>{len(str(n))}}/{n}: return {episode.return_:.2f}, " \
           f"length {episode.length}"
    if episode.game_score is not None:
        line += f", game score {episode.game_score:.0f}"
    return line + (" (time limit)" if episode.timeout else "")


def _check_video_args(args: argparse.Namespace) -> str | None:
    """The video format to write (None without ``--video``); checked before any work."""
    if args.video is None:
        for option in ("video_episodes", "video_format"):
            if getattr(args, option) is not None:
                raise CommandError(f"--{option.replace('_', '-')} needs --video DIR.")
        return None
    if not args.fps > 0:
        raise CommandError(f"--fps must be positive, got {args.fps}.")
    from rlframe.utils.video import choose_format
    try:
        video_format = choose_format(args.video_format)
    except ImportError as error:
        raise CommandError(f"--video: {error}") from None
    return video_format


def _load(args: argparse.Namespace) -> LoadedRun:
    """The run's agent and spec; loading errors become ``CommandError``."""
    from rlframe.runners.loading import AgentLoadError, load_run

    try:
        return load_run(args.run_dir, itr=args.itr, device=args.device)
    except (FileNotFoundError, ValueError, AgentLoadError) as error:
        raise CommandError(str(error)) from None


def _make_env(loaded: LoadedRun, record: bool) -> Env:
    """The run's evaluation env; a gymnasium env renders RGB frames when ``record``."""
    from rlframe.envs.gym import GymEnvWrapper
    from rlframe.runners.loading import AgentLoadError

    try:
        env = loaded.make_env(eval=True)
        if record and isinstance(env, GymEnvWrapper) and env.env.render_mode != "rgb_array":
            env.close()
            env = loaded.make_env(eval=True, render_mode="rgb_array")
    except (AgentLoadError, TypeError, ValueError) as error:
        raise CommandError(f"cannot build the run's evaluation env: {error}") from None
    return env


def _frame_source(env: Env) -> Callable[[], np.ndarray]:
    """A function returning the env's current RGB screen, [H, W, 3] uint8.

    Raises:
        CommandError: the env is neither a gymnasium env nor ``AtariEnv``, or
            cannot render (gymnasium's classic control envs need pygame).
    """
    from rlframe.envs.atari.atari_env import AtariEnv
    from rlframe.envs.gym import GymEnvWrapper

    if isinstance(env, AtariEnv):
        return env.ale.getScreenRGB
    if not isinstance(env, GymEnvWrapper):
        raise CommandError(f"--video records gymnasium envs and AtariEnv; this run's env is a "
                           f"{type(env).__name__}.")
    import gymnasium as gym
    from rlframe.utils.video import INSTALL_HINT

    env.reset()  # Rendering needs an episode; seeding still applies to the next reset.
    try:
        frame = env.render()
    except gym.error.DependencyNotInstalled as error:
        raise CommandError(f"--video: rendering the env needs a package: {error} "
                           f"({INSTALL_HINT} installs pygame).") from None
    if frame is None or getattr(frame, "ndim", 0) != 3:
        raise CommandError("--video: the env renders no RGB frames in render_mode='rgb_array'.")
    return env.render  # type: ignore[return-value]  # rgb_array mode: frames, checked above.


def _open_video(path: str, video_format: str, fps: float) -> VideoWriter:
    from rlframe.utils.video import VideoWriter

    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return VideoWriter(path, video_format, fps)
    except (ImportError, OSError) as error:
        raise CommandError(f"--video: cannot write {path}: {error}") from None


def _write_json(path: str, results: dict[str, Any]) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    except OSError as error:
        raise CommandError(f"--json: cannot write {path}: {error}") from None


def _positive_int(text: str) -> int:
    """argparse type for counts: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
