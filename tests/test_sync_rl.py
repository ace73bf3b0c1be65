"""SyncRl / SyncRlEval: data-parallel training over 2 CPU ranks (gloo), under
`python script.py` and under torchrun, with failures, signals and bad input."""
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.distributed as dist
from conftest import run_dirs, start_script, wait_for_line
from shm_helpers import assert_no_new_shm, shm_entries

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.runners.callbacks import StopAtReturn
from rlframe.runners.sync_rl import SyncRl, SyncRlError, SyncRlEval
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.distributed import state_digest
from rlframe.utils.launching.affinity import make_sync_affinity
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "example_sync_ppo.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# torchrun's own logs go to --log-dir, by default a torchelastic_* folder it makes in the
# temporary directory and leaves there; the tests give it one in their own folder.
TORCHRUN_LOGS = ["--log-dir", "torchrun_logs"]
# No pinning: the test machine's cores are shared with the test runner.
TWO_RANKS = [dict(master_torch_threads=1, workers_cpus=[0]),
             dict(master_torch_threads=1, workers_cpus=[0])]


def cartpole_sampler(batch_T=128, batch_B=4, eval_n_envs=4, SamplerCls=SerialSampler):
    evaluation = dict(eval_env_kwargs=dict(id="CartPole-v1"), eval_n_envs=eval_n_envs,
                      eval_max_steps=eval_n_envs * 500) if eval_n_envs else {}
    return SamplerCls(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=batch_T,
                      batch_B=batch_B, max_decorrelation_steps=0, **evaluation)


def cartpole_ppo():
    return PPO(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, minibatches=4, epochs=8,
               ratio_clip=0.2, value_loss_coeff=0.5, entropy_loss_coeff=0.,
               clip_grad_norm=10., normalize_advantage=True)


def read_progress(run_dir):
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def descendants():
    return {c.pid for c in psutil.Process().children(recursive=True)}


def no_new_descendants_left(before, timeout=10.):
    """No process started during the test (a rank, a sampler worker) is still running;
    processes that other tests left (e.g. multiprocessing's resource tracker) do not count."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        alive = []
        for pid in descendants() - before:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def shm_before():
    return shm_entries()


# --------------------------------------------------------------------------- learning

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_sync_eval_two_ranks_learns_cartpole(in_tmp_cwd, shm_before):
    """2 ranks x SerialSampler: eval return >= 475 within 150k total steps; every
    rank's samples counted in CumSteps; identical parameters on both ranks."""
    before = descendants()
    stop = StopAtReturn(475)
    runner = SyncRlEval(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                        sampler=cartpole_sampler(), n_steps=153600, log_interval_steps=10240,
                        affinity=TWO_RANKS, seed=0, callbacks=[stop])
    with logger_context("sync", 0, "sync", {}, snapshot_mode="last"):
        runner.train()
        run_dir = logger.get_snapshot_dir()
    assert runner.world_size == 2
    assert runner.itr_batch_size == 2 * 128 * 4
    assert runner.log_interval_itrs == 10240 // 1024
    rows = read_progress(run_dir)
    returns = [float(r["ReturnAverage"]) for r in rows]
    steps = [int(r["Diagnostics/CumSteps"]) for r in rows]
    itrs = [int(r["Diagnostics/Iteration"]) for r in rows]
    assert returns[0] < 100
    assert max(returns) >= 475 and steps[returns.index(max(returns))] <= 150e3, returns
    # CumSteps counts both ranks: (itr + 1) x 128 x 4 x 2.
    assert all(s == (i + 1) * 1024 for s, i in zip(steps[1:], itrs[1:]))
    # The other rank's training trajectories reach rank 0 (CartPole episodes: >= 9 steps).
    cum_trajs = int(rows[1]["Diagnostics/CumCompletedTrajs"])
    assert cum_trajs * 500 >= 10240
    assert len(runner.rank_digests) == 2 and runner.rank_digests[0] == runner.rank_digests[1]
    assert state_digest(runner.agent.state_dict()) == runner.rank_digests[0]
    assert len(run_dirs(in_tmp_cwd)) == 1
    assert not dist.is_initialized()
    assert no_new_descendants_left(before)
    assert_no_new_shm(shm_before)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dqn_sync_two_ranks_learns_cartpole(in_tmp_cwd):
    """Off-policy: each rank its own replay, gradients averaged; the training
    episodes of both ranks (online returns) reach 150 within 40k total steps."""
    algo = DQN(discount=0.99, batch_size=64, min_steps_learn=1000, replay_size=int(2e4),
               replay_ratio=16, target_update_interval=96, n_step_return=3,
               learning_rate=2.3e-3, delta_clip=1., eps_steps=4000, double_dqn=True)
    agent = DqnAgent(eps_final=0.04, eps_eval=0., model_kwargs=dict(hidden_sizes=[128, 128]))
    sampler = cartpole_sampler(batch_T=32, batch_B=4, eval_n_envs=0)
    runner = SyncRl(algo=algo, agent=agent, sampler=sampler, n_steps=40960,
                    log_interval_steps=4096, affinity=TWO_RANKS, seed=3, log_traj_window=20,
                    callbacks=[StopAtReturn(150)])
    with logger_context("sync_dqn", 0, "sync_dqn", {}, snapshot_mode="none"):
        runner.train()
        run_dir = logger.get_snapshot_dir()
    returns = [float(r["ReturnAverage"]) for r in read_progress(run_dir)]
    assert max(returns) >= 150, returns
    assert runner.rank_digests[0] == runner.rank_digests[1]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sac_sync_keeps_ranks_identical(in_tmp_cwd):
    """Twin critics, policy and the learned temperature (outside DDP, averaged by
    hand) stay bit-identical over ranks; strong scaling halves the per-rank batch."""
    algo = SAC(batch_size=64, min_steps_learn=200, replay_size=5000, replay_ratio=64)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"), batch_T=1,
                            batch_B=4, max_decorrelation_steps=0)
    runner = SyncRl(algo=algo, agent=SacAgent(), sampler=sampler, n_steps=600,
                    log_interval_steps=200, affinity=TWO_RANKS, seed=5, batch_scaling="strong")
    with logger_context("sync_sac", 0, "sync_sac", {}, snapshot_mode="none"):
        runner.train()
    assert runner.sampler.batch_spec.B == 2 and algo.batch_size == 32
    # Each rank learns from its 200th step (iteration 100 of 150), 4 updates an iteration.
    assert algo.update_counter == 50 * 4
    assert runner.rank_digests[0] == runner.rank_digests[1]
    assert float(algo.log_alpha.detach()) != 0.  # The temperature did train.


def off_policy_cases():
    from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
    from rlframe.agents.dqn.r2d1_agent import R2d1Agent
    from rlframe.agents.qpg.ddpg_agent import DdpgAgent
    from rlframe.agents.qpg.td3_agent import Td3Agent
    from rlframe.algos.dqn.cat_dqn import CategoricalDQN
    from rlframe.algos.dqn.r2d1 import R2D1
    from rlframe.algos.qpg.ddpg import DDPG
    from rlframe.algos.qpg.td3 import TD3
    from rlframe.envs.wrappers import make_velocity_hidden_cartpole
    pendulum = dict(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"))
    return {
        "catdqn": (lambda: CategoricalDQN(batch_size=32, min_steps_learn=64, replay_size=1000,
                                          replay_ratio=8, target_update_interval=4),
                   CatDqnAgent, dict(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"))),
        "r2d1": (lambda: R2D1(batch_T=8, batch_B=4, warmup_T=4, store_rnn_state_interval=4,
                              min_steps_learn=64,
                              replay_size=800, replay_ratio=2, n_step_return=2,
                              target_update_interval=3, eps_steps=200),
                 lambda: R2d1Agent(model_kwargs=dict(lstm_size=16, head_size=16)),
                 dict(EnvCls=make_velocity_hidden_cartpole, env_kwargs={})),
        "ddpg": (lambda: DDPG(batch_size=32, min_steps_learn=64, replay_size=1000,
                              replay_ratio=32), DdpgAgent, pendulum),
        "td3": (lambda: TD3(batch_size=32, min_steps_learn=64, replay_size=1000,
                            replay_ratio=32), Td3Agent, pendulum),
    }


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["catdqn", "r2d1", "ddpg", "td3"])
def test_off_policy_algorithms_train_in_sync(name, in_tmp_cwd):
    """Every model of the algorithm (critics, target networks, recurrent state
    models) trains through DDP: the ranks end bit-identical."""
    make_algo, make_agent, env = off_policy_cases()[name]
    algo = make_algo()
    sampler = SerialSampler(**env, batch_T=8, batch_B=2, max_decorrelation_steps=0)
    runner = SyncRl(algo=algo, agent=make_agent(), sampler=sampler, n_steps=8 * 2 * 2 * 12,
                    log_interval_steps=8 * 2 * 2 * 6, affinity=TWO_RANKS, seed=7)
    with logger_context("sync_" + name, 0, name, {}, snapshot_mode="none"):
        runner.train()
    assert algo.update_counter > 0
    assert runner.rank_digests[0] == runner.rank_digests[1]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ppo_target_kl_stops_every_rank_at_the_same_minibatch(in_tmp_cwd):
    """Each rank measures the KL on its own samples; their mean decides where the
    iteration's updates end, so no rank waits in DDP's reduction for one that stopped."""
    algo = PPO(discount=0.98, learning_rate=3e-3, minibatches=4, epochs=8, target_kl=0.002)
    runner = SyncRl(algo=algo, agent=CategoricalPgAgent(),
                    sampler=cartpole_sampler(batch_T=64, batch_B=2, eval_n_envs=0),
                    n_steps=64 * 2 * 2 * 8, log_interval_steps=64 * 2 * 2 * 4,
                    affinity=TWO_RANKS, seed=3, pg_timeout=30)  # Ranks that disagree: fail.
    with logger_context("sync_kl", 0, "sync_kl", {}, snapshot_mode="none"):
        runner.train()
    assert 0 < algo.update_counter < 8 * 4 * 8  # The KL stopped some iterations early.
    assert runner.rank_digests[0] == runner.rank_digests[1]


# --------------------------------------------------------------------------- failures

class FailingPPO(PPO):
    """PPO whose rank 1 raises at iteration 3."""

    def optimize_agent(self, itr, samples):
        if itr == 3 and dist.get_rank() == 1:
            raise ValueError("boom in rank 1")
        return super().optimize_agent(itr, samples)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_exception_in_a_rank_is_reported_with_its_traceback(in_tmp_cwd, shm_before):
    before = descendants()
    runner = SyncRl(algo=FailingPPO(), agent=CategoricalPgAgent(),
                    sampler=cartpole_sampler(batch_T=16, eval_n_envs=0), n_steps=128000,
                    log_interval_steps=1280, affinity=TWO_RANKS, seed=0)
    start = time.time()
    with logger_context("sync_fail", 0, "sync_fail", {}, snapshot_mode="last"):
        with pytest.raises(SyncRlError, match="rank 1 failed") as info:
            runner.train()
    assert "boom in rank 1" in str(info.value) and "ValueError" in str(info.value)
    assert time.time() - start < 60
    assert not dist.is_initialized()
    assert no_new_descendants_left(before)
    assert_no_new_shm(shm_before)


THREADS_AFTER_SHUTDOWN = """
import json, os, sys
sys.path.insert(0, {tests!r})
from test_sync_rl import CategoricalPgAgent, SyncRl, TWO_RANKS, cartpole_ppo, cartpole_sampler
from rlframe.runners.callbacks import Callback
from rlframe.utils.logging.context import logger_context

def thread_names():
    tasks = os.listdir("/proc/self/task")
    return [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in tasks]

class SeeThreads(Callback):
    seen = []
    def on_log(self, runner, itr, diagnostics):
        self.seen.extend(thread_names())

runner = SyncRl(algo=cartpole_ppo(), agent=CategoricalPgAgent(), seed=0,
                sampler=cartpole_sampler(batch_T=16, eval_n_envs=0), n_steps=256,
                log_interval_steps=128, affinity=TWO_RANKS, callbacks=[SeeThreads()])
with logger_context("sync_threads", 0, "sync_threads", {{}}):
    runner.train()
print(json.dumps(dict(during=SeeThreads.seen, after=thread_names())))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_no_gloo_threads_outlive_the_run(in_tmp_cwd):
    """The process group and its gloo threads are gone once train() returns (in a new
    interpreter, where DistributedDataParallel's imports come after the group exists):
    threads left to the interpreter's exit now and then abort the process."""
    code = THREADS_AFTER_SHUTDOWN.format(tests=os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], cwd=in_tmp_cwd, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    threads = json.loads(result.stdout.strip().splitlines()[-1])
    assert any(name.startswith("pt_gloo") for name in threads["during"]), threads
    assert not [name for name in threads["after"]
                if name.startswith(("pt_gloo", "gloo", "pt_tcpstore"))], threads


def process_tree(pid):
    root = psutil.Process(pid)
    return [root] + root.children(recursive=True)


def assert_tree_gone(processes, timeout=10.):
    gone, alive = psutil.wait_procs(processes, timeout=timeout)
    for p in alive:
        p.kill()
    assert not alive, [p.pid for p in alive]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_killed_rank_stops_the_others_with_its_name(in_tmp_cwd, shm_before):
    process = start_script([sys.executable, EXAMPLE, "--n_steps", "1e7", "--cpu_per_rank",
                            "1", "--log_dir", "killed"], cwd=in_tmp_cwd)
    try:
        wait_for_line(process, "Optimizing over")
        tree = process_tree(process.pid)
        rank1 = [p for p in tree[1:] if "SyncRl" in " ".join(p.cmdline()) or p.ppid() ==
                 process.pid]
        assert rank1, [p.cmdline() for p in tree]
        time.sleep(1.)
        killed_at = time.time()
        rank1[0].send_signal(signal.SIGKILL)
        output, _ = process.communicate(timeout=60)
        assert time.time() - killed_at < 60
        assert process.returncode != 0
        assert "SyncRlError" in output and "rank 1" in output and "signal 9" in output, \
            output[-3000:]
        assert_tree_gone(tree)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert_no_new_shm(shm_before)


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_every_rank(in_tmp_cwd, shm_before, signum):
    """SIGINT to the whole process group (Ctrl-C in a terminal) or SIGTERM to
    rank 0 alone: every rank and sampler worker exits."""
    process = start_script([sys.executable, EXAMPLE, "--n_steps", "1e7", "--sampler", "cpu",
                            "--cpu_per_rank", "1", "--log_dir", "signals"], cwd=in_tmp_cwd)
    try:
        wait_for_line(process, "Optimizing over")
        tree = process_tree(process.pid)
        assert len(tree) >= 4  # rank 0, rank 1, and a sampler worker in each.
        if signum == signal.SIGINT:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        process.communicate(timeout=60)
        assert process.returncode != 0
        assert_tree_gone(tree)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert_no_new_shm(shm_before)


# --------------------------------------------------------------------------- torchrun

def torchrun_env():
    env = dict(os.environ)
    env.pop("RLFRAME_DATA_DIR", None)
    env["OMP_NUM_THREADS"] = "1"
    # Two "machines" on this one share its cores, each rank with the torch threads of a
    # whole machine: waiting OpenMP threads sleep instead of spinning on the other's cores.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_torchrun_standalone_two_processes(in_tmp_cwd):
    result = subprocess.run(TORCHRUN + TORCHRUN_LOGS + ["--standalone", "--nproc_per_node=2",
                                                        EXAMPLE, "--n_steps", "10240",
                                                        "--log_dir", "standalone"],
                            cwd=in_tmp_cwd, capture_output=True, text=True, timeout=180,
                            env=torchrun_env())
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    dirs = run_dirs(in_tmp_cwd)
    assert len(dirs) == 1
    rows = read_progress(dirs[0])
    assert int(rows[-1]["Diagnostics/CumSteps"]) == 10240  # 2 processes x 512 x 10 itrs
    assert "Joined torchrun's process group: rank 0 of 2" in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_torchrun_two_nodes_over_loopback(in_tmp_cwd):
    with socket.socket() as sock:  # A port the OS hands out, off SyncRl's own sequence.
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    common = ["--nnodes=2", "--nproc_per_node=1", "--master_addr=127.0.0.1",
              f"--master_port={port}"]
    script = [EXAMPLE, "--n_steps", "10240", "--log_dir", "two_nodes"]
    nodes = [subprocess.Popen(TORCHRUN + TORCHRUN_LOGS + common + [f"--node_rank={r}"]
                              + script,
                              cwd=in_tmp_cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=torchrun_env())
             for r in (1, 0)]
    try:
        outputs = [node.communicate(timeout=180)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    dirs = run_dirs(in_tmp_cwd)
    assert len(dirs) == 1
    assert int(read_progress(dirs[0])[-1]["Diagnostics/CumSteps"]) == 10240


def test_torchrun_affinity_is_indexed_by_local_rank(monkeypatch, in_tmp_cwd):
    for name, value in dict(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT="29999").items():
        monkeypatch.setenv(name, value)
    affinity = [dict(master_torch_threads=1), dict(master_torch_threads=2)]
    runner = SyncRl(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                    sampler=cartpole_sampler(eval_n_envs=0), n_steps=1e4, affinity=affinity)
    assert (runner.rank, runner.world_size) == (3, 4)
    assert runner.affinity == dict(master_torch_threads=2)
    one = SyncRl(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                 sampler=cartpole_sampler(eval_n_envs=0), n_steps=1e4,
                 affinity=dict(master_torch_threads=1))
    assert one.affinity == dict(master_torch_threads=1)
    # Ranks other than 0 write no run directory.
    with logger_context("torchrun_rank3", 0, "x", {}) as run_dir:
        assert run_dir is None
        logger.log("not written anywhere")
    assert run_dirs(in_tmp_cwd) == []


# --------------------------------------------------------------------------- bad input

def make_runner(**kwargs):
    defaults = dict(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                    sampler=cartpole_sampler(eval_n_envs=0), n_steps=1e4,
                    affinity=TWO_RANKS)
    defaults.update(kwargs)
    return SyncRl(**defaults)


def test_bad_input_is_reported_before_any_run_directory(in_tmp_cwd):
    with pytest.raises(TypeError, match="list of affinity dicts, one per rank"):
        make_runner(affinity=dict(master_torch_threads=1))
    with pytest.raises(ValueError, match=r"affinity\[1\] has keys .*missing in affinity\[1\]: "
                                         r"\['workers_cpus'\]"):
        make_runner(affinity=[dict(master_torch_threads=1, workers_cpus=[0]),
                              dict(master_torch_threads=1)])
    with pytest.raises(ValueError, match=r"batch_B=5 over world_size=2 ranks: it must be a "
                                         r"multiple of 2"):
        make_runner(sampler=cartpole_sampler(batch_B=5, eval_n_envs=0), batch_scaling="strong")
    with pytest.raises(ValueError, match=r"DQN's batch_size=33 over world_size=2"):
        make_runner(algo=DQN(batch_size=33, replay_size=1000), agent=DqnAgent(),
                    batch_scaling="strong")
    with pytest.raises(ValueError, match="batch_scaling must be one of"):
        make_runner(batch_scaling="linear")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"affinity\[0\]\['cuda_idx'\]=0 asks for a GPU"):
            make_runner(affinity=[dict(cuda_idx=0), dict(cuda_idx=1)])
    with pytest.raises(ValueError, match="either every rank has a cuda_idx or none has"):
        make_runner(affinity=[dict(cuda_idx=None), dict(cuda_idx=1)])
    with pytest.raises(ValueError, match="start_method must be one of"):
        make_runner(start_method="thread")
    assert not os.path.exists(os.path.join(in_tmp_cwd, "data"))


def test_unpicklable_runner_under_spawn_is_reported_up_front(in_tmp_cwd):
    sampler = SerialSampler(EnvCls=lambda **kw: gym_make(**kw), env_kwargs=dict(id="CartPole-v1"),
                            batch_T=8, batch_B=2)
    with pytest.raises(TypeError, match="starts ranks 1.. with 'spawn'.*does not pickle"):
        make_runner(sampler=sampler, start_method="spawn")


# --------------------------------------------------------------------------- affinity

def test_make_sync_affinity_splits_cores_per_rank():
    affinity = make_sync_affinity(n_rank=2, n_cpu_core=4, hyperthread_offset=0)
    assert [a["master_cpus"] for a in affinity] == [(0, 1), (2, 3)]
    assert [a["workers_cpus"] for a in affinity] == [((0,), (1,)), ((2,), (3,))]
    assert all(a["master_torch_threads"] == 2 for a in affinity)
    ht = make_sync_affinity(n_rank=2, n_cpu_core=4, hyperthread_offset=4, cpu_per_rank=1,
                            run_slot=1)
    assert [a["master_cpus"] for a in ht] == [(2, 6), (3, 7)]
    with pytest.raises(ValueError, match="run_slot=2 is not available"):
        make_sync_affinity(n_rank=2, n_cpu_core=4, hyperthread_offset=0, cpu_per_rank=1,
                           run_slot=2)
    with pytest.raises(ValueError, match="n_rank=3 ranks need at least one core each"):
        make_sync_affinity(n_rank=3, n_cpu_core=2, hyperthread_offset=0)


@pytest.mark.slow
def test_cpu_sampler_ranks_use_global_env_ranks(in_tmp_cwd):
    """A CpuSampler in each rank: envs are numbered over all ranks (rank 1's first
    env is global env B), so epsilon schedules and seeds do not repeat."""
    runner = SyncRl(algo=cartpole_ppo(), agent=CategoricalPgAgent(),
                    sampler=cartpole_sampler(batch_T=16, eval_n_envs=0,
                                             SamplerCls=CpuSampler),
                    n_steps=16 * 4 * 2 * 2, log_interval_steps=16 * 4 * 2,
                    affinity=make_sync_affinity(n_rank=2, n_cpu_core=2, hyperthread_offset=0,
                                                set_affinity=False), seed=2)
    with logger_context("sync_cpu", 0, "sync_cpu", {}, snapshot_mode="none"):
        runner.train()
    assert runner.sampler.global_B == 8
    assert runner.rank_digests[0] == runner.rank_digests[1]


def test_a_ranks_report_is_kept_for_every_look_at_the_failure():
    """Rank 0's watchdog thread and its main thread both look for the failure; the
    one that takes a rank's report from the queue must not hide it from the other."""
    import multiprocessing as mp
    import queue

    from rlframe.utils.processes import ChildReport, ChildSupervisor

    class Dead:
        exitcode, pid = 1, 12345

    runner = SyncRl.__new__(SyncRl)
    runner._supervisor = ChildSupervisor(mp.get_context(), error_queue=queue.Queue())
    runner._supervisor.children["rank 1"] = Dead()
    runner._supervisor.error_queue.put(
        ChildReport("rank 1", 12345, "Traceback ...\nValueError: env exploded", False))
    first = runner._find_failure()  # The watchdog drains the queue.
    second = runner._find_failure()  # Shutdown, in the main thread, looks again.
    assert first == second == "rank 1 failed:\nTraceback ...\nValueError: env exploded"
