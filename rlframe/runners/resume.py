"""Resuming a run from its snapshot: what the runners add to a snapshot, write beside
it, and load back at startup (see ``logger_context(resume=True)``).

A snapshot holds the agent's and optimizer's states, the algorithm's counters and
schedules (``algo.state_dict()``), the random generators and the runner's cumulative
statistics. Beside it go the in-process sampler's envs mid-episode
(``sampler_state.pkl``: a resumed serial run continues exactly where it stopped) and,
for off-policy algorithms made with ``checkpoint_replay=True``, the replay buffer
(``replay_buffer.pkl``). The exploration and learning-rate schedules follow the
iteration, which continues from the snapshot's.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from rlframe.utils.checkpoint import (REPLAY_FILE, SAMPLER_STATE_FILE, SnapshotError,
                                      load_agent_state, load_replay_state,
                                      load_sampler_state, load_snapshot, read_state_file,
                                      replay_state, rng_state, sampler_state, set_rng_state,
                                      write_state_file)
from rlframe.utils.logging import logger

SNAPSHOT_KEYS = ("itr", "cum_steps", "agent_state_dict", "optimizer_state_dict")


def training_state(runner: Any) -> dict:
    """The snapshot entries that let ``runner`` resume: algorithm state, generators and
    the runner's cumulative statistics (numbers, tensors, dicts and lists only)."""
    state = dict(algo_state_dict=runner.algo.state_dict(), rng_state=rng_state(),
                 runner_state=dict(cum_time=float(time.time() - runner._start_time),
                                   cum_eval_time=float(getattr(runner, "_cum_eval_time", 0.)),
                                   cum_completed_trajs=int(runner._cum_completed_trajs)))
    window = getattr(runner, "_traj_infos", None)
    if window is not None and not isinstance(window, list):  # MinibatchRl's deque
        state["runner_state"]["traj_window"] = [_plain(info) for info in window]
    if hasattr(runner, "throttle_itr"):  # AsyncRl: where the optimizer waits next.
        state["runner_state"]["throttle_itr"] = float(runner.throttle_itr)
    return state


def write_side_files(runner: Any, itr: int) -> None:
    """Beside the snapshot just written: the sampler's envs and, when asked, the replay."""
    run_dir = logger.get_snapshot_dir()
    if run_dir is None:
        return
    state, why = sampler_state(runner.sampler)
    if state is not None:
        write_state_file(run_dir, SAMPLER_STATE_FILE, itr, state)
    elif not getattr(runner, "_told_no_sampler_state", False):
        runner._told_no_sampler_state = True
        logger.log(f"Snapshots keep no env states ({why}): a resumed run starts its "
                   "training episodes afresh.")
    if getattr(runner.algo, "checkpoint_replay", False):
        replay = runner.algo.replay_buffer
        storage = getattr(replay, "storage", None)
        # A shared replay (AsyncRl) is read while its writers wait.
        with storage.read_access() if storage is not None else contextlib.nullcontext():
            write_state_file(run_dir, REPLAY_FILE, itr, replay_state(replay))


def restore(runner: Any, path: str) -> int:
    """Load the snapshot ``path`` (and its side files) into an initialized ``runner``.

    Returns:
        The first iteration to run: the snapshot's plus one.

    Raises:
        SnapshotError: (a ``ValueError``) if the file is not a readable snapshot, was
            written by a run with another batch size, lacks what resuming needs, or
            holds a model that does not fit the runner's agent.
    """
    snapshot = _load(path, map_location=runner.agent.device)
    itr = int(snapshot["itr"])
    expected = (itr + 1) * runner.itr_batch_size
    _check_steps(path, snapshot, expected, f"iteration {itr}",
                 f"this runner's iterations of {runner.itr_batch_size} steps make {expected}: "
                 "the sampler's batch_T, batch_B or the number of ranks differ")
    load_agent_state(runner.agent, snapshot["agent_state_dict"], path)
    runner.algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    runner.algo.load_state_dict(snapshot["algo_state_dict"])
    _restore_statistics(runner, snapshot["runner_state"])
    run_dir = os.path.dirname(os.path.abspath(path))
    _restore_sampler(runner, run_dir, itr)
    _restore_replay(runner, run_dir, itr)
    set_rng_state(snapshot["rng_state"])  # Last: nothing above draws from them.
    runner.last_completed_itr = itr
    logger.log(f"Resumed from {os.path.basename(path)}: iteration {itr}, "
               f"{expected} env steps, {runner.algo.update_counter} updates done.")
    return itr + 1


def load_async_snapshot(runner: Any, path: str) -> dict:
    """First part of resuming an ``AsyncRl`` run, before its children start: the
    agent's weights (into the model the sampler shares), the replay and the optimizer's
    throttle. Returns the snapshot, for :func:`restore_async`."""
    snapshot = _load(path, map_location="cpu", extra=("sampler_itr",))
    sampler_itr = int(snapshot["sampler_itr"])
    expected = sampler_itr * runner.sampler_batch_size
    _check_steps(path, snapshot, expected, f"sampler iteration {sampler_itr}",
                 f"this sampler's batches of {runner.sampler_batch_size} steps make "
                 f"{expected}: its batch_T or batch_B differ")
    load_agent_state(runner.agent, snapshot["agent_state_dict"], path)
    runner.throttle_itr = float(snapshot["runner_state"]["throttle_itr"])
    _restore_replay(runner, os.path.dirname(os.path.abspath(path)), int(snapshot["itr"]))
    return snapshot


def restore_async(runner: Any, snapshot: dict, path: str) -> int:
    """Second part, once the optimizer is built: its state, the algorithm's counters,
    the runner's statistics and generators. Returns the first optimizer iteration."""
    itr = int(snapshot["itr"])
    runner.algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    runner.algo.load_state_dict(snapshot["algo_state_dict"])
    _restore_statistics(runner, snapshot["runner_state"])
    runner._last_sampler_itr = runner._log_sampler_itr = int(snapshot["sampler_itr"])
    set_rng_state(snapshot["rng_state"])
    runner.last_completed_itr = itr
    logger.log(f"Resumed from {os.path.basename(path)}: optimizer iteration {itr}, sampler "
               f"iteration {snapshot['sampler_itr']} ({snapshot['cum_steps']} env steps), "
               f"{runner.algo.update_counter} updates done; the sampler starts fresh episodes.")
    return itr + 1


def _load(path: str, map_location: Any, extra: tuple[str, ...] = ()) -> dict:
    """The snapshot ``path``, checked to hold what resuming needs."""
    snapshot = load_snapshot(path, map_location=map_location)
    missing = [key for key in SNAPSHOT_KEYS + extra + ("algo_state_dict", "rng_state")
               if key not in snapshot]
    if missing:
        raise SnapshotError(f"{path} cannot be resumed from: it lacks {missing} (written by "
                            "an older version or by hand).")
    return snapshot


def _check_steps(path: str, snapshot: dict, expected: int, at: str, mismatch: str) -> None:
    if int(snapshot["cum_steps"]) != expected:
        raise SnapshotError(f"{path} was written after {snapshot['cum_steps']} env steps "
                            f"at {at}, but {mismatch} from the run's.")


def restore_optimizer(algo: Any, path: str) -> None:
    """An ``AsyncRl`` optimizer rank 1..: the optimizer's state and counters of the
    snapshot ``path`` (the weights come from rank 0)."""
    snapshot = load_snapshot(path, required=("optimizer_state_dict", "algo_state_dict"))
    algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    algo.load_state_dict(snapshot["algo_state_dict"])


def _restore_statistics(runner: Any, state: dict) -> None:
    now = time.time()
    runner._start_time = now - float(state["cum_time"])
    runner._last_time = now
    runner._cum_completed_trajs = int(state["cum_completed_trajs"])
    runner._last_update_counter = runner.algo.update_counter
    if hasattr(runner, "_cum_eval_time"):
        runner._cum_eval_time = float(state["cum_eval_time"])
    window = getattr(runner, "_traj_infos", None)
    if window is not None and not isinstance(window, list):
        window.extend(state.get("traj_window", []))


def _restore_sampler(runner: Any, run_dir: str, itr: int) -> None:
    state, why = read_state_file(run_dir, SAMPLER_STATE_FILE, itr)
    if state is None:
        logger.log(f"Training envs start afresh ({why}).")
        return
    load_sampler_state(runner.sampler, state)


def _restore_replay(runner: Any, run_dir: str, itr: int) -> None:
    replay = getattr(runner.algo, "replay_buffer", None)
    if replay is None:
        return
    if not getattr(runner.algo, "checkpoint_replay", False):
        logger.log("The replay buffer starts empty (the algorithm was not made with "
                   "checkpoint_replay=True).")
        return
    state, why = read_state_file(run_dir, REPLAY_FILE, itr)
    if state is None:
        logger.log(f"WARNING: the replay buffer starts empty ({why}).")
        return
    load_replay_state(replay, state)
    logger.log(f"Replay buffer restored: {replay.n_stored} steps per env.")


def _plain(info: Any) -> dict:
    """A trajectory info as a dict of Python numbers (loadable with weights_only)."""
    return {key: (value.item() if hasattr(value, "item") else value)
            for key, value in dict(info).items()
            if isinstance(value, (int, float, bool)) or hasattr(value, "item")}
