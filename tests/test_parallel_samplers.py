"""Parallel samplers: equivalence with serial sampling, start methods, robustness."""
import signal
import textwrap
import time

import psutil
import pytest
import torch

from rlframe.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                           CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.parallel.cpu.collectors import CpuResetCollector, CpuWaitResetCollector
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import (AlternatingSampler,
                                                              NoOverlapAlternatingSampler)
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector, GpuWaitResetCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.buffer import buffer_func
from rlframe.utils.seed import set_seed
from conftest import running_script
from shm_helpers import assert_no_new_shm, shm_entries
from samplers_helpers import (CrashingEnv, GreedyAgent, flat_leaves, length_by_parity_env,
                              worker_children)

ENV = dict(id="CartPole-v1")
# Collector classes by (GPU-style sampler, mid_batch_reset).
COLLECTORS = {(False, True): CpuResetCollector, (False, False): CpuWaitResetCollector,
              (True, True): GpuResetCollector, (True, False): GpuWaitResetCollector}


def assert_same_samples(reference, batches, label=""):
    """Env data, actions and done flags must match exactly. Model outputs (values)
    may differ in the last bit: a matrix product over 2 rows and over 4 rows can
    take different CPU kernels."""
    for a, b in zip(flat_leaves(reference), flat_leaves(batches)):
        if a.dtype.is_floating_point:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), label
        else:
            assert torch.equal(a, b), label
    for a, b in zip(reference, batches):
        assert torch.equal(a.env.observation, b.env.observation), label
        assert torch.equal(a.env.reward, b.env.reward), label
        assert torch.equal(a.agent.action, b.agent.action), label


def collect(SamplerCls, mid_batch_reset=True, start_method=None, n_batches=3, B=4,
            workers=(0, 1), **kwargs):
    set_seed(0)
    CollectorCls = COLLECTORS[(getattr(SamplerCls, "gpu", False), mid_batch_reset)]
    extra = {} if SamplerCls is SerialSampler else dict(start_method=start_method)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, batch_T=40, batch_B=B,
                         CollectorCls=CollectorCls, max_decorrelation_steps=0, **extra,
                         **kwargs)
    agent = GreedyAgent()
    sampler.initialize(agent, affinity=dict(workers_cpus=list(workers)), seed=7,
                       bootstrap_value=True)
    batches, n_trajs = [], []
    try:
        for itr in range(n_batches):
            samples, traj_infos = sampler.obtain_samples(itr)
            batches.append(buffer_func(samples, torch.clone))
            n_trajs.append(sorted(round(info.Return) for info in traj_infos))
    finally:
        sampler.shutdown()
    return batches, n_trajs


@pytest.mark.parametrize("mid_batch_reset", [True, False])
def test_cpu_gpu_and_serial_samplers_give_identical_samples(mid_batch_reset):
    serial, serial_trajs = collect(SerialSampler, mid_batch_reset)
    for SamplerCls in (CpuSampler, GpuSampler):
        batches, trajs = collect(SamplerCls, mid_batch_reset)
        assert trajs == serial_trajs, SamplerCls.__name__
        assert_same_samples(serial, batches, SamplerCls.__name__)
    assert sum(len(t) for t in serial_trajs) > 0  # episodes ended inside the batches


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_start_methods_give_the_same_samples(start_method):
    reference, ref_trajs = collect(CpuSampler, n_batches=2)
    for SamplerCls in (CpuSampler, GpuSampler):
        batches, trajs = collect(SamplerCls, start_method=start_method, n_batches=2)
        assert trajs == ref_trajs
        assert_same_samples(reference, batches, SamplerCls.__name__)


def test_alternating_samplers_match_gpu_sampler():
    reference, ref_trajs = collect(GpuSampler, workers=(0, 1, 0, 1))
    for SamplerCls in (AlternatingSampler, NoOverlapAlternatingSampler):
        batches, trajs = collect(SamplerCls, workers=(0, 1, 0, 1))
        assert trajs == ref_trajs
        assert_same_samples(reference, batches, SamplerCls.__name__)


@pytest.mark.parametrize("SamplerCls", [CpuSampler, GpuSampler, AlternatingSampler])
def test_parallel_evaluation(SamplerCls):
    set_seed(0)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, eval_env_kwargs=ENV, batch_T=8,
                         batch_B=4, eval_n_envs=4, eval_max_steps=4000,
                         eval_max_trajectories=6)
    sampler.initialize(CategoricalPgAgent(), affinity=dict(workers_cpus=[0, 1, 0, 1]), seed=3)
    try:
        traj_infos = sampler.evaluate_agent(1)
        assert len(traj_infos) == 6  # Workers were told to stop once 6 ended.
        assert all(info.Length > 0 for info in traj_infos)
        samples, _ = sampler.obtain_samples(2)  # training continues after evaluation
        assert samples.env.observation.shape == (8, 4, 4)
    finally:
        sampler.shutdown()


def test_recurrent_agents_and_alternation():
    set_seed(0)
    sampler = AlternatingSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=16, batch_B=4)
    with pytest.raises(TypeError, match="alternating recurrent agent"):
        sampler.initialize(RecurrentCategoricalPgAgent(), affinity=dict(workers_cpus=[0, 1]))
    for SamplerCls, agent in [(AlternatingSampler, AlternatingRecurrentCategoricalPgAgent()),
                              (CpuSampler, RecurrentCategoricalPgAgent()),
                              (GpuSampler, RecurrentCategoricalPgAgent())]:
        sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, batch_T=16, batch_B=4)
        sampler.initialize(agent, affinity=dict(workers_cpus=[0, 1]), seed=1,
                           bootstrap_value=True)
        try:
            samples, _ = sampler.obtain_samples(0)
            h = samples.agent.agent_info.prev_rnn_state.h
            assert h.shape == (16, 4, 1, 64) and torch.all(h[0] == 0)
            assert torch.all(h[1:].abs().sum(dim=(2, 3)) > 0) or samples.env.done.any()
        finally:
            sampler.shutdown()


@pytest.mark.parametrize("affinity,words", [
    (dict(workers_cpus=[0, 1, 0]), "multiple of the number of workers"),
    (dict(workers_cpus=[]), "workers_cpus"),
    (dict(workers_cpus=[0, 4096]), "4096"),
    (dict(), "workers_cpus"),
])
def test_bad_affinity_rejected(affinity, words):
    sampler = CpuSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=4)
    with pytest.raises(ValueError, match=words):
        sampler.initialize(CategoricalPgAgent(), affinity=affinity)
    assert worker_children() == []


def test_alternating_needs_even_workers():
    sampler = AlternatingSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=3)
    with pytest.raises(ValueError, match="even"):
        sampler.initialize(CategoricalPgAgent(), affinity=dict(workers_cpus=[0, 1, 0]))


def test_bad_start_method():
    with pytest.raises(ValueError, match="start_method"):
        CpuSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2, start_method="thread")


@pytest.mark.parametrize("SamplerCls", [CpuSampler, GpuSampler])
@pytest.mark.parametrize("crash_at", [0, 30])
def test_worker_error_surfaces_with_traceback(SamplerCls, crash_at):
    before_shm = shm_entries()
    set_seed(0)
    sampler = SamplerCls(EnvCls=CrashingEnv, env_kwargs=dict(crash_at=crash_at, crash_rank=1),
                         batch_T=20, batch_B=4, max_decorrelation_steps=0)
    start = time.time()
    with pytest.raises(WorkerError) as info:
        sampler.initialize(CategoricalPgAgent(), affinity=dict(workers_cpus=[0, 1]), seed=0)
        for itr in range(5):
            sampler.obtain_samples(itr)
    assert time.time() - start < 10
    msg = str(info.value)
    assert "Sampler worker" in msg and "RuntimeError: env exploded" in msg
    assert "crashing_step" in msg  # the worker's own traceback
    assert worker_children() == []
    del sampler
    assert_no_new_shm(before_shm)


RUNNER_SCRIPT = textwrap.dedent("""
    import sys
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.gym import make as gym_make
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.parallel.cpu.sampler import CpuSampler
    from rlframe.samplers.parallel.gpu.sampler import GpuSampler
    from rlframe.utils.logging.context import logger_context

    if __name__ == "__main__":
        SamplerCls = dict(cpu=CpuSampler, gpu=GpuSampler)[sys.argv[1]]
        sampler = SamplerCls(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                             batch_T=64, batch_B=4, start_method=sys.argv[2])
        runner = MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler,
                             n_steps=1e8, affinity=dict(workers_cpus=[0, 1]), seed=0)
        with logger_context("interrupt", 0, "interrupt"):
            runner.train()
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("kind,start_method", [("cpu", "fork"), ("gpu", "spawn")])
def test_interrupt_stops_every_worker(tmp_path, sig, kind, start_method):
    before_shm = shm_entries()
    script = tmp_path / "train.py"
    script.write_text(RUNNER_SCRIPT)
    with running_script(script, kind, start_method, cwd=tmp_path) as proc:
        # Wait until the workers run and training has started.
        deadline = time.time() + 120
        children = []
        while time.time() < deadline:
            children = worker_children(proc.pid)
            if len(children) >= 2 and (tmp_path / "data").exists():
                break
            time.sleep(0.2)
        assert len(children) >= 2
        time.sleep(1.0)
        if sig == signal.SIGINT:
            # Ctrl-C reaches the whole foreground process group.
            for p in [psutil.Process(proc.pid)] + children:
                p.send_signal(sig)
        else:
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "shut down" in out, out[-2000:]
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]
    assert_no_new_shm(before_shm)


@pytest.mark.parametrize("SamplerCls", [SerialSampler, CpuSampler, GpuSampler,
                                        AlternatingSampler])
def test_evaluation_counts_each_envs_first_episodes(SamplerCls):
    """6 trajectories over 4 evaluation envs, of which the even-seeded ones end every 2
    steps and the others every 9: each env's first ones count (2, 2, 1, 1 of them), not
    the first 6 to end (which would all be short)."""
    kwargs = dict(EnvCls=length_by_parity_env, env_kwargs={}, eval_env_kwargs={}, batch_T=4,
                  batch_B=2, eval_n_envs=4, eval_max_steps=400, eval_max_trajectories=6)
    sampler = SamplerCls(**kwargs)
    affinity = {} if SamplerCls is SerialSampler else dict(workers_cpus=[0, 1])
    sampler.initialize(CategoricalPgAgent(), affinity=affinity, seed=2)
    try:
        for itr in range(2):  # Each evaluation starts its counts afresh.
            lengths = sorted(info.Length for info in sampler.evaluate_agent(itr))
            assert lengths == [2, 2, 2, 9, 9, 9], (SamplerCls.__name__, lengths)
    finally:
        sampler.shutdown()
