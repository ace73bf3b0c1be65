"""torch.distributed helpers of the synchronous runners: process groups, objects,
gradients and parameter checks across ranks."""
from __future__ import annotations

import datetime
import hashlib
import os
import threading
import urllib.parse
from typing import Any, Callable, Iterable, Mapping, Protocol, TypeVar

import torch
import torch.distributed as dist

from rlframe.utils.collections import iter_leaves
from rlframe.utils.synchronize import find_port

T = TypeVar("T")


class Stateful(Protocol):
    """Anything with a torch-style state dict (an agent, a module, an optimizer)."""

    def state_dict(self) -> dict: ...  # noqa: D102

    def load_state_dict(self, state_dict: dict) -> object: ...  # noqa: D102


# Environment variables that torchrun (torch.distributed.run) sets in every process.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_env() -> dict[str, int] | None:
    """This process's place in a torchrun job, or None when not started by torchrun.

    Returns:
        ``dict(rank, world_size, local_rank)`` when every variable of
        :data:`TORCHRUN_VARS` is set and ``WORLD_SIZE > 1``; else None.
    """
    if any(name not in os.environ for name in TORCHRUN_VARS):
        return None
    try:
        values = {name: int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    except ValueError as error:
        raise ValueError(f"torchrun's RANK, WORLD_SIZE and LOCAL_RANK must be integers: "
                         f"{error}") from None
    if values["WORLD_SIZE"] <= 1:
        return None
    return dict(rank=values["RANK"], world_size=values["WORLD_SIZE"],
                local_rank=values["LOCAL_RANK"])


def torchrun_rank() -> int:
    """This process's rank in a torchrun job of several processes, else 0."""
    env = torchrun_env()
    return 0 if env is None else env["rank"]


def master_store(offset: int, world_size: int, timeout_s: float,
                 attempts: int = 20) -> dist.TCPStore:
    """Rank 0's store of a process group, listening on 127.0.0.1 (``store.port``) before
    any other rank starts; they join with ``init_method=f"tcp://127.0.0.1:{store.port}"``.

    The port is the first of :func:`~rlframe.utils.synchronize.find_port`'s sequence
    for ``offset`` that the store could bind. Finding a free port and binding it are
    two steps: another run started at the same moment can take the port in between,
    and its ranks would then meet this run's. Binding here, and trying the next free
    port when the bind fails, leaves no such gap.

    Args:
        offset: as for ``find_port`` (e.g. the first master CPU, modulo 100).
        world_size: number of ranks, this one included.
        timeout_s: seconds the store waits for a key.
        attempts: ports tried before giving up.

    Raises:
        RuntimeError: no port could be bound in ``attempts`` tries.
    """
    tried = []
    for _ in range(attempts):
        port = find_port(offset)
        try:
            store = dist.TCPStore("127.0.0.1", port, world_size, is_master=True,
                                  timeout=datetime.timedelta(seconds=timeout_s),
                                  wait_for_workers=False)
        except RuntimeError as error:  # DistNetworkError: taken since find_port looked.
            tried.append(f"{port} ({error})")
            continue
        return store
    raise RuntimeError(f"master_store(offset={offset}): could not listen on a free port in "
                       f"{attempts} tries: {'; '.join(tried)[:1000]}")


def init_process_group(backend: str, rank: int, world_size: int, init_method: str,
                       timeout_s: float, store: dist.Store | None = None
                       ) -> dist.ProcessGroup | None:
    """Join the default process group; returns a gloo group for Python objects.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (CUDA).
        rank, world_size: this process's rank and the number of processes.
        init_method: ``"tcp://host:port"``, or ``"env://"`` under torchrun.
        timeout_s: seconds a collective may wait for the other ranks.
        store: rank 0's store made by :func:`master_store` (listening on the
            ``init_method``'s port); used instead of connecting to ``init_method``.

    Returns:
        None when the default group is gloo (it carries objects itself), else a
        new gloo group over the same ranks.
    """
    # torch.distributed.nn.functional gives its functions ``group=group.WORLD`` defaults,
    # evaluated when it is first imported (DistributedDataParallel imports it). Imported
    # after this call, it would hold the default group for good: destroy_process_group
    # could not free it, and its gloo threads would still run while the interpreter
    # shuts down, which now and then aborts the process ("terminate called without an
    # active exception") after a run has finished.
    import torch.distributed.nn.functional  # noqa: F401
    timeout = datetime.timedelta(seconds=timeout_s)
    if init_method == "env://":
        store = _torchrun_store(rank, world_size, timeout)
    elif store is None and init_method.startswith("tcp://"):
        # Every rank passes a store: torch keys a store it makes itself under a prefix,
        # one it is given without, and rank 0 may be given master_store's.
        address = urllib.parse.urlsplit(init_method)
        store = dist.TCPStore(address.hostname, address.port, world_size,
                              is_master=rank == 0, timeout=timeout)
    if store is None:
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=timeout)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
    return None if backend == "gloo" else dist.new_group(backend="gloo")


def _torchrun_store(rank: int, world_size: int, timeout: datetime.timedelta) -> dist.Store:
    """torchrun's store (``MASTER_ADDR:MASTER_PORT``) seen through the keys of this
    restart attempt only.

    Under ``torchrun --max-restarts``, every attempt gets the same store (the agent's),
    so the process group's keys of a failed attempt, such as the address of a rank that
    died, would be read by the next one, which then cannot connect. A prefix per
    attempt (``TORCHELASTIC_RESTART_COUNT``) keeps them apart.
    """
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world_size, is_master=not agent_store and rank == 0,
                          timeout=timeout, multi_tenant=not agent_store)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"rlframe/attempt_{attempt}", store)


def init_process_group_watched(backend: str, rank: int, world_size: int, init_method: str,
                               timeout_s: float, check: Callable[[], None],
                               poll_s: float = 0.1, store: dist.Store | None = None
                               ) -> dist.ProcessGroup | None:
    """:func:`init_process_group` in a thread, calling ``check()`` every ``poll_s``
    seconds meanwhile: ``check`` raises if a process this one waits for has failed,
    which would otherwise keep it waiting for ``timeout_s``.

    Returns:
        as :func:`init_process_group`; its error, if any, is raised here.
    """
    result: dict[str, Any] = {}

    def join() -> None:
        try:
            result["group"] = init_process_group(backend, rank, world_size, init_method,
                                                 timeout_s, store)
        except BaseException as error:  # noqa: BLE001 - re-raised in the calling thread.
            result["error"] = error
    thread = threading.Thread(target=join, daemon=True, name="rlframe-join-process-group")
    thread.start()
    while thread.is_alive():
        thread.join(poll_s)
        if thread.is_alive():
            check()
    if "error" in result:
        raise result["error"]
    return result["group"]


def broadcast_object(obj: T, src: int = 0, group: dist.ProcessGroup | None = None) -> T:
    """``obj`` of rank ``src``, on every rank (picklable objects)."""
    holder = [obj]
    dist.broadcast_object_list(holder, src=src, group=group)
    return holder[0]


def gather_objects(obj: T, dst: int = 0,
                   group: dist.ProcessGroup | None = None) -> list[T] | None:
    """Every rank's ``obj``, in rank order, on rank ``dst`` (None on the others)."""
    world_size = dist.get_world_size(group)
    gathered: list[Any] | None = [None] * world_size if dist.get_rank() == dst else None
    dist.gather_object(obj, gathered, dst=dst, group=group)
    return gathered


def is_gloo_pair(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``group`` (default: the world) is a gloo group of exactly two ranks."""
    return (dist.is_available() and dist.is_initialized()
            and dist.get_world_size(group) == 2 and dist.get_backend(group) == "gloo")


def sum_over_ranks_(tensor: torch.Tensor, group: dist.ProcessGroup | None = None
                    ) -> torch.Tensor:
    """Sum a contiguous ``tensor`` over the ranks of ``group``, in place.

    On a gloo group of two ranks, with a CPU tensor, the ranks swap their
    tensors in one pair of point-to-point messages and each adds the other's:
    on tensors the size of RL networks' gradients this takes a third to a half
    of the time of gloo's ``all_reduce``, which waits on several message round
    trips (``benchmarks/sync_scaling.py``). Float addition commutes, so both
    ranks get bitwise the same sum. Any other group: ``dist.all_reduce``.

    Returns:
        ``tensor``.
    """
    if tensor.device.type != "cpu" or not is_gloo_pair(group):
        dist.all_reduce(tensor, group=group)
        return tensor
    rank = dist.get_rank(group)
    peer = 1 - rank if group is None else dist.get_global_rank(group, 1 - rank)
    other = torch.empty_like(tensor)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, peer, group),
                                        dist.P2POp(dist.irecv, other, peer, group)]):
        work.wait()
    return tensor.add_(other)


def pair_mean_hook(group: dist.ProcessGroup | None,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DistributedDataParallel communication hook: the mean of a gradient
    bucket over a gloo group of two ranks, by :func:`sum_over_ranks_`.

    The same numbers as DDP's default hook (divide by the world size, then
    sum), bitwise. Registered by ``rlframe.agents.base.wrap_ddp`` where it
    applies.
    """
    buffer = bucket.buffer()
    sum_over_ranks_(buffer.div_(2), group)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


# DDP checks a hook's annotations against these objects; this module's are strings.
pair_mean_hook.__annotations__.update(
    {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]})


def average_gradients(params: Iterable[torch.Tensor]) -> None:
    """Average the gradients of ``params`` over all ranks, in place.

    For parameters trained outside DistributedDataParallel (e.g. SAC's
    ``log_alpha``); a no-op without a process group of several ranks.
    """
    if not dist.is_available() or not dist.is_initialized():
        return
    world_size = dist.get_world_size()
    if world_size == 1:
        return
    for p in params:
        if p.grad is not None:
            sum_over_ranks_(p.grad).div_(world_size)


def broadcast_tensors(tensors: Iterable[torch.Tensor], src: int = 0,
                      group: dist.ProcessGroup | None = None) -> None:
    """Overwrite ``tensors`` with rank ``src``'s values, in place, through a gloo
    ``group`` (CUDA tensors travel through the CPU)."""
    for t in tensors:
        if t.device.type == "cpu":
            dist.broadcast(t.detach(), src=src, group=group)
        else:
            staged = t.detach().cpu()
            dist.broadcast(staged, src=src, group=group)
            t.detach().copy_(staged)


def broadcast_state(obj: Stateful, src: int = 0, group: dist.ProcessGroup | None = None) -> None:
    """Give ``obj`` (anything with ``state_dict``/``load_state_dict``, e.g. an agent)
    rank ``src``'s state on every rank: every tensor of its state dict, target
    networks and buffers included."""
    state = obj.state_dict()
    broadcast_tensors([t for _, t in iter_leaves(state) if isinstance(t, torch.Tensor)],
                      src=src, group=group)
    obj.load_state_dict(state)


def state_digest(state: Mapping[str, object]) -> str:
    """SHA-1 of every tensor in a (nested) state dict, with its path: equal digests on
    two ranks mean bit-identical parameters."""
    digest = hashlib.sha1()
    for path, leaf in iter_leaves(state):
        if isinstance(leaf, torch.Tensor):
            digest.update(path.encode())
            digest.update(leaf.detach().cpu().reshape(-1).contiguous().view(torch.uint8)
                          .numpy().tobytes())
    return digest.hexdigest()


def is_collective_error(error: BaseException) -> bool:
    """Whether ``error`` looks like a broken process group (a peer died or timed out)."""
    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        word in text for word in ("gloo", "Connection reset", "Connection closed", "NCCL",
                                  "Timed out", "timed out", "Broken pipe"))
