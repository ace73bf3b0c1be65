"""EnvPool's Atari under the samplers, with ``AtariEnv``'s keywords and step semantics.

``env_backend="envpool"`` with ``EnvCls=AtariEnv`` builds :class:`EnvPoolAtariVecEnv`:
the same game, stepped by EnvPool's C++ threads, its options set from the
``AtariEnv`` keywords (``frame_skip`` -> ``frame_skip``, ``num_img_obs`` ->
``stack_num``, ``clip_reward`` -> ``reward_clip``, ``episodic_lives`` ->
``episodic_life``, ``fire_on_reset`` -> ``use_fire_reset``, ``max_start_noops`` ->
``noop_max`` (+1, below), ``repeat_action_probability``, ``horizon`` ->
``max_episode_steps``, ``frame_shape`` -> ``img_height``/``img_width``), and rows as
``AtariEnv`` gives them: ``env_info`` is ``EnvInfo(game_score, traj_done, timeout)``
(the raw score, game over or horizon, cut by the horizon), so ``AtariTrajInfo``
sums ``GameScore`` and the samplers reset an env only when its game is over. After
a lost life (``episodic_lives``) the row is ``done`` and the game goes on by itself,
as with ``AtariEnv``. The frame stack is ``AtariEnv``'s too: frames from before a
reset or a lost life are zeros (EnvPool repeats the first frame, or keeps the last
life's; they are zeroed here), which the frame replays of the DQN family rely on
when they rebuild stacks.

Where the two differ (same keywords, not the same frames step for step):

* **Frames**: EnvPool area-resizes the whole 210x160 screen (OpenCV's INTER_AREA)
  for every ``frame_shape``; ``AtariEnv`` does so too except at its default
  (104, 80), which is rlpyt's crop to 208 rows and 2x2 block mean. At (84, 84) the
  two agree within one gray level; at (104, 80) the frames differ, so train and
  evaluate on one backend.
* **After a lost life**: EnvPool plays 1 to ``noop_max`` random no-ops (and FIRE,
  with ``use_fire_reset``) before the next life's first frame; ``AtariEnv`` plays
  one NOOP (then FIRE and UP with ``fire_on_life_loss``, which EnvPool has only
  together with ``fire_on_reset``: ``fire_on_life_loss`` alone is refused).
* **No-ops at a reset**: the same law (1 to ``max_start_noops + 1`` NOOPs, the
  first of them rlpyt's NOOP after reset), so ``noop_max = max_start_noops + 1``;
  with ``fire_on_reset`` EnvPool presses FIRE in place of the last no-op, where
  ``AtariEnv`` presses FIRE and UP after them.
* **Emulator**: EnvPool's own build of ALE (``backend`` must stay ``"ale_py"``) and
  its own seeds: env ``b`` of a pool seeded ``s`` gets ``s + b``.
* A game over in the middle of a frame skip ends the step at once in both; EnvPool
  then stacks the last frame without the max over two.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlframe.envs.atari.atari_env import AtariEnv, EnvInfo
from rlframe.envs.envpool import EnvPoolVecEnv, import_envpool
from rlframe.envs.gym import build_info_tuples
from rlframe.envs.vec_env import VecStep
from rlframe.utils.buffer import buffer_from_example

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue


def envpool_atari_options(env_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id and options for ``AtariEnv(**env_kwargs)``.

    The keywords are first checked by building that ``AtariEnv`` (its own errors,
    naming the keyword, for bad values), then mapped as the module docstring says.

    Raises:
        ValueError: a bad ``AtariEnv`` keyword, ``backend="atari_py"``,
            ``fire_on_life_loss`` without ``fire_on_reset``, or a game that EnvPool
            does not have.
    """
    backend = env_kwargs.get("backend", "ale_py")
    if backend != "ale_py":
        raise ValueError(f"env_backend='envpool' plays Atari on EnvPool's own ALE; AtariEnv's "
                         f"backend={backend!r} cannot apply. Leave out backend (ale_py) or use "
                         "env_backend='plain'.")
    env = AtariEnv(**env_kwargs)  # Checks every keyword, as the plain backend would.
    try:
        if env.fire_on_life_loss and not env.fire_on_reset:
            raise ValueError("env_backend='envpool' presses FIRE after a lost life only with "
                             "its FIRE after a reset (use_fire_reset): AtariEnv's "
                             "fire_on_life_loss=True needs fire_on_reset=True there, or use "
                             "env_backend='plain'.")
        height, width = env.frame_shape
        options = dict(frame_skip=env.frame_skip, stack_num=env.num_img_obs,
                       reward_clip=env.clip_reward, episodic_life=env.episodic_lives,
                       use_fire_reset=env.fire_on_reset, noop_max=env.max_start_noops + 1,
                       repeat_action_probability=env.repeat_action_probability,
                       max_episode_steps=env.horizon, img_height=height, img_width=width,
                       gray_scale=True, full_action_space=False, use_inter_area_resize=True)
        return envpool_atari_id(env.game), options
    finally:
        env.close()


def envpool_atari_id(game: str) -> str:
    """EnvPool's task id of an rlpyt game name (``"space_invaders"`` -> ``"SpaceInvaders-v5"``).

    Raises:
        ValueError: EnvPool has no such Atari game (its ROM set is older than ale-py's).
    """
    ids = [i for i in import_envpool().list_all_envs() if i.endswith("-v5")]
    by_key = {i[:-len("-v5")].lower(): i for i in ids}
    task_id = by_key.get(game.replace("_", "").lower())
    if task_id is None:
        raise ValueError(f"env_backend='envpool' has no Atari game {game!r} (EnvPool ships "
                         f"its own, older set of ROMs); use env_backend='plain'.")
    return task_id


class EnvPoolAtariVecEnv(EnvPoolVecEnv):
    """B games of an ``AtariEnv`` configuration on EnvPool (see the module docstring).

    Args:
        env_kwargs: ``AtariEnv`` keyword arguments.
        num_envs: B.
        seed: env ``b`` of the first pool starts from ``seed + b`` (None: a random seed).
    """

    def __init__(self, env_kwargs: dict[str, Any], num_envs: int, *,
                 seed: int | None = None) -> None:
        task_id, options = envpool_atari_options(env_kwargs)
        self._episodic_lives = options["episodic_life"]
        super().__init__(task_id, num_envs, seed=seed, envpool_kwargs=options)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._stack = options["stack_num"]
        self._since_start = np.zeros(num_envs, dtype=np.int64)  # Steps since (re)start.
        self._atari_info = buffer_from_example(
            build_info_tuples(dict(EnvInfo(np.float32(0), False, False)._asdict())), num_envs)

    @classmethod
    def from_atari(cls, EnvCls: Callable[..., Any], env_kwargs: dict,
                   n_envs: int) -> EnvPoolAtariVecEnv:
        """``n_envs`` games of ``EnvCls(**env_kwargs)``, where ``EnvCls`` is ``AtariEnv``.

        Raises:
            ValueError: ``EnvCls`` is a subclass of ``AtariEnv``, whose overrides
                EnvPool cannot run.
        """
        if EnvCls is not AtariEnv:
            raise ValueError(f"env_backend='envpool' plays AtariEnv's games on EnvPool, which "
                             f"cannot run the overrides of {EnvCls.__name__} (a subclass of "
                             "AtariEnv); use env_backend='plain'.")
        return cls(env_kwargs, n_envs)

    def reset(self, idx: np.ndarray | None = None) -> SpaceValue:
        """Start new games in every env (or those in ``idx``), up to ``max_start_noops + 1``
        NOOPs in.

        Returns:
            observation rows [n, num_img_obs, H, W] uint8, in the order of ``idx``; all
            frames but the last are 0.
        """
        observation = np.array(super().reset(idx))
        observation[:, :-1] = 0
        self._since_start[self._all_ids if idx is None else np.asarray(idx)] = 0
        return observation

    def _after_reset(self, ids: np.ndarray, info: dict) -> None:
        self._lives[ids] = info["lives"]

    def step(self, action: SpaceValue, idx: np.ndarray | None = None) -> VecStep:
        """Step every game (or those in ``idx``) once; a lost life continues the game.

        Returns:
            ``VecStep(observation [n, num_img_obs, H, W] uint8, reward float32 [n],
            done bool [n], EnvInfo(game_score, traj_done, timeout) [n])``.
        """
        ids = self._all_ids if idx is None else np.asarray(idx, dtype=np.int32)
        self._check_not_finished(ids)
        observation, reward, terminated, truncated, info = self._pool_step(
            self._action_space.revert_rows(action), ids)
        game_over = np.asarray(info["terminated"], dtype=bool)
        lives = np.asarray(info["lives"])
        score = np.asarray(info["reward"], dtype=np.float32)
        truncated = np.asarray(truncated, dtype=bool)
        lost_life = (lives > 0) & (lives < self._lives[ids])
        self._lives[ids] = lives
        done = np.asarray(terminated, dtype=bool) | truncated
        traj_done = game_over | truncated
        go_on = np.flatnonzero(done & ~traj_done)  # A lost life: the game continues.
        if go_on.size:
            observation = np.array(observation)
            observation[go_on] = self._continue(ids[go_on])
            self._since_start[ids[go_on]] = -1
        self._since_start[ids] += 1
        observation = self._zero_before_start(observation, self._since_start[ids])
        self._finished[ids] = traj_done
        n = len(ids)
        self._atari_info.game_score[:n] = score
        self._atari_info.traj_done[:n] = traj_done
        episode_end = game_over | (lost_life if self._episodic_lives else False)
        self._atari_info.timeout[:n] = truncated & ~episode_end
        return VecStep(self._observation_space.convert(observation),
                       np.asarray(reward, dtype=np.float32), done, self._atari_info[:n])

    def _zero_before_start(self, observation: np.ndarray, since: np.ndarray) -> np.ndarray:
        """Rows ``since`` steps after their (re)start, with the frames older than it zeroed."""
        young = np.flatnonzero(since < self._stack - 1)
        if young.size:
            observation = np.array(observation)
            for row in young:
                observation[row, :self._stack - 1 - since[row]] = 0
        return observation

    def _continue(self, ids: np.ndarray) -> np.ndarray:
        """Start the next life of games in ``ids``.

        EnvPool continues a game after a lost life when the env is stepped (its
        automatic reset, which ignores the action); its ``reset`` would start a new game.
        """
        return np.asarray(self._pool_step(np.zeros(len(ids), dtype=np.int32), ids)[0])
