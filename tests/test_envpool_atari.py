"""EnvPool's Atari under the samplers, set up from AtariEnv's keywords, with its rows."""
import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("envpool", reason='EnvPool is optional: pip install -e ".[envpool]"')

from rlframe.agents.pg.atari import AtariFfAgent  # noqa: E402
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo  # noqa: E402
from rlframe.envs.atari.envpool_atari import (EnvPoolAtariVecEnv,  # noqa: E402
                                              envpool_atari_id, envpool_atari_options)
from rlframe.envs.vector import make_vec_env  # noqa: E402
from rlframe.samplers.serial.sampler import SerialSampler  # noqa: E402


def test_atari_keywords_map_to_envpools_options():
    task_id, options = envpool_atari_options(dict(
        game="space_invaders", frame_skip=3, num_img_obs=2, clip_reward=False,
        episodic_lives=False, fire_on_reset=True, max_start_noops=7,
        repeat_action_probability=0.25, horizon=1000, frame_shape=(84, 84)))
    assert task_id == "SpaceInvaders-v5"
    assert options == dict(frame_skip=3, stack_num=2, reward_clip=False, episodic_life=False,
                           use_fire_reset=True, noop_max=8, repeat_action_probability=0.25,
                           max_episode_steps=1000, img_height=84, img_width=84,
                           gray_scale=True, full_action_space=False,
                           use_inter_area_resize=True)
    assert envpool_atari_id("up_n_down") == "UpNDown-v5"
    assert envpool_atari_id("pong") == "Pong-v5"


@pytest.mark.parametrize("game", ["pong", "space_invaders"])
def test_frames_rewards_and_ends_match_atari_env_step_for_step(game):
    """With no start no-ops both run reset_game and one NOOP, then the same actions:
    the stacks agree within one gray level (two INTER_AREA implementations)."""
    kwargs = dict(game=game, frame_shape=(84, 84), max_start_noops=0)
    vec = make_vec_env("envpool", AtariEnv, kwargs, 1)
    assert isinstance(vec, EnvPoolAtariVecEnv)
    env = AtariEnv(**kwargs)
    assert vec.spaces.observation.shape == env.spaces.observation.shape == (4, 84, 84)
    assert vec.spaces.action.n == env.spaces.action.n
    env.seed(0)
    first, rows = env.reset(), vec.reset()
    assert not rows[0, :-1].any()  # AtariEnv's stack at a reset: zeros but the last frame.
    assert np.abs(first.astype(int) - rows[0].astype(int)).max() <= 1
    rng = np.random.default_rng(1)
    for _ in range(150):
        action = int(rng.integers(env.spaces.action.n))
        step, vstep = env.step(action), vec.step(np.array([action]))
        assert np.abs(step.observation.astype(int) - vstep.observation[0].astype(int)).max() <= 1
        assert step.reward == vstep.reward[0] and step.done == vstep.done[0]
        assert step.env_info.game_score == vstep.env_info.game_score[0]
        assert step.env_info.traj_done == vstep.env_info.traj_done[0]
    vec.close()


def test_a_lost_life_ends_the_episode_not_the_game():
    """Breakout, random play: each lost life is ``done`` without ``traj_done`` and the
    game goes on without a reset (its next frames zeroed but the newest); after the
    fifth the game is over, and a finished game must be reset before it steps again."""
    vec = make_vec_env("envpool", AtariEnv, dict(game="breakout", frame_shape=(84, 84)), 2)
    vec.seed(3)
    vec.reset()
    rng = np.random.default_rng(0)
    lives_lost = np.zeros(2, dtype=int)
    game_over_at = None
    for t in range(3000):
        step = vec.step(rng.integers(0, 4, size=2))
        lost = step.done & ~step.env_info.traj_done
        lives_lost += lost
        for b in np.flatnonzero(lost):
            assert not step.observation[b, :-1].any() and step.observation[b, -1].any()
        if step.env_info.traj_done[0]:
            game_over_at = t
            break
        if step.env_info.traj_done[1]:
            vec.reset(np.array([1]))
    assert game_over_at is not None and lives_lost[0] == 4  # Five lives, the fifth ends it.
    assert not step.env_info.timeout.any()
    with pytest.raises(RuntimeError, match=r"envs \[0\] finished"):
        vec.step(np.zeros(2, dtype=int))
    vec.reset()
    vec.step(np.zeros(2, dtype=int))
    vec.close()


def test_horizon_cuts_the_game_as_a_timeout():
    vec = make_vec_env("envpool", AtariEnv, dict(game="pong", horizon=5, frame_shape=(84, 84)),
                       1)
    vec.reset()
    steps = [vec.step(np.array([0])) for _ in range(5)]
    assert [bool(s.done[0]) for s in steps] == [False] * 4 + [True]
    assert steps[-1].env_info.traj_done[0] and steps[-1].env_info.timeout[0]
    vec.close()


def test_serial_sampler_runs_on_envpool_with_one_keyword():
    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=dict(game="pong", frame_shape=(84, 84),
                                                             horizon=20),
                            TrajInfoCls=AtariTrajInfo, batch_T=24, batch_B=2,
                            max_decorrelation_steps=0, env_backend="envpool")
    agent = AtariFfAgent()
    sampler.initialize(agent=agent, affinity=dict(), seed=0)
    try:
        samples, traj_infos = sampler.obtain_samples(0)
        assert samples.env.observation.shape == (24, 2, 4, 84, 84)
        assert len(traj_infos) == 2 and all(t.Length == 20 for t in traj_infos)
        assert all(t.GameScore <= 0 for t in traj_infos)  # Pong: 20 steps score no point.
        assert samples.env.done.sum() == 2
    finally:
        sampler.shutdown()


def test_keywords_envpool_cannot_honour_are_refused():
    with pytest.raises(ValueError, match=r"backend='atari_py'.*env_backend='plain'"):
        envpool_atari_options(dict(game="pong", backend="atari_py"))

    class MyAtari(AtariEnv):
        pass

    with pytest.raises(ValueError, match=r"overrides of MyAtari"):
        make_vec_env("envpool", MyAtari, dict(game="pong"), 1)
    with pytest.raises(ValueError, match=r"frame_skip must be an int >= 1, got frame_skip=0"):
        make_vec_env("envpool", AtariEnv, dict(game="pong", frame_skip=0), 1)
