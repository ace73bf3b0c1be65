"""Atari 2600 games on the Arcade Learning Environment, with rlpyt's preprocessing or
DeepMind's frame size.

Frames are grayscale (ALE's palette luminance), max-pooled over the last two raw
frames of a frame skip, then either (rlpyt, the default ``frame_shape=(104, 80)``)
cropped to 208x160 (first and last row dropped) and halved to 104x80 by a 2x2 block
mean rounded half up, or (e.g. ``frame_shape=(84, 84)``, DeepMind's) the whole
210x160 screen area-resized (:class:`~rlframe.envs.atari.frames.AreaResize`); numpy
only, no OpenCV. The observation is a stack of the last ``num_img_obs`` frames,
oldest first.
"""
from __future__ import annotations

import difflib
import operator
from collections import namedtuple
from typing import TYPE_CHECKING, Any

import numpy as np

from rlframe.envs.atari.frames import (DEEPMIND_SHAPE, RAW_H, RAW_W, RLPYT_SHAPE, AreaResize,
                                      downsample)
from rlframe.envs.base import Env, EnvStep
from rlframe.envs.traj_info import TrajInfo
from rlframe.spaces.int_box import IntBox

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.collections import NamedArrayTuple

H, W = RLPYT_SHAPE  # Processed frame size (rlpyt's, the default).

EnvInfo = namedtuple("EnvInfo", ["game_score", "traj_done", "timeout"])
"""``game_score``: float32 raw (unclipped) score of the step; ``traj_done``: the
game is over (or the horizon reached), so the env needs a reset; ``timeout``:
the episode was cut by ``horizon`` and did not end on its own."""

ACTION_MEANING = {
    0: "NOOP", 1: "FIRE", 2: "UP", 3: "RIGHT", 4: "LEFT", 5: "DOWN", 6: "UPRIGHT",
    7: "UPLEFT", 8: "DOWNRIGHT", 9: "DOWNLEFT", 10: "UPFIRE", 11: "RIGHTFIRE",
    12: "LEFTFIRE", 13: "DOWNFIRE", 14: "UPRIGHTFIRE", 15: "UPLEFTFIRE",
    16: "DOWNRIGHTFIRE", 17: "DOWNLEFTFIRE",
}
"""Meaning of each of the 18 ALE actions, by ALE action id."""

ACTION_INDEX = {meaning: ale_id for ale_id, meaning in ACTION_MEANING.items()}
"""ALE action id of each meaning, e.g. ``ACTION_INDEX["FIRE"] == 1``."""

BACKENDS = ("ale_py", "atari_py")
"""Emulator packages ``AtariEnv`` runs on (its ``backend`` argument)."""

ATARI_PY_GAMES = frozenset((
    "adventure", "air_raid", "alien", "amidar", "assault", "asterix", "asteroids", "atlantis",
    "bank_heist", "battle_zone", "beam_rider", "berzerk", "bowling", "boxing", "breakout",
    "carnival", "centipede", "chopper_command", "crazy_climber", "defender", "demon_attack",
    "donkey_kong", "double_dunk", "elevator_action", "enduro", "fishing_derby", "freeway",
    "frogger", "frostbite", "galaxian", "gopher", "gravitar", "hero", "ice_hockey", "jamesbond",
    "journey_escape", "kangaroo", "keystone_kapers", "king_kong", "koolaid", "krull",
    "kung_fu_master", "laser_gates", "lost_luggage", "montezuma_revenge", "mr_do", "ms_pacman",
    "name_this_game", "phoenix", "pitfall", "pong", "pooyan", "private_eye", "qbert", "riverraid",
    "road_runner", "robotank", "seaquest", "sir_lancelot", "skiing", "solaris", "space_invaders",
    "star_gunner", "tennis", "tetris", "time_pilot", "trondead", "turmoil", "tutankham",
    "up_n_down", "venture", "video_pinball", "wizard_of_wor", "yars_revenge", "zaxxon",
))
"""Games atari-py 0.2.9's ALE has settings for: it finds them by the ROM's file name
and crashes (segfault) on any other ROM, so other games are refused up front."""


class AtariTrajInfo(TrajInfo):
    """:class:`TrajInfo` that also sums the raw game score, ``env_info.game_score``, as
    ``GameScore`` (Atari returns are usually clipped; the score is what papers report)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.GameScore = 0

    def step(self, observation: SpaceValue, action: SpaceValue, reward: float, done: bool,
             agent_info: NamedArrayTuple | None, env_info: tuple) -> None:
        """Account for one step, adding ``env_info.game_score`` (0 if absent)."""
        super().step(observation, action, reward, done, agent_info, env_info)
        self["GameScore"] += float(getattr(env_info, "game_score", 0))


class AtariEnv(Env):
    """An Atari game as an rlframe :class:`Env` (rlpyt's ``AtariEnv``).

    A step repeats the action ``frame_skip`` times, summing the reward. With
    ``episodic_lives`` a lost life ends the RL episode (``done``) but not the
    game (``env_info.traj_done`` stays False, so samplers do not reset); the
    frame stack is zeroed as after :meth:`reset`. :meth:`reset` starts a new
    game with up to ``max_start_noops`` random no-ops.

    Args:
        game: rlpyt game name, snake case (``"pong"``, ``"space_invaders"``).
        frame_skip: emulator frames per step (>= 1).
        num_img_obs: frames stacked in an observation (>= 1).
        clip_reward: reward is the sign of the game score.
        episodic_lives: a lost life ends the episode (``done``).
        fire_on_reset: press FIRE (and UP) after reset, for games that need it.
        max_start_noops: at most this many no-ops at reset (uniformly 0..max).
        repeat_action_probability: ALE sticky-action probability (rlpyt: 0).
        horizon: steps after which the game is cut (``timeout=True``).
        frame_shape: ``(height, width)`` of each stacked frame: ``(104, 80)``
            (rlpyt's crop and halving, the default) or any smaller or equal to the
            210x160 screen, area-resized from the whole screen, e.g.
            ``DEEPMIND_SHAPE = (84, 84)`` to compare with results on DeepMind's frames.
        backend: emulator package, ``"ale_py"`` (default) or ``"atari_py"``, the
            legacy one rlpyt used: the ``atari`` extra, built from source on
            Python 3.11 (needs cmake and zlib); ROMs come from ale-py; games of
            ``ATARI_PY_GAMES`` only. Without sticky actions its older ALE plays
            most games (breakout, pong, space_invaders, ...) step for step like
            ale-py for the same seed; sticky actions and games that read
            uninitialised RAM (seaquest, assault, ...) differ, the two ALEs
            drawing those from different random streams.
        fire_on_life_loss: also press FIRE (and UP) after each lost life, after its
            NOOP, as SB3's and CleanRL's Atari wrappers do (their FireResetEnv resets
            after every lost life under EpisodicLifeEnv): in Breakout the next ball
            is then served without the agent pressing FIRE.
    """

    def __init__(self, game: str = "pong", frame_skip: int = 4, num_img_obs: int = 4,
                 clip_reward: bool = True, episodic_lives: bool = True,
                 fire_on_reset: bool = False, max_start_noops: int = 30,
                 repeat_action_probability: float = 0., horizon: int = 27000,
                 backend: str = "ale_py", frame_shape: tuple[int, int] = RLPYT_SHAPE,
                 fire_on_life_loss: bool = False) -> None:
        _check_int("frame_skip", frame_skip, 1)
        _check_int("num_img_obs", num_img_obs, 1)
        _check_int("max_start_noops", max_start_noops, 0)
        _check_int("horizon", horizon, 1)
        if not 0. <= repeat_action_probability <= 1.:
            raise ValueError("AtariEnv: repeat_action_probability must lie in [0, 1], got "
                             f"repeat_action_probability={repeat_action_probability!r}.")
        self._game: str = game
        self._frame_skip: int = int(frame_skip)
        self._num_img_obs: int = int(num_img_obs)
        self._clip_reward: bool = bool(clip_reward)
        self._episodic_lives: bool = bool(episodic_lives)
        self._fire_on_reset: bool = bool(fire_on_reset)
        self._fire_on_life_loss: bool = bool(fire_on_life_loss)
        self._max_start_noops: int = int(max_start_noops)
        self._repeat_action_probability: float = float(repeat_action_probability)
        self._horizon: int = int(horizon)
        self._backend: str = backend
        self._frame_shape: tuple[int, int] = _check_frame_shape(frame_shape)
        h, w = self._frame_shape

        self._rom_path: str = rom_path(game)
        self.ale = _make_ale(backend, game)
        # Seeds ALE and the no-op RNG; drawn from numpy's global RNG so that
        # np.random.seed(...) before construction fixes an unseeded env too.
        self.seed(int(np.random.randint(0, 2 ** 31)))
        # Some of ale-py's ROMs draw taller screens (214 to 250 lines; PAL ones 250): the
        # frame processing wants 210, and atari-py would write past the end of the buffer.
        screen_shape = self.ale.getScreenGrayscale().shape[:2]  # atari-py adds a last axis.
        if screen_shape != (RAW_H, RAW_W):
            raise ValueError(f"AtariEnv: game={game!r} has a {screen_shape[0]}x{screen_shape[1]} "
                             f"screen in ale-py's ROM; AtariEnv needs {RAW_H}x{RAW_W}.")

        # What ale.act takes (ale-py: Action enums; atari-py: ints), and ALE action ids.
        self._action_set: list = list(self.ale.getMinimalActionSet())
        self._action_ids: list[int] = [_action_id(a) for a in self._action_set]
        self._action_space: IntBox = IntBox(0, len(self._action_set))
        self._observation_space: IntBox = IntBox(0, 256, shape=(num_img_obs, h, w),
                                                 dtype="uint8")
        self._raw_frames = np.zeros((2, RAW_H, RAW_W), dtype=np.uint8)
        self._max_frame = np.zeros((RAW_H, RAW_W), dtype=np.uint8)
        if self._frame_shape == RLPYT_SHAPE:
            self._scratch = (np.zeros((h, RAW_W), np.uint16), np.zeros((h, w), np.uint32))
            self._resize: AreaResize | None = None
        else:
            self._resize = AreaResize(self._frame_shape)
        self._obs = np.zeros((num_img_obs, h, w), dtype=np.uint8)
        self._lives: int = 0
        self._step_counter: int = 0

    def seed(self, seed: int | None = None) -> None:
        """Seed ALE (``random_seed``, reloading the ROM) and the no-op RNG.

        ALE's seed is ``1 + seed % (2**31 - 1)``, never 0, which atari-py's ALE
        replaces by the clock. Takes effect from the next :meth:`reset`; ``None``
        draws a fresh seed.
        """
        if seed is None:
            seed = int(np.random.randint(0, 2 ** 31))
        seed = int(seed)
        self._rng = np.random.default_rng(seed % 2 ** 31)
        self._load_rom(1 + seed % (2 ** 31 - 1))

    def reset(self) -> np.ndarray:
        """Start a new game.

        Returns:
            observation: [num_img_obs, H, W] uint8 (``frame_shape``); all frames but the
            last are 0.
        """
        self.ale.reset_game()
        self._raw_frames[:] = 0
        self._life_reset()
        for _ in range(int(self._rng.integers(0, self._max_start_noops + 1))):
            self.ale.act(0)
        if self._fire_on_reset:
            self._fire_and_up()
        self.ale.getScreenGrayscale(self._raw_frames[1])
        self._push_frame(clear=True)
        self._step_counter = 0
        return self._obs

    def step(self, action: SpaceValue | int) -> EnvStep:
        """Play ``frame_skip`` frames with one action.

        Args:
            action: int index into the minimal action set.

        Returns:
            ``EnvStep(observation [num_img_obs, H, W] uint8, reward 0-d float32,
            done bool, EnvInfo)``.
        """
        ale, raw = self.ale, self._raw_frames
        ale_action = self._action_set[int(action)]
        game_score = 0
        for _ in range(self._frame_skip - 1):
            game_score += ale.act(ale_action)
        ale.getScreenGrayscale(raw[0])
        game_score += ale.act(ale_action)
        ale.getScreenGrayscale(raw[1])

        lives = ale.lives()
        lost_life = 0 < lives < self._lives
        clear = lost_life and self._episodic_lives
        if lost_life:
            self._life_reset()
            if self._fire_on_life_loss:
                self._fire_and_up()
            if clear:
                raw[0] = 0  # Max of the two frames = the final frame.
        self._push_frame(clear)

        ended = ale.game_over()
        timed_out = self._step_counter >= self._horizon
        game_over = ended or timed_out
        episode_end = ended or (self._episodic_lives and lost_life)
        if self._clip_reward:
            reward = (game_score > 0) - (game_score < 0)  # Sign.
        else:
            reward = game_score
        self._step_counter += 1
        return EnvStep(self._obs, np.asarray(reward, dtype=np.float32),
                       bool(game_over or episode_end),
                       EnvInfo(np.float32(game_score), bool(game_over),
                               bool(timed_out and not episode_end)))

    def get_obs(self) -> np.ndarray:
        """A copy of the current observation, [num_img_obs, H, W] uint8."""
        return self._obs.copy()

    def render(self, wait: int = 10, show_full_obs: bool = False) -> np.ndarray:
        """Show the newest frame (or the whole stack) in an OpenCV window.

        Args:
            wait: milliseconds the window waits for a key (``cv2.waitKey``).
            show_full_obs: show all ``num_img_obs`` frames, stacked vertically.

        Returns:
            The image shown, [H, W] (or [num_img_obs * H, W]) uint8, so that it
            can be saved where there is no display.

        Raises:
            ImportError: OpenCV (``opencv-python``) is not installed.
        """
        img = self._obs.reshape(-1, self._frame_shape[1]) if show_full_obs else self._obs[-1]
        try:
            import cv2
        except ImportError as e:
            raise ImportError("AtariEnv.render shows frames with OpenCV: pip install "
                              "opencv-python (or take the frames from get_obs()).") from e
        cv2.imshow(self._game, img)
        cv2.waitKey(wait)
        return img.copy()

    def get_action_meanings(self) -> list[str]:
        """Names of the actions of the action space, e.g. ``["NOOP", "FIRE", ...]``."""
        return [ACTION_MEANING[i] for i in self._action_ids]

    def close(self) -> None:
        """Drop the emulator."""
        self.ale = None

    def __getstate__(self) -> dict[str, Any]:
        """The env mid-episode, for a checkpoint: its settings, frames and no-op RNG, and
        the emulator's whole state (RAM, frame counters and its random generator, which
        draws sticky actions), so that the unpickled env plays on exactly as this one."""
        state = self.__dict__.copy()
        ale = state.pop("ale")
        if ale is None:  # Closed.
            state["_emulator_state"] = None
        elif self._backend == "ale_py":
            state["_emulator_state"] = ale.cloneState(include_rng=True)  # Pickles.
        else:  # atari-py: the system state (with its RNG), as bytes.
            system_state = ale.cloneSystemState()
            state["_emulator_state"] = ale.encodeState(system_state)
            ale.deleteState(system_state)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A fresh emulator with the pickled one's settings and state."""
        state = dict(state)
        emulator_state = state.pop("_emulator_state")
        self.__dict__.update(state)
        if emulator_state is None:
            self.ale = None
            return
        self.ale = _make_ale(self._backend, self._game)
        self._load_rom(1)  # The seed of a generator that the state replaces.
        if self._backend == "ale_py":
            self.ale.restoreState(emulator_state)
        else:
            system_state = self.ale.decodeState(emulator_state)
            self.ale.restoreSystemState(system_state)
            self.ale.deleteState(system_state)

    def _load_rom(self, ale_seed: int) -> None:
        """Seed ALE and load the game (sticky actions must be set before it loads)."""
        self.ale.setInt("random_seed", ale_seed)
        self.ale.setFloat("repeat_action_probability", self._repeat_action_probability)
        self.ale.loadROM(self._rom_path)

    def _life_reset(self) -> None:
        self.ale.act(0)  # One NOOP, as rlpyt does after a reset or a lost life.
        self._lives = self.ale.lives()

    def _fire_and_up(self) -> None:
        """FIRE, then UP, where the game has them (their score is not counted)."""
        for ale_action in (1, 2):
            if ale_action in self._action_ids:
                self.ale.act(self._action_set[self._action_ids.index(ale_action)])

    def _push_frame(self, clear: bool = False) -> None:
        """Make the next observation: the last frames (zeros if ``clear``), oldest first,
        and the new one. It is a new array that the env never writes again, so that
        :meth:`step` and :meth:`reset` hand it out without copying it."""
        obs = np.empty_like(self._obs)
        if clear:
            obs[:-1] = 0
        else:
            obs[:-1] = self._obs[1:]
        if self._resize is None:  # rlpyt: max of two frames cropped to 208 rows, halved.
            frame = np.maximum(self._raw_frames[0, 1:-1], self._raw_frames[1, 1:-1],
                               out=self._max_frame[1:-1])
            downsample(frame, out=obs[-1], scratch=self._scratch)
        else:  # The max of the two whole screens, area-resized.
            frame = np.maximum(self._raw_frames[0], self._raw_frames[1], out=self._max_frame)
            self._resize(frame, out=obs[-1])
        self._obs = obs

    @property
    def game(self) -> str:
        """rlpyt game name."""
        return self._game

    @property
    def frame_skip(self) -> int:
        """Emulator frames per step."""
        return self._frame_skip

    @property
    def num_img_obs(self) -> int:
        """Frames per observation."""
        return self._num_img_obs

    @property
    def clip_reward(self) -> bool:
        """Whether the reward is the sign of the game score."""
        return self._clip_reward

    @property
    def max_start_noops(self) -> int:
        """Most no-ops at reset."""
        return self._max_start_noops

    @property
    def episodic_lives(self) -> bool:
        """Whether a lost life ends the episode."""
        return self._episodic_lives

    @property
    def fire_on_reset(self) -> bool:
        """Whether FIRE (and UP) are pressed after reset."""
        return self._fire_on_reset

    @property
    def fire_on_life_loss(self) -> bool:
        """Whether FIRE (and UP) are pressed after each lost life."""
        return self._fire_on_life_loss

    @property
    def repeat_action_probability(self) -> float:
        """ALE sticky-action probability."""
        return self._repeat_action_probability

    @property
    def horizon(self) -> int:
        """Steps after which a game is cut."""
        return self._horizon

    @property
    def frame_shape(self) -> tuple[int, int]:
        """``(height, width)`` of each stacked frame."""
        return self._frame_shape

    @property
    def backend(self) -> str:
        """Emulator package: ``"ale_py"`` or ``"atari_py"``."""
        return self._backend


def game_names() -> list[str]:
    """rlpyt names of the games with a ROM in ale-py."""
    from ale_py import roms
    return sorted(roms.get_all_rom_ids())


def rom_path(game: str) -> str:
    """Path of the ROM of ``game`` (rlpyt name) from ale-py's bundled ROMs.

    Raises:
        ValueError: unknown game, naming close matches.
    """
    from ale_py import roms
    names = game_names()
    if not isinstance(game, str) or game not in names:
        close = difflib.get_close_matches(str(game).lower(), names, n=5, cutoff=0.6)
        hint = f" Close matches: {', '.join(close)}." if close else ""
        raise ValueError(f"AtariEnv: unknown game={game!r}.{hint} "
                         f"All games: rlframe.envs.atari.atari_env.game_names().")
    return str(roms.get_rom_path(game))


def _make_ale(backend: str, game: str) -> Any:
    """A fresh emulator of ``backend`` for ``game``, logging only errors.

    Both backends take the same calls: atari-py's ``ALEInterface`` encodes str
    setting keys and ROM paths to the bytes its C library wants, so ``AtariEnv``
    runs one code path; only the type of the minimal action set's elements
    differs (see :func:`_action_id`).
    """
    if backend == "ale_py":
        import ale_py
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        return ale_py.ALEInterface()
    if backend == "atari_py":
        try:
            import atari_py
        except ImportError as e:
            raise ImportError(
                "AtariEnv: backend='atari_py' needs atari-py: install rlframe's `atari` extra "
                "(pip install 'rlframe[atari]'). PyPI has no atari-py wheel for recent Pythons "
                "(3.11 included), so pip builds it from source, which needs cmake and the zlib "
                "headers (Debian/Ubuntu: apt-get install cmake zlib1g-dev; with CMake 4 also "
                "set CMAKE_POLICY_VERSION_MINIMUM=3.5). Or use backend='ale_py'.") from e
        if game not in ATARI_PY_GAMES:
            raise ValueError(f"AtariEnv: game={game!r} is not one of atari-py's games (its "
                             "older ALE has no settings for it); use backend='ale_py'.")
        atari_py.ALEInterface.setLoggerMode(atari_py.ALEInterface.Logger.Error)
        return atari_py.ALEInterface()
    raise ValueError(f"AtariEnv: backend must be one of {BACKENDS}, got backend={backend!r}.")


def _action_id(action: Any) -> int:
    """ALE id (0..17) of an element of either backend's minimal action set: an
    ``ale_py.Action`` enum (``int()`` refuses it, ``.value`` is the id) or an int."""
    return int(getattr(action, "value", action))


def _check_frame_shape(frame_shape: Any) -> tuple[int, int]:
    """``frame_shape`` as ``(height, width)``, or a ValueError saying what is allowed."""
    try:
        h, w = (operator.index(d) for d in frame_shape)
    except (TypeError, ValueError):
        h = w = 0
    if isinstance(frame_shape, str) or not (1 <= h <= RAW_H and 1 <= w <= RAW_W):
        raise ValueError(f"AtariEnv: frame_shape must be (height, width) with 1 <= height <= "
                         f"{RAW_H} and 1 <= width <= {RAW_W}, e.g. {RLPYT_SHAPE} (rlpyt's, the "
                         f"default) or {DEEPMIND_SHAPE} (DeepMind's); got "
                         f"frame_shape={frame_shape!r}.")
    return int(h), int(w)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"AtariEnv: {name} must be an int >= {minimum}, got {name}={value!r}.")
