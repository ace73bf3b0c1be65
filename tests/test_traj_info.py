"""TrajInfo keeps its discount per instance: samplers in one process do not share it."""
import math
import pickle

import pytest

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.collections import TrajInfo
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.seed import set_seed

ENV = dict(id="CartPole-v1")


class MaxRewardTrajInfo(TrajInfo):
    """A user subclass written the documented way: kwargs go to super().__init__."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.MaxReward = -math.inf

    def step(self, observation, action, reward, done, agent_info, env_info):
        super().step(observation, action, reward, done, agent_info, env_info)
        self.MaxReward = max(self.MaxReward, float(reward))


class StepOnlyTrajInfo(TrajInfo):
    """A user subclass that only overrides step."""

    def step(self, observation, action, reward, done, agent_info, env_info):
        super().step(observation, action, reward, done, agent_info, env_info)
        self["Steps2"] = 2 * self["Length"]


class NoKwargsTrajInfo(TrajInfo):
    def __init__(self):
        super().__init__()


def discounted_ones(discount, length):
    """CartPole pays 1 per step: sum of discount**t for t < length."""
    return sum(discount ** t for t in range(length))


def make_sampler(discount, TrajInfoCls=TrajInfo, SamplerCls=SerialSampler, **kwargs):
    set_seed(0)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, batch_T=64, batch_B=2,
                         max_decorrelation_steps=0, TrajInfoCls=TrajInfoCls, **kwargs)
    sampler.initialize(CategoricalPgAgent(), seed=1, traj_info_kwargs=dict(discount=discount),
                       **({"affinity": dict(workers_cpus=[0, 1])}
                          if SamplerCls is CpuSampler else {}))
    return sampler


def completed_traj_infos(sampler, n=3):
    infos = []
    for itr in range(50):
        infos.extend(sampler.obtain_samples(itr)[1])
        if len(infos) >= n:
            return infos
    raise AssertionError("too few completed trajectories")


def assert_discounted(infos, discount):
    for info in infos:
        assert info["_discount"] == discount
        assert info["DiscountedReturn"] == pytest.approx(discounted_ones(discount, info["Length"]))


def test_discount_is_an_unlogged_instance_key():
    info = TrajInfo(discount=0.9)
    assert info["_discount"] == 0.9 and info._discount == 0.9
    assert TrajInfo()["_discount"] == 1.0
    for _ in range(3):
        info.step(None, 0, 1.0, False, None, None)
    assert info.DiscountedReturn == pytest.approx(1 + 0.9 + 0.81)
    assert [k for k in info if not k.startswith("_")] == [
        "Length", "Return", "NonzeroRewards", "DiscountedReturn"]
    copy = pickle.loads(pickle.dumps(info))  # How worker processes send it.
    assert copy == info and copy._discount == 0.9


def test_two_serial_samplers_keep_their_own_discount():
    # Both samplers exist before either samples: a shared class attribute would
    # give the first one the second one's discount.
    half, most = make_sampler(0.5), make_sampler(0.99)
    try:
        half_infos, most_infos = completed_traj_infos(half), completed_traj_infos(most)
    finally:
        half.shutdown()
        most.shutdown()
    assert_discounted(half_infos, 0.5)
    assert_discounted(most_infos, 0.99)
    assert all(info["DiscountedReturn"] < 2 for info in half_infos)
    assert TrajInfo()["_discount"] == 1.0  # The class was left alone.


@pytest.mark.slow
def test_eval_traj_infos_use_the_sampler_discount():
    sampler = make_sampler(0.9, eval_n_envs=2, eval_env_kwargs=ENV, eval_max_steps=400)
    try:
        infos = sampler.evaluate_agent(0)
    finally:
        sampler.shutdown()
    assert infos
    assert_discounted(infos, 0.9)


def test_parallel_workers_receive_the_discount():
    sampler = make_sampler(0.5, SamplerCls=CpuSampler, eval_n_envs=2, eval_env_kwargs=ENV,
                           eval_max_steps=400)
    try:
        infos = completed_traj_infos(sampler)
        eval_infos = sampler.evaluate_agent(0)
    finally:
        sampler.shutdown()
    assert_discounted(infos, 0.5)
    assert_discounted(eval_infos, 0.5)


@pytest.mark.parametrize("TrajInfoCls", [MaxRewardTrajInfo, StepOnlyTrajInfo])
def test_user_subclass_keeps_working(TrajInfoCls):
    sampler = make_sampler(0.5, TrajInfoCls=TrajInfoCls)
    try:
        infos = completed_traj_infos(sampler)
    finally:
        sampler.shutdown()
    assert all(type(info) is TrajInfoCls for info in infos)
    assert_discounted(infos, 0.5)
    for info in infos:
        if TrajInfoCls is MaxRewardTrajInfo:
            assert info.MaxReward == 1.0
        else:
            assert info.Steps2 == 2 * info.Length


def test_subclass_without_kwargs_gets_a_clear_error():
    with pytest.raises(TypeError, match=r"NoKwargsTrajInfo.*super\(\).__init__\(\*\*kwargs\)"):
        make_sampler(0.5, TrajInfoCls=NoKwargsTrajInfo)
