"""Samplers' diagnostics() reach every runner's progress rows; samplers without their
own figures add none."""
import importlib
import inspect
import pkgutil

from async_helpers import ProbeSerialSampler
from test_async_rl import AFFINITY, cartpole_agent, cartpole_dqn, cartpole_sampler

import rlframe.samplers
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRl
from rlframe.runners.callbacks import Callback
from rlframe.runners.minibatch_rl import MinibatchRl, sampler_diagnostics
from rlframe.samplers.base import BaseSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context


class CountingSampler(SerialSampler):
    """diagnostics() counts the batches sampled."""

    batches = 0

    def obtain_samples(self, itr):
        self.batches += 1
        return super().obtain_samples(itr)

    def diagnostics(self):
        return {"Batches": float(self.batches)}


class Rows(Callback):
    def __init__(self):
        self.rows = []

    def on_log(self, runner, itr, diagnostics):
        self.rows.append(diagnostics)


def test_minibatch_rows_hold_the_samplers_diagnostics(in_tmp_cwd):
    sampler = CountingSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=8,
                              batch_B=2, max_decorrelation_steps=0)
    rows = Rows()
    runner = MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler,
                         n_steps=3 * 16, log_interval_steps=16, seed=0, callbacks=[rows])
    with logger_context("diag", 0, "diag", {}, snapshot_mode="none"):
        runner.train()
    assert [row["Diagnostics/Batches"] for row in rows.rows] == [1., 2., 3.]


def test_async_rows_hold_the_samplers_diagnostics(in_tmp_cwd):
    sampler = cartpole_sampler(ProbeSerialSampler, eval_n_envs=0)
    rows = Rows()
    runner = AsyncRl(algo=cartpole_dqn(min_steps_learn=256, replay_ratio=8),
                     agent=cartpole_agent(), sampler=sampler, n_steps=1024,
                     affinity=make_affinity(**AFFINITY), seed=0, log_interval_steps=512,
                     callbacks=[rows])
    with logger_context("diag", 0, "diag", {}, snapshot_mode="none"):
        runner.train()
    assert rows.rows and all(row["Diagnostics/SamplerProbe"] == 7. for row in rows.rows)


def test_every_sampler_has_the_hook_and_plain_ones_report_nothing():
    samplers = set()
    for module_info in pkgutil.walk_packages(rlframe.samplers.__path__, "rlframe.samplers."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__.startswith("rlframe.samplers") and hasattr(cls, "obtain_samples")
                    and not cls.__name__.endswith("Mixin")
                    and not getattr(cls, "_is_protocol", False)):  # SyncSampler, AsyncSampler
                samplers.add(cls)
    names = {cls.__name__ for cls in samplers}
    assert {"SerialSampler", "CpuSampler", "GpuSampler", "RaySampler",
            "AsyncCpuSampler"} <= names, names
    assert all(issubclass(cls, BaseSampler) for cls in samplers), names
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=1)
    assert sampler.diagnostics() == {}
    assert sampler_diagnostics(object()) == {}  # a sampler-like object without the hook
