"""Every combination of replay parts against a brute-force reference.

uniform/prioritized x plain/time-limit x single steps/sequences x whole/frame
observations: each sampled item is identified by the global step it starts at,
and every field is checked against values computed directly from the raw
[N, B] history, across wrap-around and episode ends.
"""
import multiprocessing as mp

import numpy as np
import pytest

from rlframe.replays.layouts import SequenceLayout, TransitionLayout
from rlframe.replays.non_sequence.time_limit import AsyncTlPrioritizedReplayBuffer
from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.sampling import PrioritizedSampling, UniformSampling
from rlframe.replays.targets import NStepTargets
from rlframe.utils.collections import namedarraytuple

B, N_STEP, N_FRAMES, DISCOUNT = 3, 3, 4, 0.9
RSI, SEQ_T = 2, 4  # Sequences: RNN state every 2 steps, 4 steps long.
Step = namedarraytuple("Step", ["observation", "action", "reward", "done", "timeout",
                                "prev_rnn_state"])


class History:
    """Raw env data of B envs; actions encode (step, env) so items can be identified."""

    def __init__(self, n_steps, frames, seed=0):
        rng = np.random.default_rng(seed)
        steps, envs = np.arange(n_steps)[:, None], np.arange(B)[None, :]
        self.n_steps, self.frames = n_steps, frames
        self.action = (steps * B + envs).astype(np.int64)
        self.reward = rng.normal(size=(n_steps, B)).astype(np.float32)
        self.done = rng.random((n_steps, B)) < 0.12
        self.timeout = self.done & (rng.random((n_steps, B)) < 0.5)
        self.rnn_state = (steps * 10. + envs).astype(np.float32)[..., None].repeat(2, -1)
        if frames:  # A frame per step, never all zero: [step % 256, step // 256 * 8 + env + 1].
            frame = np.stack(np.broadcast_arrays(steps % 256, steps // 256 * 8 + envs + 1),
                             axis=-1).astype(np.uint8)
            self.observation = self.stacks(frame)
        else:
            self.observation = np.stack(np.broadcast_arrays(steps, envs, np.ones_like(steps)),
                                        axis=-1).astype(np.float32)

    def stacks(self, frame):
        """What a frame-stacking env returns: the last N_FRAMES frames, those from before
        the episode's first step zeroed."""
        obs = np.zeros((self.n_steps, B, N_FRAMES) + frame.shape[2:], np.uint8)
        for t in range(self.n_steps):
            for b in range(B):
                for k in range(N_FRAMES):
                    s = t - (N_FRAMES - 1 - k)
                    if s >= 0 and not self.done[s:t, b].any():
                        obs[t, b, k] = frame[s, b]
        return obs

    def chunk(self, start, stop):
        s = slice(start, stop)
        return Step(self.observation[s], self.action[s], self.reward[s], self.done[s],
                    self.timeout[s], self.rnn_state[s])

    # Brute-force targets of step t of env b.
    def return_done_timeout_n(self, t, b):
        ret, discount = 0., 1.
        for k in range(N_STEP):
            ret += discount * self.reward[t + k, b]
            discount *= DISCOUNT
            if self.done[t + k, b]:
                return ret, True, bool(self.timeout[t + k, b])
        return ret, False, False

    def prev(self, t, b, zero_after_done):
        if zero_after_done and self.done[t - 1, b]:
            return 0, 0.
        return self.action[t - 1, b], self.reward[t - 1, b]


def example():
    return Step(observation=History(1, FRAMES_OF[0]).observation[0, 0], action=np.int64(0),
                reward=np.float32(0), done=np.bool_(False), timeout=np.bool_(False),
                prev_rnn_state=np.zeros(2, np.float32))


FRAMES_OF = [False]  # Which observation kind example() builds (set per test).


def build(prioritized, time_limit, sequences, frames, shared=False):
    FRAMES_OF[0] = frames
    layout = SequenceLayout(RSI, SEQ_T) if sequences else TransitionLayout()
    sampling = PrioritizedSampling(alpha=1., beta=0.5) if prioritized else UniformSampling()
    ex = example()
    if not time_limit:
        ex = namedarraytuple("StepNoTl", [f for f in Step._fields if f != "timeout"])(
            *(getattr(ex, f) for f in Step._fields if f != "timeout"))
    replay = ReplayBuffer(ex, size=24 * B, B=B,
                          targets=NStepTargets(DISCOUNT, N_STEP, time_limit=time_limit),
                          sampling=sampling, layout=layout, frames=frames, shared=shared)
    return replay, type(ex)


def append(replay, ExampleCls, history, start, sizes):
    """Append ``history`` from step ``start`` in chunks of ``sizes``; returns the next step."""
    for size in sizes:
        chunk = history.chunk(start, start + size)
        replay.append_samples(ExampleCls(*(getattr(chunk, f) for f in ExampleCls._fields)))
        start += size
    return start


def check_transition_batch(batch, history, n_appended, replay, time_limit):
    steps, envs = np.divmod(batch.action.numpy(), B)
    oldest = max(0, n_appended - replay.T)
    # Never from the invalid zones: oldest off_forward, newest n_step_return.
    assert steps.min() >= oldest + replay.off_forward
    assert steps.max() <= n_appended - 1 - N_STEP
    for i, (t, b) in enumerate(zip(steps, envs)):
        ret, done_n, timeout_n = history.return_done_timeout_n(t, b)
        np.testing.assert_allclose(batch.return_[i].item(), ret, rtol=1e-5, atol=1e-5)
        assert batch.done_n[i].item() == done_n
        assert batch.done[i].item() == history.done[t, b]
        np.testing.assert_array_equal(batch.agent_inputs.observation[i].numpy(),
                                      history.observation[t, b])
        np.testing.assert_array_equal(batch.target_inputs.observation[i].numpy(),
                                      history.observation[t + N_STEP, b])
        prev_a, prev_r = history.prev(t, b, zero_after_done=True)
        assert batch.agent_inputs.prev_action[i].item() == prev_a
        assert batch.agent_inputs.prev_reward[i].item() == pytest.approx(prev_r)
        target_prev_a, target_prev_r = history.prev(t + N_STEP, b, zero_after_done=False)
        assert batch.target_inputs.prev_action[i].item() == target_prev_a
        assert batch.target_inputs.prev_reward[i].item() == pytest.approx(target_prev_r)
        if time_limit:
            assert batch.timeout[i].item() == history.timeout[t, b]
            assert batch.timeout_n[i].item() == timeout_n
    return steps, envs


def check_sequence_batch(batch, history, n_appended, replay, time_limit):
    starts, envs = np.divmod(batch.all_action[1].numpy(), B)  # all_action[1]: the start's.
    oldest = max(0, n_appended - replay.T)
    assert (starts % RSI == 0).all()
    assert starts.min() >= oldest + replay.off_forward
    assert starts.max() <= n_appended - SEQ_T - N_STEP
    for i, (s, b) in enumerate(zip(starts, envs)):
        for k in range(SEQ_T + N_STEP):
            np.testing.assert_array_equal(batch.all_observation[k, i].numpy(),
                                          history.observation[s + k, b])
            prev_a, prev_r = history.prev(s + k, b, zero_after_done=(k == 0))
            assert batch.all_action[k, i].item() == prev_a
            assert batch.all_reward[k, i].item() == pytest.approx(prev_r)
        for k in range(SEQ_T):
            ret, done_n, timeout_n = history.return_done_timeout_n(s + k, b)
            np.testing.assert_allclose(batch.return_[k, i].item(), ret, rtol=1e-5, atol=1e-5)
            assert batch.done_n[k, i].item() == done_n
            assert batch.done[k, i].item() == history.done[s + k, b]
            if time_limit:
                assert batch.timeout[k, i].item() == history.timeout[s + k, b]
                assert batch.timeout_n[k, i].item() == timeout_n
        np.testing.assert_array_equal(batch.init_rnn_state[i].numpy(), history.rnn_state[s, b])
    return starts, envs


@pytest.mark.parametrize("frames", [False, True], ids=["whole", "frames"])
@pytest.mark.parametrize("sequences", [False, True], ids=["steps", "sequences"])
@pytest.mark.parametrize("time_limit", [False, True], ids=["plain", "timelimit"])
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_every_combination_matches_brute_force(prioritized, time_limit, sequences, frames):
    np.random.seed(0)
    replay, ExampleCls = build(prioritized, time_limit, sequences, frames)
    assert replay.T == 24
    history = History(80, frames, seed=1)
    n = 0
    seen = set()
    # Chunks of even length (the sequence start interval), wrapping the 24-step ring thrice.
    for sizes in ([12], [4, 6], [8, 2, 12], [14], [6, 2, 14]):
        n = append(replay, ExampleCls, history, n, sizes)
        assert replay.can_sample()
        batch = replay.sample_batch(32)
        check = check_sequence_batch if sequences else check_transition_batch
        steps, envs = check(batch, history, n, replay, time_limit)
        seen.update(zip(steps.tolist(), envs.tolist()))
        assert hasattr(batch, "is_weights") == prioritized
        if prioritized:
            w = batch.is_weights.numpy()
            assert w.shape == (32,) and w.max() == pytest.approx(1.) and (w > 0).all()
            replay.update_batch_priorities(np.full(32, 2.))
    assert n == 80 and len(seen) > 40  # Many distinct items, across the wraps.


def test_prioritized_draws_follow_updated_priorities():
    replay, ExampleCls = build(prioritized=True, time_limit=True, sequences=False, frames=True)
    history = History(40, frames=True)
    append(replay, ExampleCls, history, 0, [20, 20])
    np.random.seed(3)
    batch = replay.sample_batch(64)
    steps, envs = np.divmod(batch.action.numpy(), B)
    favoured = (int(steps[0]), int(envs[0]))
    # Priority 1000 for the first draw, ~0 for the rest: later draws pick it almost always.
    replay.update_batch_priorities(np.where(np.arange(64) == 0, 1000., 1e-6))
    steps, envs = np.divmod(replay.sample_batch(256).action.numpy(), B)
    assert np.mean([(s, e) == favoured for s, e in zip(steps, envs)]) > 0.9


def _append_in_child(replay, sizes):
    history = History(sum(sizes), frames=True, seed=1)
    append(replay, Step, history, 0, sizes)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_shared_replay_written_by_another_process(start_method):
    """A replay in shared memory: a child process appends, this one samples what it wrote."""
    FRAMES_OF[0] = True
    replay = AsyncTlPrioritizedReplayBuffer(example=example(), size=24 * B, B=B,
                                            discount=DISCOUNT, n_step_return=N_STEP)
    assert replay.async_ and replay.storage.lock is not None
    ctx = mp.get_context(start_method)
    sizes = [10, 8, 14, 6]
    child = ctx.Process(target=_append_in_child, args=(replay, sizes))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert replay.t == sum(sizes) % replay.T and replay.n_stored == replay.T
    history = History(sum(sizes), frames=False, seed=1)  # Same env data as the child's.
    np.random.seed(0)
    batch = replay.sample_batch(32)
    steps, envs = np.divmod(batch.action.numpy(), B)
    assert steps.min() >= sum(sizes) - replay.T + 1
    for i, (t, b) in enumerate(zip(steps, envs)):
        ret, done_n, timeout_n = history.return_done_timeout_n(t, b)
        np.testing.assert_allclose(batch.return_[i].item(), ret, rtol=1e-5, atol=1e-5)
        assert batch.timeout_n[i].item() == timeout_n
    # The child's priority tree is this process's tree too.
    assert replay.priority_tree.total > 0


def _append_history(replay, ExampleCls, frames, sizes):
    append(replay, ExampleCls, History(sum(sizes), frames, seed=1), 0, sizes)


@pytest.mark.parametrize("frames", [False, True], ids=["whole", "frames"])
@pytest.mark.parametrize("sequences", [False, True], ids=["steps", "sequences"])
@pytest.mark.parametrize("time_limit", [False, True], ids=["plain", "timelimit"])
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_every_shared_combination_sees_another_process_append(prioritized, time_limit,
                                                              sequences, frames):
    """Shared storage, cursor and priority tree of every layout: what a child process
    (a memory copier) appends, this process samples exactly."""
    replay, ExampleCls = build(prioritized, time_limit, sequences, frames, shared=True)
    assert replay.storage.lock is not None
    sizes = [12, 4, 6, 8, 2, 12]
    child = mp.get_context("fork").Process(target=_append_history,
                                           args=(replay, ExampleCls, frames, sizes))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    n = sum(sizes)
    assert replay.t == n % replay.T and replay.n_stored == replay.T
    np.random.seed(0)
    batch = replay.sample_batch(32)
    check = check_sequence_batch if sequences else check_transition_batch
    check(batch, History(n, frames, seed=1), n, replay, time_limit)
    if prioritized:
        assert replay.priority_tree.total > 0
