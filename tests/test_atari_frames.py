"""AtariEnv's frame_shape: rlpyt's 104x80 halving or an area resize of the whole screen
(DeepMind's 84x84)."""
import re

import numpy as np
import pytest

from rlframe.envs.atari.frames import RAW_H, RAW_W, AreaResize, area_weights


def area_mean_by_repetition(frame, h, w):
    """An independent area resize: repeat every pixel so that both sizes divide the
    repeated image, then take plain block means."""
    rows, cols = np.lcm(RAW_H, h), np.lcm(RAW_W, w)
    big = np.repeat(np.repeat(frame.astype(np.float64), rows // RAW_H, axis=0),
                    cols // RAW_W, axis=1)
    return big.reshape(h, rows // h, w, cols // w).mean(axis=(1, 3))


@pytest.mark.parametrize("n_in, n_out", [(210, 84), (160, 84), (210, 105), (160, 160),
                                         (7, 3), (5, 1)])
def test_area_weights_rows_sum_to_one_over_the_covered_cells(n_in, n_out):
    weights = area_weights(n_in, n_out)
    assert weights.shape == (n_out, n_in)
    np.testing.assert_allclose(weights.sum(axis=1), 1., rtol=1e-6)
    assert (weights >= 0).all()
    for i, row in enumerate(weights):  # Output cell i covers [i * s, (i + 1) * s).
        covered = np.flatnonzero(row)
        s = n_in / n_out
        assert covered[0] == int(np.floor(i * s + 1e-9))
        assert covered[-1] == int(np.ceil((i + 1) * s - 1e-9)) - 1


@pytest.mark.parametrize("shape", [(84, 84), (105, 80), (210, 160), (42, 32), (1, 1)])
def test_area_resize_is_the_rounded_area_mean(shape):
    frame = np.random.default_rng(1).integers(0, 256, size=(RAW_H, RAW_W), dtype=np.uint8)
    expected = area_mean_by_repetition(frame, *shape)
    out = np.zeros(shape, np.uint8)
    assert AreaResize(shape)(frame, out=out) is out
    diff = np.abs(out.astype(np.float64) - expected)
    # Nearest level, but where the exact mean lies (within float32's error) on a half.
    ties = np.abs(expected - np.floor(expected) - 0.5) < 1e-3
    assert (diff[~ties] < 0.5).all() and (diff <= 0.5 + 1e-3).all()
    np.testing.assert_array_equal(AreaResize(shape)(frame), out)


def test_area_resize_keeps_flat_frames_and_the_extremes():
    for level in (0, 1, 128, 255):
        frame = np.full((RAW_H, RAW_W), level, np.uint8)
        assert (AreaResize((84, 84))(frame) == level).all()


def test_area_resize_is_opencvs_inter_area_to_one_level():
    cv2 = pytest.importorskip("cv2")
    frame = np.random.default_rng(2).integers(0, 256, size=(RAW_H, RAW_W), dtype=np.uint8)
    ours = AreaResize((84, 84))(frame).astype(int)
    theirs = cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA).astype(int)
    assert np.abs(ours - theirs).max() <= 1
    assert (ours == theirs).mean() > 0.99


@pytest.fixture
def ale():
    return pytest.importorskip("ale_py")


def test_deepmind_frames_are_the_resized_max_of_the_last_two_screens(ale):
    from rlframe.envs.atari import AtariEnv
    from rlframe.envs.atari.atari_env import DEEPMIND_SHAPE
    env = AtariEnv(game="breakout", frame_shape=DEEPMIND_SHAPE, fire_on_reset=True)
    env.seed(0)
    obs = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space.shape == (4, 84, 84) and env.frame_shape == (84, 84)
    resize = AreaResize((84, 84))
    for t in range(30):
        obs, _, done, _ = env.step(t % env.action_space.n)
        assert env.observation_space.contains(obs)
        # The emulator's last two screens of the frame skip, kept by the env.
        expected = resize(np.maximum(env._raw_frames[0], env._raw_frames[1]))
        np.testing.assert_array_equal(obs[-1], expected)
        if done:
            break
    assert obs[-1].any()


def test_both_frame_shapes_play_the_same_game(ale):
    """The frame size changes the observation only: same seed and actions, same
    rewards, dones and scores."""
    from rlframe.envs.atari import AtariEnv
    envs = [AtariEnv(game="pong", frame_shape=shape) for shape in [(104, 80), (84, 84)]]
    results = []
    for env in envs:
        env.seed(3)
        env.reset()
        steps = [env.step(a % 6) for a in range(300)]
        results.append([(float(r), d, float(i.game_score)) for _, r, d, i in steps])
    assert results[0] == results[1]


@pytest.mark.parametrize("bad", [(0, 84), (84, 161), (211, 10), (84,), (84, 84, 1), "84x84",
                                 (84.5, 84), None])
def test_bad_frame_shapes_say_what_is_allowed(ale, bad):
    from rlframe.envs.atari import AtariEnv
    allowed = re.escape("frame_shape must be (height, width) with 1 <= height <= 210 and "
                        "1 <= width <= 160")
    with pytest.raises(ValueError, match=allowed + ".*" + re.escape(f"got frame_shape={bad!r}")):
        AtariEnv(game="pong", frame_shape=bad)


@pytest.mark.parametrize("agent_name", ["AtariDqnAgent", "AtariFfAgent"])
def test_a_model_made_for_the_other_frame_shape_is_named_before_training(ale, agent_name,
                                                                         in_tmp_cwd):
    """A state dict trained on 104x80 frames given to an agent on 84x84 frames: the
    runner's first check names both observation shapes; nothing is written."""
    import os

    from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
    from rlframe.agents.pg.atari import AtariFfAgent
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.atari import AtariEnv
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.serial.sampler import SerialSampler
    AgentCls, algo = dict(AtariDqnAgent=(AtariDqnAgent, DQN()),
                          AtariFfAgent=(AtariFfAgent, PPO()))[agent_name]
    trained = AgentCls()
    trained.initialize(AtariEnv(game="pong").spaces)  # rlpyt's 104x80 frames.
    agent = AgentCls(initial_model_state_dict=trained.state_dict())
    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=dict(game="pong", frame_shape=(84, 84)),
                            batch_T=4, batch_B=1)
    with pytest.raises(ValueError, match=re.escape(
            "It was made for observations of shape (4, 104, 80); the env gives (4, 84, 84). "
            "Build the env with frame_shape=(104, 80) (AtariEnv)")):
        MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=100)
    assert not os.path.exists(in_tmp_cwd / "data")
    fitting = AgentCls(initial_model_state_dict=trained.state_dict())
    fitting.initialize(AtariEnv(game="pong").spaces)  # Same frames: it loads.
