"""Children's start method where forking this process would break them: a default
fork becomes forkserver (logged); an explicit fork is refused with the reason."""
import multiprocessing as mp

import pytest
import torch

from rlframe.utils.synchronize import cuda_fork_problem, start_method_without_fork


def test_no_problem_keeps_what_was_asked():
    for method in (None, "fork", "spawn"):
        assert start_method_without_fork(method, "AsyncRl", None) == method


def test_a_default_fork_becomes_forkserver_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(mp, "get_start_method", lambda allow_none=False: "fork")
    assert start_method_without_fork(None, "SyncRl", "the reason") == "forkserver"
    assert ("SyncRl: starting the child processes with start_method='forkserver' instead of "
            "the default 'fork': the reason.") in capsys.readouterr().out
    assert start_method_without_fork("spawn", "SyncRl", "the reason") == "spawn"


def test_an_explicit_fork_is_refused_naming_the_reason():
    with pytest.raises(RuntimeError, match=r"AsyncRl: start_method='fork' cannot work here: "
                                           r"the reason\. Pass start_method='forkserver'"):
        start_method_without_fork("fork", "AsyncRl", "the reason")


def test_cuda_is_a_problem_only_for_children_on_a_gpu_after_cuda_was_initialized(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert cuda_fork_problem([None, None]) is None
    assert "has initialized CUDA" in cuda_fork_problem([None, 0])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert cuda_fork_problem([0, 1]) is None
