"""Build and convert nested array buffers (tuples, namedtuples, namedarraytuples).

Every function here recurses through (named)tuples and keeps their structure;
``None`` leaves stay ``None``.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
from multiprocessing import heap as mp_heap
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar, overload

import numpy as np
import torch

from rlframe.utils.collections import (is_namedarraytuple, is_namedtuple,
                                       namedarraytuple_like)

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy.typing as npt

    from rlframe.utils.collections import NamedArrayTuple

    TensorTree: TypeAlias = "torch.Tensor | NamedArrayTuple"
    """A tensor, or a (nested) namedarraytuple of tensors: e.g. an observation of a
    ``Dict`` space, or an LSTM state ``(h, c)``. For type checkers only."""
    ArrayTree: TypeAlias = "np.ndarray | NamedArrayTuple"
    """The numpy counterpart of :data:`TensorTree` (e.g. a replay's stored fields)."""
    Tree: TypeAlias = "np.ndarray | torch.Tensor | tuple"
    """Arrays or tensors, or (named) tuples of them, nested: what every function here walks."""

# A tree that a function returns with its structure (and, mostly, leaf kind) kept.
TreeT = TypeVar("TreeT", bound="np.ndarray | torch.Tensor | tuple | list | None")


def _rebuild(struct: Any, values: list) -> Any:
    """Rebuild a tuple-like ``struct`` with new field ``values``."""
    if is_namedarraytuple(struct):
        return type(struct)(*values)
    if is_namedtuple(struct):
        return namedarraytuple_like(struct)(*values)
    return tuple(values)


@overload
def buffer_from_example(example: None, leading_dims: int | Sequence[int],
                        share_memory: bool = False) -> None: ...
@overload
def buffer_from_example(example: np.ndarray | np.generic | float,
                        leading_dims: int | Sequence[int],
                        share_memory: bool = False) -> np.ndarray: ...
@overload
def buffer_from_example(example: tuple, leading_dims: int | Sequence[int],
                        share_memory: bool = False) -> NamedArrayTuple: ...
@overload
def buffer_from_example(example: npt.ArrayLike, leading_dims: int | Sequence[int],
                        share_memory: bool = False) -> ArrayTree: ...
def buffer_from_example(example: npt.ArrayLike | None, leading_dims: int | Sequence[int],
                        share_memory: bool = False) -> ArrayTree | tuple | None:
    """Zero-filled buffer shaped like ``example`` with extra leading dims.

    Args:
        example: an array, a number, or a (nested) namedtuple of them.
        leading_dims: e.g. ``(T, B)``; the buffer has shape ``[*leading_dims, *example.shape]``.
        share_memory: allocate on shared memory that forked/spawned workers write to.

    Returns:
        numpy arrays inside namedarraytuples (namedtuples are upgraded; a plain
        tuple stays a tuple, which type checkers see as a NamedArrayTuple too).
    """
    if example is None:
        return None
    if isinstance(example, tuple):
        return _rebuild(example, [buffer_from_example(v, leading_dims, share_memory)
                                  for v in example])
    return build_array(example, leading_dims, share_memory)


def build_array(example: npt.ArrayLike, leading_dims: int | Sequence[int],
                share_memory: bool = False) -> np.ndarray:
    """Zero numpy array of shape ``[*leading_dims, *np.shape(example)]``, example's dtype."""
    a = np.asarray(example)
    if a.dtype == object:
        raise TypeError("Buffer example value cannot be of type object "
                        f"(got {type(example).__name__}: {example!r}).")
    if isinstance(leading_dims, (int, np.integer)):
        leading_dims = (int(leading_dims),)
    shape = tuple(int(d) for d in leading_dims) + a.shape
    if share_memory:
        return np_mp_array(shape, a.dtype)
    return np.zeros(shape, dtype=a.dtype)


def _rebuild_shared_array(raw: Any, dtype: str, shape: tuple, strides: tuple,
                          offset: int) -> "SharedNdarray":
    buffer = raw.buffer if isinstance(raw, mp_heap.Arena) else raw
    arr = np.ndarray(shape, dtype=np.dtype(dtype), buffer=buffer, offset=offset,
                     strides=strides).view(SharedNdarray)
    arr._raw = raw
    return arr


def _start_address(raw: Any) -> int:
    """Address of the first byte of a ``RawArray`` or of an ``Arena``'s mapping."""
    if isinstance(raw, mp_heap.Arena):
        return np.frombuffer(raw.buffer, np.uint8).__array_interface__["data"][0]
    return ctypes.addressof(raw)


class SharedNdarray(np.ndarray):
    """A numpy array (or a view of one) on ``multiprocessing`` shared memory.

    Forked children share it directly. When pickled to a spawned or forkserver
    child (as a Process argument), the underlying shared memory (a ``RawArray``,
    or for large arrays an ``Arena`` of their own) is handed over together with
    the view's offset and strides, so the child writes the same memory, e.g.
    ``samples.agent.action`` (a view of the [T + 1, B] array).
    """

    _raw: Any = None

    def __array_finalize__(self, obj):
        # Views and slices keep a reference to the shared memory they live in.
        self._raw = getattr(obj, "_raw", None)

    def __reduce__(self):
        raw = self._raw
        # Shared memory travels only to a child being started; pickles made for
        # anything else (files, queues) hold a copy of the values.
        if raw is None or mp.context.get_spawning_popen() is None:
            return np.asarray(self).__reduce__()
        offset = self.__array_interface__["data"][0] - _start_address(raw)
        return (_rebuild_shared_array,
                (raw, self.dtype.str, self.shape, self.strides, offset))


# Shared arrays of at least this many bytes get a multiprocessing Arena (a new,
# unlinked shared-memory file) of their own, instead of a RawArray block.
OWN_ARENA_BYTES = 2 ** 20


def np_mp_array(shape: int | Sequence[int], dtype: npt.DTypeLike) -> np.ndarray:
    """Zeroed numpy array on ``multiprocessing`` shared memory.

    The memory is anonymous and freed with the last process that maps it:
    nothing is left in ``/dev/shm``. Like ``np.zeros``, a large array takes
    memory only where it is written: it gets a new shared-memory file of its
    own, which reads as zeros. (``RawArray`` writes zeros over its whole block,
    since its heap reuses freed blocks; for a 1M-transition Atari replay that
    is 8 GB of memory committed, and seconds spent, before the first step.)
    """
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    size = max(int(np.prod(shape)), 1) * dtype.itemsize
    if size >= OWN_ARENA_BYTES:
        raw = mp_heap.Arena(size)
    else:
        raw = mp.RawArray("b", size)  # zero-initialised
    return _rebuild_shared_array(raw, dtype.str, shape, None, 0)


@overload
def torchify_buffer(buffer_: None) -> None: ...
@overload
def torchify_buffer(buffer_: NamedArrayTuple) -> NamedArrayTuple: ...
@overload
def torchify_buffer(buffer_: np.ndarray | np.generic | torch.Tensor | float) -> torch.Tensor: ...
@overload
def torchify_buffer(buffer_: npt.ArrayLike) -> TensorTree | tuple: ...
def torchify_buffer(buffer_: npt.ArrayLike | torch.Tensor | None) -> TensorTree | tuple | None:
    """numpy arrays -> torch tensors sharing memory (structure kept)."""
    if buffer_ is None:
        return None
    if isinstance(buffer_, np.ndarray):
        return torch.from_numpy(np.asarray(buffer_))
    if isinstance(buffer_, (np.generic, int, float, bool)):
        return torch.as_tensor(buffer_)
    if isinstance(buffer_, torch.Tensor):
        return buffer_
    if isinstance(buffer_, tuple):
        return _rebuild(buffer_, [torchify_buffer(b) for b in buffer_])
    return torch.as_tensor(buffer_)


@overload
def numpify_buffer(buffer_: None) -> None: ...
@overload
def numpify_buffer(buffer_: NamedArrayTuple) -> NamedArrayTuple: ...
@overload
def numpify_buffer(buffer_: torch.Tensor | np.ndarray) -> np.ndarray: ...
@overload
def numpify_buffer(buffer_: Tree) -> ArrayTree | tuple: ...
def numpify_buffer(buffer_: Tree | None) -> ArrayTree | tuple | None:
    """torch tensors -> numpy arrays (CPU tensors share memory)."""
    if buffer_ is None:
        return None
    if isinstance(buffer_, torch.Tensor):
        try:
            return buffer_.numpy()  # CPU tensors without grad: the common, cheapest case.
        except (RuntimeError, TypeError):
            return buffer_.detach().cpu().numpy()
    if isinstance(buffer_, tuple):
        return _rebuild(buffer_, [numpify_buffer(b) for b in buffer_])
    return buffer_


class RowWriter:
    """Writes ``[B]`` rows into row ``t`` of one ``[T, B]`` buffer, one assignment per leaf.

    ``dst[t] = src`` on a namedarraytuple walks both structures at every call.
    A RowWriter lists ``dst``'s leaves once; afterwards a source of the type it
    first saw has its leaves read by one ``attrgetter`` call and each is written
    with one numpy assignment (torch tensors through :func:`numpify_buffer`).
    Sources of another type, and buffers holding plain (unnamed) tuples, take
    ``dst[t] = numpify_buffer(src)``: the same result, the general way.

    Args:
        dst: a numpy array or a (nested) namedarraytuple of arrays, leading dim
            [T]; ``None`` leaves are left alone.
    """

    def __init__(self, dst: ArrayTree):
        self.dst = dst
        paths = _leaf_paths(dst) if is_namedarraytuple(dst) else None
        self._leaves: list[np.ndarray] = []
        self._get: Callable[[Any], tuple] | None = None
        if paths:
            self._leaves = [attrgetter(p)(dst) for p in paths]
            self._get = attrgetter(*paths)  # One path: the leaf itself, not a tuple.
        self._one_leaf = len(self._leaves) == 1
        self._src_type: type | None = None

    def write(self, t: int, src: ArrayTree | TensorTree) -> None:
        """``dst[t] = src`` for rows ``src`` [B, ...] (numpy or torch, same structure)."""
        if type(src) is self._src_type:
            values = self._get(src)
            if self._one_leaf:
                values = (values,)
            for leaf, value in zip(self._leaves, values):
                leaf[t] = value if type(value) is np.ndarray else numpify_buffer(value)
        elif type(src) is np.ndarray:
            self.dst[t] = src
        elif (self._src_type is None and self._get is not None
              and getattr(src, "_fields", None) == self.dst._fields):
            self._src_type = type(src)
            self.write(t, src)
        else:
            self.dst[t] = numpify_buffer(src)


def _leaf_paths(tree: Any, prefix: str = "") -> list[str] | None:
    """Dotted field paths of the non-None leaves of nested namedtuples (None if a plain
    tuple occurs: its items have no names)."""
    paths: list[str] = []
    for name, value in zip(tree._fields, tree):
        if isinstance(value, tuple):
            if not is_namedtuple(value):
                return None
            sub = _leaf_paths(value, f"{prefix}{name}.")
            if sub is None:
                return None
            paths.extend(sub)
        elif value is not None:
            paths.append(prefix + name)
    return paths


def buffer_to(buffer_: TreeT, device: torch.device | str | int | None = None) -> TreeT:
    """Move every tensor to ``device`` (numpy arrays raise TypeError).

    Tensors already there, and (namedarray)tuples all of whose leaves are, are
    returned as they are: no copies, no rebuilt tuples.
    """
    if buffer_ is None:
        return buffer_
    if device is not None and not isinstance(device, torch.device):
        device = torch.device(device)
    return _buffer_to(buffer_, device)


def _buffer_to(buffer_: Any, device: torch.device | None) -> Any:
    if isinstance(buffer_, torch.Tensor):
        return buffer_ if buffer_.device == device else buffer_.to(device)
    if isinstance(buffer_, np.ndarray):
        raise TypeError("Cannot move numpy array to device: torchify_buffer() it first.")
    if isinstance(buffer_, tuple):
        moved = [None if b is None else _buffer_to(b, device) for b in buffer_]
        if is_namedtuple(buffer_) and not is_namedarraytuple(buffer_):
            return _rebuild(buffer_, moved)  # Plain namedtuples become namedarraytuples.
        if all(m is b for m, b in zip(moved, buffer_)):
            return buffer_
        return _rebuild(buffer_, moved)
    return buffer_


def buffer_method(buffer_: TreeT, method_name: str, *args: Any, **kwargs: Any) -> TreeT:
    """Call ``leaf.method_name(*args, **kwargs)`` on every leaf, e.g. ``"float"``; the
    arguments go to the method as they are."""
    if buffer_ is None:
        return buffer_
    if isinstance(buffer_, (tuple, list)):
        return _rebuild(buffer_, [buffer_method(b, method_name, *args, **kwargs)
                                  for b in buffer_]) if isinstance(buffer_, tuple) else \
            [buffer_method(b, method_name, *args, **kwargs) for b in buffer_]
    return getattr(buffer_, method_name)(*args, **kwargs)


def buffer_func(buffer_: TreeT, func: Callable[..., Any], *args: Any, **kwargs: Any
                ) -> TreeT:
    """Call ``func(leaf, *args, **kwargs)`` on every leaf; the arguments go to ``func``
    as they are."""
    if buffer_ is None:
        return buffer_
    if isinstance(buffer_, tuple):
        return _rebuild(buffer_, [buffer_func(b, func, *args, **kwargs) for b in buffer_])
    return func(buffer_, *args, **kwargs)


@overload
def get_leading_dims(buffer_: None, n_dim: int = 1) -> None: ...
@overload
def get_leading_dims(buffer_: Tree, n_dim: int = 1) -> tuple[int, ...]: ...
def get_leading_dims(buffer_: Tree | None, n_dim: int = 1) -> tuple[int, ...] | None:
    """Leading ``n_dim`` dims shared by every leaf (ValueError if they differ; None for
    a tree of None leaves)."""
    if buffer_ is None:
        return None
    if isinstance(buffer_, tuple):
        dims = [get_leading_dims(b, n_dim) for b in buffer_]
        dims = [d for d in dims if d is not None]
        if not dims:
            return None
        if any(d != dims[0] for d in dims[1:]):
            fields = getattr(buffer_, "_fields", None)
            raise ValueError(f"Leading dims mismatch among fields {fields}: {dims}.")
        return dims[0]
    return tuple(buffer_.shape[:n_dim])
