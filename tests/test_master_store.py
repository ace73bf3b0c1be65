"""Rank 0 listens on its process group's port before the other ranks start, so two runs
started at the same moment cannot meet each other's ranks."""
import multiprocessing as mp
import socket

import pytest
import torch
import torch.distributed as dist

import rlframe.utils.distributed as distributed
from rlframe.utils.distributed import init_process_group, master_store
from rlframe.utils.synchronize import find_port


def test_a_port_taken_after_find_port_looked_is_passed_over(monkeypatch):
    """find_port saw the port free; another process bound it before the store did: the
    store listens on the next free port of the sequence instead of failing."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", find_port(3)))
    taken.listen()
    taken_port = taken.getsockname()[1]
    offered = [taken_port]

    def racy_find_port(offset):  # The first answer was true a moment ago.
        return offered.pop() if offered else find_port(offset)
    monkeypatch.setattr(distributed, "find_port", racy_find_port)
    try:
        store = master_store(3, world_size=1, timeout_s=5)
    finally:
        taken.close()
    assert store.port != taken_port and (store.port - 29500) % 100 == 3
    store.set("key", "value")
    assert store.get("key") == b"value"


def test_no_port_in_the_tries_names_them(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    monkeypatch.setattr(distributed, "find_port", lambda offset: port)
    try:
        with pytest.raises(RuntimeError, match=rf"offset=5.*3 tries.*{port}"):
            master_store(5, world_size=2, timeout_s=5, attempts=3)
    finally:
        held.close()


def _join_as_rank_1(init_method, results):
    init_process_group("gloo", 1, 2, init_method, timeout_s=30)
    value = torch.tensor([2.])
    dist.all_reduce(value)
    results.put(value.item())
    dist.destroy_process_group()


def test_two_groups_started_at_once_each_meet_their_own_rank():
    """Two rank 0s with the same port offset listen at once on different ports; each
    one's rank 1 joins it (the sums differ: 1 + 2 and 10 + 2)."""
    stores = [master_store(9, world_size=2, timeout_s=30) for _ in range(2)]
    assert stores[0].port != stores[1].port
    ctx = mp.get_context("fork")  # As SyncRl starts its ranks, after its store listens.
    results = ctx.Queue()
    children = [ctx.Process(target=_join_as_rank_1, args=(f"tcp://127.0.0.1:{s.port}", results))
                for s in stores]
    for child in children:
        child.start()
    sums = []
    try:
        for own, store in zip((1., 10.), stores):
            init_process_group("gloo", 0, 2, f"tcp://127.0.0.1:{store.port}", timeout_s=30,
                               store=store)
            value = torch.tensor([own])
            dist.all_reduce(value)
            sums.append(value.item())
            dist.destroy_process_group()
        assert sorted(results.get(timeout=30) for _ in children) == [3., 12.]
        assert sums == [3., 12.]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    assert [child.exitcode for child in children] == [0, 0]
