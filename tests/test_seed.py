"""Seeding helpers."""
from __future__ import annotations

import multiprocessing as mp
import random

import numpy as np
import torch

from rlframe.utils.seed import SEED_MODULUS, get_seed, make_seed, set_envs_seeds, set_seed


def draws():
    return random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()


def test_set_seed_reproduces_draws(capsys):
    set_seed(123)
    first = draws()
    set_seed(123)
    assert draws() == first
    assert get_seed() == 123
    assert "using seed 123" in capsys.readouterr().out
    set_seed(124)
    assert draws() != first


def test_set_seed_reduces_large_seeds():
    set_seed(SEED_MODULUS + 5)
    assert get_seed() == 5
    set_seed(np.int64(7))
    assert get_seed() == 7


def test_make_seed_range():
    seeds = [make_seed() for _ in range(200)]
    assert all(isinstance(s, int) and 0 <= s < 10000 for s in seeds)
    assert len(set(seeds)) > 150


def _seeds_after_barrier(barrier, results):
    barrier.wait()
    results.put(tuple(make_seed() for _ in range(4)))


def test_make_seed_differs_between_simultaneous_processes():
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [ctx.Process(target=_seeds_after_barrier, args=(barrier, results)) for _ in range(2)]
    try:
        for p in procs:
            p.start()
        seeds = [results.get(timeout=30) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()
    assert seeds[0] != seeds[1]


class _Space:
    def __init__(self):
        self.seeds = []

    def seed(self, seed):
        self.seeds.append(seed)


class _Env:
    def __init__(self):
        self.seeds = []
        self.action_space = _Space()
        self.observation_space = _Space()

    def seed(self, seed):
        self.seeds.append(seed)


class _BareEnv:
    action_space = None


def test_set_envs_seeds():
    envs = [_Env(), _Env(), _BareEnv()]
    set_envs_seeds(envs, 10)
    assert [e.seeds for e in envs[:2]] == [[10], [11]]
    assert envs[1].action_space.seeds == [11] and envs[1].observation_space.seeds == [11]
    set_envs_seeds(envs, None)
    assert envs[0].seeds == [10]
