import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gym_spaces
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.wrappers import TimeLimit

from rlframe.envs.base import EnvSpaces, EnvStep
from rlframe.envs.gym import (GymEnvWrapper, build_info_tuples, check_env_id, infill_info,
                              info_to_nt, make)
from rlframe.spaces.composite import Composite
from rlframe.utils.buffer import buffer_from_example
from rlframe.utils.checkpoint import dumps
from rlframe.utils.collections import is_namedarraytuple


class InfoEnv(gym.Env):
    """Terminates after 5 steps; its info mixes kept, dropped and occasional keys."""

    observation_space = gym_spaces.Box(-1, 1, (2,), np.float64)
    action_space = gym_spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2), {"ale.lives": 3}

    def step(self, action):
        self.t += 1
        info = {"ale.lives": 3 - self.t // 2, "name": "pong", "flag": self.t % 2 == 0,
                "nested": {"a": self.t, "b": np.array([0.5, 1.5]) * self.t}}
        if self.t % 2 == 1:
            info["sometimes"] = 1.5 * self.t
        if self.t == 3:
            info["late"] = 7
        obs = self.np_random.uniform(-1, 1, 2)
        return obs, float(action), self.t >= 5, False, info


class DictEnv(gym.Env):
    """Dict observations and Dict actions."""

    observation_space = gym_spaces.Dict({
        "pos": gym_spaces.Box(-1, 1, (2,), np.float64),
        "count": gym_spaces.Discrete(10),
    })
    action_space = gym_spaces.Dict({
        "move": gym_spaces.Discrete(3),
        "force": gym_spaces.Box(-1, 1, (1,), np.float32),
    })

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert isinstance(action, dict) and set(action) == {"move", "force"}
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 4, {}

    def _obs(self):
        return {"pos": self.np_random.uniform(-1, 1, 2), "count": self.t}


def test_cartpole_step_reset_and_spaces():
    env = make("CartPole-v1")
    assert env.horizon == 500
    assert isinstance(env.spaces, EnvSpaces) and env.action_space.n == 2
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (4,)
    step = env.step(env.action_space.sample())
    assert isinstance(step, EnvStep)
    assert isinstance(step.reward, np.float32) and isinstance(step.done, bool)
    assert step.env_info._fields == ("timeout",) and step.env_info.timeout.dtype == np.bool_
    env.close()


def test_truncation_sets_timeout():
    env = GymEnvWrapper(TimeLimit(CartPoleEnv(), max_episode_steps=3))
    assert env.horizon == 3
    env.seed(0)
    env.reset()
    steps = [env.step(1 - t % 2) for t in range(3)]
    assert [s.done for s in steps] == [False, False, True]
    assert [bool(s.env_info.timeout) for s in steps] == [False, False, True]


def test_termination_is_not_timeout():
    env = make("CartPole-v1")
    env.seed(0)
    env.reset()
    for _ in range(100):
        step = env.step(0)  # always push left: the pole falls within a few dozen steps
        if step.done:
            break
    assert step.done and not step.env_info.timeout


def test_terminated_and_truncated_together_is_not_timeout():
    env = GymEnvWrapper(TimeLimit(InfoEnv(), max_episode_steps=5))
    env.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps = [env.step(0) for _ in range(5)]
    assert steps[-1].done and not steps[-1].env_info.timeout


def test_free_form_info_schema():
    env = GymEnvWrapper(InfoEnv())
    env.reset()
    first = env.step(1)
    info = first.env_info
    assert info._fields == ("ale_lives", "flag", "nested", "sometimes", "timeout")
    assert type(info).__name__ == "info" and type(info.nested).__name__ == "info_nested"
    assert info.ale_lives.dtype == np.int64 and info.ale_lives == 3
    assert info.flag.dtype == np.bool_ and info.sometimes.dtype == np.float32
    assert info.sometimes == np.float32(1.5)
    assert info.nested.a == 1 and info.nested.b.dtype == np.float32
    assert first.reward == np.float32(1.0) and first.observation.dtype == np.float32

    second = env.step(0)
    assert type(second.env_info) is type(info)
    assert second.env_info.sometimes == 0 and second.env_info.sometimes.dtype == np.float32
    with pytest.warns(UserWarning, match="late"):
        third = env.step(0)
    assert "late" not in third.env_info._fields and third.env_info.sometimes == np.float32(4.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning about "late" is given once
        env.reset()
        env.step(0), env.step(0), env.step(0)

    buf = buffer_from_example(info, (3, 2))
    for t, step in enumerate((first, second, third)):
        buf[t, 1] = step.env_info
    assert buf.nested.b.dtype == np.float32 and buf.nested.b.shape == (3, 2, 2)
    assert buf.sometimes[:, 1].tolist() == [1.5, 0.0, 4.5]
    assert buf.ale_lives[:, 1].tolist() == [3, 2, 2]


def test_info_helpers():
    example = build_info_tuples({"x.y": 1.0, "s": "text", "d": {"k": True}}, name="myinfo")
    assert example._fields == ("x_y", "d") and type(example.d).__name__ == "myinfo_d"
    dropped = []
    nt = info_to_nt({"x.y": 2, "extra": 1}, example, dropped)
    assert nt.x_y == np.float32(2.0) and nt.d.k == np.False_ and dropped == ["extra"]
    nt = info_to_nt({"x.y": np.ones(3)}, example, dropped)
    assert nt.x_y == 0 and "x_y" in dropped
    filled = infill_info({"a": 1, "n": {"b": 2}}, {"a": 0, "c": 5, "n": {"b": 0, "e": 1}})
    assert filled == {"a": 1, "c": 5, "n": {"b": 2, "e": 1}}


def test_info_example_declares_occasional_keys():
    env = make("CartPole-v1", info_example={"episode": {"r": 0.0, "l": 0}})
    env.reset()
    info = env.step(0).env_info
    assert info._fields == ("episode", "timeout") and info.episode.l.dtype == np.int64


def test_env_info_pickles():
    env = GymEnvWrapper(InfoEnv())
    env.reset()
    info = env.step(0).env_info
    back = pickle.loads(pickle.dumps(info))
    assert type(back) is type(info) and back.nested.a == info.nested.a
    assert np.array_equal(back.nested.b, info.nested.b)


def test_env_info_unpickles_in_a_fresh_interpreter():
    env = GymEnvWrapper(InfoEnv())
    env.reset()
    info = env.step(0).env_info
    code = ("import pickle, sys; x = pickle.loads(sys.stdin.buffer.read()); "
            "print(type(x).__name__, ','.join(x._fields), int(x.nested.a))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(info),
                         capture_output=True, check=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1]).stdout.decode().split()
    assert out == ["info", ",".join(info._fields), "1"]


def test_dict_observation_and_action_spaces():
    env = GymEnvWrapper(DictEnv())
    assert isinstance(env.observation_space.space, Composite)
    assert isinstance(env.action_space.space, Composite)
    obs = env.reset()
    assert is_namedarraytuple(obs) and set(obs._fields) == {"pos", "count"}
    assert obs.pos.dtype == np.float32 and env.observation_space.contains(obs)
    action = env.action_space.sample()
    assert is_namedarraytuple(action)
    step = env.step(action)  # DictEnv asserts it receives a dict
    assert is_namedarraytuple(step.observation) and step.observation.count == 1
    back = pickle.loads(pickle.dumps(step.observation))
    assert type(back) is type(step.observation) and np.array_equal(back.pos, step.observation.pos)
    null = env.observation_space.null_value()
    assert null.pos.shape == (2,) and null.pos.dtype == np.float32
    buf = buffer_from_example(obs, (2, 3))
    buf[1, 2] = step.observation
    assert np.array_equal(buf.pos[1, 2], step.observation.pos)


def test_unknown_env_id_error():
    with pytest.raises(ValueError) as err:
        make("CartPol-v1")
    message = str(err.value)
    assert "id" in message and "'CartPol-v1'" in message and "CartPole-v1" in message
    with pytest.raises(ValueError, match="CartPole-v1"):
        check_env_id("cartpole-v1")
    check_env_id("CartPole-v1")


def test_ale_ids_are_registered():
    pytest.importorskip("ale_py")
    check_env_id("ALE/Pong-v5")
    with pytest.raises(ValueError, match="ALE/Pong-v5"):
        check_env_id("ALE/Pongg-v5")
    env = make("ALE/Pong-v5")
    env.reset()
    info = env.step(0).env_info
    assert "lives" in info._fields and "timeout" in info._fields
    env.close()


def _rollout(env, seed, n=30):
    env.seed(seed)
    trajectory = [env.reset()]
    actions = [env.action_space.sample() for _ in range(n)]
    for a in actions:
        o, r, d, _ = env.step(a)
        trajectory.append(o)
        if d:
            trajectory.append(env.reset())
    return np.concatenate([np.ravel(x) for x in trajectory]), np.array(actions)


def test_seed_reproducibility():
    obs_a, act_a = _rollout(make("CartPole-v1"), seed=7)
    obs_b, act_b = _rollout(make("CartPole-v1"), seed=7)
    obs_c, _ = _rollout(make("CartPole-v1"), seed=8)
    np.testing.assert_array_equal(act_a, act_b)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert obs_a.shape != obs_c.shape or not np.array_equal(obs_a, obs_c)


def test_fast_info_path_matches_general_conversion():
    from rlframe.envs.gym import _FlatInfoConverter, build_info_tuples, info_to_nt
    example = build_info_tuples({"x_position": 0.5, "lives": 3, "flag": True,
                                 "timeout": False})
    fast = _FlatInfoConverter(example)
    for info in [{"x_position": 1.25, "lives": np.int32(2), "flag": False},
                 {"lives": 7.9},  # missing keys -> zeros; value cast to the schema dtype
                 {"flag": 2, "x_position": np.float64(3.5)}]:
        for timeout in (False, True):
            got = fast.convert(info, timeout)
            want = info_to_nt({**info, "timeout": timeout}, example)
            assert type(got) is type(want)
            for g, w in zip(got, want):
                assert g == w and np.asarray(g).dtype == np.asarray(w).dtype
    assert fast.convert({"unknown": 1.0}, False) is None  # falls back (and warns there)
    assert fast.convert({"lives": np.zeros(3)}, False) is None


def _play_on(env, actions):
    """Observations, rewards and dones of ``actions`` from where ``env`` is, resetting at
    each episode's end (reset noise comes from the env's generator)."""
    out = []
    for action in actions:
        step = env.step(action)
        out.append((np.asarray(step.observation), float(step.reward), bool(step.done)))
        if step.done:
            out.append((np.asarray(env.reset()), 0., False))
    return out


@pytest.mark.parametrize("env_id", ["Hopper-v5", "ALE/Breakout-v5"])
def test_an_env_that_rebuilds_itself_when_unpickled_plays_on_exactly(env_id):
    """MuJoCo's and ALE's gymnasium envs unpickle as fresh envs (EzPickle): the wrapper
    saves their physics or emulator (sticky actions' generator included) and their
    random generator, so a checkpoint's env continues its episode step for step."""
    pytest.importorskip("mujoco" if env_id.startswith("Hopper") else "ale_py")
    env = make(id=env_id)
    env.seed(3)
    env.reset()
    rng = np.random.default_rng(0)
    actions = [env.action_space.sample() for _ in range(400)]
    if env_id.startswith("ALE"):
        actions = [int(a) for a in rng.integers(env.action_space.n, size=400)]
    _play_on(env, actions[:40])
    copy = pickle.loads(dumps(env))  # As a checkpoint pickles (the info classes too).
    assert copy.unwrapped is not env.unwrapped
    a, b = _play_on(env, actions[40:]), _play_on(copy, actions[40:])
    assert len(a) == len(b) and any(done for *_, done in a)  # Through an episode's end.
    for (obs_a, r_a, d_a), (obs_b, r_b, d_b) in zip(a, b):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert (r_a, d_a) == (r_b, d_b)


class RebuiltEnv(gym.Env, gym.utils.EzPickle):
    """Rebuilds itself when unpickled, with a state (``t``) nobody saves."""

    observation_space = gym_spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym_spaces.Discrete(2)

    def __init__(self):
        gym.utils.EzPickle.__init__(self)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 0., self.t >= 10, False, {}


def test_an_env_that_rebuilds_itself_with_an_unknown_state_is_not_saved():
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.checkpoint import sampler_state

    with pytest.raises(TypeError, match="RebuiltEnv rebuilds itself .* cannot be saved"):
        dumps(GymEnvWrapper(RebuiltEnv()))
    sampler = SerialSampler(EnvCls=lambda: GymEnvWrapper(RebuiltEnv()), env_kwargs={},
                            batch_T=4, batch_B=2, max_decorrelation_steps=0)
    sampler.initialize(CategoricalPgAgent(), seed=0)
    try:
        state, why = sampler_state(sampler)  # The run would start fresh episodes, and say so.
        assert state is None and "RebuiltEnv rebuilds itself" in why
    finally:
        sampler.shutdown()
