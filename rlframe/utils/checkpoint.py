"""What a run needs besides its weights to continue where it stopped: random number
generator states, the sampler's envs mid-episode, and (optionally) the replay buffer.

The snapshot itself (``params.pkl`` or ``itr_<N>.pkl``) holds tensors, numbers and
dicts only, so that ``torch.load(path, weights_only=True)`` reads it. Envs and replay
contents are Python objects and large arrays: they go to their own pickle files beside
the snapshot (:data:`SAMPLER_STATE_FILE`, :data:`REPLAY_FILE`), each tagged with the
iteration it belongs to and written atomically, and are read only to resume one's
own run.
"""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import random
import re
import tempfile
from typing import Any

import numpy as np
import torch

from rlframe.utils.collections import reduce_runtime_class

SAMPLER_STATE_FILE = "sampler_state.pkl"
REPLAY_FILE = "replay_buffer.pkl"
_ITR_SNAPSHOT = re.compile(r"itr_(\d+)\.pkl")


# ------------------------------------------------------------------------ snapshots
def itr_snapshots(run_dir: str) -> list[int]:
    """The iterations N of the ``itr_<N>.pkl`` snapshots in ``run_dir``, ascending."""
    return sorted(int(m.group(1)) for name in os.listdir(run_dir)
                  if (m := _ITR_SNAPSHOT.fullmatch(name)))


def find_snapshot(run_dir: str) -> str | None:
    """The newest snapshot of ``run_dir``: ``params.pkl`` or the ``itr_<N>.pkl`` of
    the highest N, whichever holds the later iteration (None if there is none)."""
    itrs = itr_snapshots(run_dir)
    newest_itr_file = os.path.join(run_dir, f"itr_{itrs[-1]}.pkl") if itrs else None
    last = os.path.join(run_dir, "params.pkl")
    if not os.path.exists(last):
        return newest_itr_file
    if itrs and itrs[-1] > snapshot_itr(last):
        return newest_itr_file
    return last


def snapshot_itr(path: str) -> int:
    """The iteration a snapshot file was written at."""
    return int(torch.load(path, map_location="cpu", weights_only=True)["itr"])


# ------------------------------------------------------------------------ RNG states
def rng_state() -> dict:
    """torch (CPU and CUDA), numpy's global and Python's ``random`` generator states,
    as tensors, numbers and lists."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return dict(
        torch=torch.get_rng_state(),
        torch_cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        numpy=dict(kind=kind, keys=torch.from_numpy(keys.astype(np.int64)), pos=int(pos),
                   has_gauss=int(has_gauss), cached=float(cached)),
        python=dict(version=version, internal=list(internal), gauss_next=gauss_next),
    )


def set_rng_state(state: dict) -> None:
    """Restore the generators saved by :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("torch_cuda") or []
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states[:torch.cuda.device_count()])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


# ------------------------------------------------------------------------ side files
class _StatePickler(pickle.Pickler):
    """Pickles the namedtuple classes rlframe makes at run time (env info schemas)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type):
            reduced = reduce_runtime_class(obj)
            if reduced is not None:
                return reduced
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """``pickle.dumps`` that also handles rlframe's run-time namedtuple classes."""
    buffer = io.BytesIO()
    _StatePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def write_state_file(run_dir: str, name: str, itr: int, state: Any) -> None:
    """Pickle ``state`` tagged with ``itr`` to ``run_dir/name``, atomically: streamed to
    a temporary file and renamed (a replay of gigabytes is never held twice in memory)."""
    fd, tmp_path = tempfile.mkstemp(dir=run_dir, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _StatePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(dict(itr=int(itr),
                                                                         state=state))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, os.path.join(run_dir, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


def read_state_file(run_dir: str, name: str, itr: int) -> tuple[Any, str | None]:
    """The state of ``run_dir/name`` if it belongs to iteration ``itr``.

    Returns:
        ``(state, None)``, or ``(None, why)`` when the file is missing, unreadable or of
        another iteration.
    """
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        return None, f"no {name}"
    try:
        with open(path, "rb") as f:
            saved = pickle.load(f)
    except Exception as error:  # noqa: BLE001 - reported; the run goes on without it.
        return None, f"{name} could not be read ({type(error).__name__}: {error})"
    if saved.get("itr") != itr:
        return None, (f"{name} is of iteration {saved.get('itr')}, the snapshot of "
                      f"iteration {itr}")
    return saved["state"], None


# ------------------------------------------------------------------------ replay buffers
def _walk_state(obj: Any, path: str, seen: set[int], out: dict[str, Any]) -> None:
    """Arrays and scalars reachable from a replay buffer's own objects, by path."""
    if isinstance(obj, np.ndarray):
        out[path] = obj
        return
    if isinstance(obj, (bool, int, float, np.generic)) or obj is None:
        out[path] = obj
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, tuple):  # namedarraytuples of arrays
        for i, item in enumerate(obj):
            _walk_state(item, f"{path}[{i}]", seen, out)
        return
    if type(obj).__module__.startswith("rlframe.replays") and hasattr(obj, "__dict__"):
        for name, value in vars(obj).items():
            _walk_state(value, f"{path}.{name}", seen, out)


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def replay_state(replay: Any) -> dict[str, Any]:
    """The contents of a replay buffer: every array it owns (once, views left out) and
    every number (cursor, priorities' maximum, beta, ...), keyed by attribute path."""
    found: dict[str, Any] = {}
    _walk_state(replay, "replay", set(), found)
    state, roots = {}, set()
    for path, value in found.items():
        if isinstance(value, np.ndarray):
            root = _root(value)
            if id(root) in roots:
                continue
            roots.add(id(root))
            value = root
        state[path] = value
    return state


def load_replay_state(replay: Any, state: dict[str, Any]) -> None:
    """Copy a :func:`replay_state` into ``replay`` (built with the same settings):
    arrays in place (shared memory stays shared), numbers and arrays made since
    construction (e.g. the last sampled tree indexes) by attribute."""
    current = replay_state(replay)
    for path, value in state.items():
        target = current.get(path)
        if isinstance(value, np.ndarray) and isinstance(target, np.ndarray):
            if target.shape != value.shape or target.dtype != value.dtype:
                raise ValueError(f"the saved replay buffer's {path} is {value.dtype} "
                                 f"{value.shape}, this one's {target.dtype} {target.shape}: "
                                 "was it made with other replay settings?")
            target[...] = value
            continue
        owner_path, _, name = path.rpartition(".")
        if not name or "[" in name:
            raise ValueError(f"the saved replay buffer does not match this one at {path}: "
                             "was it made with other replay settings?")
        setattr(_resolve(replay, owner_path), name, value)


def _resolve(replay: Any, path: str) -> Any:
    obj = replay
    for name in path.split(".")[1:]:
        obj = getattr(obj, name)
    return obj


# ------------------------------------------------------------------------ samplers
def sampler_state(sampler: Any) -> tuple[Any, str | None]:
    """The training envs of an in-process sampler (``SerialSampler``) mid-episode, with
    the stepping core's per-env bookkeeping and the agent's recurrent state.

    Returns:
        ``(state, None)``, or ``(None, why)`` when the sampler's envs live in other
        processes or do not pickle (a resumed run then starts fresh episodes).
    """
    stepper = getattr(getattr(sampler, "collector", None), "stepper", None)
    if stepper is None:
        return None, f"{type(sampler).__name__} steps its envs outside this process"
    try:
        state = stepper.state()
    except TypeError as error:
        return None, str(error)
    state["rnn_state"] = getattr(sampler.agent, "_prev_rnn_state", None)
    try:
        return dumps(state), None
    except Exception as error:  # noqa: BLE001 - e.g. an emulator handle
        return None, f"its envs do not pickle ({type(error).__name__}: {error})"


def load_sampler_state(sampler: Any, payload: bytes) -> None:
    """Put the envs and bookkeeping of :func:`sampler_state` back into ``sampler``
    (initialized with the same settings); its fresh envs are closed."""
    state = pickle.loads(payload)
    stepper = sampler.collector.stepper
    stepper.load_state(state)
    sampler.traj_infos = stepper.tracker
    if state["rnn_state"] is not None:
        sampler.agent._prev_rnn_state = state["rnn_state"]

