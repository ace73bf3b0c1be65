"""AsyncRaySampler: double-buffer columns, parameter versions and their staleness bound,
worker failures, and DQN learning CartPole through AsyncRlEval with nothing left behind."""
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch

ray = pytest.importorskip("ray")

from rlframe.agents.pg.categorical import CategoricalPgAgent  # noqa: E402
from rlframe.envs.gym import make as gym_make  # noqa: E402
from rlframe.runners.async_rl import AsyncRl, AsyncRlEval  # noqa: E402
from rlframe.runners.callbacks import Callback, StopAtReturn  # noqa: E402
from rlframe.samplers.parallel.base import WorkerError  # noqa: E402
from rlframe.samplers.ray import AsyncRaySampler  # noqa: E402
from rlframe.samplers.serial.sampler import SerialSampler  # noqa: E402
from rlframe.utils.launching.affinity import make_affinity  # noqa: E402
from rlframe.utils.logging.context import logger_context  # noqa: E402
from conftest import long_lived_helper, start_script, wait_for_line  # noqa: E402
from samplers_helpers import (CrashingEnv, GreedyAgent, MarkerCrashEnv,  # noqa: E402
                              flat_leaves)
from test_async_rl import AFFINITY, LEAD_STEPS, cartpole_agent, cartpole_dqn  # noqa: E402
from test_async_rl import _running as alive, shm_entries  # noqa: E402

ENV = dict(id="CartPole-v1")
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(TESTS_DIR), "examples", "example_dqn_async_ray.py")


@pytest.fixture(scope="module")
def pythonpath_with_tests():
    """Ray workers import the test helpers by name: they inherit this environment from
    the process that starts Ray."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(
            [TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        yield


# Tests without a Ray in this process come first: the module's Ray starts at its first use,
# and a runner's forked sampler process must not inherit a Ray connection.

@pytest.mark.parametrize("value,error", [(0, ValueError), (-1, ValueError), (1.5, ValueError),
                                         ("2", TypeError)])
def test_bad_max_batches_in_flight_rejected(value, error):
    with pytest.raises(error, match="max_batches_in_flight"):
        AsyncRaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=4, n_workers=2,
                        max_batches_in_flight=value)


def test_ray_sampler_arguments_are_checked_too():
    with pytest.raises(ValueError, match="batch_B=4.*n_workers=3"):
        AsyncRaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=4, n_workers=3)


class Descendants(Callback):
    """Every descendant process of this (the test's) process, recorded at startup and at
    every log row."""

    def __init__(self):
        self.seen = {}

    def record(self):
        for p in psutil.Process().children(recursive=True):
            try:
                cmd = " ".join(p.cmdline())[:200]
                if not long_lived_helper(p):  # Serves this process for its whole life.
                    self.seen.setdefault(p.pid, (p, cmd))
            except psutil.Error:
                continue

    def on_startup(self, runner):
        time.sleep(1.)  # The sampler process starts Ray and its actors.
        self.record()

    def on_log(self, runner, itr, diagnostics):
        self.record()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dqn_async_ray_trains_evaluates_and_leaves_nothing(in_tmp_cwd):
    """AsyncRlEval with two Ray workers sampling continuously, for two log intervals;
    afterwards no process that the run started (Ray's own, the actors) is left, nor a
    shared-memory file. (DQN learning CartPole through AsyncRl is test_async_rl's; the
    AsyncRaySampler writes the serial sampler's batches, tested below.)"""
    assert not ray.is_initialized()
    shm_before = shm_entries()
    stop = StopAtReturn(1e9)  # Records every evaluation; never stops the run.
    descendants = Descendants()
    sampler = AsyncRaySampler(EnvCls=gym_make, env_kwargs=ENV, eval_env_kwargs=ENV, batch_T=32,
                              batch_B=8, max_decorrelation_steps=0, eval_n_envs=4,
                              eval_max_steps=4000, eval_max_trajectories=8, n_workers=2)
    affinity = make_affinity(**AFFINITY)
    affinity["sampler"].pop("workers_cpus")  # Ray places the workers.
    runner = AsyncRlEval(algo=cartpole_dqn(), agent=cartpole_agent(), sampler=sampler,
                         n_steps=8192, affinity=affinity, seed=1, log_interval_steps=4096,
                         callbacks=[stop, descendants], sampler_lead_steps=LEAD_STEPS)
    with logger_context("async_ray", 1, "async_ray", {}, snapshot_mode="none"):
        runner.train()
    # The untrained agent's evaluation, then one per log interval (a row may count a
    # sampler batch or two more than the interval: the optimizer reads the counter), each
    # with returns.
    steps = [steps for steps, _ in stop.history]
    assert len(steps) == 3 and steps[0] == 0 and steps[2] == 8192, stop.history
    assert 4096 <= steps[1] < 8192, stop.history
    assert all(ret > 0 for _, ret in stop.history), stop.history
    assert runner.algo.update_counter > 0
    assert sampler.diagnostics() == {"WorkerRestarts": 0}

    commands = [cmd for _, cmd in descendants.seen.values()]
    assert any("raylet" in cmd for cmd in commands), commands  # Its own Ray was seen...
    assert sum("RaySamplerWorker" in cmd for cmd in commands) == 2, commands  # ...and actors.
    deadline = time.time() + 20.
    while (left := [p for p, _ in descendants.seen.values() if alive(p)]) and \
            time.time() < deadline:
        time.sleep(0.3)
    assert not left, [descendants.seen[p.pid][1] for p in left]
    assert not ray.is_initialized()
    assert not new_shm_of(set(descendants.seen) | {os.getpid()}, shm_before)


def new_shm_of(pids, shm_before):
    """New /dev/shm entries whose name holds one of ``pids`` (torch's and
    multiprocessing's files name the creating process; rlframe's are anonymous)."""
    pids = {str(pid) for pid in pids}
    return {name for name in shm_entries() - shm_before if set(re.findall(r"\d+", name)) & pids}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["ctrl_c", "master_killed"])
def test_an_interrupted_run_leaves_nothing(how, in_tmp_cwd):
    """Ctrl-C (SIGINT to the process group), or SIGKILL to the master: the sampler
    process, its Ray and the actors end too."""
    shm_before = shm_entries()
    process = start_script([sys.executable, EXAMPLE, "--n_steps", "1e7", "--seed", "1"],
                           cwd=in_tmp_cwd)
    try:
        wait_for_line(process, "AsyncRaySampler initialized", timeout=120.)
        time.sleep(2.)  # Sampling and training.
        root = psutil.Process(process.pid)
        tree = {p.pid: p for p in [root] + root.children(recursive=True)}
        commands = []
        for p in tree.values():
            try:
                commands.append(" ".join(p.cmdline()))
            except psutil.Error:
                pass
        assert any("raylet" in cmd for cmd in commands), commands
        assert sum("RaySamplerWorker" in cmd for cmd in commands) == 2, commands
        if how == "ctrl_c":
            os.killpg(process.pid, signal.SIGINT)
        else:
            root.kill()
        try:
            output, _ = process.communicate(timeout=60.)
        except subprocess.TimeoutExpired:
            output = ""
        _, left = psutil.wait_procs(list(tree.values()), timeout=30.)
        left = [p for p in left if alive(p)]
        names = [p.name() for p in left]
        for p in left:
            p.kill()
        assert not left, (names, output[-3000:])
        assert process.returncode != 0
        if how == "ctrl_c":
            assert "AsyncRaySampler shut down" in output, output[-3000:]
        assert not new_shm_of(tree, shm_before)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_async_ray_after_ray_in_the_same_process_starts_by_forkserver(in_tmp_cwd):
    """A script that ran a RaySampler first (its process used Ray, so a forked child cannot
    start Ray): AsyncRl picks forkserver by itself, says so, completes, and leaves nothing."""
    script = os.path.join(TESTS_DIR, "ray_then_async_script.py")
    shm_before = shm_entries()
    process = start_script([sys.executable, script], cwd=in_tmp_cwd)
    seen = {}

    def watch():  # Every descendant of the script while it runs.
        while process.poll() is None:
            try:
                for p in psutil.Process(process.pid).children(recursive=True):
                    seen.setdefault(p.pid, p)
            except psutil.Error:
                pass
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        output, _ = process.communicate(timeout=170.)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        watcher.join()
    assert process.returncode == 0, output[-3000:]
    assert "RAY RUN DONE" in output and "ASYNC RUN DONE" in output, output[-3000:]
    assert re.search(r"AsyncRl: starting the child processes with start_method='forkserver' "
                     r"instead of the default 'fork': this process \(pid \d+\) used Ray",
                     output), output[-3000:]
    assert "AsyncRaySampler initialized" in output and "Training complete" in output
    assert len(seen) >= 5, seen  # Both runs' Rays, the forkserver and the runner's children.
    _, left = psutil.wait_procs(list(seen.values()), timeout=20.)
    left = [p for p in left if alive(p)]
    names = [p.name() for p in left]
    for p in left:
        p.kill()
    assert not left, names
    assert not new_shm_of(set(seen) | {process.pid}, shm_before)


def test_fork_asked_for_in_a_process_that_used_ray_is_refused(in_tmp_cwd, monkeypatch):
    """An explicit start_method='fork' is honoured as asked, so it fails early and clearly."""
    import rlframe.samplers.ray.cluster as ray_cluster
    monkeypatch.setattr(ray_cluster, "_RAY_USED_BY_PID", os.getpid())  # As after a Ray run.
    sampler = AsyncRaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2,
                              n_workers=1)
    affinity = make_affinity(**AFFINITY)
    affinity["sampler"].pop("workers_cpus")
    runner = AsyncRl(algo=cartpole_dqn(), agent=cartpole_agent(), sampler=sampler, n_steps=64,
                     affinity=affinity, start_method="fork")
    with pytest.raises(RuntimeError, match=r"start_method='fork' cannot work here: "
                       r"this process \(pid \d+\) used Ray.*'forkserver' or 'spawn'"):
        with logger_context("fork", 0, "fork", {}, snapshot_mode="none"):
            runner.train()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_process_lost_from_rays_tree_dies_with_the_master(in_tmp_cwd):
    """Processes that Ray's processes start and that leave their tree (handed to init, as
    a late-started agent of a killed raylet is) end too when the master is killed."""
    script = os.path.join(TESTS_DIR, "async_ray_orphan_script.py")
    pid_file = str(in_tmp_cwd / "orphans")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p))
    process = start_script([sys.executable, script, pid_file], cwd=in_tmp_cwd, env=env)
    orphans = []
    try:
        wait_for_line(process, "TRAINING STARTED", timeout=120.)
        with open(pid_file) as f:
            orphans = [psutil.Process(int(line)) for line in f.read().split()]
        assert len(orphans) >= 2, orphans  # One per worker's env at least.
        root = psutil.Process(process.pid)
        tree = [root] + root.children(recursive=True)
        assert not {p.pid for p in orphans} & {p.pid for p in tree}  # Out of the tree.
        root.kill()
        process.wait()
        _, left = psutil.wait_procs(orphans + tree, timeout=30.)
        left = [p for p in left if alive(p)]
        names = [p.name() for p in left]
        assert not left, names
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for p in orphans:
            if alive(p):
                p.kill()


# ------------------------------------------------------------------ with this process's Ray

@pytest.fixture(scope="module")
def local_ray(pythonpath_with_tests):
    """One local Ray for the unit tests (the samplers use it and leave it running)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def initialized(agent, seed=7, bootstrap_value=False, EnvCls=gym_make, env_kwargs=ENV,
                **kwargs):
    """An AsyncRaySampler after async_initialize and initialize, both in this process."""
    sampler = AsyncRaySampler(EnvCls=EnvCls, env_kwargs=env_kwargs, max_decorrelation_steps=0,
                              n_workers=2, **kwargs)
    sampler.async_initialize(agent, bootstrap_value=bootstrap_value, seed=seed)
    sampler.initialize({})
    return sampler


@pytest.mark.slow
def test_double_buffer_halves_get_the_serial_samplers_columns(local_ray):
    """Worker w's envs are columns w * B / n_workers on, time-contiguous across batches;
    each batch goes to the half named, the other half is left alone."""
    agent = GreedyAgent()
    sampler = initialized(agent, bootstrap_value=True, batch_T=40, batch_B=4)
    try:
        serial = SerialSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=40, batch_B=4,
                               max_decorrelation_steps=0)
        serial_agent = GreedyAgent()
        serial.initialize(serial_agent, seed=7, bootstrap_value=True)
        serial_agent.load_state_dict(agent.state_dict())  # The same parameters.
        for itr in range(4):
            db_idx = itr % 2
            other = sampler.double_buffer_pyt[1 - db_idx]
            other.env.observation.fill_(-7.)
            traj_infos = sampler.obtain_samples(itr, db_idx)
            expected, serial_infos = serial.obtain_samples(itr)
            got = sampler.double_buffer_pyt[db_idx]
            assert torch.all(other.env.observation == -7.)
            for a, b in zip(flat_leaves(expected), flat_leaves(got)):
                assert a.shape == b.shape
                assert torch.allclose(a.float(), b.float(), rtol=1e-6, atol=1e-6)
            assert torch.equal(expected.env.observation, got.env.observation)
            assert torch.equal(expected.agent.action, got.agent.action)
            assert sorted((i.Length, i.Return) for i in traj_infos) == \
                sorted((i.Length, i.Return) for i in serial_infos)
        assert sum(len(q) for q in sampler._in_flight) == 2 * sampler.max_batches_in_flight
        serial.shutdown()
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_new_parameters_are_published_once_and_reach_the_workers(local_ray):
    """Parameters go to the object store only when the optimizer sent new ones; a batch
    sampled with them comes back max_batches_in_flight iterations after the send."""
    agent = CategoricalPgAgent()
    sampler = initialized(agent, seed=3, batch_T=8, batch_B=4, eval_env_kwargs=ENV,
                          eval_n_envs=2, eval_max_steps=2000, eval_max_trajectories=4,
                          max_batches_in_flight=2)

    def uniform(samples):
        return torch.allclose(samples.agent.agent_info.dist_info.prob, torch.tensor(0.5))

    try:
        sampler.obtain_samples(0, 0)
        assert sampler._params_version == 1
        sampler.obtain_samples(1, 1)
        assert sampler._params_version == 1  # Unchanged parameters are not put again.
        assert not uniform(sampler.double_buffer_pyt[1])
        with torch.no_grad():  # The optimizer's side: train (here: zero) and send.
            for p in agent.model.parameters():
                p.zero_()
        agent.send_shared_memory()
        # Batches 2 and 3 were queued before the send: old parameters.
        for itr in (2, 3):
            sampler.obtain_samples(itr, itr % 2)
            assert not uniform(sampler.double_buffer_pyt[itr % 2]), itr
        assert sampler._params_version == 2
        sampler.obtain_samples(4, 0)
        samples = sampler.double_buffer_pyt[0]
        assert uniform(samples) and torch.all(samples.agent.agent_info.value == 0)
        traj_infos = sampler.evaluate_agent(5)  # Behind the queued calls, then sampling goes on.
        assert 4 <= len(traj_infos) and all(info.Length > 0 for info in traj_infos)
        sampler.obtain_samples(5, 1)
        assert uniform(sampler.double_buffer_pyt[1])
        assert sampler._params_version == 2
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_worker_error_surfaces_with_its_traceback_and_stops_the_workers(local_ray):
    sampler = initialized(CategoricalPgAgent(), seed=1, batch_T=20, batch_B=4,
                          EnvCls=CrashingEnv, env_kwargs=dict(crash_at=5, crash_rank=1),
                          max_worker_restarts=0)
    # The actors' handles, kept past shutdown() to ask whether they still run.
    workers = list(sampler.workers)
    try:
        with pytest.raises(WorkerError, match=r"(?s)worker 1 .*failed.*env exploded"):
            for itr in range(3):
                sampler.obtain_samples(itr, itr % 2)
    finally:
        sampler.shutdown()
    assert sampler.workers == [] and sampler._in_flight == []
    for worker in workers:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(worker.ready.remote(), timeout=30)
    table = ray.util.placement_group_table()
    assert all(pg["state"] == "REMOVED" for pg in table.values()), table


@pytest.mark.slow
def test_a_sampler_is_sent_to_its_process_before_initialize(local_ray):
    sampler = initialized(CategoricalPgAgent(), batch_T=4, batch_B=2)
    try:
        with pytest.raises(RuntimeError, match="before initialize"):
            pickle.dumps(sampler)
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_a_failed_worker_is_restarted_and_its_queued_batches_sampled_again(local_ray,
                                                                          tmp_path):
    """An env error in worker 1 (once): the worker is replaced, its lost queued calls run
    on the new actor, every batch comes back whole, and the master's copy of the sampler
    reports the restart."""
    marker = tmp_path / "crash"
    marker.touch()
    sampler = initialized(CategoricalPgAgent(), seed=0, batch_T=20, batch_B=4,
                          EnvCls=MarkerCrashEnv,
                          env_kwargs=dict(marker=str(marker), crash_at=30, crash_seed=2),
                          max_worker_restarts=1)
    try:
        first = sampler.workers[1]
        with pytest.warns(RuntimeWarning, match="worker 1 .*env exploded"):
            for itr in range(4):
                half = sampler.double_buffer_pyt[itr % 2]
                half.env.observation.fill_(float("nan"))
                sampler.obtain_samples(itr, itr % 2)
                assert not torch.isnan(half.env.observation).any(), itr
        assert not marker.exists()  # The crash happened.
        assert sampler.workers[1] is not first
        assert sampler.diagnostics() == {"WorkerRestarts": 1}
        assert all(len(queue) == sampler.max_batches_in_flight for queue in sampler._in_flight)
    finally:
        sampler.shutdown()
