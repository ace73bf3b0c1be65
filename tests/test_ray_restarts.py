"""RaySampler's fault tolerance: failed workers are restarted with new envs and their
columns re-sampled (env errors, killed actors, a lost node of a two-node cluster), the
limit max_worker_restarts, and Ctrl-C leaving no process behind."""
import csv
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from conftest import start_script, wait_for_line  # noqa: E402
from rlframe.agents.pg.categorical import CategoricalPgAgent  # noqa: E402
from rlframe.algos.pg.a2c import A2C  # noqa: E402
from rlframe.envs.gym import make as gym_make  # noqa: E402
from rlframe.runners.callbacks import Callback  # noqa: E402
from rlframe.runners.minibatch_rl import MinibatchRl  # noqa: E402
from rlframe.samplers.parallel.base import WorkerError  # noqa: E402
from rlframe.samplers.ray import RaySampler  # noqa: E402
from rlframe.samplers.ray.sampler import RESTART_SEED_OFFSET  # noqa: E402
from rlframe.utils.logging import logger  # noqa: E402
from rlframe.utils.logging.context import logger_context  # noqa: E402
from samplers_helpers import (RAY_RESTART_SEED_OFFSET, GreedyAgent,  # noqa: E402
                              MarkerCrashEnv, TreeRecorder, assert_all_gone, descendants,
                              is_ray_process, is_raylet)

ENV = dict(id="CartPole-v1")
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def test_helper_env_uses_the_samplers_seed_offset():
    assert RAY_RESTART_SEED_OFFSET == RESTART_SEED_OFFSET


# ---- a lost node of a two-node cluster, and Ctrl-C (no Ray running in this process) ----

class RemoveNodeAt(Callback):
    """Records where the workers run at start-up, and removes ``node`` from ``cluster``
    after the log row of iteration ``itr``. Every call records the process tree in
    ``tree`` (a TreeRecorder), so that the workers are seen whatever the load."""

    def __init__(self, cluster, node, itr, tree):
        self.cluster, self.node, self.itr, self.tree = cluster, node, itr, tree
        self.nodes_at_start = None
        self.removed = False

    def on_startup(self, runner):
        workers = runner.sampler.workers
        self.nodes_at_start = ray.get([worker.node_id.remote() for worker in workers])
        self.tree.record()

    def on_log(self, runner, itr, diagnostics):
        self.tree.record()
        if itr == self.itr:
            assert diagnostics["Diagnostics/WorkerRestarts"] == 0
            self.cluster.remove_node(self.node)
            self.removed = True


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_completes_when_a_node_is_lost(in_tmp_cwd):
    assert not ray.is_initialized()
    n_itr = 6
    with TreeRecorder() as tree:
        cluster = Cluster(initialize_head=True,
                          head_node_args=dict(num_cpus=2, include_dashboard=False))
        try:
            # Two one-CPU workers SPREAD: one on each node; the head has room for the lost one.
            node = cluster.add_node(num_cpus=1)
            head_id, lost_id = cluster.head_node.node_id, node.node_id
            sampler = RaySampler(EnvCls=gym_make, env_kwargs=ENV, batch_T=16, batch_B=2,
                                 n_workers=2, placement_strategy="SPREAD",
                                 ray_address=cluster.address, max_decorrelation_steps=0)
            remover = RemoveNodeAt(cluster, node, itr=1, tree=tree)
            runner = MinibatchRl(algo=A2C(), agent=CategoricalPgAgent(), sampler=sampler,
                                 n_steps=n_itr * 32, log_interval_steps=32, seed=0,
                                 affinity=dict(master_torch_threads=1), callbacks=[remover])
            with pytest.warns(RuntimeWarning, match=f"worker [01] on node {lost_id}"):
                with logger_context("restarts", 0, "restarts", {}, snapshot_mode="none"):
                    runner.train()
                    run_dir = logger.get_snapshot_dir()
            assert sampler.workers == []  # shut down with the run
            assert ray.is_initialized()  # the cluster's Ray is not the sampler's to stop
        finally:
            ray.shutdown()
            cluster.shutdown()
    assert remover.removed
    assert sorted(remover.nodes_at_start) == sorted([head_id, lost_id])
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["Diagnostics/Iteration"]) for r in rows] == list(range(n_itr))
    restarts = [int(float(r["Diagnostics/WorkerRestarts"])) for r in rows]
    assert restarts[:2] == [0, 0] and restarts[-1] == 1, restarts
    # Full command lines: a venv's path can be long enough to push "raylet" past any cut.
    ray_seen = tree.ray_commands()
    # Two raylets, the GCS and three sampler workers (the restarted one too) at least.
    assert sum(is_raylet(cmd) for cmd in ray_seen) == 2, ray_seen
    # A process read while it exits shows only its name, cut to 15 characters.
    assert sum("ray::RaySampler" in cmd for cmd in ray_seen) >= 3, ray_seen
    assert_all_gone(tree.processes, timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_c_stops_the_workers_and_the_samplers_own_ray(tmp_path):
    proc = start_script([sys.executable, os.path.join(TESTS_DIR, "ray_ctrl_c_script.py")],
                        cwd=tmp_path)
    try:
        with TreeRecorder(proc.pid) as tree:
            wait_for_line(proc, "TRAINING STARTED", timeout=120)
            time.sleep(1.)  # Ctrl-C lands mid-iteration, not at its first line.
            tree.record()
            os.killpg(proc.pid, signal.SIGINT)  # What a terminal's Ctrl-C does.
            start = time.time()
            output, _ = proc.communicate(timeout=30)
            exit_time = time.time() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert exit_time < 30
    assert "KeyboardInterrupt" in output, output[-3000:]
    assert "RaySampler shut down." in output, output[-3000:]
    ray_seen = tree.ray_commands()
    assert any(is_raylet(cmd) for cmd in ray_seen), ray_seen  # its Ray
    assert sum("ray::RaySampler" in cmd for cmd in ray_seen) >= 2, ray_seen
    assert_all_gone(tree.processes, timeout=15)


# ---- restarts on this process's local Ray -------------------------------------------

@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the samplers below; Ray's workers import the test helpers."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(
            [TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        seen = [p for p in descendants() if is_ray_process(p)]
        yield
        seen += [p for p in descendants() if is_ray_process(p)]
        ray.shutdown()
    assert_all_gone(seen + [p for p in descendants() if is_ray_process(p)])


def make_sampler(marker, max_worker_restarts, once=True, step_sleep=0., batch_T=20, **kwargs):
    # batch_B=4 on two workers: the env seeded 7 + 2 (crash_seed=9) is worker 1's first.
    return RaySampler(EnvCls=MarkerCrashEnv,
                      env_kwargs=dict(marker=str(marker), crash_at=5, crash_seed=9, once=once,
                                      step_sleep=step_sleep),
                      batch_T=batch_T, batch_B=4, max_decorrelation_steps=0, n_workers=2,
                      max_worker_restarts=max_worker_restarts, **kwargs)


def assert_valid_batch(samples):
    obs = samples.env.observation.numpy()
    assert np.isfinite(obs).all()
    assert (np.abs(obs[..., 2]) < 0.5).all()  # pole angles of running CartPoles
    assert set(np.unique(samples.env.reward.numpy())) <= {1.}


@pytest.mark.slow
def test_env_error_restarts_the_worker_with_new_envs(local_ray, tmp_path):
    marker = tmp_path / "crash"
    marker.touch()
    sampler = make_sampler(marker, max_worker_restarts=1)
    sampler.initialize(GreedyAgent(), seed=7)
    try:
        first_nodes = list(sampler.worker_nodes)
        sampler.samples_np.env.observation[:] = np.nan  # columns not re-sampled stay NaN
        with pytest.warns(RuntimeWarning, match="worker 1 on node .*env exploded"):
            samples, _ = sampler.obtain_samples(0)
        assert not marker.exists()
        assert sampler.worker_restarts == 1
        assert sampler.diagnostics() == {"WorkerRestarts": 1}
        assert_valid_batch(samples)
        # Worker 1's new envs are seeded with the restart offset: its first column starts
        # from CartPole's reset with that seed.
        import gymnasium as gym
        reset_obs, _ = gym.make("CartPole-v1").reset(seed=7 + RESTART_SEED_OFFSET + 2)
        np.testing.assert_allclose(samples.env.observation[0, 2].numpy(), reset_obs)
        samples, _ = sampler.obtain_samples(1)  # sampling goes on
        assert_valid_batch(samples)
        assert sampler.worker_restarts == 1
        assert len(sampler.worker_nodes) == 2 and sampler.worker_nodes[0] == first_nodes[0]
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_past_the_limit_the_workers_traceback_is_raised(local_ray, tmp_path):
    marker = tmp_path / "crash"
    marker.touch()
    sampler = make_sampler(marker, max_worker_restarts=2, once=False)  # crashes every time
    sampler.initialize(GreedyAgent(), seed=7)
    with pytest.warns(RuntimeWarning), pytest.raises(WorkerError) as info:
        sampler.obtain_samples(0)
    message = str(info.value)
    assert "worker 1" in message and "max_worker_restarts=2" in message
    assert "RuntimeError: env exploded" in message
    assert 'samplers_helpers.py", line' in message and "in step" in message  # the traceback
    assert "\x1b[" not in message  # no terminal colour codes
    assert sampler.worker_restarts == 2
    assert sampler.workers == []
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


@pytest.mark.slow
def test_killed_worker_is_restarted_between_and_during_iterations(local_ray, tmp_path):
    # No marker: the env never crashes; 2 ms per step makes a batch last ~0.5 s or more.
    sampler = make_sampler(tmp_path / "absent", max_worker_restarts=2, step_sleep=0.002,
                           batch_T=200)
    sampler.initialize(GreedyAgent(), seed=7)
    try:
        sampler.obtain_samples(0)
        ray.kill(sampler.workers[1])
        with pytest.warns(RuntimeWarning, match="worker 1"):
            samples, _ = sampler.obtain_samples(1)
        assert sampler.worker_restarts == 1
        assert_valid_batch(samples)

        sampler.samples_np.env.observation[:] = np.nan
        victim = sampler.workers[0]
        timer = threading.Timer(0.2, ray.kill, args=(victim,))
        timer.start()
        start = time.time()
        with pytest.warns(RuntimeWarning, match="worker 0"):
            samples, _ = sampler.obtain_samples(2)
        timer.join()
        assert time.time() - start > 0.2  # the kill landed during the batch
        assert sampler.worker_restarts == 2
        assert sampler.workers[0] is not victim
        assert_valid_batch(samples)
    finally:
        sampler.shutdown()


@pytest.mark.slow
def test_evaluation_is_redone_by_a_restarted_worker(local_ray, tmp_path):
    sampler = make_sampler(tmp_path / "absent", max_worker_restarts=1, eval_n_envs=2,
                           eval_env_kwargs=dict(marker=str(tmp_path / "absent")),
                           eval_max_steps=2000, eval_max_trajectories=4)
    sampler.initialize(CategoricalPgAgent(), seed=7)
    try:
        ray.kill(sampler.workers[1])
        with pytest.warns(RuntimeWarning, match="worker 1"):
            traj_infos = sampler.evaluate_agent(0)
        assert len(traj_infos) >= 4 and all(info.Length > 0 for info in traj_infos)
        assert sampler.worker_restarts == 1
    finally:
        sampler.shutdown()
