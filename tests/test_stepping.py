"""The stepping core: whole-row writes, trajectory statistics, resets, backends' checks."""
import numpy as np
import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.envs.vector import EnvList, make_vec_env
from rlframe.samplers.collections import TrajInfo
from rlframe.samplers.parallel.cpu.collectors import CpuWaitResetCollector
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.samplers.stepping import EnvStepper, TrajTracker
from rlframe.utils.seed import set_seed

ENV_KWARGS = dict(id="CartPole-v1", max_episode_steps=20)


class PerStepTrajInfo(TrajInfo):
    """Overrides step: the tracker must step it per env, as before."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.Steps = 0

    def step(self, observation, action, reward, done, agent_info, env_info):
        super().step(observation, action, reward, done, agent_info, env_info)
        assert observation.shape == (4,) and np.ndim(action) == 0
        assert agent_info.value.shape == () and env_info.timeout.shape == ()
        self.Steps += 1


def sample(TrajInfoCls=TrajInfo, n_itr=3, B=3, T=64, **kwargs):
    set_seed(5)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=ENV_KWARGS, batch_T=T, batch_B=B,
                            max_decorrelation_steps=0, TrajInfoCls=TrajInfoCls, **kwargs)
    sampler.initialize(CategoricalPgAgent(), seed=5, traj_info_kwargs=dict(discount=0.9))
    batches, infos = [], []
    for itr in range(n_itr):
        samples, completed = sampler.obtain_samples(itr)
        batches.append(samples.env.observation.clone().numpy())
        batches.append(samples.agent.action.clone().numpy())
        infos.extend(completed)
    sampler.shutdown()
    return batches, infos, samples


def test_rows_match_a_plain_per_env_loop_through_resets_and_time_limits():
    _, _, samples = sample(n_itr=1)
    env_np = samples.env
    T, B = env_np.done.shape
    for b in range(B):
        env = gym_make(**ENV_KWARGS)
        env.seed(5 + b)
        obs, n_done, n_timeout = env.reset(), 0, 0
        for t in range(T):
            np.testing.assert_array_equal(env_np.observation[t, b].numpy(), obs)
            obs, r, d, info = env.step(int(samples.agent.action[t, b]))
            assert env_np.reward[t, b] == r and bool(env_np.done[t, b]) == d
            assert bool(env_np.env_info.timeout[t, b]) == bool(info.timeout)
            if t + 1 < T:
                assert samples.agent.prev_action[t + 1, b] == samples.agent.action[t, b]
                assert samples.env.prev_reward[t + 1, b] == r
            if d:
                n_done += 1
                n_timeout += bool(info.timeout)
                obs = env.reset()
        assert n_done >= 2 and n_timeout >= 1  # Both kinds of episode end were crossed.


def test_array_statistics_equal_per_env_trajinfo_objects():
    batches, fast, _ = sample(TrajInfo)
    batches_slow, slow, _ = sample(PerStepTrajInfo)
    for a, b in zip(batches, batches_slow):
        np.testing.assert_array_equal(a, b)
    assert len(fast) == len(slow) > 5
    for f, s in zip(fast, slow):
        assert type(f) is TrajInfo and type(s) is PerStepTrajInfo
        assert s.Steps == s.Length == f.Length
        assert f.Return == pytest.approx(s.Return) and f.Return == f.Length
        assert f.DiscountedReturn == pytest.approx(s.DiscountedReturn)
        assert f.DiscountedReturn == pytest.approx((1 - 0.9 ** f.Length) / (1 - 0.9))
        assert f.NonzeroRewards == s.NonzeroRewards == f.Length


def test_tracker_builds_trajinfo_only_at_trajectory_end_with_subset_rows():
    tracker = TrajTracker(TrajInfo, dict(discount=0.5), B=3)
    assert tracker.vectorized
    zeros, all_done = np.zeros(3), np.ones(3, bool)
    tracker.record(zeros, zeros, np.ones(3, np.float32), ~all_done, None, None)
    done, idx = np.array([False, True]), np.array([0, 2])
    tracker.record(zeros, zeros, np.array([1., 2.], np.float32), done, None, None, idx=idx)
    completed = tracker.finish(done, np.zeros((2, 4)), idx=idx)
    assert [(c.Length, c.Return, c.DiscountedReturn) for c in completed] == [(2, 3., 2.)]
    assert list(tracker.length) == [2, 1, 0]  # Env 2 restarted, env 1 not stepped.
    tracker.record(zeros, zeros, np.ones(3, np.float32), all_done, None, None)
    completed = tracker.finish(all_done, np.zeros((3, 4)))
    assert [(c.Length, c.Return, c.DiscountedReturn) for c in completed] == [
        (3, 3., 1.75), (2, 2., 1.5), (1, 1., 1.)]


@pytest.mark.parametrize("block", [1, 4, 64])
def test_tracker_sums_are_the_same_whatever_the_block(block):
    rng = np.random.default_rng(0)
    rewards = rng.choice([0., 1., -2.5], size=(30, 2)).astype(np.float32)
    tracker = TrajTracker(TrajInfo, dict(discount=0.9), B=2, block=block)
    for r in rewards:
        tracker.record(None, None, r, np.zeros(2, bool), None, None)
    info = tracker.finish(np.array([True, False]), np.zeros((2, 4)))[0]
    r = rewards[:, 0].astype(np.float64)
    assert info.Length == 30 and info.Return == pytest.approx(r.sum())
    assert info.NonzeroRewards == np.count_nonzero(r)
    assert info.DiscountedReturn == pytest.approx((0.9 ** np.arange(30) * r).sum())
    assert info._cur_discount == pytest.approx(0.9 ** 30)
    assert list(tracker.length) == [0, 30]


@pytest.mark.parametrize("block", [1, 3, 64])
def test_tracker_equals_per_step_trajinfo_when_trajectories_end_inside_blocks(block):
    rng = np.random.default_rng(1)
    B = 12
    tracker = TrajTracker(TrajInfo, dict(discount=0.8), B=B, block=block)
    reference = [TrajInfo(discount=0.8) for _ in range(B)]
    got, expected = [], []
    for _ in range(200):
        reward = rng.choice([0., 1., -0.5], size=B).astype(np.float32)
        done = rng.random(B) < rng.choice([0.1, 0.9])  # One env, or most envs at once.
        tracker.record(None, None, reward, done, None, None)
        got.extend(tracker.finish(done, np.zeros((B, 4))))
        for b in range(B):
            reference[b].step(None, None, reward[b], done[b], None, None)
            if done[b]:
                expected.append(reference[b])
                reference[b] = TrajInfo(discount=0.8)
    assert len(got) == len(expected) > 20
    for g, e in zip(got, expected):
        assert g.Length == e.Length and g.NonzeroRewards == e.NonzeroRewards
        assert g.Return == pytest.approx(e.Return)
        assert g.DiscountedReturn == pytest.approx(e.DiscountedReturn)
        assert g._cur_discount == pytest.approx(e._cur_discount)
    assert list(tracker.length) == [r.Length for r in reference]


def test_decorrelation_steps_every_env_a_different_number_of_steps():
    np.random.seed(0)
    venv = EnvList([gym_make("CartPole-v1") for _ in range(4)])
    venv.seed(0)
    stepper = EnvStepper(venv, TrajInfo)
    stepper.start(max_decorrelation_steps=30)
    lengths = stepper.tracker.length
    np.random.seed(0)
    expected = 1 + (np.random.rand(4) * 30).astype(int)
    # Each env's running trajectory is at most its own step count long.
    assert np.all(lengths <= expected) and len(set(expected)) > 1
    assert not np.array_equal(stepper.inputs.observation[0], stepper.inputs.observation[1])


def test_env_backend_is_checked_when_the_sampler_is_built():
    with pytest.raises(ValueError, match=r"env_backend='vec'.*'plain', 'gymnasium'"):
        SerialSampler(EnvCls=gym_make, env_kwargs=ENV_KWARGS, batch_T=4, batch_B=2,
                      env_backend="vec")
    with pytest.raises(ValueError, match=r"env_backend='gymnasium'.*CpuWaitResetCollector"):
        SerialSampler(EnvCls=gym_make, env_kwargs=ENV_KWARGS, batch_T=4, batch_B=2,
                      env_backend="gymnasium", CollectorCls=CpuWaitResetCollector)
    with pytest.raises(ValueError, match="env_backend"):
        make_vec_env("threads", gym_make, ENV_KWARGS, 2)


@pytest.mark.parametrize("env_backend", ["gymnasium", "gymnasium_async"])
def test_gymnasium_backends_give_the_plain_path_batches(env_backend):
    plain, plain_infos, _ = sample(n_itr=2)
    vector, vector_infos, _ = sample(n_itr=2, env_backend=env_backend)
    for a, b in zip(plain, vector):
        np.testing.assert_array_equal(a, b)
    assert [i.Length for i in plain_infos] == [i.Length for i in vector_infos]


def test_envpool_backend_fills_batches_with_the_same_semantics():
    pytest.importorskip("envpool", reason='EnvPool is an optional extra: pip install -e ".[envpool]"')
    _, infos, samples = sample(n_itr=2, env_backend="envpool")
    done, timeout = samples.env.done.numpy(), samples.env.env_info.timeout.numpy()
    assert done.any() and timeout.any() and not (timeout & ~done).any()
    assert infos and all(1 <= i.Length <= 20 for i in infos)
    assert any(i.Length == 20 for i in infos)  # Time-limit truncations end trajectories too.


def test_cpu_sampler_workers_use_the_env_backend():
    from rlframe.samplers.parallel.cpu.sampler import CpuSampler
    set_seed(5)
    sampler = CpuSampler(EnvCls=gym_make, env_kwargs=ENV_KWARGS, batch_T=32, batch_B=2,
                         max_decorrelation_steps=0, env_backend="gymnasium")
    sampler.initialize(CategoricalPgAgent(), affinity=dict(workers_cpus=[0, 1]), seed=5)
    try:
        samples, infos = sampler.obtain_samples(0)
        assert samples.env.done.any() and infos
    finally:
        sampler.shutdown()


@pytest.mark.parametrize("CollectorCls", [None, CpuWaitResetCollector])
def test_stepper_state_continues_the_batches_of_an_uninterrupted_stepper(CollectorCls):
    """Saved mid-episode (and, without mid-batch resets, with envs held) and loaded
    into a fresh sampler, the stepper gives the batches it would have given."""
    import pickle

    from rlframe.utils.checkpoint import dumps  # Pickles env infos' run-time classes.
    kwargs = {} if CollectorCls is None else dict(CollectorCls=CollectorCls)
    whole, _, _ = sample(n_itr=4, B=3, T=13, **kwargs)

    def sampler():
        set_seed(5)
        s = SerialSampler(EnvCls=gym_make, env_kwargs=ENV_KWARGS, batch_T=13, batch_B=3,
                          max_decorrelation_steps=0, **kwargs)
        s.initialize(CategoricalPgAgent(), seed=5, traj_info_kwargs=dict(discount=0.9))
        return s

    first = sampler()
    for itr in range(2):
        first.obtain_samples(itr)
    payload = dumps(first.collector.stepper.state())
    rng = np.random.get_state(), torch.get_rng_state()
    agent_state = first.agent.state_dict()
    first.shutdown()
    second = sampler()
    second.agent.load_state_dict(agent_state)
    second.collector.stepper.load_state(pickle.loads(payload))
    second.traj_infos = second.collector.stepper.tracker
    np.random.set_state(rng[0])
    torch.set_rng_state(rng[1])
    for itr in (2, 3):
        samples, _ = second.obtain_samples(itr)
        np.testing.assert_array_equal(samples.env.observation.numpy(), whole[2 * itr])
        np.testing.assert_array_equal(samples.agent.action.numpy(), whole[2 * itr + 1])
    second.shutdown()


def test_stepper_state_refuses_envs_stepped_by_a_vector_backend():
    stepper = EnvStepper(make_vec_env("gymnasium", gym_make, ENV_KWARGS, 2), TrajInfo)
    with pytest.raises(TypeError, match="SyncVectorEnv|not as plain envs"):
        stepper.state()
    stepper.close()
