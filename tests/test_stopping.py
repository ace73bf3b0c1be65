"""Ctrl-C and SIGTERM during an iteration: the iteration ends first (for stop_wait_s at
most), so that the final snapshot holds it whole and the resumed run is exact."""
import os
import re
import signal
import threading
import time

import pytest
import torch

from resume_helpers import LOG_DIR, RUNNERS, column, debug_log, flat_state, progress, train
from rlframe.runners.stopping import IterationStop
from rlframe.utils.logging.context import logger_context

ERRORS = {signal.SIGTERM: SystemExit, signal.SIGINT: KeyboardInterrupt}


def snapshot_itr(run_ID):
    path = os.path.join(LOG_DIR, f"run_{run_ID}", "params.pkl")
    return torch.load(path, weights_only=True)["itr"]


def signal_during_update(runner, itr, signums, sleep_s=0.):
    """Send this process ``signums``, one after the other, in the middle of iteration
    ``itr``'s update (after the sampling, before the optimizer's steps), then sleep."""
    optimize = runner.algo.optimize_agent

    def optimize_with_signals(at, samples):
        if at == itr:
            for signum in signums:
                os.kill(os.getpid(), signum)
                time.sleep(0.05)  # The handler runs in between.
            time.sleep(sleep_s)
        return optimize(at, samples)
    runner.algo.optimize_agent = optimize_with_signals


def train_stopped(algo, run_ID, itr, signums, wait_s=None, sleep_s=0.):
    """Train ``algo`` in run ``run_ID`` with ``signums`` sent during iteration ``itr``;
    returns the exception the run ended by and the seconds from the signal to its end."""
    runner = RUNNERS[algo]()
    if wait_s is not None:
        runner.stop_wait_s = wait_s
    signal_during_update(runner, itr, signums, sleep_s)
    sent = {}
    original = runner.algo.optimize_agent

    def timed(at, samples):
        if at == itr:
            sent["at"] = time.monotonic()
        return original(at, samples)
    runner.algo.optimize_agent = timed
    with pytest.raises((SystemExit, KeyboardInterrupt)) as raised:
        with logger_context(LOG_DIR, run_ID, algo, dict(algo=algo), snapshot_mode="last",
                            override_prefix=True):
            runner.train()
    return raised.value, time.monotonic() - sent["at"]


@pytest.mark.slow
@pytest.mark.parametrize("algo, stop_itr, signum", [
    ("ppo", 5, signal.SIGTERM), ("ppo", 7, signal.SIGINT), ("dqn", 150, signal.SIGTERM)])
def test_a_stop_during_an_update_ends_the_iteration_and_resumes_exactly(algo, stop_itr, signum,
                                                                       in_tmp_cwd):
    """The run stops after the iteration the signal came in, with its final snapshot of
    that iteration (PPO 7: a log point, whose row the resumed run writes); resumed, it
    ends with the uninterrupted run's weights, counters and returns."""
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    if signum == signal.SIGINT and handlers[0] is not signal.default_int_handler:
        pytest.skip("Ctrl-C is handled by the test process's own handler here")
    full = train(algo, 0)
    error, _ = train_stopped(algo, 1, stop_itr, [signum])
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers
    assert isinstance(error, ERRORS[signum])
    if signum == signal.SIGTERM:
        assert error.code == 128 + signal.SIGTERM
    assert snapshot_itr(1) == stop_itr
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert f"{name} arrived during iteration {stop_itr}, which was finished" in debug_log(1)
    resumed = train(algo, 1, resume=True)
    rows, full_rows = progress(1), progress(0)
    for name in ("Iteration", "CumSteps", "CumUpdates", "CumCompletedTrajs"):
        assert column(rows, name) == column(full_rows, name), name
    full_state, resumed_state = flat_state(full.agent), flat_state(resumed.agent)
    assert [k for k in full_state if not torch.equal(full_state[k], resumed_state[k])] == []
    assert resumed.algo.update_counter == full.algo.update_counter
    for name in ("ReturnAverage", "Diagnostics/NewCompletedTrajs", "lossAverage"):
        if name in rows[0]:
            assert [r[name] for r in rows] == [r[name] for r in full_rows], name


@pytest.mark.parametrize("second_signal", [True, False], ids=["second_signal", "time_limit"])
def test_a_second_signal_or_the_time_limit_stops_inside_the_iteration(second_signal,
                                                                      in_tmp_cwd):
    """SIGTERM again, or an iteration that outlasts stop_wait_s: the run stops inside the
    iteration, its final snapshot is of the one before, and debug.log says why."""
    signums = [signal.SIGTERM] * (2 if second_signal else 1)
    error, elapsed = train_stopped("ppo", 1, 5, signums, wait_s=0.5, sleep_s=30.)
    assert isinstance(error, SystemExit) and error.code == 128 + signal.SIGTERM
    assert elapsed < 10.  # Not the 30 s the update sleeps.
    assert snapshot_itr(1) == 4
    log = debug_log(1)
    why = (r"then SIGTERM [\d.]+ s later" if second_signal else
           r"which did not end within 0\.5 s")
    assert re.search(rf"SIGTERM arrived during an iteration, {why}: stopped inside it", log)
    assert "final snapshot of iteration 4 written" in log
    assert "which was finished" not in log


@pytest.fixture
def sigterm_raises():
    """SIGTERM raises SystemExit in this process (as a runner sets it), not ends it."""
    def raise_exit(signum, frame):
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, raise_exit)
    yield raise_exit
    signal.signal(signal.SIGTERM, previous)


def test_signals_outside_an_iteration_or_without_a_wait_stop_at_once(sigterm_raises):
    logged = []
    with IterationStop(5., logged.append) as stop:
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.)  # Interrupted: outside an iteration, nothing is held.
        with stop.iteration(0):
            pass  # No signal: the block ends as it is.
        assert logged == []
        with pytest.raises(SystemExit):
            with stop.iteration(1):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # Held: the block goes on to its end.
                logged.append("block ended")
        assert logged[0] == "block ended"
        assert logged[1].startswith("SIGTERM arrived during iteration 1, which was finished (")
    assert signal.getsignal(signal.SIGTERM) is sigterm_raises
    with IterationStop(0., logged.append) as stop:  # As under SyncRl: nothing is held.
        assert signal.getsignal(signal.SIGTERM) is sigterm_raises
        with pytest.raises(SystemExit):
            with stop.iteration(0):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.)
                pytest.fail("SIGTERM was held")


def test_handlers_are_set_in_the_main_thread_only():
    previous = signal.getsignal(signal.SIGTERM)
    errors = []

    def in_thread():
        try:
            with IterationStop(5., print) as stop:
                with stop.iteration(0):
                    pass
        except Exception as error:  # noqa: BLE001
            errors.append(error)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert errors == [] and signal.getsignal(signal.SIGTERM) is previous
