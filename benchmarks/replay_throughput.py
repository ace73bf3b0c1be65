"""Replay buffer throughput against a deque of per-step tuples, measured in one run.

Each buffer holds 1e6 transitions of a CartPole-like step (observation
float32[4], int64 action, float32 reward, bool done) from B=8 envs. Appends come
in sampler-sized chunks [T=128, B=8]; the append rate is measured while filling
the buffer from empty and wrapping once more over 10% of it. Sampling draws
batches of 32 and 256 transitions, returned as torch tensors.

Baseline: ``collections.deque(maxlen=1e6)`` of ``(obs, action, reward,
next_obs, done)`` tuples, filled with ``deque.extend(zip(...))`` from the same
chunks, sampled with ``random.sample`` and stacked into torch tensors. The
replay batches carry more (previous action and reward, target inputs at t+n,
n-step return, done_n), so the comparison favours the deque on content.
A preallocated Python list used as a ring (same tuples, indexed at random:
O(1) access where the deque's is O(n)) is shown for reference. Prioritized
sampling is timed together with ``update_batch_priorities``, as an
algorithm uses it.

    python benchmarks/replay_throughput.py [--seconds 1.0] [--n_step_return 1]
"""
import argparse
import collections
import random
import time

import numpy as np
import torch

from rlframe.replays.non_sequence.prioritized import PrioritizedReplayBuffer
from rlframe.replays.non_sequence.uniform import UniformReplayBuffer
from rlframe.utils.collections import namedarraytuple

from _timing import warn_if_cpus_busy

SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
CAPACITY, B, CHUNK_T = int(1e6), 8, 128


def make_chunks(n: int, seed: int = 0) -> list:
    """``n`` distinct [CHUNK_T, B] chunks to cycle through."""
    rng = np.random.default_rng(seed)
    return [SamplesToBuffer(
        observation=rng.normal(size=(CHUNK_T, B, 4)).astype(np.float32),
        action=rng.integers(0, 2, size=(CHUNK_T, B)),
        reward=np.ones((CHUNK_T, B), np.float32),
        done=rng.random((CHUNK_T, B)) < 0.02,
    ) for _ in range(n)]


def n_fill_chunks() -> int:
    """Chunks that fill the buffer and wrap over 10% of it."""
    return int(np.ceil(1.1 * CAPACITY / (CHUNK_T * B)))


def timed_rate(step, items_per_call: int, seconds: float) -> float:
    """Items per second of repeated ``step()`` calls for about ``seconds``."""
    step()  # warm-up
    n_calls, start = 0, time.perf_counter()
    while True:
        step()
        n_calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n_calls * items_per_call / elapsed


def deque_fill(chunks: list) -> tuple[collections.deque, float]:
    """Fill a deque of per-step tuples; returns it and transitions/s."""
    dq = collections.deque(maxlen=CAPACITY)
    n_chunks = n_fill_chunks()
    start = time.perf_counter()
    for i in range(n_chunks):
        c = chunks[i % len(chunks)]
        obs = c.observation.transpose(1, 0, 2).reshape(-1, 4)  # env-major, so t+1 follows t
        next_obs = np.roll(c.observation, -1, axis=0).transpose(1, 0, 2).reshape(-1, 4)
        dq.extend(zip(obs, c.action.T.ravel().tolist(), c.reward.T.ravel().tolist(), next_obs,
                      c.done.T.ravel().tolist()))
    return dq, n_chunks * CHUNK_T * B / (time.perf_counter() - start)


def list_ring_fill(chunks: list) -> tuple[list, float]:
    """Fill a preallocated list of per-step tuples as a ring; returns it and transitions/s."""
    ring, cursor = [None] * CAPACITY, 0
    n_chunks = n_fill_chunks()
    start = time.perf_counter()
    for i in range(n_chunks):
        c = chunks[i % len(chunks)]
        obs = c.observation.transpose(1, 0, 2).reshape(-1, 4)
        next_obs = np.roll(c.observation, -1, axis=0).transpose(1, 0, 2).reshape(-1, 4)
        steps = list(zip(obs, c.action.T.ravel().tolist(), c.reward.T.ravel().tolist(),
                         next_obs, c.done.T.ravel().tolist()))
        head = min(len(steps), CAPACITY - cursor)
        ring[cursor:cursor + head] = steps[:head]
        ring[:len(steps) - head] = steps[head:]
        cursor = (cursor + len(steps)) % CAPACITY
    return ring, n_chunks * CHUNK_T * B / (time.perf_counter() - start)


def tuples_to_batch(batch: list):
    """Per-step tuples -> torch tensors."""
    obs, action, reward, next_obs, done = zip(*batch)
    return (torch.from_numpy(np.stack(obs)), torch.as_tensor(action),
            torch.as_tensor(reward), torch.from_numpy(np.stack(next_obs)),
            torch.as_tensor(done))


def list_ring_sample(ring: list, batch_size: int):
    """One batch from the list ring (uniform, with replacement) as torch tensors."""
    return tuples_to_batch([ring[i] for i in random.choices(range(CAPACITY), k=batch_size)])


def deque_sample(dq: collections.deque, batch_size: int):
    """One batch from the deque as torch tensors."""
    return tuples_to_batch(random.sample(dq, batch_size))


def replay_fill(replay, chunks: list) -> float:
    """Append chunks until the replay is full and wrapped; returns transitions/s."""
    n_chunks = n_fill_chunks()
    start = time.perf_counter()
    for i in range(n_chunks):
        replay.append_samples(chunks[i % len(chunks)])
    return n_chunks * CHUNK_T * B / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per sampling measurement")
    parser.add_argument("--n_step_return", type=int, default=1)
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    torch.set_num_threads(1)
    random.seed(0)
    np.random.seed(0)
    chunks = make_chunks(8)
    example = SamplesToBuffer(np.zeros(4, np.float32), np.int64(0), np.float32(0), np.bool_(False))
    kwargs = dict(example=example, size=CAPACITY, B=B, discount=0.99,
                  n_step_return=args.n_step_return)
    total_start = time.perf_counter()

    dq, deque_append = deque_fill(chunks)
    ring, ring_append = list_ring_fill(chunks)
    uniform = UniformReplayBuffer(**kwargs)
    uniform_append = replay_fill(uniform, chunks)
    prioritized = PrioritizedReplayBuffer(**kwargs)
    prioritized_append = replay_fill(prioritized, chunks)

    print(f"capacity {CAPACITY:.0e} transitions, obs float32[4], B={B}, append chunks "
          f"[{CHUNK_T}, {B}], n_step_return={args.n_step_return}, torch threads=1")
    print(f"{'operation':<18} {'deque':>11} {'list ring':>11} {'Uniform':>12} {'ratio':>7} "
          f"{'Prioritized':>12} {'ratio':>7}   (transitions/s; ratios to the deque)")
    rows = [("append", deque_append, ring_append, uniform_append, prioritized_append)]
    for batch_size in (32, 256):
        td_errors = torch.rand(batch_size)

        def prioritized_step():
            prioritized.sample_batch(batch_size)
            prioritized.update_batch_priorities(td_errors)
        rows.append((
            f"sample batch {batch_size}",
            timed_rate(lambda: deque_sample(dq, batch_size), batch_size, args.seconds),
            timed_rate(lambda: list_ring_sample(ring, batch_size), batch_size, args.seconds),
            timed_rate(lambda: uniform.sample_batch(batch_size), batch_size, args.seconds),
            timed_rate(prioritized_step, batch_size, args.seconds),
        ))
    for label, base, ring_rate, uni, pri in rows:
        print(f"{label:<18} {base:>11,.0f} {ring_rate:>11,.0f} {uni:>12,.0f} {uni / base:>7.1f} "
              f"{pri:>12,.0f} {pri / base:>7.1f}")
    print("(prioritized sampling includes update_batch_priorities; "
          f"total run {time.perf_counter() - total_start:.0f} s)")


if __name__ == "__main__":
    main()
