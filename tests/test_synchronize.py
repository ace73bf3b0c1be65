"""Readers-writer lock, queue draining and port search."""
from __future__ import annotations

import multiprocessing as mp
import queue
import socket

import pytest

from rlframe.utils.synchronize import RWLock, drain_queue, find_port

CTX = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def _put_items(q):
    for item in (1, 2, None, 3, None):
        q.put(item)


def _read_then_signal(lock, entered, release):
    with lock:
        entered.set()
        release.wait(10)


def _stop(procs):
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
            p.join()


def test_drain_queue_non_blocking():
    q = queue.Queue()
    for item in (1, None, 2, 3):
        q.put(item)
    assert drain_queue(q) == [1, 2, 3]
    assert drain_queue(q) == []


def test_drain_queue_guard_sentinel_puts_it_back():
    q = queue.Queue()
    for item in (1, None, 2):
        q.put(item)
    assert drain_queue(q, guard_sentinel=True) == [1]
    assert [q.get_nowait(), q.get_nowait()] == [2, None]


def test_drain_queue_blocks_for_sentinels_from_another_process():
    q = CTX.Queue()
    proc = CTX.Process(target=_put_items, args=(q,))
    proc.start()
    try:
        assert drain_queue(q, n_sentinel=2) == [1, 2, 3]
    finally:
        _stop([proc])
    with pytest.raises(ValueError, match="n_sentinel"):
        drain_queue(q, n_sentinel=-1)


def test_rwlock_readers_share_and_writer_excludes():
    lock = RWLock(ctx=CTX)
    entered, release = CTX.Event(), CTX.Event()
    reader = CTX.Process(target=_read_then_signal, args=(lock, entered, release))
    try:
        with lock:  # a reader here does not block a reader in the child
            reader.start()
            assert entered.wait(10)
            assert not lock.write_lock.acquire(timeout=0.05)  # but writers wait
        assert not lock.write_lock.acquire(timeout=0.05)  # the child still reads
        release.set()
        reader.join(10)
        assert lock.write_lock.acquire(timeout=5)
        lock.release_write()

        lock.acquire_write()
        entered.clear()
        release.clear()
        reader = CTX.Process(target=_read_then_signal, args=(lock, entered, release))
        reader.start()
        assert not entered.wait(0.2)  # reader blocked by the writer
        lock.release_write()
        assert entered.wait(10)
        release.set()
    finally:
        release.set()
        _stop([reader])
    with pytest.raises(RuntimeError, match="release_read"):
        lock.release_read()


def test_find_port_returns_bindable_port():
    port = find_port(7)
    assert port >= 29507 and (port - 29500) % 100 == 7
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        other = find_port(7)  # the occupied port is skipped
    assert other != port and (other - 29500) % 100 == 7


@pytest.mark.parametrize("offset", [-1, 100, 1.5, "3", True])
def test_find_port_rejects_bad_offset(offset):
    with pytest.raises(ValueError, match="offset must be an integer in \\[0, 100\\)"):
        find_port(offset)
