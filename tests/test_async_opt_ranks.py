"""AsyncRl with two optimizer ranks on CPUs (gloo): both ranks train the same parameters
from the one shared replay, and a failed, killed or interrupted run stops every process."""
import os
import re
import signal
import sys
import textwrap
import threading
import time

import psutil
import pytest
from async_helpers import params_digest
from conftest import start_script, wait_for_line
from test_async_rl import (Rows, _running, cartpole_agent, cartpole_dqn, cartpole_sampler,
                           shm_entries)

from rlframe.runners.async_rl import AsyncRl, OptimizerBarrier
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.utils.distributed import state_digest
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

TESTS = os.path.dirname(os.path.abspath(__file__))
LEAD_STEPS = 1024


def two_rank_affinity():
    """Optimizer rank 0 (this process) on core 0, rank 1 on core 1, the sampler on core 1."""
    sampler = make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True)["sampler"]
    optimizer = [dict(cpus=(cpu,), cuda_idx=None, torch_threads=1, set_affinity=True)
                 for cpu in (0, 1)]
    return dict(all_cpus=(0, 1), optimizer=optimizer, sampler=sampler, set_affinity=True)


# --------------------------------------------------------------------------- barrier

def test_barrier_meets_times_out_checks_and_aborts():
    barrier = OptimizerBarrier(3)
    assert not barrier.wait(0, timeout=0.05)  # Nobody came.
    results = {}

    def rank(r):
        results[r] = barrier.wait(r)
    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 2)]
    for thread in threads:
        thread.start()
    assert barrier.wait(0, timeout=5.)
    for thread in threads:
        thread.join(5.)
    assert results == {1: True, 2: True}

    def failed():
        raise RuntimeError("a rank failed")
    with pytest.raises(RuntimeError, match="a rank failed"):  # Rank 1 never comes.
        barrier.wait(0, check=failed)

    def waiting(r):
        try:
            barrier.wait(r)
        except threading.BrokenBarrierError:
            results[r] = "broken"
    thread = threading.Thread(target=waiting, args=(2,))
    thread.start()
    barrier.abort()
    thread.join(5.)
    assert results[2] == "broken" and barrier.broken
    with pytest.raises(threading.BrokenBarrierError):
        barrier.wait(0)


# --------------------------------------------------------------------------- training

@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_two_ranks_train_the_same_parameters(in_tmp_cwd, start_method):
    rows = Rows()
    algo = cartpole_dqn(min_steps_learn=512, replay_ratio=8)
    agent = cartpole_agent()
    cpus_before = psutil.Process().cpu_affinity()
    runner = AsyncRl(algo=algo, agent=agent,
                     sampler=cartpole_sampler(AsyncSerialSampler, eval_n_envs=0),
                     n_steps=8192, affinity=two_rank_affinity(), seed=0,
                     log_interval_steps=2048, callbacks=[rows], start_method=start_method,
                     sampler_lead_steps=LEAD_STEPS)
    with logger_context("ranks", 0, "ranks", {}, snapshot_mode="last"):
        runner.train()
    assert runner.world_size == 2
    calls = runner.rank_optimize_calls
    assert len(calls) == 2 and calls[0] == calls[1] > 0, calls
    assert algo.update_counter == calls[0] * algo.updates_per_sync
    digests = runner.rank_digests
    assert len(digests) == 2 and digests[0] == digests[1], digests
    assert digests[0] == state_digest(agent.state_dict())
    # Rank 0 published its final parameters to the sampler's shared model.
    assert params_digest(agent.shared_model) == params_digest(agent.model)
    assert agent.model is not agent.shared_model and not agent._ddp
    assert psutil.Process().cpu_affinity() == cpus_before
    # Every optimize_agent call trains batch_size transitions on each of the two ranks.
    batch = algo.batch_size * 2
    for row in rows.rows:
        trained = row["CumUpdates"] * batch
        assert row["CumReplayRatio"] == pytest.approx(trained / max(1, row["CumSteps"])), row
        # The optimizer may be one call past its mark (the call that passed it).
        assert trained <= algo.replay_ratio * row["CumSteps"] + batch * algo.updates_per_sync, row
    assert rows.rows[-1]["CumReplayRatio"] > 0.5 * algo.replay_ratio, rows.rows[-1]


# --------------------------------------------------------------------------- shutdown

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_async_rl import cartpole_agent, cartpole_sampler
    from test_async_opt_ranks import two_rank_affinity
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.runners.async_rl import AsyncRl, OptimizerBarrier
    from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
    from rlframe.utils.logging.context import logger_context

    mode = sys.argv[1]


    class FailingDQN(DQN):
        \"\"\"Raises in its 20th optimize_agent call on rank ``fail_rank``.\"\"\"

        fail_rank = None
        calls = 0

        def optimize_agent(self, itr, samples=None, sampler_itr=None):
            self.calls += 1
            if self.rank == self.fail_rank and self.calls == 20:
                print(f"OPTIMIZER RANK {{self.rank}} RAISES", flush=True)
                raise ValueError(f"boom in optimizer rank {{self.rank}}")
            return super().optimize_agent(itr, samples, sampler_itr)


    if __name__ == "__main__":
        algo = FailingDQN(discount=0.99, batch_size=64, min_steps_learn=500,
                          replay_size=int(5e4), replay_ratio=8, target_update_interval=96,
                          n_step_return=3)
        algo.fail_rank = {{"fail_rank1": 1, "fail_rank0": 0}}.get(mode)
        runner = AsyncRl(algo=algo, agent=cartpole_agent(),
                         sampler=cartpole_sampler(AsyncSerialSampler, eval_n_envs=0,
                                                  step_seconds=2e-4),
                         n_steps=1e7, affinity=two_rank_affinity(), seed=0,
                         log_interval_steps=2048, sampler_lead_steps=1024)
        with logger_context("ranks", 0, "ranks", {{}}, snapshot_mode="last"):
            runner.train()
        print("RUN ENDED NORMALLY", flush=True)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "opt_ranks_script.py"
    path.write_text(SCRIPT.format(tests=TESTS))
    return path


def running_ranks(process):
    """``(rank 1's pid, the script's process tree)`` once the ranks train."""
    lines = wait_for_line(process, "Started optimizer ranks 1..1")
    rank1_pid = int(lines[-1].split("pids [")[1].split("]")[0])
    wait_for_line(process, "Joined the process group of 2 optimizer ranks")
    root = psutil.Process(process.pid)
    return rank1_pid, [root] + root.children(recursive=True)


def assert_all_gone(process, tree, timeout):
    """The script and every process it started end within ``timeout`` seconds, and no
    /dev/shm entry named after one of them is left (other jobs may use /dev/shm)."""
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
    pids = {str(p.pid) for p in tree}
    deadline = time.time() + 5.  # The script's resource tracker unlinks asynchronously.
    while True:
        left = {e for e in shm_entries() if pids & set(re.split(r"[_\-]", e))}
        if not left or time.time() > deadline:
            break
        time.sleep(0.2)
    assert not left, (left, output[-3000:])
    return output


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode, message", [
    ("fail_rank1", "the optimizer rank 1 process failed"),
    ("fail_rank0", "boom in optimizer rank 0")])
def test_an_exception_in_a_rank_stops_every_process(script, in_tmp_cwd, mode, message):
    """Rank 1's error is reported by name; rank 0's own error is not blamed on rank 1."""
    process = start_script([sys.executable, str(script), mode], cwd=in_tmp_cwd)
    _, tree = running_ranks(process)
    rank = mode[-1]
    wait_for_line(process, f"OPTIMIZER RANK {rank} RAISES")
    raised = time.time()
    output = assert_all_gone(process, tree, timeout=10.)
    assert time.time() - raised < 10.
    assert process.returncode != 0 and "RUN ENDED NORMALLY" not in output
    assert message in output and "ValueError" in output, output[-3000:]
    if mode == "fail_rank1":
        assert "AsyncRlError" in output and "boom in optimizer rank 1" in output, output[-3000:]
    else:
        assert "optimizer rank 1 process" not in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_rank_is_named(script, in_tmp_cwd):
    process = start_script([sys.executable, str(script), "normal"], cwd=in_tmp_cwd)
    rank1_pid, tree = running_ranks(process)
    wait_for_line(process, "CumUpdates")  # Training.
    psutil.Process(rank1_pid).send_signal(signal.SIGKILL)
    output = assert_all_gone(process, tree, timeout=10.)
    assert process.returncode != 0
    assert "AsyncRlError" in output and "optimizer rank 1" in output \
        and "signal 9" in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_stops_every_rank(script, in_tmp_cwd):
    process = start_script([sys.executable, str(script), "normal"], cwd=in_tmp_cwd)
    _, tree = running_ranks(process)
    wait_for_line(process, "CumUpdates")
    os.killpg(process.pid, signal.SIGINT)
    output = assert_all_gone(process, tree, timeout=10.)
    assert process.returncode != 0 and "RUN ENDED NORMALLY" not in output
    assert "KeyboardInterrupt" in output, output[-3000:]
