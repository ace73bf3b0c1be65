"""AtariEnv: observations, seeding, lives, time limit, rewards, errors; atari-py vs ale-py."""
import pickle
import sys

import numpy as np
import pytest

pytest.importorskip("ale_py")

from rlframe.envs.atari import AtariEnv  # noqa: E402
from rlframe.envs.atari.atari_env import AtariTrajInfo, downsample  # noqa: E402
from rlframe.utils.seed import set_envs_seeds  # noqa: E402


def _env(**kwargs) -> AtariEnv:
    env = AtariEnv(**kwargs)
    env.seed(0)
    return env


def test_observation_shape_dtype_and_spaces():
    env = _env(game="pong", num_img_obs=3)
    obs = env.reset()
    assert obs.shape == (3, 104, 80) and obs.dtype == np.uint8
    assert env.observation_space.shape == (3, 104, 80)
    assert env.observation_space.contains(obs)
    assert env.action_space.n == len(env.get_action_meanings()) == 6
    assert env.get_action_meanings()[:2] == ["NOOP", "FIRE"]
    o, r, d, info = env.step(1)
    assert o.shape == (3, 104, 80) and o.dtype == np.uint8
    assert r.dtype == np.float32 and r.shape == ()
    assert isinstance(d, bool)
    assert info._fields == ("game_score", "traj_done", "timeout")
    assert info.game_score.dtype == np.float32


def test_reset_zeroes_all_but_newest_frame_and_stack_shifts():
    env = _env(game="breakout")
    obs = env.reset()
    assert not obs[:-1].any() and obs[-1].any()
    prev = obs
    for _ in range(5):
        obs, *_ = env.step(0)
        np.testing.assert_array_equal(obs[:-1], prev[1:])  # Oldest first, newest last.
        prev = obs
    assert all(frame.any() for frame in obs)


@pytest.mark.slow
def test_same_seed_same_actions_same_trajectory():
    def run(seed):
        env = AtariEnv(game="breakout", repeat_action_probability=0.25, max_start_noops=30)
        set_envs_seeds([env], seed)
        rng = np.random.default_rng(7)
        out = [env.reset()]
        for _ in range(150):
            o, r, d, info = env.step(int(rng.integers(env.action_space.n)))
            out += [o, r, d, info.game_score]
            if info.traj_done:
                out.append(env.reset())
        return out

    a, b, c = run(3), run(3), run(4)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert len(a) != len(c) or any(not np.array_equal(x, y) for x, y in zip(a, c))


def _play_until_life_lost(env: AtariEnv, max_steps: int = 2000):
    env.reset()
    lives = env.ale.lives()
    rng = np.random.default_rng(0)
    for _ in range(max_steps):
        step = env.step(int(rng.integers(env.action_space.n)))
        if env.ale.lives() < lives:
            return step
    raise AssertionError("no life lost")


def test_observations_handed_out_are_never_written_again():
    """Steps return their stacks without a copy: later steps, a lost life (which clears
    the stack) and a reset must leave the arrays already returned as they were."""
    env = _env(game="breakout", fire_on_reset=True)
    obs = env.reset()
    kept = [(obs, obs.copy())]
    lives, rng = env.ale.lives(), np.random.default_rng(0)
    for _ in range(2000):
        obs, *_ = env.step(int(rng.integers(env.action_space.n)))
        kept.append((obs, obs.copy()))
        if env.ale.lives() < lives:
            break
    assert env.ale.lives() < lives and not obs[:-1].any()
    obs = env.reset()
    kept += [(obs, obs.copy()), (env.step(0).observation, None), (env.get_obs(), None)]
    for obs, copy in kept[:-2]:
        np.testing.assert_array_equal(obs, copy)
    assert len({id(obs) for obs, _ in kept}) == len(kept)


def test_episodic_lives_ends_episode_not_game():
    env = _env(game="breakout", fire_on_reset=True)
    obs, _, done, info = _play_until_life_lost(env)
    assert done and not info.traj_done and not info.timeout
    assert not env.ale.game_over()
    assert not obs[:-1].any() and obs[-1].any()  # Frame stack restarted.


@pytest.mark.parametrize("fire", [False, True])
def test_fire_on_life_loss_serves_the_next_ball(fire):
    """Breakout serves a ball only on FIRE: with fire_on_life_loss the env presses it
    after a lost life, so an agent that only plays NOOP loses the next life too."""
    env = _env(game="breakout", fire_on_reset=True, fire_on_life_loss=fire)
    assert env.fire_on_life_loss is fire
    _play_until_life_lost(env)
    lives = env.ale.lives()
    for _ in range(1500):
        _, _, done, _ = env.step(0)  # NOOP: the paddle stays where it is.
        if done:
            break
    assert (env.ale.lives() < lives) is fire


def test_envpool_refuses_fire_on_life_loss_without_fire_on_reset():
    from rlframe.envs.atari.envpool_atari import envpool_atari_options
    with pytest.raises(ValueError, match="fire_on_life_loss=True needs fire_on_reset=True"):
        envpool_atari_options(dict(game="breakout", fire_on_life_loss=True))


def test_life_loss_without_episodic_lives_is_not_done():
    env = _env(game="breakout", fire_on_reset=True, episodic_lives=False)
    obs, _, done, info = _play_until_life_lost(env)
    assert not done and not info.traj_done
    assert obs[:-1].any()


def test_horizon_gives_timeout():
    env = _env(game="pong", horizon=5)
    env.reset()
    for _ in range(5):
        _, _, done, info = env.step(0)
        assert not done and not info.timeout
    _, _, done, info = env.step(0)
    assert done and info.traj_done and info.timeout


@pytest.mark.parametrize("clip", [True, False])
def test_reward_clipping(clip):
    env = _env(game="space_invaders", clip_reward=clip)
    env.reset()
    scores, rewards = [], []
    for _ in range(600):
        _, r, d, info = env.step(1)  # FIRE
        scores.append(float(info.game_score))
        rewards.append(float(r))
        if info.traj_done:
            env.reset()
    scores, rewards = np.array(scores), np.array(rewards)
    assert scores.max() > 1  # Space Invaders scores 5 and more per hit.
    np.testing.assert_array_equal(rewards, np.sign(scores) if clip else scores)


def test_atari_traj_info_sums_game_score():
    env = _env(game="space_invaders")
    env.reset()
    traj_info = AtariTrajInfo()
    total = 0.
    for _ in range(200):
        o, r, d, info = env.step(1)
        traj_info.step(o, 1, r, d, None, info)
        total += float(info.game_score)
    assert traj_info.GameScore == total > 0
    assert traj_info.Length == 200


@pytest.mark.parametrize("little_endian", [True, False])
def test_downsample_is_rounded_block_mean(monkeypatch, little_endian):
    """Both ways of summing the column pairs, on random frames, all-255 blocks (the
    largest sums) and every remainder of the rounding, with and without scratch."""
    from rlframe.envs.atari import frames
    monkeypatch.setattr(frames, "_LITTLE_ENDIAN", little_endian)
    rng = np.random.default_rng(0)
    edges = np.full((208, 160), 255, np.uint8)
    edges[:, :8] = rng.integers(0, 3, size=(208, 8))  # Small sums: every remainder.
    edges[100:, 40:] = 0
    scratch = (np.zeros((104, 160), np.uint16), np.zeros((104, 80), np.uint32))
    for a in (rng.integers(0, 256, size=(208, 160), dtype=np.uint8), edges,
              rng.integers(250, 256, size=(208, 160), dtype=np.uint8)):
        expected = np.floor(a.reshape(104, 2, 80, 2).astype(float).mean(axis=(1, 3)) + 0.5)
        np.testing.assert_array_equal(downsample(a), expected.astype(np.uint8))
        out = np.zeros((104, 80), np.uint8)
        assert downsample(a, out=out, scratch=scratch) is out
        np.testing.assert_array_equal(out, expected.astype(np.uint8))


def test_bad_game_names_close_matches():
    with pytest.raises(ValueError, match="space_invaders"):
        AtariEnv(game="space_invader")
    with pytest.raises(ValueError, match="game='no_such_game'"):
        AtariEnv(game="no_such_game")


@pytest.mark.parametrize("kwargs, name", [({"frame_skip": 0}, "frame_skip=0"),
                                          ({"num_img_obs": 0}, "num_img_obs=0"),
                                          ({"frame_skip": 2.5}, "frame_skip=2.5"),
                                          ({"max_start_noops": -1}, "max_start_noops=-1"),
                                          ({"horizon": 0}, "horizon=0"),
                                          ({"repeat_action_probability": 2.},
                                           "repeat_action_probability=2.0")])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AtariEnv(**kwargs)


def test_backends():
    try:
        import atari_py  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"rlframe\[atari\].*cmake"):
            AtariEnv(backend="atari_py")
    with pytest.raises(ValueError, match="backend='gym'"):
        AtariEnv(backend="gym")


def test_screens_other_than_210x160_are_refused():
    with pytest.raises(ValueError, match="game='adventure' has a 250x160 screen"):
        AtariEnv(game="adventure")


def test_seed_zero_gives_ale_a_nonzero_seed():
    env = _env(game="pong")  # seed(0): ALE would seed from the clock on 0 (atari-py).
    assert env.ale.getInt("random_seed") == 1


ATARI_PY_SKIP = ("atari-py not installed: pip install 'rlframe[atari]' (a source build on "
                 "Python 3.11, needing cmake and zlib headers)")


def _trajectory(backend: str, game: str, steps: int, **kwargs) -> list:
    env = AtariEnv(game=game, backend=backend, **kwargs)
    env.seed(5)
    rng = np.random.default_rng(0)
    out = [env.reset()]
    for _ in range(steps):
        step = env.step(int(rng.integers(env.action_space.n)))
        out.append(step)
        if step.env_info.traj_done:
            out.append(env.reset())
    return out


@pytest.mark.parametrize("game, kwargs", [("breakout", {"fire_on_reset": True}),
                                          ("pong", {"horizon": 150})])
def test_atari_py_backend_steps_like_ale_py(game, kwargs):
    pytest.importorskip("atari_py", reason=ATARI_PY_SKIP)
    a = _trajectory("ale_py", game, 400, **kwargs)
    b = _trajectory("atari_py", game, 400, **kwargs)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):  # A reset's observation.
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(x.observation, y.observation)
            assert x.reward == y.reward and x.reward.dtype == y.reward.dtype
            assert x.done == y.done and x.env_info == y.env_info
    steps = [x for x in a if not isinstance(x, np.ndarray)]
    assert any(s.env_info.traj_done for s in steps)  # A game over or a horizon, then reset.
    assert any(s.reward != 0 for s in steps)
    if game == "breakout":
        assert any(s.done and not s.env_info.traj_done for s in steps)  # A lost life.


def _play(env: AtariEnv, actions: np.ndarray) -> list:
    out = []
    for a in actions:
        step = env.step(int(a))
        out.append(step)
        if step.env_info.traj_done:
            out.append(env.reset())
    return out


@pytest.mark.parametrize("backend", ["ale_py", "atari_py"])
def test_a_pickled_env_plays_on_exactly_as_the_original(backend):
    """A checkpoint keeps the emulator mid-episode: with sticky actions (the emulator's
    RNG), lives, the frame stack and the no-op RNG of the resets to come."""
    if backend == "atari_py":
        pytest.importorskip("atari_py", reason=ATARI_PY_SKIP)
    env = AtariEnv(game="breakout", backend=backend, repeat_action_probability=0.25,
                   fire_on_reset=True, horizon=300)
    env.seed(11)
    env.reset()
    actions = np.random.default_rng(2).integers(env.action_space.n, size=700)
    _play(env, actions[:120])
    copy = pickle.loads(pickle.dumps(env))
    assert copy.ale is not env.ale and copy.ale.lives() == env.ale.lives()
    np.testing.assert_array_equal(copy.get_obs(), env.get_obs())
    a, b = _play(env, actions[120:]), _play(copy, actions[120:])
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):  # A reset's observation (the no-op RNG's draws).
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(x.observation, y.observation)
            assert x.reward == y.reward and x.done == y.done and x.env_info == y.env_info
    steps = [x for x in a if not isinstance(x, np.ndarray)]
    assert any(s.env_info.traj_done for s in steps)  # Through a reset.
    assert any(s.done and not s.env_info.traj_done for s in steps)  # And a lost life.
    env.close()
    assert pickle.loads(pickle.dumps(env)).ale is None  # A closed env stays closed.


def test_atari_py_backend_refuses_games_it_lacks():
    pytest.importorskip("atari_py", reason=ATARI_PY_SKIP)
    env = AtariEnv(game="pong", backend="atari_py")
    assert env.backend == "atari_py" and env.get_action_meanings()[:2] == ["NOOP", "FIRE"]
    with pytest.raises(ValueError, match="game='video_chess'.*backend='ale_py'"):
        AtariEnv(game="video_chess", backend="atari_py")


@pytest.mark.slow
def test_serial_sampler_steps_atari():
    from rlframe.agents.pg.atari import AtariFfAgent
    from rlframe.samplers.serial.sampler import SerialSampler
    import torch

    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=dict(game="pong", horizon=10),
                            batch_T=12, batch_B=2, TrajInfoCls=AtariTrajInfo,
                            max_decorrelation_steps=0)
    sampler.initialize(AtariFfAgent(), seed=0)
    samples, traj_infos = sampler.obtain_samples(0)
    assert samples.env.observation.shape == (12, 2, 4, 104, 80)
    assert samples.env.observation.dtype == torch.uint8
    assert samples.env.env_info.timeout.any()  # Every env hits horizon=10 within 12 steps.
    assert len(traj_infos) == 2
    assert all(t.Length == 11 and "GameScore" in t for t in traj_infos)
    sampler.shutdown()


def test_action_tables_and_render_without_opencv(monkeypatch):
    from rlframe.envs.atari.atari_env import ACTION_INDEX, ACTION_MEANING
    assert ACTION_INDEX["FIRE"] == 1
    assert all(ACTION_INDEX[m] == i for i, m in ACTION_MEANING.items())
    env = AtariEnv("pong")
    obs = env.reset()
    np.testing.assert_array_equal(env.get_obs(), obs)
    monkeypatch.setitem(sys.modules, "cv2", None)  # As if OpenCV were not installed.
    with pytest.raises(ImportError, match="opencv-python"):
        env.render()
