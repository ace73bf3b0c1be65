"""Seeding of Python, numpy and torch random generators, and of environments."""
from __future__ import annotations

import hashlib
import operator
import os
import random
import time
from typing import Any, Iterable

import numpy as np
import torch

from rlframe.utils.logging import logger

# numpy accepts seeds below 2**32 - 1; reduce larger ones into range.
SEED_MODULUS = 4294967294

_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed ``random``, ``numpy``, ``torch`` (and CUDA when available) with ``seed``.

    The seed is reduced modulo ``SEED_MODULUS``, stored for ``get_seed`` and logged.

    Args:
        seed: any integer (numpy integers too).
    """
    global _seed
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer, got {seed!r} ({type(seed).__name__}).") from None
    seed %= SEED_MODULUS
    _seed = seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    logger.log(f"using seed {seed}", color="green")


def get_seed() -> int | None:
    """The seed last given to ``set_seed`` in this process (``None`` before)."""
    return _seed


def make_seed() -> int:
    """A fresh seed in ``[0, 10000)``.

    Mixes a nanosecond clock, the process id and OS entropy, so processes
    started at the same moment (even forked ones) get different seeds.
    """
    material = b"".join([
        time.perf_counter_ns().to_bytes(16, "little", signed=True),
        time.time_ns().to_bytes(16, "little", signed=True),
        os.getpid().to_bytes(8, "little"),
        os.urandom(16),
    ])
    digest = hashlib.blake2b(material, digest_size=8).digest()
    return int.from_bytes(digest, "little") % 10000


def set_envs_seeds(envs: Iterable[Any], seed: int | None) -> None:
    """Seed env ``i`` and its spaces with ``seed + i`` (nothing when ``seed`` is ``None``).

    ``env.seed``, ``env.action_space.seed`` and ``env.observation_space.seed``
    are called where they exist.
    """
    if seed is None:
        return
    for i, env in enumerate(envs):
        env_seed = seed + i
        if callable(getattr(env, "seed", None)):
            env.seed(env_seed)
        for space_name in ("action_space", "observation_space"):
            space = getattr(env, space_name, None)
            if callable(getattr(space, "seed", None)):
                space.seed(env_seed)
