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
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol, Union

import numpy as np
import torch

from rlframe.utils.checks import listed, shape_differences
from rlframe.utils.collections import reduce_runtime_class

SAMPLER_STATE_FILE = "sampler_state.pkl"
REPLAY_FILE = "replay_buffer.pkl"
# The temporary files snapshots and their state files are written through (mkstemp's
# ".<name>.<random>.tmp" beside each), left behind only by a process killed mid-write.
_TEMPORARY = re.compile(r"\..+\.pkl\.[^.]+\.tmp")
_ITR_SNAPSHOT = re.compile(r"itr_(\d+)\.pkl")
# Where ``torch.load`` puts tensors: a device, a device name, a mapping of names, or a
# function of (storage, location).
MapLocation = Union[str, torch.device, dict[str, str], Callable[..., Any], None]


class HasStateDict(Protocol):
    """What a snapshot's weights are loaded into: an agent (or any torch module)."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> object: ...


# ------------------------------------------------------------------------ snapshots
def itr_snapshots(run_dir: str) -> list[int]:
    """The iterations N of the ``itr_<N>.pkl`` snapshots in ``run_dir``, ascending."""
    return sorted(int(m.group(1)) for name in os.listdir(run_dir)
                  if (m := _ITR_SNAPSHOT.fullmatch(name)))


def find_snapshot(run_dir: str) -> str | None:
    """The newest snapshot of ``run_dir``: ``params.pkl`` or the ``itr_<N>.pkl`` of
    the highest N, whichever holds the later iteration (None if there is none).

    Raises:
        SnapshotError: ``params.pkl`` must be read to compare it with ``itr_<N>.pkl``
            and is not a readable snapshot.
    """
    itrs = itr_snapshots(run_dir)
    newest_itr_file = os.path.join(run_dir, f"itr_{itrs[-1]}.pkl") if itrs else None
    last = os.path.join(run_dir, "params.pkl")
    if not os.path.exists(last):
        return newest_itr_file
    if itrs and itrs[-1] > snapshot_itr(last):
        return newest_itr_file
    return last


def snapshot_itr(path: str) -> int:
    """The iteration a snapshot file was written at.

    Raises:
        SnapshotError: ``path`` is not a readable snapshot or records no ``itr``.
    """
    return int(load_snapshot(path, required=("itr",))["itr"])


class SnapshotError(ValueError):
    """A file that is not a readable rlframe snapshot, or a snapshot that does not fit
    the run or agent it is loaded into."""


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's (zip) format starts with it.


def load_snapshot(path: str, map_location: MapLocation = "cpu",
                  required: tuple[str, ...] = ()) -> dict:
    """``torch.load(path, weights_only=True)`` of a snapshot, with errors that say what
    is wrong with the file.

    Args:
        path: the snapshot file (``params.pkl``, ``itr_<N>.pkl``).
        map_location: where tensors go, as for ``torch.load``.
        required: keys the snapshot must hold.

    Raises:
        SnapshotError: the file cannot be read, is empty or cut short, is not a file
            written by ``torch.save``, holds objects other than tensors, numbers,
            strings, lists and dicts, is not a dict, or lacks a ``required`` key.
    """
    def unreadable(why: str) -> SnapshotError:
        return SnapshotError(f"{path} is not a readable rlframe snapshot: {why}")

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(len(_ZIP_MAGIC))
    except OSError as error:
        raise unreadable(f"it cannot be read ({error.strerror or error}).") from None
    if size == 0:
        raise unreadable("the file is empty (0 bytes); it may be cut short (a write "
                         "that never finished, or a full disk).")
    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols: not ours.
            warnings.simplefilter("ignore")
            snapshot = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 - whatever a damaged or foreign file raises
        if "deserialize object on" in str(error):
            raise  # A readable file, for a device this machine lacks: torch says which.
        raise unreadable(_why_unreadable(error, head, size)) from None
    if not isinstance(snapshot, Mapping):
        raise unreadable(f"it holds a {type(snapshot).__name__}, not the dict of a snapshot.")
    missing = [key for key in required if key not in snapshot]
    if missing:
        raise unreadable(f"it lacks {missing} (its keys: {sorted(map(str, snapshot))[:10]}).")
    return dict(snapshot)


def _why_unreadable(error: Exception, head: bytes, size: int) -> str:
    """Why ``torch.load`` failed on a file starting with ``head``, in rlframe's words."""
    if "Unsupported global" in str(error):
        return ("it holds objects other than the tensors, numbers, strings, lists and dicts "
                "of an rlframe snapshot (saved by other code?).")
    if isinstance(error, EOFError) or head == _ZIP_MAGIC:
        kind = "a torch.save file" if head == _ZIP_MAGIC else "a file"
        return (f"{kind} whose end is missing or damaged ({size} bytes); it may be cut short "
                "(a copy or download that did not finish, or a full disk).")
    if head[:1] == b"\x80":  # A pickle's first opcode (PROTO), not torch.save's format.
        return ("it is a Python pickle, not a torch.save file of tensors, numbers, strings, "
                "lists and dicts as rlframe writes (saved by other code?).")
    return (f"its {size} bytes are not a file written by torch.save "
            f"({type(error).__name__} while reading it).")


_MAX_LISTED = 10  # Entries a mismatch lists before "and N more".


def load_agent_state(agent: HasStateDict, state_dict: object, path: str) -> None:
    """``agent.load_state_dict(state_dict)``; when the weights do not fit the agent's
    model, a :class:`SnapshotError` lists the parameters that differ.

    Args:
        agent: an initialized agent (its model built).
        state_dict: the snapshot's ``agent_state_dict``.
        path: the snapshot file, for the message.
    """
    if not isinstance(state_dict, Mapping):
        raise SnapshotError(f"{path} is not a readable rlframe snapshot: its "
                            f"agent_state_dict is a {type(state_dict).__name__}, not a dict.")
    try:
        agent.load_state_dict(state_dict)
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as error:
        differences = state_dict_differences(_shapes(agent.state_dict()), _shapes(state_dict))
        if not differences:
            raise
        raise SnapshotError(
            f"{path}: this snapshot's model does not fit this agent "
            f"({type(agent).__name__}): {differences}. Build the agent with the settings "
            "the run was trained with (model_kwargs, the algorithm, the env).") from None


def _shapes(tree: Any, prefix: str = "") -> dict[str, tuple[int, ...] | None]:
    """Dotted names of the tensors in a nested state dict, with their shapes
    (DistributedDataParallel's ``module.`` prefix left out)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for key, value in (tree.items() if isinstance(tree, Mapping) else ()):
        name = str(key)
        name = name[len("module."):] if name.startswith("module.") else name
        if isinstance(value, Mapping):
            out.update(_shapes(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = tuple(value.shape) if hasattr(value, "shape") else None
    return out


def state_dict_differences(agent: dict[str, Any], saved: dict[str, Any]) -> str:
    """What differs between two ``{name: shape}`` maps, readable: the parameters of
    other shapes, then those missing from and unexpected in the snapshot ("" if none)."""
    shaped, missing, unexpected = (sorted(names) for names in shape_differences(agent, saved))
    parts = []
    if shaped:
        parts.append("parameters of other shapes: " + listed(
            [f"{name} ({_shape(saved[name])} in the snapshot, {_shape(agent[name])} in the "
             "agent)" for name in shaped], _MAX_LISTED))
    if missing:
        parts.append("missing from the snapshot: " + listed(missing, _MAX_LISTED))
    if unexpected:
        parts.append("unexpected in the snapshot: " + listed(unexpected, _MAX_LISTED))
    return "; ".join(parts)


def _shape(shape: tuple[int, ...] | None) -> str:
    return "not a tensor" if shape is None else f"[{', '.join(map(str, shape))}]"


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


def dumps(obj: object) -> bytes:
    """``pickle.dumps`` that also handles rlframe's run-time namedtuple classes."""
    buffer = io.BytesIO()
    _StatePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def write_state_file(run_dir: str, name: str, itr: int, state: object) -> None:
    """Pickle ``state`` tagged with ``itr`` to ``run_dir/name``, atomically: streamed to
    a temporary file and renamed (a replay of gigabytes is never held twice in memory).

    Raises:
        OSError: naming the file, when it cannot be written (e.g. the disk is full);
            the file of the previous snapshot is left as it was.
    """
    path = os.path.join(run_dir, name)
    tmp_path = stage_state_file(run_dir, name, itr, state)
    try:
        os.replace(tmp_path, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise write_error(path, error) from error


def stage_state_file(run_dir: str, name: str, itr: int, state: object) -> str:
    """The first half of :func:`write_state_file`: ``state`` tagged with ``itr``, pickled
    to a temporary file beside ``run_dir/name`` and flushed to disk, whose path is
    returned for ``os.replace`` onto ``run_dir/name`` (or ``os.unlink``).

    Raises:
        OSError: naming the file, when it cannot be written; nothing is left behind.
    """
    path = os.path.join(run_dir, name)
    try:
        fd, tmp_path = tempfile.mkstemp(dir=run_dir, prefix=f".{name}.", suffix=".tmp")
    except OSError as error:
        raise write_error(path, error) from error
    try:
        with os.fdopen(fd, "wb") as f:
            _StatePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(dict(itr=int(itr),
                                                                         state=state))
            f.flush()
            os.fsync(f.fileno())
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        if isinstance(error, OSError):
            raise write_error(path, error) from error
        raise
    return tmp_path


def remove_stale_snapshot_files(run_dir: str) -> list[str]:
    """Remove the temporary files (``.<name>.pkl.<random>.tmp``) that a process killed
    while writing its snapshot left in ``run_dir`` (a replay's can be gigabytes);
    returns their names."""
    stale = sorted(name for name in os.listdir(run_dir) if _TEMPORARY.fullmatch(name))
    for name in stale:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(run_dir, name))
    return stale


def write_error(path: str, error: OSError,
                kept: str = "its earlier version, if any, is left as it was") -> OSError:
    """``error`` (e.g. a full disk) restated to name the file that was being written
    and what was kept (``kept``); the errno, and so the ``OSError`` subclass, is kept."""
    message = f"could not write {path}: {error.strerror or error} ({kept})"
    return OSError(error.errno, message) if error.errno else OSError(message)


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
    if not isinstance(saved, dict):
        return None, f"{name} holds a {type(saved).__name__}, not a saved state"
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


def replay_state(replay: object) -> dict[str, Any]:
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


def load_replay_state(replay: object, state: dict[str, Any]) -> None:
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


def _resolve(replay: object, path: str) -> Any:
    obj = replay
    for name in path.split(".")[1:]:
        obj = getattr(obj, name)
    return obj


# ------------------------------------------------------------------------ samplers
def sampler_state(sampler: Any) -> tuple[bytes | None, str | None]:
    """The training envs of an in-process sampler (``SerialSampler``) mid-episode, with
    the stepping core's per-env bookkeeping and the agent's recurrent state; and its
    evaluation envs, whose random state the next evaluations' episodes start from (left
    out where they do not pickle).

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
    eval_stepper = getattr(getattr(sampler, "eval_collector", None), "stepper", None)
    if eval_stepper is not None:
        with contextlib.suppress(Exception):  # Not plain envs, or they do not pickle.
            return dumps(dict(state, eval_envs=eval_stepper.state()["envs"])), None
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
    eval_stepper = getattr(getattr(sampler, "eval_collector", None), "stepper", None)
    if eval_stepper is not None and state.get("eval_envs") is not None:
        with contextlib.suppress(TypeError, ValueError):  # Other evaluation envs now.
            eval_stepper.replace_envs(state["eval_envs"])

