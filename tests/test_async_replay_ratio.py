"""AsyncRl's reached replay ratio: logged in every row, and a warning when the sampler
outruns the optimizer so far that fewer than half the asked-for updates are made."""
import math
import os
import warnings

import pytest
from conftest import read_csv, run_dirs
from test_async_rl import AFFINITY, Rows, assert_replay_ratio_bounds, cartpole_agent
from test_async_rl import cartpole_dqn, cartpole_sampler

from rlframe.runners.async_rl import AsyncRl
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

DROP = "replay ratio reached"


def short_run(tmp_path, lead_steps):
    """8192 CartPole steps, replay_ratio 16; returns (runner, rows, warnings, debug.log,
    progress.csv's header and rows)."""
    rows = Rows()
    algo = cartpole_dqn(min_steps_learn=512, replay_ratio=16)
    runner = AsyncRl(algo=algo, agent=cartpole_agent(),
                     sampler=cartpole_sampler(AsyncSerialSampler, eval_n_envs=0),
                     n_steps=8192, affinity=make_affinity(**AFFINITY), seed=0,
                     log_interval_steps=2048, callbacks=[rows], sampler_lead_steps=lead_steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with logger_context("ratio", 0, "ratio", {}, snapshot_mode="none"):
            runner.train()
    (run_dir,) = run_dirs(tmp_path)
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    header, csv_rows = read_csv(os.path.join(run_dir, "progress.csv"))
    dropped = [w for w in caught if DROP in str(w.message)]
    return runner, rows.rows, dropped, log, (header, csv_rows)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sampler_outrunning_the_optimizer_is_logged_and_warned_once(in_tmp_cwd):
    runner, rows, dropped, log, (header, csv_rows) = short_run(in_tmp_cwd, None)
    for column in ("ReplayRatio", "CumReplayRatio", "LearningReplayRatio"):
        assert f"Diagnostics/{column}" in header, header
    assert len(csv_rows) == len(rows) >= 1
    algo = runner.algo
    trained = algo.update_counter * algo.batch_size
    last = rows[-1]
    # The learning ratio is the updates' transitions per step sampled since learning began.
    learn_steps = last["CumSteps"] - runner._learn_start_itr * runner.sampler_batch_size
    assert last["LearningReplayRatio"] == pytest.approx(trained / learn_steps)
    assert last["CumReplayRatio"] == pytest.approx(trained / last["CumSteps"])
    intervals = [row["ReplayRatio"] for row in rows]
    assert all(not math.isnan(r) and r >= 0 for r in intervals), intervals
    assert last["LearningReplayRatio"] < 0.5 * algo.replay_ratio, last  # CartPole outran it.

    assert len(dropped) == 1, [str(w.message) for w in dropped]  # Once per run.
    message = str(dropped[0].message)
    assert issubclass(dropped[0].category, RuntimeWarning)
    assert "below half of DQN's replay_ratio=16" in message, message
    assert "sampler_lead_steps (e.g. 2048" in message, message
    reached = float(message.split(" is ")[1].split(",")[0])
    assert reached < 8, message
    assert f"WARNING: {message}" in log


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sampler_lead_keeps_the_ratio_and_warns_nothing(in_tmp_cwd):
    runner, rows, dropped, log, _ = short_run(in_tmp_cwd, 512)
    assert not dropped, [str(w.message) for w in dropped]
    assert DROP not in log
    assert_replay_ratio_bounds(rows, runner, lead_steps=512)
    last = rows[-1]
    assert 0.8 * runner.algo.replay_ratio < last["LearningReplayRatio"] \
        <= runner.algo.replay_ratio * 1.05, last
