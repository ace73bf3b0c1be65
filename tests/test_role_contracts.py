"""The role Protocols state what every shipped implementation accepts.

``SyncSampler`` and ``AsyncSampler`` (rlframe.samplers.base) are the two sampler
contracts; ``AsyncAlgorithm`` (rlframe.algos.base) is what an asynchronous
runner needs of its algorithm. Each shipped class must accept every call its
Protocol allows: the Protocol's own parameters bind to the class's signature,
passed as the Protocol passes them (by position where it allows that, else by
keyword).
"""
from __future__ import annotations

import inspect

import pytest

from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.algos.base import AsyncAlgorithm
from rlframe.algos.off_policy import OffPolicyAlgorithm
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3
from rlframe.samplers.async_.alternating_sampler import (AsyncAlternatingSampler,
                                                         AsyncNoOverlapAlternatingSampler)
from rlframe.samplers.async_.base import AsyncSamplerMixin
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.base import AsyncSampler, BaseSampler, SyncSampler
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import (AlternatingSampler,
                                                               NoOverlapAlternatingSampler)
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.ray.async_sampler import AsyncRaySampler
from rlframe.samplers.ray.sampler import RaySampler
from rlframe.samplers.serial.sampler import SerialSampler

SYNC_SAMPLERS = [SerialSampler, CpuSampler, GpuSampler, AlternatingSampler,
                 NoOverlapAlternatingSampler, RaySampler]
ASYNC_SAMPLERS = [AsyncSerialSampler, AsyncCpuSampler, AsyncGpuSampler, AsyncAlternatingSampler,
                  AsyncNoOverlapAlternatingSampler, AsyncRaySampler]


def _protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    methods = {}
    for klass in protocol.__mro__:
        if klass in (object,) or not getattr(klass, "_is_protocol", False):
            continue
        for name, value in vars(klass).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                methods.setdefault(name, inspect.signature(value))
    return methods


def _protocol_attributes(protocol: type) -> set[str]:
    names: set[str] = set()
    for klass in protocol.__mro__:
        if getattr(klass, "_is_protocol", False) and klass is not object:
            names |= set(getattr(klass, "__annotations__", {}))
    return names


def _unbindable(protocol: type, cls: type) -> list[str]:
    """Protocol calls ``cls`` does not accept, in words (empty if it takes them all)."""
    problems = []
    for name, protocol_sig in _protocol_methods(protocol).items():
        method = getattr(cls, name, None)
        if not callable(method):
            problems.append(f"{name}: missing")
            continue
        args, kwargs = [], {}
        for param in list(protocol_sig.parameters.values())[1:]:  # After self.
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                kwargs[param.name] = object()
            else:
                args.append(object())
        try:
            inspect.signature(method).bind(object(), *args, **kwargs)
        except TypeError as error:
            problems.append(f"{name}{protocol_sig}: {error}")
    return problems


def test_the_two_sampler_contracts_differ() -> None:
    sync = _protocol_methods(SyncSampler)
    asyn = _protocol_methods(AsyncSampler)
    assert list(sync["initialize"].parameters)[:2] == ["self", "agent"]
    assert list(asyn["initialize"].parameters) == ["self", "affinity"]
    assert list(asyn["obtain_samples"].parameters) == ["self", "itr", "db_idx"]
    assert "async_initialize" in asyn and "async_initialize" not in sync
    assert {"batch_spec", "mid_batch_reset"} <= _protocol_attributes(SyncSampler)
    assert {"double_buffer", "takes_affinity_list"} <= _protocol_attributes(AsyncSampler)


def test_base_sampler_states_the_synchronous_initialize() -> None:
    params = inspect.signature(BaseSampler.initialize).parameters
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values())
    assert _unbindable(SyncSampler, BaseSampler) == []


@pytest.mark.parametrize("cls", SYNC_SAMPLERS, ids=lambda c: c.__name__)
def test_synchronous_samplers_keep_the_sync_contract(cls: type) -> None:
    assert not issubclass(cls, AsyncSamplerMixin)
    assert _unbindable(SyncSampler, cls) == []


@pytest.mark.parametrize("cls", ASYNC_SAMPLERS, ids=lambda c: c.__name__)
def test_asynchronous_samplers_keep_the_async_contract(cls: type) -> None:
    assert issubclass(cls, AsyncSamplerMixin)
    assert _unbindable(AsyncSampler, cls) == []
    # The synchronous initialize(agent, affinity=..., ...) is not theirs.
    with pytest.raises(TypeError):
        inspect.signature(cls.initialize).bind(object(), object(), affinity={})


@pytest.mark.parametrize("algo", [DQN, CategoricalDQN, R2D1, DDPG, TD3, SAC],
                         ids=lambda c: c.__name__)
def test_off_policy_algorithms_keep_the_async_algorithm_contract(algo: type) -> None:
    assert issubclass(algo, OffPolicyAlgorithm)
    assert isinstance(algo(), AsyncAlgorithm)
    assert _unbindable(AsyncAlgorithm, algo) == []


@pytest.mark.parametrize("algo", [A2C, PPO], ids=lambda c: c.__name__)
def test_on_policy_algorithms_are_not_asynchronous(algo: type) -> None:
    assert not isinstance(algo(), AsyncAlgorithm)
