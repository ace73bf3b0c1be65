"""RaySampler: equivalence with SerialSampler, evaluation, bad inputs, clean shutdown.

Learning through it is not trained again here: its batches equal the SerialSampler's
(whose PPO learns CartPole in test_learning), new parameters reach its workers, and
examples/example_ppo_ray.py trains PPO through it end to end."""
import os
import subprocess
import sys
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from rlframe.agents.pg.categorical import CategoricalPgAgent  # noqa: E402
from rlframe.envs.gym import make as gym_make  # noqa: E402
from rlframe.samplers.parallel.base import WorkerError  # noqa: E402
from rlframe.samplers.parallel.cpu.collectors import (CpuResetCollector,  # noqa: E402
                                                      CpuWaitResetCollector)
from rlframe.samplers.ray import RaySampler  # noqa: E402
from rlframe.samplers.serial.sampler import SerialSampler  # noqa: E402
from rlframe.utils.buffer import buffer_func  # noqa: E402
from rlframe.utils.seed import set_seed  # noqa: E402
from samplers_helpers import (CrashingEnv, GreedyAgent, assert_all_gone,  # noqa: E402
                              descendants, flat_leaves, is_ray_process, length_by_parity_env)

ENV = dict(id="CartPole-v1")
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def ray_processes():
    """Ray's processes (daemons and workers) that this test process started: other
    Ray instances on the machine are not looked at."""
    return [p for p in descendants() if is_ray_process(p)]


def assert_no_ray_processes(seen=(), timeout=15.):
    """The Ray processes in ``seen`` (recorded while they ran, so that ones which
    outlived their parent are known) and any Ray process still under this test
    process all exit within ``timeout`` seconds."""
    assert_all_gone(list(seen) + ray_processes(), timeout)


@pytest.fixture(scope="module")
def pythonpath_with_tests():
    """Ray workers import the test helpers (GreedyAgent, CrashingEnv) by name: they inherit
    this environment from the Ray started in this process."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(
            [TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        yield


@pytest.fixture(scope="module")
def local_ray(pythonpath_with_tests):
    """One local Ray for the module's samplers (they use it and leave it running)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    seen = ray_processes()
    yield
    seen += ray_processes()
    ray.shutdown()
    assert_no_ray_processes(seen)


# Tests without a running Ray come first: the module's Ray starts at its first use.

@pytest.mark.parametrize("kwargs,error,words", [
    (dict(n_workers=3), ValueError, "batch_B=4.*n_workers=3"),
    (dict(n_workers=0), ValueError, "n_workers"),
    (dict(placement_strategy="ANYWHERE"), ValueError, "placement_strategy"),
    (dict(num_cpus=0), ValueError, "num_cpus"),
    (dict(max_worker_restarts=-1), ValueError, "max_worker_restarts"),
    (dict(max_worker_restarts=1.5), ValueError, "max_worker_restarts"),
])
def test_bad_arguments_rejected(kwargs, error, words):
    with pytest.raises(error, match=words):
        RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=4, **kwargs)


@pytest.mark.parametrize("address", ["127.0.0.1:9", "auto"])  # Port 9: nothing listens.
def test_unreachable_address_fails_fast(address, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # "auto" finds any Ray on this machine (by its processes or its last address file):
    # hide other Ray instances so that no cluster is found.
    import ray._private.services as services
    def no_gcs_addresses():
        return set()
    no_gcs_addresses.cache_clear = lambda: None  # Ray clears the cached original.
    monkeypatch.setattr(services, "find_gcs_addresses", no_gcs_addresses)
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2, n_workers=2,
                         ray_address=address)
    start = time.time()
    with pytest.raises(ConnectionError, match=f"ray_address='{address}'"):
        sampler.initialize(CategoricalPgAgent())
    assert time.time() - start < 30
    assert not ray.is_initialized()
    assert_no_ray_processes()


def test_importing_rlframe_does_not_import_ray():
    code = ("import sys, rlframe, rlframe.samplers.ray, rlframe.runners.minibatch_rl; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_missing_ray_names_the_extra(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2)
    with pytest.raises(ImportError, match=r'pip install "rlframe\[ray\]"'):
        sampler.initialize(CategoricalPgAgent())


def _initialize_in_fork(errors):
    # A forked child that uses torch's thread pool as its parent did can hang: one thread,
    # as the project's own forked processes do.
    torch.set_num_threads(1)
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2)
    try:
        sampler.initialize(CategoricalPgAgent(), seed=0)
        errors.put("initialized")
    except Exception as error:  # noqa: BLE001 - sent to the test.
        errors.put(f"{type(error).__name__}: {error}")
    finally:
        sampler.shutdown()


def test_a_fork_of_a_process_that_used_ray_fails_clearly(monkeypatch):
    """Ray cannot start in a process forked from one that used it (ray.init hangs
    there): the sampler says so at once and names the start methods that work."""
    import multiprocessing as mp

    import rlframe.samplers.ray.cluster as ray_cluster
    monkeypatch.setattr(ray_cluster, "_RAY_USED_BY_PID", os.getpid())
    ctx = mp.get_context("fork")
    errors = ctx.Queue()
    child = ctx.Process(target=_initialize_in_fork, args=(errors,))
    child.start()
    try:
        message = errors.get(timeout=60)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert message.startswith("RuntimeError") and "forked" in message, message
    assert "start_method='forkserver'" in message


@pytest.mark.slow
def test_own_ray_is_started_and_stopped(pythonpath_with_tests):
    """With no Ray running, the sampler starts one and shutdown() leaves nothing behind."""
    assert not ray.is_initialized()
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=8, batch_B=2, n_workers=2,
                         max_decorrelation_steps=0)
    sampler.initialize(GreedyAgent(), seed=0)
    try:
        assert ray.is_initialized()
        samples, _ = sampler.obtain_samples(0)
        assert samples.env.observation.shape == (8, 2, 4)
        seen = ray_processes()
        assert len(seen) >= 4  # gcs_server, raylet and the two workers at least
    finally:
        sampler.shutdown()
    assert not ray.is_initialized()
    assert_no_ray_processes(seen)


@pytest.mark.slow
def test_a_sampler_built_while_connected_to_ray_marks_forks_of_this_process(local_ray):
    """A script's own Ray counts as use: its forks then refuse to start Ray."""
    import rlframe.samplers.ray.cluster as ray_cluster
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray_cluster, "_RAY_USED_BY_PID", None)
        RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2)
        assert ray_cluster._RAY_USED_BY_PID == os.getpid()


def collect(SamplerCls, CollectorCls, n_batches=3, **kwargs):
    set_seed(0)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, batch_T=40, batch_B=4,
                         CollectorCls=CollectorCls, max_decorrelation_steps=0, **kwargs)
    sampler.initialize(GreedyAgent(), seed=7, bootstrap_value=True)
    batches, trajs = [], []
    try:
        for itr in range(n_batches):
            samples, traj_infos = sampler.obtain_samples(itr)
            batches.append(buffer_func(samples, torch.clone))
            trajs.append([(info.Length, info.Return) for info in traj_infos])
    finally:
        sampler.shutdown()
    return batches, trajs


@pytest.mark.slow
@pytest.mark.parametrize("CollectorCls", [CpuResetCollector, CpuWaitResetCollector])
def test_ray_and_serial_samplers_give_identical_samples(local_ray, CollectorCls):
    serial, serial_trajs = collect(SerialSampler, CollectorCls)
    batches, trajs = collect(RaySampler, CollectorCls, n_workers=2)
    assert sum(len(t) for t in serial_trajs) > 0  # episodes ended inside the batches
    assert [sorted(t) for t in trajs] == [sorted(t) for t in serial_trajs]
    for a, b in zip(flat_leaves(serial), flat_leaves(batches)):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.is_floating_point:  # model outputs may differ in the last bit
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(a, b)
    for a, b in zip(serial, batches):
        assert torch.equal(a.env.observation, b.env.observation)
        assert torch.equal(a.env.reward, b.env.reward)
        assert torch.equal(a.agent.action, b.agent.action)
        assert torch.equal(a.agent.prev_action, b.agent.prev_action)


@pytest.mark.slow
def test_parameters_reach_the_workers_and_evaluation_runs(local_ray):
    set_seed(0)
    sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, eval_env_kwargs=ENV, batch_T=8,
                         batch_B=4, eval_n_envs=4, eval_max_steps=4000,
                         eval_max_trajectories=6, n_workers=2)
    agent = CategoricalPgAgent()
    sampler.initialize(agent, seed=3, bootstrap_value=True)
    try:
        traj_infos = sampler.evaluate_agent(0)
        assert len(traj_infos) == 6  # Each worker's envs end their shares of 6.
        assert all(info.Length > 0 for info in traj_infos)
        samples, _ = sampler.obtain_samples(1)  # training continues after evaluation
        assert samples.env.observation.shape == (8, 4, 4)
        # New parameters are used from the next batch on: a zero model gives uniform
        # probabilities and a zero value in every worker.
        with torch.no_grad():
            for p in agent.parameters():
                p.zero_()
        samples, _ = sampler.obtain_samples(2)
        assert torch.all(samples.agent.agent_info.value == 0)
        assert torch.allclose(samples.agent.agent_info.dist_info.prob, torch.tensor(0.5))
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_worker_error_surfaces_and_stops_the_workers(local_ray):
    sampler = RaySampler(EnvCls=CrashingEnv, env_kwargs=dict(crash_at=5, crash_rank=1),
                         batch_T=20, batch_B=4, max_decorrelation_steps=0, n_workers=2,
                         max_worker_restarts=0)
    sampler.initialize(CategoricalPgAgent(), seed=1)
    with pytest.raises(WorkerError, match="env exploded"):
        sampler.obtain_samples(0)
    assert sampler.workers == []
    assert ray.util.placement_group_table() == {} or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


@pytest.mark.slow
def test_evaluation_counts_each_envs_first_episodes(local_ray):
    """6 trajectories over 2 workers x 2 evaluation envs, the even-seeded ones ending
    every 2 steps and the others every 9: each env's first ones count (2, 2, 1, 1)."""
    sampler = RaySampler(EnvCls=length_by_parity_env, env_kwargs={}, eval_env_kwargs={},
                         batch_T=4, batch_B=2, eval_n_envs=4, eval_max_steps=400,
                         eval_max_trajectories=6, n_workers=2)
    sampler.initialize(CategoricalPgAgent(), seed=2)
    try:
        for itr in range(2):
            lengths = sorted(info.Length for info in sampler.evaluate_agent(itr))
            assert lengths == [2, 2, 2, 9, 9, 9]
    finally:
        sampler.shutdown()
