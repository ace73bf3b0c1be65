"""SyncRl with a RaySampler in each rank: every rank starts a local Ray of its own,
samples its own envs, trains the same parameters, and stops its Ray at the end,
also when another rank fails."""
import json
import os
import time

import psutil
import pytest
import torch
import torch.distributed as dist

ray = pytest.importorskip("ray")

from rlframe.agents.pg.categorical import CategoricalPgAgent  # noqa: E402
from rlframe.algos.pg.ppo import PPO  # noqa: E402
from rlframe.envs.gym import make as gym_make  # noqa: E402
from rlframe.runners.callbacks import Callback  # noqa: E402
from rlframe.runners.sync_rl import SyncRl, SyncRlError  # noqa: E402
from rlframe.samplers.ray import RaySampler  # noqa: E402
from rlframe.utils.logging import logger  # noqa: E402
from rlframe.utils.logging.context import logger_context  # noqa: E402
from conftest import long_lived_helper, warm_python_interpreter  # noqa: E402
from test_sync_rl import descendants, read_progress  # noqa: E402

# No workers_cpus: Ray places each rank's workers.
TWO_RANKS = [dict(master_torch_threads=1), dict(master_torch_threads=1)]
T, B = 16, 4
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def ray_sampler():
    return RaySampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=T,
                      batch_B=B, max_decorrelation_steps=0, n_workers=2)


class RecordingPPO(PPO):
    """PPO that saves each rank's first batch of observations [T, B, 4] to ``out_dir``."""

    def __init__(self, out_dir, fail_at=None, **kwargs):
        super().__init__(**kwargs)
        self.out_dir = out_dir
        self.fail_at = fail_at

    def optimize_agent(self, itr, samples):
        rank = dist.get_rank()
        if itr == 0:
            torch.save(samples.env.observation.clone(),
                       os.path.join(self.out_dir, f"obs_rank{rank}.pt"))
        if itr == self.fail_at and rank == 1:
            raise ValueError("boom in rank 1")
        return super().optimize_agent(itr, samples)


def recording_ppo(out_dir, fail_at=None):
    """test_sync_rl's CartPole PPO settings."""
    return RecordingPPO(out_dir, fail_at=fail_at, discount=0.98, learning_rate=1e-3,
                        gae_lambda=0.95, minibatches=4, epochs=8, ratio_clip=0.2,
                        value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
                        normalize_advantage=True)


class SeeProcesses(Callback):
    """On rank 0: this process's descendants at iteration 1 (rank 1, both Rays' daemons
    and actors), as ``(pid, create_time, cmdline)``, but for the long-lived helpers that
    serve the test process for its whole life."""

    def __init__(self):
        self.seen = []

    def on_iteration_end(self, runner, itr, samples, opt_info):
        if itr != 1:
            return
        for p in psutil.Process().children(recursive=True):
            try:
                if not long_lived_helper(p):
                    self.seen.append((p.pid, p.create_time(), " ".join(p.cmdline())))
            except psutil.Error:
                pass


def train_two_ranks(out_dir, fail_at=None, start_method=None, n_itr=4):
    """A 2-rank SyncRl run of PPO on CartPole, a RaySampler in each rank; returns what
    the test checks (the error's message, if a rank failed)."""
    see = SeeProcesses()
    runner = SyncRl(algo=recording_ppo(out_dir, fail_at=fail_at), agent=CategoricalPgAgent(),
                    sampler=ray_sampler(), n_steps=n_itr * T * B * 2,
                    log_interval_steps=2 * T * B * 2, affinity=TWO_RANKS, seed=11,
                    callbacks=[see], start_method=start_method)
    error = None
    with logger_context("sync_ray", 0, "sync_ray", {}, snapshot_mode="none"):
        run_dir = logger.get_snapshot_dir()
        try:
            runner.train()
        except SyncRlError as e:
            error = str(e)
    return dict(error=error, seen=see.seen, run_dir=run_dir, global_B=runner.sampler.global_B,
                digests=runner.rank_digests, ray_initialized=ray.is_initialized(),
                dist_initialized=dist.is_initialized())


SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from test_sync_ray import train_two_ranks
print(json.dumps(train_two_ranks({out_dir!r}, fail_at={fail_at!r})))
"""


def run_script(out_dir, fail_at=None):
    """``train_two_ranks`` in a new process of the warm interpreter (Ray never ran there
    before: ranks 1.. start by fork, the default); returns its result."""
    script = os.path.join(out_dir, "train_two_ranks.py")
    with open(script, "w") as f:
        f.write(SCRIPT.format(tests=TESTS_DIR, out_dir=str(out_dir), fail_at=fail_at))
    result = warm_python_interpreter().run(script, [], out_dir, timeout=200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_all_gone(seen, timeout=20.):
    """None of the processes seen during the run (by pid and start time) is still
    running, wherever it was reparented to. Multiprocessing's resource tracker and
    forkserver serve the whole interpreter and end with it, not with a run."""
    deadline = time.time() + timeout
    while True:
        alive = []
        for pid, created, cmd in seen:
            if "resource_tracker" in cmd or "forkserver" in cmd:
                continue
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(cmd)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() > deadline:
            break
        time.sleep(0.3)
    assert not alive, alive


def ray_actors(seen):
    return [cmd for _, _, cmd in seen if "RaySamplerWorker" in cmd]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_ranks_sample_with_their_own_ray_samplers(in_tmp_cwd):
    """Both ranks sample through their own Ray actors (4 in all), with different env
    seeds; CumSteps counts both ranks; the ranks' parameters stay equal; nothing of
    either Ray is left once train() returns."""
    out = run_script(in_tmp_cwd)
    assert out["error"] is None, out["error"]
    assert len(ray_actors(out["seen"])) == 4, out["seen"]  # 2 workers in each rank's Ray.
    for daemon in ("gcs_server", "raylet"):  # Each rank started a Ray of its own.
        assert sum(daemon in cmd for _, _, cmd in out["seen"]) == 2, out["seen"]
    rows = read_progress(out["run_dir"])
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [2 * T * B * 2, 4 * T * B * 2]
    assert out["global_B"] == 2 * B
    assert len(out["digests"]) == 2 and out["digests"][0] == out["digests"][1]
    obs = [torch.load(in_tmp_cwd / f"obs_rank{r}.pt") for r in (0, 1)]
    assert obs[0].shape == obs[1].shape == (T, B, 4)
    # Seeds differ over ranks and over each rank's envs: no two columns start alike.
    first = torch.cat([obs[0][0], obs[1][0]])
    assert len({tuple(row.tolist()) for row in first}) == 2 * B
    assert not out["ray_initialized"] and not out["dist_initialized"]
    assert_all_gone(out["seen"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_failing_rank_stops_both_rays(in_tmp_cwd):
    """Rank 1 raises mid-run: the run ends with SyncRlError naming it, and neither
    rank's Ray (daemons and actors) outlives it."""
    out = run_script(in_tmp_cwd, fail_at=2)
    assert out["error"] is not None and "rank 1 failed" in out["error"]
    assert "boom in rank 1" in out["error"]
    assert len(ray_actors(out["seen"])) == 4, out["seen"]
    assert not out["ray_initialized"] and not out["dist_initialized"]
    assert_all_gone(out["seen"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_forkserver_ranks_after_ray_ran_in_this_process(in_tmp_cwd):
    """A process that has run Ray before cannot fork a rank that starts Ray again (the
    forked Ray client hangs); ranks started by forkserver (or spawn) can."""
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    ray.shutdown()
    before = descendants()
    out = train_two_ranks(str(in_tmp_cwd), start_method="forkserver", n_itr=2)
    assert out["error"] is None, out["error"]
    assert len(ray_actors(out["seen"])) == 4, out["seen"]
    assert out["digests"][0] == out["digests"][1]
    assert not ray.is_initialized()
    assert_all_gone(out["seen"])
    now = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                now.append((p.pid, p.create_time(), " ".join(p.cmdline())))
        except psutil.Error:
            pass
    assert_all_gone(now, timeout=0.)  # Nothing started since iteration 1 either.
