"""Resuming runs from their snapshots: logger_context(resume=True) + runner.train()."""
import csv
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch

from conftest import warm_python_interpreter
from resume_helpers import (LOG_DIR, RUNNERS, RecordEpsilon, column, debug_log, flat_state,
                            ppo_runner, progress, train)
from rlframe.utils.checkpoint import REPLAY_FILE, SAMPLER_STATE_FILE
from rlframe.utils.logging.context import logger_context

TESTS = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(TESTS, "resume_helpers.py")
SYNC_SCRIPT = os.path.join(TESTS, "resume_sync_script.py")


def run_child(*args, expect_killed=False):
    """``python resume_helpers.py *args`` in this directory (in the warm interpreter)."""
    result = warm_python_interpreter().run(HELPERS, args, os.getcwd())
    if expect_killed:
        assert result.returncode == -9, result.stderr[-3000:]
    else:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_same_agents(a, b):
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different


@pytest.mark.slow
@pytest.mark.parametrize("algo, die_at", [("ppo", 9), ("atari_ppo", 7), ("dqn", 130)])
def test_killed_run_resumes_to_the_uninterrupted_result(algo, die_at, in_tmp_cwd):
    """SIGKILL mid-run (no final snapshot), then resume=True: the run ends at the full
    step count with the same parameters as an uninterrupted run of the same seed (serial
    sampler: envs continue mid-episode, Atari's emulators too; DQN: replay, priorities
    and epsilon continue)."""
    if algo == "atari_ppo":
        pytest.importorskip("ale_py")
    run_child(algo, 0)
    run_child(algo, 1, "--die-at", die_at, expect_killed=True)
    killed_rows = progress(1)
    assert killed_rows and column(killed_rows, "Iteration")[-1] < die_at
    run_child(algo, 1, "--resume")
    full, resumed = progress(0), progress(1)
    assert column(resumed, "Iteration") == column(full, "Iteration")  # strictly increasing
    assert column(resumed, "CumSteps")[-1] == column(full, "CumSteps")[-1]
    for name in ("CumUpdates", "CumCompletedTrajs"):
        assert column(resumed, name) == column(full, name), name
    # The returns (DQN: evaluations, whose envs the snapshot keeps) and what each row
    # gathers over its interval: trajectories and losses.
    for name in ("ReturnAverage", "lossAverage", "Diagnostics/NewCompletedTrajs"):
        if name in full[0]:
            assert [r[name] for r in resumed] == [r[name] for r in full], name
    assert_same_agents(torch.load("agent_0.pt"), torch.load("agent_1.pt"))
    log = debug_log(1)
    assert "Resumed from params.pkl" in log and "start afresh" not in log
    if algo == "dqn":
        assert "Replay buffer restored" in log


@pytest.mark.slow
def test_a_run_killed_while_writing_its_replay_resumes_from_the_snapshot_before(in_tmp_cwd):
    """SIGKILL while the snapshot of iteration 119 writes its replay (the envs' state
    already written to its temporary file): the snapshot of iteration 79 and its side
    files stay together, the resumed run removes the temporary files, restores envs and
    replay of iteration 79, and ends as the uninterrupted run does."""
    run_child("dqn", 0)
    run_child("dqn", 1, "--die-writing-replay-at", "119", expect_killed=True)
    run_dir = os.path.join(LOG_DIR, "run_1")
    stale = sorted(name for name in os.listdir(run_dir) if name.endswith(".tmp"))
    assert [name.split(".")[1] for name in stale] == ["replay_buffer", "sampler_state"]
    assert torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)["itr"] == 79
    run_child("dqn", 1, "--resume")
    assert not [name for name in os.listdir(run_dir) if name.endswith(".tmp")]
    log = debug_log(1)
    assert "Removed the temporary files of a snapshot being written" in log
    assert "Resumed from params.pkl: iteration 79" in log
    assert "Replay buffer restored" in log and "start afresh" not in log
    full, resumed = progress(0), progress(1)
    for name in ("Iteration", "CumSteps", "CumUpdates", "CumCompletedTrajs"):
        assert column(resumed, name) == column(full, name), name
    assert_same_agents(torch.load("agent_0.pt"), torch.load("agent_1.pt"))


@pytest.mark.slow
def test_epsilon_continues_and_replay_refills_without_a_replay_checkpoint(in_tmp_cwd):
    run_child("dqn", 0, "--die-at", 100, "--no-replay-checkpoint", expect_killed=True)
    snapshot_itr = int(column(progress(0), "Iteration")[-1])
    assert not os.path.exists(os.path.join(LOG_DIR, "run_0", REPLAY_FILE))
    record, uninterrupted = RecordEpsilon(), RecordEpsilon()
    runner = train("dqn", 0, resume=True, callbacks=[record], checkpoint_replay=False)
    train("dqn", 1, callbacks=[uninterrupted], checkpoint_replay=False)
    first = min(record.epsilons)
    assert first == snapshot_itr + 1
    assert record.epsilons[first] < 0.6  # On its way down from 1, not restarting at 1.
    assert record.epsilons == {itr: eps for itr, eps in uninterrupted.epsilons.items()
                               if itr >= first}
    assert column(progress(0), "CumSteps")[-1] == runner.n_itr * runner.itr_batch_size
    assert "The replay buffer starts empty" in debug_log(0)


def test_resume_without_a_run_starts_afresh_and_rows_after_the_snapshot_go(in_tmp_cwd):
    train("ppo", 0, resume=True)  # Nothing to resume: a fresh run.
    rows = progress(0)
    assert column(rows, "Iteration") == [3., 7., 11., 15.]
    run_dir = os.path.join(LOG_DIR, "run_0")
    assert os.path.exists(os.path.join(run_dir, SAMPLER_STATE_FILE))
    # A crash between a snapshot and later rows: rows after the snapshot's iteration are
    # written again by the resumed run, not duplicated.
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    assert snapshot["itr"] == 15
    snapshot["itr"], snapshot["cum_steps"] = 7, 8 * 128
    torch.save(snapshot, os.path.join(run_dir, "params.pkl"))
    os.remove(os.path.join(run_dir, SAMPLER_STATE_FILE))
    train("ppo", 0, resume=True)
    assert column(progress(0), "Iteration") == [3., 7., 11., 15.]
    assert "Training envs start afresh (no sampler_state.pkl)" in debug_log(0)


def stop_at_log_point(runner, itr, during_evaluation):
    """Make ``runner`` raise KeyboardInterrupt (as Ctrl-C) at the log point of ``itr``:
    during its evaluation, or right after its snapshot, before its row either way."""
    if during_evaluation:
        evaluate = runner.sampler.evaluate_agent

        def evaluate_then_stop(at):
            traj_infos = evaluate(at)
            if at == itr:
                raise KeyboardInterrupt
            return traj_infos
        runner.sampler.evaluate_agent = evaluate_then_stop
    else:
        save = runner.save_itr_snapshot

        def save_then_stop(at, final=False):
            names = save(at, final=final)
            if at == itr and not final:
                raise KeyboardInterrupt
            return names
        runner.save_itr_snapshot = save_then_stop


@pytest.mark.slow
@pytest.mark.parametrize("algo, stop_itr", [("ppo", 7), ("ppo", 15), ("dqn", 199)])
def test_a_run_stopped_before_a_log_points_row_writes_it_when_resumed(algo, stop_itr,
                                                                      in_tmp_cwd):
    """Ctrl-C after a log point's iteration, before its row (PPO: after its snapshot;
    DQN: during its evaluation): the final snapshot is of that iteration, and the resumed
    run writes the missing row first, with the uninterrupted run's counters (the last
    row too: a run stopped at its end is not left without it)."""
    full = train(algo, 0)
    runner = RUNNERS[algo]()
    stop_at_log_point(runner, stop_itr, during_evaluation=algo == "dqn")
    with pytest.raises(KeyboardInterrupt):
        with logger_context(LOG_DIR, 1, algo, dict(algo=algo), snapshot_mode="last",
                            override_prefix=True):
            runner.train()
    assert column(progress(1), "Iteration")[-1] < stop_itr
    assert torch.load(os.path.join(LOG_DIR, "run_1", "params.pkl"),
                      weights_only=True)["itr"] == stop_itr
    resumed = train(algo, 1, resume=True)
    rows, full_rows = progress(1), progress(0)
    for name in ("Iteration", "CumSteps", "CumUpdates"):
        assert column(rows, name) == column(full_rows, name), name
    row = next(r for r in rows if float(r["Diagnostics/Iteration"]) == stop_itr)
    assert math.isnan(float(row["Diagnostics/StepsPerSecond"]))  # Its training: not timed.
    assert f"row of iteration {stop_itr}; writing it now" in debug_log(1)
    if algo == "ppo":  # The row of the training episodes, from the snapshot's window.
        assert column(rows, "CumCompletedTrajs") == column(full_rows, "CumCompletedTrajs")
        assert [r["ReturnAverage"] for r in rows] == [r["ReturnAverage"] for r in full_rows]
        assert_same_agents(flat_state(resumed.agent), flat_state(full.agent))
    assert resumed.algo.update_counter == full.algo.update_counter


def test_bad_resumes_are_refused_and_leave_the_run_as_it_is(in_tmp_cwd):
    run_dir = os.path.join(LOG_DIR, "run_0")
    with logger_context(LOG_DIR, 0, "ppo", dict(algo="ppo"), override_prefix=True):
        pass  # A run without snapshots.
    before = {name: open(os.path.join(run_dir, name), "rb").read()
              for name in os.listdir(run_dir)}
    with pytest.raises(FileExistsError, match="no snapshot to resume from"):
        train("ppo", 0, resume=True)
    after = {name: open(os.path.join(run_dir, name), "rb").read()
             for name in os.listdir(run_dir)}
    assert after == before

    train("ppo", 1)
    with pytest.raises(ValueError, match=r"different setting \(algo: 'ppo' in the run, "
                                         r"'dqn' now"):
        with logger_context(LOG_DIR, 1, "ppo", dict(algo="dqn"), snapshot_mode="last",
                            override_prefix=True, resume=True):
            pass
    with open(os.path.join(LOG_DIR, "run_1", "params.json")) as f:
        assert json.load(f)["algo"] == "ppo"

    other_batch = ppo_runner()
    other_batch.sampler.batch_spec = other_batch.sampler.batch_spec._replace(T=16)
    with pytest.raises(ValueError, match="batch_T, batch_B or the number of ranks differ"):
        with logger_context(LOG_DIR, 1, "ppo", dict(algo="ppo"), snapshot_mode="last",
                            override_prefix=True, resume=True):
            other_batch.train()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_async_rl_resumes_with_its_replay(in_tmp_cwd):
    """AsyncRl killed mid-run (its sampler and copiers die with it) and resumed: the
    sampler continues at the snapshot's iteration, the replay and counters come back."""
    run_child("async_dqn", 0, "--die-at", 60, expect_killed=True)
    rows = progress(0)
    assert rows, "no log point before the kill"
    killed_at = column(rows, "SamplerIteration")[-1]
    run_child("async_dqn", 0, "--resume")
    rows = progress(0)
    sampler_itrs = column(rows, "SamplerIteration")
    assert sampler_itrs == sorted(set(sampler_itrs)) and sampler_itrs[-1] >= 399
    assert column(rows, "Iteration") == sorted(set(column(rows, "Iteration")))
    updates = column(rows, "CumUpdates")
    assert updates == sorted(updates)  # Counted on from the snapshot, not from 0.
    log = debug_log(0)
    assert f"sampler iteration {int(killed_at)}" in log and "Replay buffer restored" in log


def sync_progress():
    with open(os.path.join("sync_runs", "run_0", "progress.csv"), newline="") as f:
        return list(csv.DictReader(f))


def assert_sync_run_completed(resumed_from):
    rows = sync_progress()
    assert column(rows, "Iteration") == [3., 7., 11., 15., 19., 23.]
    assert column(rows, "CumSteps")[-1] == 256 * 24
    with open(os.path.join("sync_runs", "run_0", "debug.log")) as f:
        log = f.read()
    said = [line for line in log.splitlines() if "snapshot" in line or "Resum" in line]
    assert f"Resumed from params.pkl: iteration {resumed_from}" in log, "\n".join(said)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sync_rl_resumes_after_rank_0_was_killed(in_tmp_cwd):
    env = dict(os.environ, PYTHONPATH=TESTS, OMP_NUM_THREADS="1")
    killed = subprocess.run([sys.executable, SYNC_SCRIPT, "0", "13"], env=env,
                            capture_output=True, text=True, timeout=240)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert column(sync_progress(), "Iteration") == [3., 7., 11.]
    resumed = subprocess.run([sys.executable, SYNC_SCRIPT, "0", "13"], env=env,
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_sync_run_completed(resumed_from=11)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sync_rl_writes_the_row_rank_0_was_stopped_before(in_tmp_cwd):
    """Ctrl-C on rank 0 after its snapshot of iteration 15, before the row: the resumed
    ranks write that row together (rank 0 gathers from rank 1) before training on."""
    env = dict(os.environ, PYTHONPATH=TESTS, OMP_NUM_THREADS="1")
    stopped = subprocess.run([sys.executable, SYNC_SCRIPT, "0", "15", "interrupt"], env=env,
                             capture_output=True, text=True, timeout=240)
    assert stopped.returncode != 0 and "KeyboardInterrupt" in stopped.stderr, \
        stopped.stderr[-3000:]
    assert column(sync_progress(), "Iteration") == [3., 7., 11.]
    resumed = subprocess.run([sys.executable, SYNC_SCRIPT, "0", "15"], env=env,
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_sync_run_completed(resumed_from=15)
    assert math.isnan(column(sync_progress(), "StepsPerSecond")[3])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_max_restarts_resumes_after_a_rank_was_killed(in_tmp_cwd):
    """Elastic restart: rank 1 is killed, torchrun restarts both ranks, and the run goes
    on from rank 0's final snapshot (written when the process group broke)."""
    env = dict(os.environ, PYTHONPATH=TESTS, OMP_NUM_THREADS="1")
    env.pop("RLFRAME_DATA_DIR", None)
    # torchrun's logs in the test's folder, not in a torchelastic_* folder it would leave
    # in the temporary directory.
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--log-dir", "torchrun_logs", "--nproc_per_node=2",
                             "--max-restarts=1", SYNC_SCRIPT, "1", "13"],
                            env=env, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert os.path.exists("first_attempt_done")  # Rank 1 was killed once.
    assert_sync_run_completed(resumed_from=13)


def test_snapshots_still_load_with_weights_only(in_tmp_cwd):
    runner = train("ppo", 0)
    snapshot = torch.load(os.path.join(LOG_DIR, "run_0", "params.pkl"), weights_only=True)
    assert {"algo_state_dict", "rng_state", "runner_state"} <= set(snapshot)
    assert snapshot["algo_state_dict"]["update_counter"] == runner.algo.update_counter
    assert flat_state(runner.agent).keys()


@pytest.mark.slow
def test_rlframe_resume_continues_a_killed_rlframe_train(in_tmp_cwd):
    command = [sys.executable, "-m", "rlframe"]
    train_cmd = command + ["train", "ppo", "CartPole-v1", "--n-steps", "16384",
                           "--log-interval-steps", "2048", "--log-dir", "cli", "--run-id", "0",
                           "--seed", "1"]
    progress_csv = os.path.join("cli", "run_0", "progress.csv")
    child = subprocess.Popen(train_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and child.poll() is None:
            if os.path.exists(progress_csv) and len(open(progress_csv).readlines()) >= 4:
                break  # The untrained evaluation and two training rows.
            time.sleep(0.2)
    finally:
        child.kill()
        child.wait()
    rows = list(csv.DictReader(open(progress_csv)))
    assert 3 <= len(rows) < 9, "the run was to be killed mid-way"
    result = subprocess.run(command + ["resume", os.path.join("cli", "run_0")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader(open(progress_csv)))
    itrs = [float(row["Diagnostics/Iteration"]) for row in rows]
    assert itrs == sorted(set(itrs)) and itrs[-1] == 15
    assert float(rows[-1]["Diagnostics/CumSteps"]) == 16384


def test_rlframe_resume_refuses_what_it_cannot_resume(in_tmp_cwd, capsys):
    from rlframe.cli import main
    assert main(["resume", "nowhere"]) == 2
    assert "nowhere is not a directory" in capsys.readouterr().err
    train("ppo", 0)  # A script's run: params.json without algo and env_id.
    assert main(["resume", os.path.join(LOG_DIR, "run_0")]) == 2
    assert "was not made by `rlframe train`" in capsys.readouterr().err
    os.makedirs("cli/run_0")
    with open("cli/run_0/params.json", "w") as f:
        json.dump(dict(algo="ppo", env_id="CartPole-v1"), f)
    assert main(["resume", "cli/run_0"]) == 2
    assert "holds no snapshot" in capsys.readouterr().err
    assert os.listdir("cli/run_0") == ["params.json"]
