"""Asynchronous GPU-style samplers on the CPU (cuda_idx=None): AsyncGpuSampler with one
affinity dict (the sampler process serves actions) and with a list of dicts (one
action-server process each), and the alternating ones. Their double-buffer batches
match the synchronous GpuSampler's; they train under AsyncRlEval with the optimizer's
parameters; every process they start ends, however the run ends."""
import gc
import multiprocessing as mp
import os
import signal
import sys
import textwrap
import time

import psutil
import pytest
import torch
from async_helpers import FailingGpuSampler, RecordingGpuSampler, slow_env
from conftest import read_csv, run_dirs, start_script
from samplers_helpers import (CrashingEnv, GreedyAgent, flat_leaves, length_by_parity_env,
                              worker_children)
from shm_helpers import mapped_inodes
from test_async_rl import (AFFINITY, PublishedDigests, cartpole_agent, cartpole_dqn, running_tree,
                           shm_entries)

from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRl, AsyncRlError, AsyncRlEval
from rlframe.samplers.async_.alternating_sampler import (AsyncAlternatingSampler,
                                                         AsyncNoOverlapAlternatingSampler)
from rlframe.samplers.async_.collectors import (DbCpuResetCollector, DbCpuWaitResetCollector,
                                                DbGpuResetCollector, DbGpuWaitResetCollector)
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.parallel.gpu.collectors import GpuResetCollector, GpuWaitResetCollector
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.utils.buffer import buffer_func
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context
from rlframe.utils.seed import set_seed

ENV = dict(id="CartPole-v1")
SEED = 7
# Hand-made CPU action servers: one worker each, each server pinned beside its worker.
SERVERS = [dict(master_cpus=[0], workers_cpus=[0], cuda_idx=None),
           dict(master_cpus=[1], workers_cpus=[1], cuda_idx=None)]
DB_COLLECTORS = {(True, True): DbGpuResetCollector, (True, False): DbGpuWaitResetCollector,
                 (False, True): DbCpuResetCollector, (False, False): DbCpuWaitResetCollector}


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Samplers initialized in this process set one torch thread for it."""
    n_threads = torch.get_num_threads()
    yield
    torch.set_num_threads(n_threads)


def shm_in_use(processes):
    """Inodes of the /dev/shm files (e.g. named semaphores) that ``processes`` have
    mapped. Other jobs on the machine create and remove entries too, so a test checks
    its own; a semaphore is mapped under a temporary name, hence inodes."""
    return set().union(*(mapped_inodes(process.pid) for process in processes))


def shm_left(inodes):
    """The /dev/shm entries whose inode is in ``inodes``."""
    left = set()
    for name in shm_entries():
        try:
            if os.stat(os.path.join("/dev/shm", name)).st_ino in inodes:
                left.add(name)
        except OSError:
            continue
    return left


def assert_gone(inodes, timeout=5.):
    """No /dev/shm entry of ``inodes`` outlives ``timeout`` seconds (a finished process's
    resource tracker unlinks its entries asynchronously)."""
    deadline = time.time() + timeout
    while (left := shm_left(inodes)) and time.time() < deadline:
        time.sleep(0.2)
    assert not left, left


def assert_released(timeout=5.):
    """No child process is left, and no /dev/shm entry this process has mapped outlives
    the finished run's objects (such as the replay buffer's locks) once collected."""
    assert worker_children() == []
    ours = shm_in_use([psutil.Process()])
    gc.collect()
    assert_gone(ours, timeout)


# --------------------------------------------------------------------------- batches

@pytest.fixture(scope="module")
def reference():
    """Three batches of the synchronous GpuSampler (seed 7, envs seeded 7 + b), per
    mid_batch_reset, and the parameters of the greedy agent that acted."""
    out = {}
    for mid_batch_reset in (True, False):
        set_seed(0)
        agent = GreedyAgent()
        sampler = GpuSampler(
            EnvCls=gym_make, env_kwargs=ENV, batch_T=40, batch_B=4, max_decorrelation_steps=0,
            CollectorCls=GpuResetCollector if mid_batch_reset else GpuWaitResetCollector)
        sampler.initialize(agent, affinity=dict(workers_cpus=[0, 1]), seed=SEED,
                           bootstrap_value=True)
        batches, trajs = [], []
        try:
            for itr in range(3):
                samples, traj_infos = sampler.obtain_samples(itr)
                batches.append(buffer_func(samples, torch.clone))
                trajs.append(sorted(info.Return for info in traj_infos))
        finally:
            sampler.shutdown()
        assert sum(map(len, trajs)) > 0  # Episodes end inside the batches.
        out[mid_batch_reset] = batches, trajs, agent.state_dict()
    return out


def collect_double_buffer(SamplerCls, affinity, state_dict, mid_batch_reset=True,
                          start_method=None, n_batches=3):
    """Batches ``itr`` into half ``itr % 2``; returns each batch as written and the
    sorted returns of the trajectories each batch completed."""
    agent = GreedyAgent(initial_model_state_dict=state_dict)
    CollectorCls = DB_COLLECTORS[(getattr(SamplerCls, "gpu", False), mid_batch_reset)]
    extra = {} if SamplerCls is AsyncSerialSampler else dict(start_method=start_method)
    sampler = SamplerCls(EnvCls=gym_make, env_kwargs=ENV, batch_T=40, batch_B=4,
                         max_decorrelation_steps=0, CollectorCls=CollectorCls, **extra)
    double_buffer, _ = sampler.async_initialize(agent, bootstrap_value=True, seed=SEED,
                                                ctx=mp.get_context(start_method))
    batches, trajs = [], []
    try:
        sampler.initialize(affinity)
        for itr in range(n_batches):
            db_idx = itr % 2
            other = buffer_func(double_buffer[1 - db_idx], torch.clone)
            traj_infos = sampler.obtain_samples(itr, db_idx)
            batches.append(buffer_func(double_buffer[db_idx], torch.clone))
            trajs.append(sorted(info.Return for info in traj_infos))
            for before, after in zip(flat_leaves(other), flat_leaves(double_buffer[1 - db_idx]),
                                     strict=True):
                assert torch.equal(before, after), f"batch {itr} wrote into the other half"
    finally:
        sampler.shutdown()
    return batches, trajs


def assert_same_batches(reference_batches, batches):
    """Env data, actions and done flags equal; model outputs equal up to the last bit
    (a matrix product over fewer rows may take another CPU kernel)."""
    for itr, (ref, batch) in enumerate(zip(reference_batches, batches, strict=True)):
        for a, b in zip(flat_leaves(ref), flat_leaves(batch), strict=True):
            if a.dtype.is_floating_point:
                assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), f"batch {itr}"
            else:
                assert torch.equal(a, b), f"batch {itr}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mid_batch_reset", [True, False])
@pytest.mark.parametrize("SamplerCls, affinity", [
    (AsyncGpuSampler, dict(workers_cpus=[0, 1], cuda_idx=None)),
    (AsyncGpuSampler, SERVERS),
    (AsyncAlternatingSampler, dict(workers_cpus=[0, 1, 0, 1], cuda_idx=None)),
    (AsyncNoOverlapAlternatingSampler, dict(workers_cpus=[0, 1, 0, 1])),
    (AsyncAlternatingSampler, [dict(workers_cpus=[0, 0]), dict(workers_cpus=[1, 1])]),
    (AsyncCpuSampler, dict(workers_cpus=[0, 1])),
    (AsyncSerialSampler, {}),
], ids=["gpu", "gpu-2-servers", "alternating", "no-overlap", "alternating-2-servers", "cpu",
        "serial"])
def test_double_buffer_batches_match_the_gpu_sampler(reference, SamplerCls, affinity,
                                                     mid_batch_reset):
    """With the same seed and a deterministic agent, the batches written into alternate
    halves are the synchronous sampler's batches, one by one, and each batch leaves
    the other half alone; the completed trajectories are the same."""
    ref_batches, ref_trajs, state_dict = reference[mid_batch_reset]
    batches, trajs = collect_double_buffer(SamplerCls, affinity, state_dict, mid_batch_reset)
    assert trajs == ref_trajs
    assert_same_batches(ref_batches, batches)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method, affinity", [
    ("spawn", dict(workers_cpus=[0, 1], cuda_idx=None)), ("forkserver", SERVERS)],
    ids=["spawn-one", "forkserver-two"])
def test_start_methods_give_the_same_batches(reference, start_method, affinity):
    ref_batches, ref_trajs, state_dict = reference[True]
    batches, trajs = collect_double_buffer(AsyncGpuSampler, affinity, state_dict,
                                           start_method=start_method, n_batches=2)
    assert trajs == ref_trajs[:2]
    assert_same_batches(ref_batches[:2], batches)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("affinity", [dict(workers_cpus=[0, 1]), SERVERS], ids=["one", "two"])
def test_evaluation_stops_early_over_all_servers(affinity):
    set_seed(0)
    sampler = AsyncGpuSampler(EnvCls=gym_make, env_kwargs=ENV, eval_env_kwargs=ENV, batch_T=8,
                              batch_B=4, eval_n_envs=4, eval_max_steps=4000,
                              eval_max_trajectories=6)
    double_buffer, _ = sampler.async_initialize(CategoricalPgAgent(), seed=3)
    try:
        sampler.initialize(affinity)
        traj_infos = sampler.evaluate_agent(0)
        assert len(traj_infos) == 6  # Stopped early: 4 envs x 1000 steps allowed.
        assert all(info.Length > 0 for info in traj_infos)
        if sampler.server_group is not None:  # The servers counted into one total.
            assert sampler.server_group.sync.eval_count.value == len(traj_infos)
        sampler.obtain_samples(1, 1)  # Training goes on after an evaluation.
        assert double_buffer[1].env.observation.abs().sum() > 0
        assert len(sampler.evaluate_agent(2)) == 6
    finally:
        sampler.shutdown()
    assert worker_children() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("affinity", [dict(workers_cpus=[0, 1]), SERVERS], ids=["one", "two"])
def test_evaluation_counts_each_envs_first_episodes(affinity):
    """6 trajectories over 4 evaluation envs (split over two action servers, or not),
    the even-seeded ones ending every 2 steps and the others every 9: each env's first
    ones count (2, 2, 1, 1 of them), not the first 6 to end."""
    sampler = AsyncGpuSampler(EnvCls=length_by_parity_env, env_kwargs={}, eval_env_kwargs={},
                              batch_T=8, batch_B=4, eval_n_envs=4, eval_max_steps=400,
                              eval_max_trajectories=6)
    sampler.async_initialize(CategoricalPgAgent(), seed=2)
    try:
        sampler.initialize(affinity)
        for itr in range(2):
            assert sorted(info.Length for info in sampler.evaluate_agent(itr)) == [
                2, 2, 2, 9, 9, 9]
    finally:
        sampler.shutdown()
    assert worker_children() == []


def test_bad_input_is_reported(in_tmp_cwd):
    sampler = AsyncGpuSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2)
    sampler.async_initialize(CategoricalPgAgent(), seed=0)
    with pytest.raises(ValueError, match=r"batch_B=2 .*len\(affinity\['sampler'\]\)=3"):
        sampler.initialize([dict(workers_cpus=[0])] * 3)
    with pytest.raises(ValueError, match=r"affinity\['sampler'\]\[1\]\['workers_cpus'\]"):
        sampler.initialize([dict(workers_cpus=[0]), dict(workers_cpus=[])])
    with pytest.raises(ValueError, match=r"1 envs.*len\(affinity\['sampler'\]\[0\]\['work"):
        sampler.initialize([dict(workers_cpus=[0, 1]), dict(workers_cpus=[1])])
    assert worker_children() == []
    with pytest.raises(TypeError, match="DbGpuResetCollector"):
        AsyncGpuSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2,
                        CollectorCls=GpuResetCollector)
    with pytest.raises(TypeError, match="alternating recurrent agent"):
        AsyncAlternatingSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2
                                ).async_initialize(RecurrentCategoricalPgAgent())
    # A sampler that takes one affinity dict is told so by the runner.
    affinity = make_affinity(**AFFINITY)
    affinity["sampler"] = SERVERS
    serial = AsyncSerialSampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=4, batch_B=2)
    with pytest.raises(TypeError, match=r"affinity\['sampler'\] is a list of 2 .*"
                                        "AsyncSerialSampler takes one dict"):
        AsyncRl(algo=cartpole_dqn(), agent=cartpole_agent(), sampler=serial, n_steps=1e3,
                affinity=affinity)


# --------------------------------------------------------------------------- training

def cartpole_gpu_sampler(SamplerCls, **kwargs):
    # 0.5 ms per env step: the sampler then runs no faster than the optimizer trains.
    return SamplerCls(EnvCls=slow_env, env_kwargs=dict(id="CartPole-v1", step_seconds=5e-4),
                      batch_T=32, batch_B=8, max_decorrelation_steps=0, **kwargs)


def async_affinity(sampler_affinity=None):
    affinity = make_affinity(**AFFINITY)
    if sampler_affinity is not None:
        affinity["sampler"] = sampler_affinity
    return affinity


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("servers", [False, True], ids=["one", "two"])
def test_async_rl_eval_trains_with_the_optimizer_parameters(in_tmp_cwd, servers):
    """AsyncRlEval with DQN on CartPole: the run completes and logs; every batch is
    sampled with parameters the optimizer published, new ones as training goes on."""
    sampler = cartpole_gpu_sampler(RecordingGpuSampler, eval_n_envs=4, eval_env_kwargs=ENV,
                                   eval_max_steps=2000, eval_max_trajectories=8)
    sampler.record_path = str(in_tmp_cwd / "digests.txt")
    published = PublishedDigests()
    # The sampler waits when 1,024 steps ahead of the optimizer: on a loaded machine an
    # optimizer process slow to start would otherwise see the run end before it trains.
    runner = AsyncRlEval(algo=cartpole_dqn(min_steps_learn=512, replay_ratio=8),
                         agent=cartpole_agent(), sampler=sampler, n_steps=8192,
                         affinity=async_affinity(SERVERS if servers else None), seed=0,
                         log_interval_steps=4096, callbacks=[published],
                         sampler_lead_steps=1024)
    with logger_context("gpu", 0, "gpu", {}, snapshot_mode="last"):
        runner.train()
    assert runner.algo.update_counter > 0
    (run_dir,) = run_dirs(in_tmp_cwd)
    header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
    assert len(rows) == 3  # Before training and at the two log points.
    trajs = [int(row[header.index("Diagnostics/TrajsInEval")]) for row in rows]
    assert all(n >= 1 for n in trajs), trajs
    with open(sampler.record_path) as f:
        records = [line.split() for line in f]
    offsets = sorted({int(offset) for offset, _, _ in records})
    assert offsets == ([0, 4] if servers else [0])  # Each server acted for its envs.
    for offset in offsets:
        seen = [digest for o, _, digest in records if int(o) == offset]
        assert len(seen) == runner.n_itr + 1  # AsyncRlEval samples one more batch.
        assert seen[0] == published.digests[0]
        assert set(seen) <= set(published.digests), "acted with unpublished parameters"
        assert len(set(seen)) >= 3, "new parameters did not reach the action server"
    del runner
    assert_released()


# --------------------------------------------------------------------------- shutdown

@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["obtain_samples", "server worker"])
def test_an_exception_stops_every_process(in_tmp_cwd, where):
    """An exception in the sampler process's obtain_samples, or in the env of a worker
    of the second action server, ends the run with an AsyncRlError naming it; no
    process and no shared-memory entry is left."""
    if where == "obtain_samples":
        sampler = cartpole_gpu_sampler(FailingGpuSampler)
        message = "ValueError: boom in obtain_samples"
    else:  # Env 7 (seed 0 + 7) is the last of the second server's envs.
        sampler = AsyncGpuSampler(EnvCls=CrashingEnv, env_kwargs=dict(crash_at=100,
                                                                      crash_rank=3),
                                  batch_T=32, batch_B=8, max_decorrelation_steps=0)
        message = "Action server 1 failed"
    runner = AsyncRl(algo=cartpole_dqn(min_steps_learn=512, replay_ratio=8),
                     agent=cartpole_agent(), sampler=sampler, n_steps=1e5,
                     affinity=async_affinity(SERVERS), seed=0, log_interval_steps=4096)
    with pytest.raises(AsyncRlError) as info, logger_context("fail", 0, "fail", {},
                                                             snapshot_mode="none"):
        runner.train()
    error = str(info.value)
    assert "the sampler process failed" in error
    assert message in error, error
    if where == "server worker":
        assert "RuntimeError: env exploded" in error
    del runner, info
    assert_released()


SCRIPT = textwrap.dedent("""
    import signal
    import sys
    sys.path.insert(0, {tests!r})
    from async_helpers import slow_env
    from test_async_rl import AFFINITY, cartpole_agent, cartpole_dqn
    from rlframe.runners.async_rl import AsyncRl
    from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
    from rlframe.utils.launching.affinity import make_affinity
    from rlframe.utils.logging.context import logger_context

    if __name__ == "__main__":
        # Started in the background, a process inherits Ctrl-C ignored; take it as a user would.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        affinity = make_affinity(**AFFINITY)
        affinity["sampler"] = [dict(master_cpus=[0], workers_cpus=[0, 1]),
                               dict(master_cpus=[1], workers_cpus=[0, 1])]
        sampler = AsyncGpuSampler(EnvCls=slow_env, env_kwargs=dict(id="CartPole-v1",
                                  step_seconds=1e-3), batch_T=32, batch_B=8,
                                  max_decorrelation_steps=0, start_method=sys.argv[1])
        runner = AsyncRl(algo=cartpole_dqn(min_steps_learn=500, replay_ratio=8),
                         agent=cartpole_agent(), sampler=sampler, n_steps=1e7,
                         affinity=affinity, seed=0, log_interval_steps=2048)
        with logger_context("signal", 0, "signal", {{}}, snapshot_mode="none"):
            runner.train()
        print("RUN ENDED NORMALLY", flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum, start_method", [(signal.SIGINT, "fork"),
                                                  (signal.SIGTERM, "forkserver")],
                         ids=["ctrl-c-fork", "sigterm-forkserver"])
def test_ctrl_c_and_sigterm_stop_every_process(tmp_path, signum, start_method):
    """Ctrl-C (SIGINT to the process group) or SIGTERM to the master stops the master,
    the sampler process, both action servers and their four workers."""
    script = tmp_path / "gpu_script.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))))
    process = start_script([sys.executable, str(script), start_method], cwd=tmp_path)
    _, tree = running_tree(process)
    # Copiers, sampler, servers, workers; under forkserver also the sampler's and each
    # server's fork server.
    n_processes = 2 + 1 + 2 + 4 + (3 if start_method == "forkserver" else 0)
    assert wait_for_processes(tree[0], n_processes)
    tree = [tree[0]] + tree[0].children(recursive=True)
    ours = shm_in_use(tree)
    if signum == signal.SIGINT:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    try:
        output, _ = process.communicate(timeout=30.)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=5.)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [p.pid for p in alive]
    assert process.returncode != 0 and "RUN ENDED NORMALLY" not in output
    assert_gone(ours)


def wait_for_processes(root, n, timeout=60.):
    """True once ``root`` has ``n`` descendants besides the resource tracker."""
    deadline = time.time() + timeout
    while time.time() < deadline and root.status() != psutil.STATUS_ZOMBIE:
        children = []
        for child in root.children(recursive=True):
            try:
                if "resource_tracker" not in " ".join(child.cmdline()):
                    children.append(child)
            except psutil.Error:
                continue
        if len(children) >= n:
            return True
        time.sleep(0.2)
    return False
