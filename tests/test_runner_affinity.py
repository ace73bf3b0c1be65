"""The runner pins its process from the affinity dict, or warns where it cannot."""
import multiprocessing as mp
import warnings

import psutil
import pytest
import torch

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching import pinning as affinity_module


def _runner(affinity):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=2,
                            batch_B=1, max_decorrelation_steps=0)
    return MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=2,
                       affinity=affinity, seed=0)


def _startup_in_child(queue):
    runner = _runner(dict(master_cpus=[0], master_torch_threads=1))
    runner.startup()
    queue.put((psutil.Process().cpu_affinity(), torch.get_num_threads()))
    runner.shutdown()


@pytest.mark.skipif(not hasattr(psutil.Process(), "cpu_affinity"),
                    reason="no CPU affinity on this platform")
def test_master_cpus_and_threads_applied():
    ctx = mp.get_context("spawn")  # A fresh process: the test process stays unpinned.
    queue = ctx.Queue()
    p = ctx.Process(target=_startup_in_child, args=(queue,))
    p.start()
    cpus, threads = queue.get(timeout=120)
    p.join(timeout=30)
    assert p.exitcode == 0
    assert cpus == [0] and threads == 1


class _ProcessWithoutAffinity:
    """Stands in for psutil.Process on platforms without cpu_affinity (macOS)."""

    def __init__(self, *args):
        pass


def test_missing_cpu_affinity_warns_once_and_runs(monkeypatch):
    monkeypatch.setattr(affinity_module.psutil, "Process", _ProcessWithoutAffinity)
    monkeypatch.setattr(affinity_module, "_warned_no_affinity", False)
    n_threads = torch.get_num_threads()
    runner = _runner(dict(master_cpus=[0]))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runner.startup()
            affinity_module.set_cpu_affinity([0])  # A second request does not warn again.
        runner.shutdown()
    finally:
        torch.set_num_threads(n_threads)
    messages = [str(w.message) for w in caught if "affinity" in str(w.message)]
    assert len(messages) == 1 and "not supported" in messages[0]
