"""VecEnv backends give the rows an EnvList of the same envs gives, step for step."""
import multiprocessing as mp
import os
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

from rlframe.envs.gym import GymEnvWrapper, make
from rlframe.envs.gym_vector import GymVecEnv
from rlframe.envs.vector import EnvList, make_vec_env
from rlframe.utils.collections import iter_leaves

B = 4


def assert_rows_equal(actual, expected, atol=0.0):
    """Same structure, field names, dtypes and values (within ``atol`` for floats)."""
    actual_leaves, expected_leaves = iter_leaves(actual), iter_leaves(expected)
    assert [p for p, _ in actual_leaves] == [p for p, _ in expected_leaves]
    for (path, a), (_, e) in zip(actual_leaves, expected_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, (path, a.dtype, e.dtype, a.shape,
                                                           e.shape)
        if atol:
            np.testing.assert_allclose(a, e, rtol=0, atol=atol, err_msg=path)
        else:
            np.testing.assert_array_equal(a, e, err_msg=path)


def step_together(vec, ref, n_steps, draw_actions, atol=0.0, same_info=True,
                  limit_wins_at=None):
    """Step ``vec`` and ``ref`` with the same actions, resetting finished envs like a collector.

    Args:
        same_info: compare all of ``env_info``, else only ``env_info.timeout``.
        limit_wins_at: the time limit, for a backend that reports ``timeout`` where an
            episode terminates on the time limit's step (the reference: not a timeout).

    Returns:
        counts of episodes ended by termination, by time limit, and by both at once.
    """
    assert_rows_equal(vec.reset(), ref.reset(), atol)
    terminations = timeouts = both = 0
    lengths = np.zeros(vec.num_envs, dtype=int)
    for _ in range(n_steps):
        action = draw_actions()
        got, expected = vec.step(action), ref.step(action)
        lengths += 1
        assert_rows_equal(got.observation, expected.observation, atol)
        for field in ("reward", "done"):
            assert_rows_equal(getattr(got, field), getattr(expected, field))
        expected_timeout = expected.env_info.timeout.copy()
        terminated = expected.done & ~expected_timeout
        if limit_wins_at is not None:
            coinciding = terminated & (lengths == limit_wins_at)
            both += int(coinciding.sum())
            expected_timeout |= coinciding
        if same_info:
            assert_rows_equal(got.env_info, expected.env_info)
        else:
            assert_rows_equal(got.env_info.timeout, expected_timeout)
        timeouts += int(expected.env_info.timeout.sum())
        terminations += int(terminated.sum())
        done_idx = np.flatnonzero(expected.done)
        if len(done_idx):
            lengths[done_idx] = 0
            assert_rows_equal(vec.reset(done_idx), ref.reset(done_idx), atol)
    return terminations, timeouts, both


# gymnasium backends ######################################################################

@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_gym_vec_env_matches_env_list_on_cartpole(asynchronous):
    env_kwargs = dict(id="CartPole-v1", max_episode_steps=30)
    ref = EnvList([make(**env_kwargs) for _ in range(B)])
    vec = GymVecEnv.from_env_cls(make, env_kwargs, B, asynchronous=asynchronous)
    try:
        assert vec.steps_subsets is False and vec.horizon == ref.horizon == 30
        assert vec.spaces == ref.spaces
        vec.seed(123)
        ref.seed(123)
        assert_rows_equal(vec.sample_actions(), ref.sample_actions())
        rng = np.random.default_rng(0)
        terminations, timeouts, _ = step_together(
            vec, ref, 600, lambda: rng.integers(0, 2, size=B))
        assert terminations >= 10 and timeouts >= 10, (terminations, timeouts)
    finally:
        vec.close()
        ref.close()
    assert not mp.active_children()


class DictObsEnv(gym.Env):
    """Dict observations with a float64 box, and infos of every kind GymEnvWrapper stores."""

    observation_space = gym.spaces.Dict({
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
        "count": gym.spaces.Discrete(100)})
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-0.5, 0.5, 2)
        return self._obs(), {"start": 1}

    def step(self, action):
        self.t += 1
        self.pos = np.clip(self.pos + 0.3 * action, -1.0, 1.0)
        terminated = bool(abs(self.pos[0]) >= 1.0)
        info = {"py_int": self.t, "py_float": float(self.pos[0]), "flag": np.bool_(self.t % 2),
                "np64": np.float64(self.pos[1]), "vec": self.pos.copy(), "pair": [self.t, 1],
                "nested": {"a": 2 * self.t, "s": "skip"}, "ale.lives": np.int32(3),
                "name": "skip", "timeout": "not the wrapper's"}
        if self.t % 3 == 0:
            del info["py_float"]  # Steps without the key store zeros.
        if self.t == 4:
            info["late"] = 1.0  # Not in the schema: dropped with a warning.
        return self._obs(), float(self.pos.sum()), terminated, False, info

    def _obs(self):
        return {"pos": self.pos.copy(), "count": min(self.t, 99)}


def make_dict_env(max_episode_steps=12):
    return GymEnvWrapper(gym.wrappers.TimeLimit(DictObsEnv(), max_episode_steps))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_gym_vec_env_matches_env_list_with_dict_obs_and_infos(asynchronous):
    ref = EnvList([make_dict_env() for _ in range(B)])
    vec = GymVecEnv.from_env_cls(make_dict_env, {}, B, asynchronous=asynchronous)
    try:
        vec.seed(7)
        ref.seed(7)
        rng = np.random.default_rng(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            terminations, timeouts, _ = step_together(
                vec, ref, 60, lambda: rng.uniform(-1, 1, (B, 2)).astype(np.float32))
        assert terminations >= 2 and timeouts >= 2, (terminations, timeouts)
        assert any("GymVecEnv" in str(w.message) and "late" in str(w.message) for w in caught)
        info = vec.step(vec.sample_actions()).env_info
        assert info.np64.dtype == np.float32 and info.vec.shape == (B, 2)
        assert info.flag.dtype == np.bool_ and info.pair.dtype == np.int64
    finally:
        vec.close()
        ref.close()


class SteppedEnv(GymEnvWrapper):
    """Overrides step (with the same values): EnvList must call it per env."""

    def step(self, action):
        return super().step(action)


@pytest.mark.parametrize("make_env", [lambda: make("CartPole-v1", max_episode_steps=15),
                                      make_dict_env], ids=["cartpole", "dict_obs_and_infos"])
def test_env_list_row_path_gives_what_per_env_steps_give(make_env):
    fast = EnvList([make_env() for _ in range(B)])
    per_env = EnvList([make_env() for _ in range(B)])
    for env in per_env.envs:
        env.__class__ = SteppedEnv
    per_env = EnvList(per_env.envs)
    assert fast._step_rows is not None and per_env._step_rows is None
    fast.seed(3)
    per_env.seed(3)
    rng = np.random.default_rng(2)
    actions = ((lambda: rng.integers(0, 2, B)) if fast.spaces.action.shape == ()
               else (lambda: rng.uniform(-1, 1, (B, 2)).astype(np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        terminations, timeouts, _ = step_together(fast, per_env, 80, actions)
    assert terminations >= 1 and timeouts >= 1


def test_env_list_steps_through_a_step_replaced_on_the_instance():
    """An env whose step is replaced on the instance (e.g. to add a delay) is stepped
    through that step, not the row fast path that would skip it."""
    envs = [make("CartPole-v1") for _ in range(B)]
    calls = []
    inner_step = envs[1].step

    def counted_step(action):
        calls.append(action)
        return inner_step(action)
    envs[1].step = counted_step
    venv = EnvList(envs)
    assert venv._step_rows is None
    venv.seed(0)
    venv.reset()
    for _ in range(3):
        venv.step(np.zeros(B, dtype=np.int64))
    assert len(calls) == 3


def test_gym_vec_env_steps_every_env_once_finished_ones_are_reset():
    vec = GymVecEnv.from_env_cls(make, dict(id="CartPole-v1", max_episode_steps=2), 3)
    zeros = np.zeros(3, dtype=np.int64)
    try:
        vec.reset()
        with pytest.raises(ValueError, match="steps every env"):
            vec.step(zeros[:2], np.array([0, 2]))
        vec.step(zeros, np.arange(3))  # Every env, named: fine.
        assert vec.step(zeros).env_info.timeout.all()
        vec.reset(np.array([0, 2]))
        with pytest.raises(RuntimeError, match=r"envs \[1\] finished"):
            vec.step(zeros)
        vec.reset(np.array([1]))
        vec.step(zeros)
    finally:
        vec.close()


class NotGymEnv:
    def __init__(self, **kwargs):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("env_backend", ["gymnasium", "gymnasium_async"])
def test_gymnasium_backends_need_a_gym_env_wrapper(env_backend):
    with pytest.raises(TypeError, match=f"env_backend='{env_backend}'.*GymEnvWrapper"):
        make_vec_env(env_backend, NotGymEnv, {}, 2)


_PARENT_PID = os.getpid()


def make_other_env_in_workers(**env_kwargs):
    """CartPole in this process, Acrobot in workers: the vector env's space check fails."""
    return make(id="CartPole-v1" if os.getpid() == _PARENT_PID else "Acrobot-v1")


def test_async_workers_end_when_construction_fails():
    with pytest.raises(RuntimeError, match="observation spaces") as excinfo:
        GymVecEnv.from_env_cls(make_other_env_in_workers, {}, 2, asynchronous=True,
                               context="fork")
    # Ended by the constructor, not by garbage collection of the half-built vector env
    # (the traceback held here keeps it alive).
    assert excinfo.traceback and not mp.active_children()


# EnvPool #################################################################################

NO_ENVPOOL = 'EnvPool is optional: pip install -e ".[envpool]"'

class StartFromState(gym.Wrapper):
    """CartPole that starts its next episode from ``next_state`` (EnvPool's first observation)."""

    next_state = None

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        if self.next_state is None:  # GymEnvWrapper's schema probe.
            return observation, info
        self.env.unwrapped.state = np.array(self.next_state, dtype=np.float64)
        return np.array(self.next_state, dtype=np.float32), {}


class ResetsFollowed:
    """An EnvPoolVecEnv whose resets set where the reference envs start their episodes."""

    def __init__(self, vec, ref):
        self.vec, self.ref, self.num_envs = vec, ref, vec.num_envs

    def reset(self, idx=None):
        observation = self.vec.reset(idx)
        for i, row in zip(range(self.num_envs) if idx is None else idx, observation):
            self.ref.envs[i].env.next_state = row.copy()
        return observation

    def step(self, action, idx=None):
        return self.vec.step(action, idx)


def test_envpool_matches_gymnasium_cartpole_from_the_same_states():
    pytest.importorskip("envpool", reason=NO_ENVPOOL)
    from rlframe.envs.envpool import EnvPoolVecEnv
    max_steps = 20
    vec = EnvPoolVecEnv.from_env_cls(make, dict(id="CartPole-v1", max_episode_steps=max_steps), B)
    ref = EnvList([GymEnvWrapper(StartFromState(gym.make("CartPole-v1",
                                                         max_episode_steps=max_steps)))
                   for _ in range(B)])
    try:
        assert vec.steps_subsets and vec.horizon == max_steps and vec.spaces == ref.spaces
        vec.seed(3)
        # EnvPool draws initial states with its own generator; from the same state, both
        # follow the same dynamics, terminations and time limits.
        followed = ResetsFollowed(vec, ref)
        rng = np.random.default_rng(0)
        terminations, timeouts, both = step_together(
            followed, ref, 300, lambda: rng.integers(0, 2, size=B), atol=1e-5,
            same_info=False, limit_wins_at=max_steps)
        assert terminations >= 5 and timeouts >= 5 and both >= 1, (terminations, timeouts, both)

        # Subsets: only the envs named step, rows in the order of idx.
        for _ in range(60):
            idx = np.sort(rng.choice(B, size=2, replace=False))
            action = rng.integers(0, 2, size=2)
            got, expected = vec.step(action, idx), ref.step(action, idx)
            assert_rows_equal(got.observation, expected.observation, atol=1e-5)
            assert_rows_equal(got.reward, expected.reward)
            assert_rows_equal(got.done, expected.done)
            if expected.done.any():
                finished = idx[expected.done]
                assert_rows_equal(followed.reset(finished), ref.reset(finished), atol=1e-5)
    finally:
        vec.close()


def test_envpool_seeds():
    pytest.importorskip("envpool", reason=NO_ENVPOOL)
    vec = make_vec_env("envpool", make, dict(id="CartPole-v1", max_episode_steps=30), B)
    actions = np.random.default_rng(0).integers(0, 2, size=(80, B))

    def observations(seed):
        vec.seed(seed)
        rows = [vec.reset()]
        for action in actions:
            step = vec.step(action)
            rows.append(step.observation.copy())
            if step.done.any():
                rows.append(vec.reset(np.flatnonzero(step.done)).copy())
        return np.concatenate(rows)

    try:
        first = observations(5)
        np.testing.assert_array_equal(observations(5), first)
        other = observations(6)
        assert not np.array_equal(other[:B], first[:B])
        np.testing.assert_array_equal(other[:B - 1], first[1:B])  # Env b starts from seed + b.
        vec.seed(5)
        ref = EnvList([make(id="CartPole-v1") for _ in range(B)])
        ref.seed(5)
        assert_rows_equal(vec.sample_actions(), ref.sample_actions())
        vec.reset()
        vec.seed(9)
        with pytest.raises(ValueError, match="next reset of all envs"):
            vec.reset(np.array([0]))
    finally:
        vec.close()


def test_envpool_steps_subsets_once_finished_envs_are_reset():
    pytest.importorskip("envpool", reason=NO_ENVPOOL)
    vec = make_vec_env("envpool", make, dict(id="CartPole-v1", max_episode_steps=1), 3)
    zeros = np.zeros(3, dtype=np.int64)
    try:
        vec.reset()
        step = vec.step(zeros[:2], np.array([0, 2]))
        assert step.env_info.timeout.all() and step.env_info.elapsed_step.tolist() == [1, 1]
        with pytest.raises(RuntimeError, match=r"envs \[2\] finished"):
            vec.step(zeros[:2], np.array([1, 2]))
        vec.step(zeros[:1], np.array([1]))
        vec.reset(np.array([0, 1, 2]))
        vec.step(zeros)
    finally:
        vec.close()


def test_envpool_unknown_id():
    pytest.importorskip("envpool", reason=NO_ENVPOOL)
    with pytest.raises(ValueError, match=r"env_backend='envpool'.*id='cartpole-v1'.*"
                                         r"Close EnvPool ids: CartPole-v1"):
        make_vec_env("envpool", make, dict(id="cartpole-v1"), 2)


def test_envpool_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # `import envpool` fails.
    with pytest.raises(ImportError, match=r'pip install -e "\.\[envpool\]"'):
        make_vec_env("envpool", make, dict(id="CartPole-v1"), 2)
