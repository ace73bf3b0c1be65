"""Validating affinity dicts and pinning processes: clear errors, no crash without affinity."""
import warnings

import pytest
import torch

from rlframe.utils.launching import affinity, pinning
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.launching.pinning import (
    check_affinity, check_cpus, check_workers_cpus, set_cpu_affinity, set_torch_threads,
)

# Machine facts passed explicitly so results do not depend on the test machine.
NO_HT = dict(hyperthread_offset=0, n_socket=1)


# --- check_affinity --------------------------------------------------------------------------

def test_check_async_affinity(monkeypatch):
    monkeypatch.setattr(pinning, "usable_cpus", lambda: [0, 1, 2, 3])
    result = make_affinity(n_cpu_core=4, n_gpu=0, cpu_per_run=4, async_sample=True, **NO_HT)
    assert check_affinity(result) is result
    bad = make_affinity(n_cpu_core=8, n_gpu=0, cpu_per_run=8, async_sample=True, **NO_HT)
    with pytest.raises(ValueError, match=r"sampler'\]\['all_cpus'\].*\[4, 5, 6, 7\]"):
        check_affinity(bad)
    bad.set_affinity = False  # Nothing is pinned, so ids are not checked.
    check_affinity(bad)
    with pytest.raises(ValueError, match=r"optimizer.*non-empty"):
        check_affinity(dict(optimizer=[], sampler=dict(workers_cpus=[0])))
    with pytest.raises(ValueError, match=r"optimizer'\]\[0\]\['cpus'\]"):
        check_affinity(dict(optimizer=[dict(cuda_idx=None)], sampler=dict(workers_cpus=[0])))
    with pytest.raises(ValueError, match=r"optimizer'\]\[0\]\['cpus'\].*9"):
        check_affinity(dict(optimizer=[dict(cpus=(9,))], sampler=dict(workers_cpus=[0])))
    with pytest.raises(ValueError, match=r"sampler.*dict or a non-empty list"):
        check_affinity(dict(optimizer=[dict(cpus=(0,))], sampler=[]))
    with pytest.raises(TypeError, match=r"sampler'\]\[0\]"):
        check_affinity(dict(optimizer=[dict(cpus=(0,))], sampler=[[1, 2]]))


# --- check_workers_cpus ----------------------------------------------------------------------

def test_check_workers_cpus(monkeypatch):
    monkeypatch.setattr(pinning, "usable_cpus", lambda: [0, 1, 2, 3])
    assert check_workers_cpus(dict(workers_cpus=[0, (1, 3), [2]])) == [(0,), (1, 3), (2,)]
    assert check_workers_cpus(dict(workers_cpus=[0, 1]), alternating=True) == [(0,), (1,)]
    with pytest.raises(ValueError, match="workers_cpus.*at least one"):
        check_workers_cpus(dict(workers_cpus=[]))
    with pytest.raises(ValueError, match="workers_cpus.*required"):
        check_workers_cpus(dict(master_cpus=[0]))
    with pytest.raises(ValueError, match=r"workers_cpus'\]\[1\].*\[7\]"):
        check_workers_cpus(dict(workers_cpus=[0, (1, 7)]))
    assert check_workers_cpus(dict(workers_cpus=[7], set_affinity=False)) == [(7,)]
    with pytest.raises(ValueError, match="workers_cpus.*even.*3"):
        check_workers_cpus(dict(workers_cpus=[0, 1, 2]), alternating=True)
    with pytest.raises(ValueError, match="workers_cpus.*even"):
        check_workers_cpus(dict(workers_cpus=[0, 1, 2], alternating=True))
    with pytest.raises(TypeError, match="workers_cpus"):
        check_workers_cpus(None)


# --- check_cpus ------------------------------------------------------------------------------

def test_check_cpus(monkeypatch):
    monkeypatch.setattr(pinning, "usable_cpus", lambda: [0, 1])
    assert check_cpus(1, "cpus") == [1]
    assert check_cpus((0, 1), "cpus") == [0, 1]
    assert check_cpus([5], "cpus", check_usable=False) == [5]
    with pytest.raises(ValueError, match=r"my_cpus=\[0, 5\].*\[5\].*\[0, 1\]"):
        check_cpus([0, 5], "my_cpus")
    with pytest.raises(ValueError, match="non-empty"):
        check_cpus([True], "cpus")
    with pytest.raises(TypeError, match="cpus.*int or a sequence"):
        check_cpus(None, "cpus")


# --- Pinning ---------------------------------------------------------------------------------

def test_set_cpu_affinity_without_support_warns_once(monkeypatch):
    # A process object without cpu_affinity, as psutil gives on macOS.
    monkeypatch.setattr(pinning.psutil, "Process", lambda *args: object())
    monkeypatch.setattr(pinning, "_warned_no_affinity", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert set_cpu_affinity([0]) is None
        assert set_cpu_affinity(0) is None
    assert [str(w.message) for w in caught] == [
        "CPU affinity is not supported on this platform; processes are not pinned."]
    assert set_cpu_affinity(None) is None


def test_set_torch_threads():
    n_threads = torch.get_num_threads()
    try:
        assert set_torch_threads(None) == n_threads
        assert set_torch_threads(1) == 1
    finally:
        torch.set_num_threads(n_threads)


def test_more_torch_threads_than_cpus_warns_with_the_key(monkeypatch):
    """A thread count above the CPUs the process may use is named in a warning; within
    them, or without a key to name (autotune's trials), nothing is said."""
    n_threads = torch.get_num_threads()
    monkeypatch.setattr(pinning, "usable_cpus", lambda: [3])
    try:
        with pytest.warns(UserWarning) as caught:
            assert set_torch_threads(2, "master_torch_threads") == 2
        assert [str(w.message) for w in caught] == [
            "master_torch_threads=2 torch threads, but this process may run on 1 CPU(s) [3]: "
            "the threads would take turns on the same cores. Set master_torch_threads to at "
            "most 1, or give the process more CPUs."]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            set_torch_threads(1, "master_torch_threads")
            set_torch_threads(2)
            set_torch_threads(None, "master_torch_threads")
    finally:
        torch.set_num_threads(n_threads)


def test_affinity_module_reexports_pinning():
    """rlpyt scripts import these from the affinity module."""
    for name in ("SYNC_AFFINITY_KEYS", "ASYNC_AFFINITY_KEYS", "OPTIMIZER_AFFINITY_KEYS",
                 "check_affinity", "check_async_affinity", "check_workers_cpus", "check_cpus",
                 "usable_cpus", "set_cpu_affinity", "set_torch_threads"):
        assert getattr(affinity, name) is getattr(pinning, name), name
        assert name in affinity.__all__, name
    assert all(hasattr(affinity, name) for name in affinity.__all__)
