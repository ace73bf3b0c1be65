"""Readers-writer lock, queue draining and port search."""
from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time

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


def _hammer_reads(lock, data, active, max_active, torn, stop, n_reads):
    """Read the whole array under the read lock until told to stop; count torn reads
    (elements that differ: a write seen half done) and concurrent readers."""
    while not stop.value:
        with lock:
            with active.get_lock():
                active.value += 1
                max_active.value = max(max_active.value, active.value)
            first = data[0]
            time.sleep(0.001)  # Hold the lock a while: other readers come in meanwhile.
            if any(x != first for x in data[:]):
                with torn.get_lock():
                    torn.value += 1
            with active.get_lock():
                active.value -= 1
        with n_reads.get_lock():
            n_reads.value += 1


def test_rwlock_concurrent_readers_and_one_writer():
    """Three readers and one writer on a shared array: readers overlap each other,
    never see a write half done, and the writer is not starved."""
    lock = RWLock(ctx=CTX)
    data = CTX.RawArray("l", 2000)
    active, max_active = CTX.Value("i", 0), CTX.Value("i", 0)
    torn, n_reads, stop = CTX.Value("i", 0), CTX.Value("l", 0), CTX.RawValue("b", 0)
    readers = [CTX.Process(target=_hammer_reads,
                           args=(lock, data, active, max_active, torn, stop, n_reads))
               for _ in range(3)]
    try:
        for reader in readers:
            reader.start()
        deadline = time.time() + 10
        while n_reads.value < 50 and time.time() < deadline:  # Readers running first.
            time.sleep(0.01)
        n_writes = 0
        for value in range(1, 201):
            with lock.write_lock:
                for i in range(len(data)):  # Element by element: slow enough to be caught.
                    data[i] = value
            n_writes += 1
        deadline = time.time() + 5
        while max_active.value < 2 and time.time() < deadline:
            time.sleep(0.01)
        stop.value = 1
    finally:
        stop.value = 1
        _stop(readers)
    assert all(r.exitcode == 0 for r in readers)
    assert n_writes == 200 and data[0] == data[-1] == 200
    assert n_reads.value > 0
    assert torn.value == 0
    assert max_active.value >= 2, "readers never held the lock together"
