"""AsyncRl / AsyncRlEval: sampling in its own process while the optimizer trains (on CPU):
learning, parameter hand-over, the throttle schedule, and shutdown in every way a run ends."""
import math
import os
import signal
import sys
import textwrap
import time

import psutil
import pytest
import torch
from async_helpers import RecordingSerialSampler, params_digest, slow_env
from conftest import start_script, wait_for_line
from shm_helpers import assert_no_new_shm, shm_entries

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import (AsyncRl, AsyncRlEval, async_n_itr, build_ctrl,
                                      throttle_schedule)
from rlframe.runners.callbacks import Callback, StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

TESTS = os.path.dirname(os.path.abspath(__file__))
# 2 cores: the optimizer on core 0, the sampler (and its worker) on core 1.
AFFINITY = dict(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True)
# CartPole steps in microseconds: the sampler would outrun this optimizer by far, so
# the learning runs keep it within 2048 steps of where replay_ratio puts the optimizer.
LEAD_STEPS = 2048
STEP_SECONDS = 0.


def cartpole_sampler(SamplerCls, step_seconds=STEP_SECONDS, eval_n_envs=4, **kwargs):
    evaluation = dict(eval_env_kwargs=dict(id="CartPole-v1"), eval_n_envs=eval_n_envs,
                      eval_max_steps=eval_n_envs * 1000, eval_max_trajectories=8) \
        if eval_n_envs else {}
    return SamplerCls(EnvCls=slow_env, env_kwargs=dict(id="CartPole-v1",
                                                       step_seconds=step_seconds),
                      batch_T=32, batch_B=8, max_decorrelation_steps=0, **evaluation, **kwargs)


def cartpole_dqn(**kwargs):
    settings = dict(discount=0.99, batch_size=64, min_steps_learn=1000, replay_size=int(5e4),
                    replay_ratio=24, target_update_interval=96, n_step_return=3,
                    learning_rate=2.3e-3, delta_clip=1., eps_steps=8000, double_dqn=True,
                    prioritized_replay=True, pri_beta_steps=60000)
    return DQN(**{**settings, **kwargs})


def cartpole_agent():
    return DqnAgent(eps_final=0.04, eps_eval=0., model_kwargs=dict(hidden_sizes=[128, 128]))


# --------------------------------------------------------------------------- learning

@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dqn_async_eval_reaches_475_on_cartpole(in_tmp_cwd):
    """Through an AsyncCpuSampler: its workers act with the parameters the optimizer
    shares. That the asynchronous samplers (serial, CPU, GPU-style) write the same
    batches is test_async_gpu_sampler's, so one learning run covers them."""
    stop = StopAtReturn(475)
    cpus_before = psutil.Process().cpu_affinity()
    rows = Rows()
    runner = AsyncRlEval(algo=cartpole_dqn(), agent=cartpole_agent(),
                         sampler=cartpole_sampler(AsyncCpuSampler), n_steps=80e3,
                         affinity=make_affinity(**AFFINITY), seed=1, log_interval_steps=4096,
                         callbacks=[stop, rows], sampler_lead_steps=LEAD_STEPS)
    with logger_context("async", 1, "async", {}, snapshot_mode="last"):
        runner.train()
    history = [(steps, ret) for steps, ret in stop.history if not math.isnan(ret)]
    assert history[0][0] == 0 and history[0][1] < 100, history
    reached = [steps for steps, ret in history if ret >= 475]
    assert reached and reached[0] <= 80e3, history
    assert runner.algo.update_counter > 0
    assert psutil.Process().cpu_affinity() == cpus_before  # The optimizer's pinning is undone.
    assert_replay_ratio_bounds(rows.rows, runner, lead_steps=LEAD_STEPS)


class Rows(Callback):
    """Every diagnostics row."""

    def __init__(self):
        self.rows = []

    def on_log(self, runner, itr, diagnostics):
        self.rows.append({key.removeprefix("Diagnostics/"): value
                          for key, value in diagnostics.items()})


def assert_replay_ratio_bounds(rows, runner, lead_steps=None):
    """replay_ratio bounds the transitions trained on per transition sampled from above
    (one optimize_agent call per delta_throttle_itr); with a sampler lead, from below up
    to the lead and min_steps_learn."""
    algo = runner.algo
    assert rows
    for row in rows:
        steps, updates = row["CumSteps"], row["CumUpdates"]
        trained = updates * algo.batch_size
        # The optimizer may be one call past its mark (the call that passed it).
        assert trained <= algo.replay_ratio * steps + algo.batch_size * algo.updates_per_sync, row
        if lead_steps is not None and row["Iteration"] >= 0:
            # Row of one sampler iteration late at most (read before the optimizer's call).
            floor = algo.replay_ratio * (steps - lead_steps - algo.min_steps_learn
                                         - 2 * runner.sampler_batch_size)
            assert trained >= floor, row


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_async_sac_reaches_minus_250_on_pendulum(in_tmp_cwd):
    """One update of 128 transitions per sampled step; the synchronous runner reaches
    -250 in 5k-6k steps with these settings, and so does the asynchronous one."""
    stop = StopAtReturn(-250)
    rows = Rows()
    sampler = AsyncSerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"),
                                 eval_env_kwargs=dict(id="Pendulum-v1"), batch_T=8, batch_B=1,
                                 max_decorrelation_steps=0, eval_n_envs=4, eval_max_steps=800)
    algo = SAC(batch_size=128, replay_ratio=128, min_steps_learn=1000, replay_size=int(1e5))
    runner = AsyncRlEval(algo=algo, agent=SacAgent(), sampler=sampler, n_steps=15e3,
                         affinity=make_affinity(**AFFINITY), seed=0, log_interval_steps=1000,
                         callbacks=[stop, rows], sampler_lead_steps=64)
    with logger_context("async_sac", 0, "async_sac", {}, snapshot_mode="none"):
        runner.train()
    history = [(steps, ret) for steps, ret in stop.history if not math.isnan(ret)]
    assert history[0][1] < -1000, history
    assert any(ret >= -250 for _, ret in history), history
    assert_replay_ratio_bounds(rows.rows, runner, lead_steps=64)


# --------------------------------------------------------------------------- parameters

class PublishedDigests(Callback):
    """Digests of the shared model after every optimizer iteration (after the send)."""

    def __init__(self):
        self.digests = []

    def on_startup(self, runner):
        self.digests.append(params_digest(runner.agent.shared_model))

    def on_iteration_end(self, runner, itr, samples, opt_info):
        self.digests.append(params_digest(runner.agent.shared_model))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cpu_optimizer_parameters_reach_the_sampler(in_tmp_cwd):
    """The CPU optimizer trains a private copy and publishes it; the sampler acts with
    parameters it published, and with new ones as training goes on."""
    sampler = cartpole_sampler(RecordingSerialSampler, step_seconds=2e-4, eval_n_envs=0)
    sampler.record_path = str(in_tmp_cwd / "sampler_digests.txt")
    published = PublishedDigests()
    agent = cartpole_agent()
    # A lead limit: on a loaded machine the optimizer process may start late, and the
    # sampler must not finish the run before it trains.
    runner = AsyncRl(algo=cartpole_dqn(min_steps_learn=512, replay_ratio=8), agent=agent,
                     sampler=sampler, n_steps=16384, affinity=make_affinity(**AFFINITY), seed=0,
                     log_interval_steps=4096, callbacks=[published], sampler_lead_steps=2048)
    with logger_context("params", 0, "params", {}, snapshot_mode="none"):
        runner.train()
    assert agent.model is not agent.shared_model
    assert runner.algo.update_counter > 0
    with open(sampler.record_path) as f:
        seen = [line.split()[1] for line in f]
    assert len(seen) == runner.n_itr
    initial = published.digests[0]
    assert seen[0] == initial
    assert set(seen) <= set(published.digests), "the sampler acted with unpublished parameters"
    assert len(set(seen) - {initial}) >= 3, "new parameters did not reach the sampler"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("lead_steps", [None, 512])
def test_replay_ratio_is_an_upper_bound_and_the_lead_a_lower_one(in_tmp_cwd, lead_steps):
    """Free-running, CartPole's sampler outruns the optimizer (replay ratio far below
    replay_ratio); with sampler_lead_steps the ratio stays within the lead of it."""
    rows = Rows()
    algo = cartpole_dqn(min_steps_learn=512, replay_ratio=16)
    runner = AsyncRl(algo=algo, agent=cartpole_agent(),
                     sampler=cartpole_sampler(AsyncSerialSampler, eval_n_envs=0),
                     n_steps=16384, affinity=make_affinity(**AFFINITY), seed=0,
                     log_interval_steps=2048, callbacks=[rows], sampler_lead_steps=lead_steps)
    with logger_context("ratio", 0, "ratio", {}, snapshot_mode="none"):
        runner.train()
    assert_replay_ratio_bounds(rows.rows, runner, lead_steps)
    last = rows.rows[-1]
    if lead_steps is None:
        assert last["CumReplayRatio"] < 0.5 * algo.replay_ratio, last
    else:
        assert last["CumReplayRatio"] > 0.8 * algo.replay_ratio, last
        assert last["SamplerThrottle"] < 1.


def _sampler_side(agent, go, results):
    """A sampler process: act with a private copy; take parameters when told to."""
    agent.async_cpu(share_memory=False)
    results.put(("start", agent._recv_count, params_digest(agent.model)))
    for _ in range(2):
        go.wait()
        go.clear()
        agent.recv_shared_memory()
        results.put(("recv", agent._recv_count, params_digest(agent.model)))
        with torch.no_grad():  # Acting must not change what the next recv brings.
            next(agent.model.parameters()).add_(1.)


def test_parameters_flow_with_a_version_counter():
    """send_shared_memory publishes the trained copy and advances the version;
    recv_shared_memory copies only when the version advanced."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    env = gym_make(id="CartPole-v1")
    agent = cartpole_agent()
    agent.initialize(env.spaces, share_memory=True)
    env.close()
    agent.make_async_handles(ctx)
    go, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_sampler_side, args=(agent, go, results))
    child.start()
    try:
        _, count, digest = results.get(timeout=30)
        initial = params_digest(agent.shared_model)
        assert count == 0 and digest == initial
        agent.async_cpu(share_memory=False)  # The optimizer trains a private copy.
        assert agent.model is not agent.shared_model
        with torch.no_grad():
            for p in agent.model.parameters():
                p.mul_(0.5).add_(0.25)
        trained = params_digest(agent.model)
        assert params_digest(agent.shared_model) == initial  # Nothing published yet.
        agent.send_shared_memory()
        assert agent._send_count.value == 1
        assert params_digest(agent.shared_model) == trained
        go.set()
        assert results.get(timeout=30)[1:] == (1, trained)
        go.set()  # No new version: the sampler keeps its (since changed) copy.
        _, count, digest = results.get(timeout=30)
        assert count == 1 and digest not in (trained, initial)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_runs_under_spawn_and_forkserver(in_tmp_cwd, start_method):
    """The runner's children (sampler, copiers, and an AsyncCpuSampler's worker)
    start under every start method, train, and stop."""
    rows = Rows()
    sampler = cartpole_sampler(AsyncCpuSampler, eval_n_envs=0, start_method=start_method)
    runner = AsyncRl(algo=cartpole_dqn(min_steps_learn=512, replay_ratio=8),
                     agent=cartpole_agent(), sampler=sampler, n_steps=4096,
                     affinity=make_affinity(**AFFINITY), seed=0, log_interval_steps=2048,
                     callbacks=[rows], start_method=start_method, sampler_lead_steps=512)
    with logger_context("start", 0, "start", {}, snapshot_mode="none"):
        runner.train()
    # CumSteps counts up to the last batch's start (sampler_itr * batch size, as rlpyt).
    assert rows.rows[-1]["CumSteps"] == 4096 - 256 and runner.algo.update_counter > 0
    assert_replay_ratio_bounds(rows.rows, runner, lead_steps=512)


# --------------------------------------------------------------------------- schedule

def test_n_itr_and_throttle_worked_examples():
    assert async_n_itr(2e6, 1e4, 5 * 8) == (250, 50000)
    assert async_n_itr(1e6, 3e4, 7 * 3) == (1428, 48552)
    assert async_n_itr(100, 1e4, 40) == (250, 250)  # At least one log interval.
    assert async_n_itr(1e4, 10, 40) == (1, 1000)  # log_interval_itrs is at least 1.
    # DQN batch 32, sampler 5 x 8, replay_ratio 8, updates_per_sync 1.
    throttle_itr, delta = throttle_schedule(min_steps_learn=int(5e4), batch_size=32,
                                            updates_per_sync=1, sampler_batch_size=40,
                                            replay_ratio=8)
    assert throttle_itr == 1 + 50000 // 40
    assert delta == pytest.approx(0.1)
    _, delta = throttle_schedule(0, batch_size=64, updates_per_sync=4, sampler_batch_size=256,
                                 replay_ratio=24, world_size=2)
    assert delta == pytest.approx(64 * 2 * 4 / (256 * 24))
    with pytest.raises(ValueError, match="replay_ratio"):
        throttle_schedule(0, 32, 1, 40, 0)


def test_runner_uses_the_worked_schedule(in_tmp_cwd):
    """n_itr, log interval and the throttle as the runner computes them."""
    runner = AsyncRl(algo=cartpole_dqn(batch_size=32, min_steps_learn=200, replay_ratio=8),
                     agent=cartpole_agent(), sampler=cartpole_sampler(AsyncSerialSampler,
                                                                      eval_n_envs=0),
                     n_steps=1e4, affinity=make_affinity(**AFFINITY), log_interval_steps=1000)
    runner.sampler_batch_size = 256
    assert runner.get_n_itr() == 10 * 3 and runner.log_interval_itrs == 3


def test_build_ctrl_has_distinct_semaphores():
    ctrl = build_ctrl(1)
    assert ctrl.sample_ready[0] is not ctrl.sample_ready[1]
    assert ctrl.sample_copied[0].acquire(block=False) and ctrl.sample_copied[1].acquire(
        block=False)
    assert not ctrl.sample_ready[0].acquire(block=False)
    assert ctrl.opt_throttle is None and ctrl.sampler_itr.value == 0


def test_bad_input_is_reported(in_tmp_cwd):
    kwargs = dict(algo=cartpole_dqn(), agent=cartpole_agent(), n_steps=1e4)
    sampler = cartpole_sampler(AsyncSerialSampler, eval_n_envs=0)
    with pytest.raises(TypeError, match="asynchronous affinity"):
        AsyncRl(sampler=sampler, affinity=dict(master_cpus=[0]), **kwargs)
    def two_ranks(first, second):
        affinity = make_affinity(**AFFINITY)
        affinity["optimizer"] = [{**affinity["optimizer"][0], **first},
                                 {**affinity["optimizer"][0], **second}]
        return affinity
    no_cpus = two_ranks({}, {})
    del no_cpus["optimizer"][1]["cpus"]
    with pytest.raises(ValueError, match=r"affinity\['optimizer'\]\[1\]\['cpus'\] is required"):
        AsyncRl(sampler=sampler, affinity=no_cpus, **kwargs)
    with pytest.raises(ValueError, match=r"every optimizer rank has a cuda_idx or none has.*"
                                         r"cuda_idx \[None, 0\]"):
        AsyncRl(sampler=sampler, affinity=two_ranks({}, dict(cuda_idx=0)), **kwargs)
    with pytest.raises(ValueError, match=r"a GPU of its own.*cuda_idx \[0, 0\]"):
        AsyncRl(sampler=sampler, affinity=two_ranks(dict(cuda_idx=0), dict(cuda_idx=0)), **kwargs)
    with pytest.raises(ValueError, match="pg_timeout must be a positive number"):
        AsyncRl(sampler=sampler, affinity=two_ranks({}, {}), pg_timeout=0, **kwargs)
    with pytest.raises(TypeError, match="asynchronous sampler"):
        AsyncRl(sampler=SerialSampler(EnvCls=slow_env, env_kwargs=dict(id="CartPole-v1"),
                                      batch_T=4, batch_B=2),
                affinity=make_affinity(**AFFINITY), **kwargs)
    with pytest.raises(ValueError, match="start_method"):
        AsyncRl(sampler=sampler, affinity=make_affinity(**AFFINITY), start_method="thread",
                **kwargs)
    with pytest.raises(ValueError, match="eval_n_envs=0"):
        AsyncRlEval(sampler=sampler, affinity=make_affinity(**AFFINITY), **kwargs)
    with pytest.raises(ValueError, match="db_idx must be 0 or 1"):
        sampler.check_db_idx(2)
    with pytest.raises(TypeError, match="AsyncSerialSampler is asynchronous.*AsyncRl"):
        MinibatchRl(sampler=sampler, **kwargs)
    with pytest.raises(TypeError, match="PPO lacks.*MinibatchRl or SyncRl"):
        AsyncRl(algo=PPO(), agent=CategoricalPgAgent(), n_steps=1e4, sampler=sampler,
                affinity=make_affinity(**AFFINITY))
    with pytest.raises(ValueError, match=r"affinity\['sampler'\] must be a dict"):
        AsyncRl(sampler=sampler, affinity=dict(optimizer=[dict(cpus=(0,))]), **kwargs)
    with pytest.raises(ValueError, match="sampler_lead_steps must be a positive.*got 0"):
        AsyncRl(sampler=sampler, affinity=make_affinity(**AFFINITY), sampler_lead_steps=0,
                **kwargs)
    with pytest.raises(ValueError, match="at least 2 cores"):
        make_affinity(run_slot=0, n_cpu_core=1, n_gpu=0, async_sample=True)


# --------------------------------------------------------------------------- shutdown

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_async_rl import cartpole_agent, cartpole_dqn, cartpole_sampler, AFFINITY
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.runners.async_rl import AsyncRl
    from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
    from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
    from rlframe.utils.launching.affinity import make_affinity
    from rlframe.utils.logging.context import logger_context

    mode, sampler_name, n_steps = sys.argv[1], sys.argv[2], float(sys.argv[3])


    class FailingDQN(DQN):
        def optimize_agent(self, itr, samples=None, sampler_itr=None):
            if itr == 20:
                raise ValueError("boom in the optimizer")
            return super().optimize_agent(itr, samples, sampler_itr)


    class FailingSampler(AsyncCpuSampler if sampler_name == "cpu" else AsyncSerialSampler):
        def obtain_samples(self, itr, db_idx):
            if itr == 12:
                raise ValueError("boom in the sampler")
            return super().obtain_samples(itr, db_idx)


    class QuietlyEndingSampler(AsyncSerialSampler):
        def obtain_samples(self, itr, db_idx):
            if itr == 12:
                import os
                os._exit(0)
            return super().obtain_samples(itr, db_idx)


    SamplerCls = {{"cpu": AsyncCpuSampler, "serial": AsyncSerialSampler}}[sampler_name]
    if mode == "fail_sampler":
        SamplerCls = FailingSampler
    if mode == "exit0_sampler":
        SamplerCls = QuietlyEndingSampler
    algo = cartpole_dqn(min_steps_learn=500, replay_ratio=8)
    if mode == "fail_opt":
        algo = FailingDQN(**{{k: getattr(algo, k) for k in ()}}, discount=0.99, batch_size=64,
                          min_steps_learn=500, replay_size=int(5e4), replay_ratio=8,
                          target_update_interval=96, n_step_return=3)
    runner = AsyncRl(algo=algo, agent=cartpole_agent(),
                     sampler=cartpole_sampler(SamplerCls, eval_n_envs=0, step_seconds=1e-3),
                     n_steps=n_steps,
                     affinity=make_affinity(**AFFINITY), seed=0, log_interval_steps=2048)
    with logger_context("shutdown", 0, "shutdown", {{}}, snapshot_mode="last"):
        runner.train()
    print("RUN ENDED NORMALLY", flush=True)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "async_script.py"
    path.write_text(SCRIPT.format(tests=TESTS))
    return path


def _running(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_all_gone(process, tree, shm_before, timeout=10.):
    """The script and every process it started end within ``timeout`` seconds; no
    new /dev/shm entries are left."""
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=1.)
    alive = [p for p in alive if _running(p)]  # A zombie has ended (its reaper may be slow).
    for p in alive:
        p.kill()
    assert not alive, [p.pid for p in alive]
    assert_no_new_shm(shm_before, context=output[-3000:])
    return output


def running_tree(process):
    """The script's process and its descendants once the children are running."""
    lines = wait_for_line(process, "Started the sampler and memory copier processes")
    root = psutil.Process(process.pid)
    time.sleep(1.)  # An AsyncCpuSampler's worker starts after its sampler process.
    return lines, [root] + root.children(recursive=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sampler_name", ["serial", "cpu"])
def test_normal_end_releases_everything(script, in_tmp_cwd, sampler_name):
    shm_before = shm_entries()
    process = start_script([sys.executable, str(script), "normal", sampler_name, "4096"],
                           cwd=in_tmp_cwd)
    _, tree = running_tree(process)
    assert len(tree) >= (5 if sampler_name == "cpu" else 4)
    output = assert_all_gone(process, tree, shm_before, timeout=60.)
    assert process.returncode == 0, output[-3000:]
    assert "RUN ENDED NORMALLY" in output


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_every_process(script, in_tmp_cwd, signum):
    """SIGINT to the process group (Ctrl-C in a terminal) or SIGTERM to the master."""
    shm_before = shm_entries()
    process = start_script([sys.executable, str(script), "normal", "cpu", "1e7"], cwd=in_tmp_cwd)
    _, tree = running_tree(process)
    if signum == signal.SIGINT:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    output = assert_all_gone(process, tree, shm_before)
    assert process.returncode != 0 and "RUN ENDED NORMALLY" not in output


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, name, message", [
    ("fail_opt", "", "boom in the optimizer"),
    ("fail_sampler", "the sampler process failed", "boom in the sampler")])
def test_an_exception_stops_every_process(script, in_tmp_cwd, mode, name, message):
    shm_before = shm_entries()
    process = start_script([sys.executable, str(script), mode, "cpu", "1e7"], cwd=in_tmp_cwd)
    _, tree = running_tree(process)
    output = assert_all_gone(process, tree, shm_before, timeout=60.)
    assert process.returncode != 0
    assert message in output and "ValueError" in output, output[-3000:]
    assert name in output


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sampler_ending_early_without_error_is_named(script, in_tmp_cwd):
    """A sampler process that exits with code 0 before its last iteration (and so
    never sets the quit flag) must not leave the optimizer waiting for it."""
    shm_before = shm_entries()
    process = start_script([sys.executable, str(script), "exit0_sampler", "serial", "1e7"],
                           cwd=in_tmp_cwd)
    _, tree = running_tree(process)
    output = assert_all_gone(process, tree, shm_before, timeout=30.)
    assert process.returncode != 0
    assert "the sampler process" in output and "before the run ended" in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_killed_copier_is_named(script, in_tmp_cwd):
    shm_before = shm_entries()
    process = start_script([sys.executable, str(script), "normal", "serial", "1e7"], cwd=in_tmp_cwd)
    lines, tree = running_tree(process)
    pids = [int(pid) for pid in lines[-1].split("pids [")[1].split("]")[0].split(",")]
    psutil.Process(pids[1]).send_signal(signal.SIGKILL)  # [sampler, copier 0, copier 1]
    output = assert_all_gone(process, tree, shm_before, timeout=30.)
    assert process.returncode != 0
    assert "AsyncRlError" in output and "memory copier" in output and "signal 9" in output, \
        output[-3000:]
