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
import weakref
from typing import TYPE_CHECKING, Protocol

from rlframe.utils.checkpoint import (REPLAY_FILE, SAMPLER_STATE_FILE, SnapshotError,
                                      load_agent_state, load_replay_state,
                                      load_sampler_state, load_snapshot, read_state_file,
                                      remove_stale_snapshot_files, replay_state, rng_state,
                                      sampler_state, set_rng_state, stage_state_file)

if TYPE_CHECKING:
    from rlframe.utils.logging.run_logger import Logger
    import torch

    from rlframe.agents.base import BaseAgent
    from rlframe.algos.base import RlAlgorithm
    from rlframe.samplers.base import BaseSampler

SNAPSHOT_KEYS = ("itr", "cum_steps", "agent_state_dict", "optimizer_state_dict")


class ResumableRunner(Protocol):
    """What resuming reads and restores of a runner: its parts, and its counters through
    ``state_dict()`` / ``load_state_dict()``."""

    agent: BaseAgent
    algo: RlAlgorithm
    sampler: BaseSampler
    itr_batch_size: int
    last_completed_itr: int | None
    logger: Logger

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class AsyncResumableRunner(ResumableRunner, Protocol):
    """An ``AsyncRl`` runner: also its sampler's batch size and its optimizer's throttle."""

    sampler_batch_size: int

    def load_throttle(self, state: dict) -> None: ...


# Runners already told that their snapshots keep no env states (told once per runner).
_told_no_sampler_state: weakref.WeakSet = weakref.WeakSet()


def training_state(runner: ResumableRunner) -> dict:
    """The snapshot entries that let ``runner`` resume: algorithm state, generators and
    the runner's ``state_dict()`` (numbers, tensors, dicts and lists only)."""
    return dict(algo_state_dict=runner.algo.state_dict(), rng_state=rng_state(),
                runner_state=runner.state_dict())


def stage_side_files(runner: ResumableRunner, itr: int) -> list[tuple[str, str]]:
    """The files that go beside the snapshot of ``itr`` (the sampler's envs and, when
    asked, the replay), written to temporary files: :func:`commit_side_files` renames
    them into place once the snapshot itself is written, so that a process killed while
    writing a replay of gigabytes leaves the earlier snapshot and its files together.

    Returns:
        ``(temporary path, final path)`` of each file.
    """
    run_dir = runner.logger.get_snapshot_dir()
    if run_dir is None:
        return []
    staged = []
    state, why = sampler_state(runner.sampler)
    if state is not None:
        staged.append((stage_state_file(run_dir, SAMPLER_STATE_FILE, itr, state),
                       os.path.join(run_dir, SAMPLER_STATE_FILE)))
    elif runner not in _told_no_sampler_state:
        _told_no_sampler_state.add(runner)
        runner.logger.log(f"Snapshots keep no env states ({why}): a resumed run starts its "
                          "training episodes afresh.")
    if getattr(runner.algo, "checkpoint_replay", False):
        replay = runner.algo.replay_buffer
        storage = getattr(replay, "storage", None)
        try:  # A shared replay (AsyncRl) is read while its writers wait.
            with storage.read_access() if storage is not None else contextlib.nullcontext():
                staged.append((stage_state_file(run_dir, REPLAY_FILE, itr,
                                                replay_state(replay)),
                               os.path.join(run_dir, REPLAY_FILE)))
        except BaseException:
            discard_side_files(staged)
            raise
    return staged


def commit_side_files(staged: list[tuple[str, str]]) -> None:
    """Rename :func:`stage_side_files`' temporary files onto their final names."""
    for tmp_path, path in staged:
        os.replace(tmp_path, path)


def discard_side_files(staged: list[tuple[str, str]]) -> None:
    """Remove :func:`stage_side_files`' temporary files (the snapshot was not written)."""
    for tmp_path, _ in staged:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)


def restore(runner: ResumableRunner, path: str) -> int:
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
    runner.load_state_dict(_runner_state(snapshot))
    run_dir = os.path.dirname(os.path.abspath(path))
    _remove_stale_files(runner, run_dir)
    _restore_sampler(runner, run_dir, itr)
    _restore_replay(runner, run_dir, itr)
    set_rng_state(snapshot["rng_state"])  # Last: nothing above draws from them.
    runner.last_completed_itr = itr  # Last: the whole run is restored.
    runner.logger.log(f"Resumed from {os.path.basename(path)}: iteration {itr}, "
                      f"{expected} env steps, {runner.algo.update_counter} updates done.")
    return itr + 1


def load_async_snapshot(runner: AsyncResumableRunner, path: str) -> dict:
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
    runner.load_throttle(snapshot["runner_state"])
    run_dir = os.path.dirname(os.path.abspath(path))
    _remove_stale_files(runner, run_dir)
    _restore_replay(runner, run_dir, int(snapshot["itr"]))
    return snapshot


def restore_async(runner: AsyncResumableRunner, snapshot: dict, path: str) -> int:
    """Second part, once the optimizer is built: its state, the algorithm's counters,
    the runner's statistics and generators. Returns the first optimizer iteration."""
    itr = int(snapshot["itr"])
    runner.algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    runner.algo.load_state_dict(snapshot["algo_state_dict"])
    runner.load_state_dict(_runner_state(snapshot, sampler_itr=int(snapshot["sampler_itr"])))
    set_rng_state(snapshot["rng_state"])
    runner.last_completed_itr = itr  # Last: the whole run is restored.
    runner.logger.log(
        f"Resumed from {os.path.basename(path)}: optimizer iteration {itr}, sampler "
        f"iteration {snapshot['sampler_itr']} ({snapshot['cum_steps']} env steps), "
        f"{runner.algo.update_counter} updates done; the sampler starts fresh episodes.")
    return itr + 1


def _load(path: str, map_location: str | torch.device | None, extra: tuple[str, ...] = ()) -> dict:
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


def restore_optimizer(algo: RlAlgorithm, path: str) -> None:
    """An ``AsyncRl`` optimizer rank 1..: the optimizer's state and counters of the
    snapshot ``path`` (the weights come from rank 0)."""
    snapshot = load_snapshot(path, required=("optimizer_state_dict", "algo_state_dict"))
    algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    algo.load_state_dict(snapshot["algo_state_dict"])


def _runner_state(snapshot: dict, **known: int) -> dict:
    """The snapshot's runner state, with what the snapshot states beside it (an
    asynchronous run's sampler iteration), less the last completed iteration: that one
    is restored last, once the whole run is."""
    state = dict(snapshot["runner_state"])
    state.pop("last_completed_itr", None)
    state.update(known)
    return state


def _restore_sampler(runner: ResumableRunner, run_dir: str, itr: int) -> None:
    state, why = read_state_file(run_dir, SAMPLER_STATE_FILE, itr)
    if state is None:
        runner.logger.log(f"Training envs start afresh ({why}).")
        return
    load_sampler_state(runner.sampler, state)


def _remove_stale_files(runner: ResumableRunner, run_dir: str) -> None:
    """In the run's own directory (never another run's, which may be writing), the
    temporary files of a snapshot that was being written when the run stopped."""
    own = runner.logger.get_snapshot_dir()
    if own is None or os.path.abspath(own) != run_dir:
        return
    stale = remove_stale_snapshot_files(run_dir)
    if stale:
        runner.logger.log(f"Removed the temporary files of a snapshot being written when "
                          f"the run stopped: {', '.join(stale)}.")


def _restore_replay(runner: ResumableRunner, run_dir: str, itr: int) -> None:
    replay = getattr(runner.algo, "replay_buffer", None)
    if replay is None:
        return
    if not getattr(runner.algo, "checkpoint_replay", False):
        runner.logger.log("The replay buffer starts empty (the algorithm was not made with "
                          "checkpoint_replay=True).")
        return
    state, why = read_state_file(run_dir, REPLAY_FILE, itr)
    if state is None:
        runner.logger.log(f"WARNING: the replay buffer starts empty ({why}).")
        return
    load_replay_state(replay, state)
    runner.logger.log(f"Replay buffer restored: {replay.n_stored} steps per env.")
