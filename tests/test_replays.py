"""Replay buffers: n-step returns, wrap-around, batch assembly, priorities, sequences, frames.

Stored values encode their global step number so every sampled field can be
checked against the step it should come from.
"""
import numpy as np
import pytest
import torch

from rlframe.algos.utils import discount_return_n_step
from rlframe.replays.non_sequence.frame import UniformReplayFrameBuffer
from rlframe.replays.non_sequence.prioritized import PrioritizedReplayBuffer
from rlframe.replays.non_sequence.time_limit import TlPrioritizedReplayBuffer, TlUniformReplayBuffer
from rlframe.replays.non_sequence.uniform import UniformReplayBuffer
from rlframe.replays.sequence.frame import UniformSequenceReplayFrameBuffer
from rlframe.replays.sequence.prioritized import PrioritizedSequenceReplayBuffer
from rlframe.replays.sequence.uniform import UniformSequenceReplayBuffer
from rlframe.utils.buffer import torchify_buffer
from rlframe.utils.collections import namedarraytuple

SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
SamplesToBufferTl = namedarraytuple("SamplesToBufferTl",
                                    ["observation", "action", "reward", "done", "timeout"])
SamplesToBufferRnn = namedarraytuple("SamplesToBufferRnn", ["observation", "action", "reward",
                                                            "done", "prev_rnn_state"])
PrioritiesSamplesToBuffer = namedarraytuple("PrioritiesSamplesToBuffer",
                                            ["priorities", "samples"])
RnnState = namedarraytuple("RnnState", ["h", "c"])


class History:
    """Env data for B envs where every value records its step: observation = (step, env)."""

    def __init__(self, B, n_steps, done_prob=0.15, seed=0):
        rng = np.random.default_rng(seed)
        self.B = B
        steps = np.arange(n_steps)[:, None]
        envs = np.arange(B)[None, :]
        self.observation = np.stack(np.broadcast_arrays(steps, envs), axis=-1).astype(np.float32)
        self.action = (steps * 10 + envs + 1).astype(np.int64)
        self.reward = rng.normal(size=(n_steps, B)).astype(np.float32)
        self.done = rng.random((n_steps, B)) < done_prob
        self.timeout = self.done & (rng.random((n_steps, B)) < 0.5)

    def chunk(self, start, stop, tl=False):
        s = slice(start, stop)
        if tl:
            return SamplesToBufferTl(self.observation[s], self.action[s], self.reward[s],
                                     self.done[s], self.timeout[s])
        return SamplesToBuffer(self.observation[s], self.action[s], self.reward[s], self.done[s])


def example(tl=False):
    fields = (np.zeros(2, np.float32), np.int64(0), np.float32(0), np.bool_(False))
    return SamplesToBufferTl(*fields, np.bool_(False)) if tl else SamplesToBuffer(*fields)


def valid_rows(replay):
    """All (T_idx, age) pairs a single-step replay may sample."""
    ages = np.arange(replay.off_backward, replay.n_stored - replay.off_forward)
    return replay.rows_of_ages(ages), ages


def append_in_chunks(replay, history, sizes, tl=False):
    start = 0
    for size in sizes:
        replay.append_samples(history.chunk(start, start + size, tl))
        start += size
    return start


# ----------------------------------------------------------------------- n-step returns
def test_n_step_return_and_done_n_hand_values():
    # Rewards 1..10, episodes end at t=3 and t=7; n=3, discount 0.5.
    h = History(B=1, n_steps=10)
    h.reward[:, 0] = np.arange(1, 11)
    h.done[:] = False
    h.done[[3, 7], 0] = True
    replay = UniformReplayBuffer(example=example(), size=20, B=1, discount=0.5, n_step_return=3)
    append_in_chunks(replay, h, [2, 3, 5])
    np.testing.assert_allclose(replay.samples_return_[:8, 0],
                               [2.75, 4.5, 5., 4., 9.75, 11.5, 11., 8.])
    np.testing.assert_array_equal(replay.samples_done_n[:8, 0],
                                  [False, True, True, True, False, True, True, True])


def test_n_step_one_aliases_reward_and_done():
    replay = UniformReplayBuffer(example=example(), size=20, B=2, n_step_return=1)
    assert replay.samples_return_ is replay.samples.reward
    assert replay.samples_done_n is replay.samples.done


@pytest.mark.parametrize("n_step_return", [2, 4])
def test_returns_with_wraparound_match_reference(n_step_return):
    rng = np.random.default_rng(1)
    B, n_total = 2, 90
    h = History(B, n_total, seed=1)
    ref_return, ref_done_n = discount_return_n_step(h.reward, h.done, n_step_return, 0.9)
    replay = UniformReplayBuffer(example=example(), size=16, B=B, discount=0.9,
                                 n_step_return=n_step_return)  # T = 8
    N = 0
    while N < n_total - 8:
        T_new = int(rng.integers(1, 9))
        replay.append_samples(h.chunk(N, N + T_new))
        N += T_new
        # Every stored step with n-1 successors has its return.
        ages = np.arange(n_step_return - 1, replay.n_stored)
        rows, steps = replay.rows_of_ages(ages), N - 1 - ages
        np.testing.assert_allclose(replay.samples_return_[rows], ref_return[steps], rtol=1e-5)
        np.testing.assert_array_equal(replay.samples_done_n[rows], ref_done_n[steps])
        np.testing.assert_array_equal(replay.samples.observation[rows, :, 0],
                                      np.repeat(steps[:, None], B, 1))


# ------------------------------------------------------------------------ batch assembly
def test_batch_fields_prev_action_zeroed_after_done_and_targets():
    n, B = 3, 3
    h = History(B, 70, done_prob=0.3, seed=2)
    replay = UniformReplayBuffer(example=example(), size=60, B=B, discount=0.99,
                                 n_step_return=n)  # T = 20
    N = append_in_chunks(replay, h, [7] * 10)  # wraps 3 times
    rows, ages = valid_rows(replay)
    T_idxs = np.repeat(rows, B)
    B_idxs = np.tile(np.arange(B), len(rows))
    steps = np.repeat(N - 1 - ages, B)
    batch = replay.extract_batch(T_idxs, B_idxs)
    assert isinstance(batch.action, torch.Tensor)
    np.testing.assert_array_equal(batch.agent_inputs.observation[:, 0].numpy(), steps)
    np.testing.assert_array_equal(batch.agent_inputs.observation[:, 1].numpy(), B_idxs)
    np.testing.assert_array_equal(batch.action.numpy(), h.action[steps, B_idxs])
    new_episode = h.done[steps - 1, B_idxs]
    assert new_episode.any() and not new_episode.all()
    np.testing.assert_array_equal(batch.agent_inputs.prev_action.numpy(),
                                  np.where(new_episode, 0, h.action[steps - 1, B_idxs]))
    np.testing.assert_array_equal(batch.agent_inputs.prev_reward.numpy(),
                                  np.where(new_episode, 0, h.reward[steps - 1, B_idxs]))
    # Targets: inputs at t + n, previous action/reward not zeroed.
    np.testing.assert_array_equal(batch.target_inputs.observation[:, 0].numpy(), steps + n)
    np.testing.assert_array_equal(batch.target_inputs.prev_action.numpy(),
                                  h.action[steps + n - 1, B_idxs])
    np.testing.assert_array_equal(batch.target_inputs.prev_reward.numpy(),
                                  h.reward[steps + n - 1, B_idxs])
    ref_return, ref_done_n = discount_return_n_step(h.reward, h.done, n, 0.99)
    np.testing.assert_allclose(batch.return_.numpy(), ref_return[steps, B_idxs], rtol=1e-5)
    np.testing.assert_array_equal(batch.done_n.numpy(), ref_done_n[steps, B_idxs])
    np.testing.assert_array_equal(batch.done.numpy(), h.done[steps, B_idxs])


def test_uniform_sampling_stays_in_valid_window():
    np.random.seed(3)
    h = History(B=2, n_steps=60, seed=3)
    for n_appended in (5, 13, 23, 53):  # before and after the wrap
        replay = UniformReplayBuffer(example=example(), size=40, B=2, n_step_return=3)  # T = 20
        append_in_chunks(replay, h, [10] * (n_appended // 10) + [n_appended % 10])
        batch = replay.sample_batch(4000)
        steps = batch.agent_inputs.observation[:, 0].numpy()
        oldest = max(0, n_appended - replay.T)
        assert steps.min() == oldest + 1  # the oldest step is not sampled
        assert steps.max() == n_appended - 1 - 3  # nor the newest n
        assert len(np.unique(steps)) == min(n_appended, 20) - 4


def test_append_accepts_torch_tensors():
    h = History(B=2, n_steps=12, seed=4)
    replay = UniformReplayBuffer(example=example(), size=40, B=2, n_step_return=2)
    replay.append_samples(torchify_buffer(h.chunk(0, 12)))
    np.testing.assert_array_equal(replay.samples.action[:12], h.action)
    assert replay.sample_batch(5).action.shape == (5,)


# ---------------------------------------------------------------------------- prioritized
def test_prioritized_importance_weights_and_updates():
    np.random.seed(5)
    h = History(B=2, n_steps=30, seed=5)
    alpha, beta = 0.5, 0.7
    replay = PrioritizedReplayBuffer(example=example(), size=40, B=2, n_step_return=2,
                                     alpha=alpha, beta=beta, default_priority=4.)
    append_in_chunks(replay, h, [10, 10])
    tree = replay.priority_tree
    rows, _ = valid_rows(replay)
    np.testing.assert_allclose(tree.priorities[rows], 4. ** alpha)
    batch = replay.sample_batch(8)
    assert torch.all(batch.is_weights == 1)  # equal priorities
    new = torch.arange(1., 9.)
    replay.update_batch_priorities(new)
    T_idxs, B_idxs = np.divmod(tree.prev_tree_idxs - tree.n_leaves, 2)
    _, first = np.unique(tree.prev_tree_idxs, return_index=True)
    np.testing.assert_allclose(tree.priorities[T_idxs[first], B_idxs[first]],
                               new.numpy()[first] ** alpha)
    replay.set_beta(0.9)
    batch = replay.sample_batch(64)
    p = tree.tree[tree.prev_tree_idxs]
    expected = (1 / (p + 1e-6)) ** 0.9
    np.testing.assert_allclose(batch.is_weights.numpy(), expected / expected.max(), rtol=1e-5)
    assert batch.is_weights.dtype == torch.float32 and batch.is_weights.max() == 1
    # The batch holds the drawn steps.
    T_idxs, B_idxs = np.divmod(tree.prev_tree_idxs - tree.n_leaves, 2)
    np.testing.assert_array_equal(batch.agent_inputs.observation.numpy(),
                                  replay.samples.observation[T_idxs, B_idxs])


def test_prioritized_input_priorities():
    h = History(B=2, n_steps=20, seed=6)
    replay = PrioritizedReplayBuffer(example=example(), size=40, B=2, alpha=0.5,
                                     input_priorities=True)
    priorities = np.arange(1., 21.)[:, None] * np.ones((1, 2))
    replay.append_samples(PrioritiesSamplesToBuffer(priorities, h.chunk(0, 20)))
    rows, _ = valid_rows(replay)
    np.testing.assert_allclose(replay.priority_tree.priorities[rows], priorities[rows] ** 0.5)
    with pytest.raises(ValueError, match=r"\(priorities, samples\)"):
        replay.append_samples(h.chunk(0, 5))


# ----------------------------------------------------------------------------- time limit
def test_timeout_n_marks_windows_ended_by_a_time_limit():
    h = History(B=1, n_steps=12, seed=7)
    h.done[:] = False
    h.timeout[:] = False
    h.done[[2, 6, 8], 0] = True
    h.timeout[[2, 8], 0] = True  # step 6 is a true terminal
    replay = TlUniformReplayBuffer(example=example(tl=True), size=30, B=1, n_step_return=3)
    append_in_chunks(replay, h, [5, 7], tl=True)
    np.testing.assert_array_equal(
        replay.samples_timeout_n[:10, 0],
        [True, True, True, False, False, False, False, True, True, False])
    batch = replay.sample_batch(50)
    steps = batch.agent_inputs.observation[:, 0].long().numpy()
    expected = np.array([1, 1, 1, 0, 0, 0, 0, 1, 1, 0], dtype=bool)
    np.testing.assert_array_equal(batch.timeout_n.numpy(), expected[steps])
    np.testing.assert_array_equal(batch.timeout.numpy(), h.timeout[steps, 0])
    one_step = TlUniformReplayBuffer(example=example(tl=True), size=30, B=1)
    assert one_step.samples_timeout_n is one_step.samples.timeout


def test_tl_prioritized_batch_fields():
    h = History(B=2, n_steps=20, seed=8)
    replay = TlPrioritizedReplayBuffer(example=example(tl=True), size=40, B=2, n_step_return=2)
    append_in_chunks(replay, h, [20], tl=True)
    batch = replay.sample_batch(6)
    assert type(batch).__name__ == "SamplesFromReplayPriTL"
    assert batch._fields[-3:] == ("timeout", "timeout_n", "is_weights")
    assert batch.is_weights.shape == (6,)


# ------------------------------------------------------------------------------ sequences
def rnn_history(B, n_steps, seed):
    h = History(B, n_steps, seed=seed)
    steps = h.observation[..., 0]
    h.prev_rnn_state = RnnState(h=np.stack([steps, steps + 0.5], -1), c=-steps)

    def chunk(start, stop):
        s = slice(start, stop)
        return SamplesToBufferRnn(h.observation[s], h.action[s], h.reward[s], h.done[s],
                                  h.prev_rnn_state[s])
    h.rnn_chunk = chunk
    return h


def rnn_example():
    return SamplesToBufferRnn(np.zeros(2, np.float32), np.int64(0), np.float32(0),
                              np.bool_(False), RnnState(np.zeros(2, np.float32), np.float32(0)))


def check_sequence_batch(replay, h, batch, N, batch_T, rsi):
    n = replay.n_step_return
    starts = batch.all_observation[0, :, 0].long().numpy()
    envs = batch.all_observation[0, :, 1].long().numpy()
    # Starts are rows holding a stored RNN state, and the state is the one recorded there.
    assert np.all((starts % replay.T) % max(rsi, 1) == 0)
    if rsi > 0:
        np.testing.assert_array_equal(batch.init_rnn_state.c.numpy(), -starts)
        np.testing.assert_array_equal(batch.init_rnn_state.h[:, 0].numpy(), starts)
    else:
        assert batch.init_rnn_state is None
    # Whole sequence and its targets stored; the oldest step is not a start.
    assert np.all(starts + batch_T + n - 1 <= N - 1)
    assert np.all(starts >= max(0, N - replay.T) + replay.off_forward)
    k = np.arange(batch_T + n)[:, None]
    np.testing.assert_array_equal(batch.all_observation[..., 0].numpy(), starts + k)
    np.testing.assert_array_equal(batch.all_observation[..., 1].numpy(),
                                  np.broadcast_to(envs, (batch_T + n, len(envs))))
    prev = starts + k - 1
    expected_action = h.action[prev, envs].copy()
    expected_reward = h.reward[prev, envs].copy()
    new_episode = h.done[starts - 1, envs]
    expected_action[0, new_episode] = 0
    expected_reward[0, new_episode] = 0
    np.testing.assert_array_equal(batch.all_action.numpy(), expected_action)
    np.testing.assert_array_equal(batch.all_reward.numpy(), expected_reward)
    ref_return, ref_done_n = discount_return_n_step(h.reward, h.done, n, replay.discount)
    tk = starts + np.arange(batch_T)[:, None]
    np.testing.assert_allclose(batch.return_.numpy(), ref_return[tk, envs], rtol=1e-5)
    np.testing.assert_array_equal(batch.done_n.numpy(), ref_done_n[tk, envs])
    np.testing.assert_array_equal(batch.done.numpy(), h.done[tk, envs])


@pytest.mark.parametrize("rsi", [0, 1, 4])
def test_uniform_sequence_alignment_with_stored_rnn_state(rsi):
    np.random.seed(9)
    B, batch_T = 2, 6
    h = rnn_history(B, 200, seed=9)
    replay = UniformSequenceReplayBuffer(example=rnn_example(), size=60, B=B,
                                         rnn_state_interval=rsi, batch_T=batch_T,
                                         discount=0.9, n_step_return=2)
    assert replay.T == (32 if rsi == 4 else 30)  # rounded to a multiple of the interval
    N = 0
    for T_new in [5, 7, 3, 9, 5, 11, 6, 13]:  # chunks not aligned to the interval; wraps
        replay.append_samples(h.rnn_chunk(N, N + T_new))
        N += T_new
        if N >= replay.min_steps_to_sample(batch_T):
            batch = replay.sample_batch(300)
            assert batch.all_observation.shape == (batch_T + 2, 300, 2)
            assert batch.return_.shape == (batch_T, 300)
            check_sequence_batch(replay, h, batch, N, batch_T, rsi)
    shorter = replay.sample_batch(10, batch_T=3)
    assert shorter.done.shape == (3, 10)


def test_prioritized_sequence_one_priority_per_start():
    np.random.seed(10)
    B, batch_T, rsi = 2, 6, 4
    h = rnn_history(B, 200, seed=10)
    replay = PrioritizedSequenceReplayBuffer(example=rnn_example(), size=64, B=B,
                                             rnn_state_interval=rsi, batch_T=batch_T,
                                             discount=0.9, n_step_return=2)
    tree = replay.priority_tree
    assert tree.T == replay.T // rsi == 8
    N = 0
    for _ in range(12):
        replay.append_samples(h.rnn_chunk(N, N + 8))
        N += 8
        if N >= replay.min_steps_to_sample(batch_T):
            batch = replay.sample_batch(200)
            check_sequence_batch(replay, h, batch, N, batch_T, rsi)
            assert batch.is_weights.shape == (200,)
            replay.update_batch_priorities(torch.rand(200) + 0.1)
        # Exactly the complete, non-oldest aligned starts have priority.
        count = replay.n_stored
        for row in range(tree.T):
            start_step = N - 1 - ((replay.t - 1 - row * rsi) % replay.T)
            oldest = N - count
            valid = (start_step >= oldest + 1 and start_step + batch_T + 2 - 1 <= N - 1)
            assert (tree.priorities[row] > 0).all() == valid
            assert (tree.priorities[row] > 0).any() == valid
    with pytest.raises(ValueError, match="multiple of rnn_state_interval=4"):
        replay.append_samples(h.rnn_chunk(0, 5))
    with pytest.raises(ValueError, match="fixed batch_T=6"):
        replay.sample_batch(4, batch_T=5)


# --------------------------------------------------------------------------------- frames
def frame_history(B, n_steps, n_frames, seed):
    """Frame-stacked observations as an env makes them: frames before a reset are zero."""
    rng = np.random.default_rng(seed)
    done = rng.random((n_steps, B)) < 0.2
    obs = np.zeros((n_steps, B, n_frames, 2, 2), np.uint8)
    for b in range(B):
        episode_start = 0
        for s in range(n_steps):
            for k in range(n_frames):
                step = s - (n_frames - 1 - k)
                if step >= episode_start:
                    obs[s, b, k] = (step % 250) + 1
            if done[s, b]:
                episode_start = s + 1
    action = np.arange(n_steps * B).reshape(n_steps, B)
    return obs, action, np.ones((n_steps, B), np.float32), done


def test_frame_buffer_rebuilds_stacks_with_frames_older_than_done_zeroed():
    n_frames, B = 4, 2
    obs, action, reward, done = frame_history(B, 47, n_frames, seed=11)
    ex = SamplesToBuffer(obs[0, 0], np.int64(0), np.float32(0), np.bool_(False))
    replay = UniformReplayFrameBuffer(example=ex, size=20, B=B, n_step_return=2)  # T = 10
    assert replay.off_forward == 3 and replay.samples_frames.shape == (13, B, 2, 2)
    N = 0
    for T_new in [3, 4, 6, 2, 9, 5, 7, 3, 8]:
        replay.append_samples(SamplesToBuffer(obs[N:N + T_new], action[N:N + T_new],
                                              reward[N:N + T_new], done[N:N + T_new]))
        N += T_new
        rows, ages = valid_rows(replay)
        if len(rows) == 0:
            continue
        T_idxs, B_idxs = np.repeat(rows, B), np.tile(np.arange(B), len(rows))
        steps = np.repeat(N - 1 - ages, B)
        batch = replay.extract_batch(T_idxs, B_idxs)
        np.testing.assert_array_equal(batch.agent_inputs.observation.numpy(), obs[steps, B_idxs])
        np.testing.assert_array_equal(batch.target_inputs.observation.numpy(),
                                      obs[steps + 2, B_idxs])
    assert done[:N].any()
    batch = replay.sample_batch(16)
    assert batch.agent_inputs.observation.shape == (16, n_frames, 2, 2)


def test_sequence_frame_buffer_observations():
    np.random.seed(12)
    n_frames, B, batch_T = 3, 2, 4
    obs, action, reward, done = frame_history(B, 60, n_frames, seed=12)
    ex = SamplesToBuffer(obs[0, 0], np.int64(0), np.float32(0), np.bool_(False))
    replay = UniformSequenceReplayFrameBuffer(example=ex, size=40, B=B, rnn_state_interval=0,
                                              batch_T=batch_T, n_step_return=1)
    N = 0
    for T_new in [7, 7, 7, 7, 7]:
        replay.append_samples(SamplesToBuffer(obs[N:N + T_new], action[N:N + T_new],
                                              reward[N:N + T_new], done[N:N + T_new]))
        N += T_new
    batch = replay.sample_batch(50)
    starts, envs = np.divmod(batch.all_action[1].numpy(), B)  # action = step * B + env
    k = np.arange(batch_T + 1)[:, None]
    np.testing.assert_array_equal(batch.all_observation.numpy(), obs[starts + k, envs])


# --------------------------------------------------------------------------------- errors
def test_errors_name_parameter_and_allowed_values():
    ex = example()
    with pytest.raises(ValueError, match=r"size=3 is smaller than B=4"):
        UniformReplayBuffer(example=ex, size=3, B=4)
    with pytest.raises(ValueError, match=r"n_step_return=0 must be an integer >= 1"):
        UniformReplayBuffer(example=ex, size=100, B=2, n_step_return=0)
    with pytest.raises(ValueError, match=r"T=2 steps per env.*at least 5 steps"):
        UniformReplayBuffer(example=ex, size=4, B=2, n_step_return=3)
    with pytest.raises(ValueError, match=r"'done' field"):
        UniformReplayBuffer(example=namedarraytuple("X", ["observation", "reward"])(0., 0.),
                            size=10, B=1)
    replay = UniformReplayBuffer(example=ex, size=100, B=2, n_step_return=3)
    h = History(B=2, n_steps=10)
    replay.append_samples(h.chunk(0, 3))
    with pytest.raises(ValueError, match=r"holds 3 steps per env but needs at least 5"):
        replay.sample_batch(4)
    with pytest.raises(ValueError, match=r"B=3 envs; the buffer was built with B=2"):
        replay.append_samples(History(B=3, n_steps=4).chunk(0, 4))
    with pytest.raises(ValueError, match=r"fields"):
        replay.append_samples(h.chunk(0, 3, tl=True))
    with pytest.raises(ValueError, match=r"T=51 steps; must be within \[1, 50\]"):
        replay.append_samples(History(B=2, n_steps=51).chunk(0, 51))
    pri = PrioritizedReplayBuffer(example=ex, size=100, B=2, n_step_return=3)
    with pytest.raises(ValueError, match=r"needs at least 5"):
        pri.sample_batch(4)
    with pytest.raises(ValueError, match=r"alpha=-1"):
        PrioritizedReplayBuffer(example=ex, size=100, B=2, alpha=-1)
    with pytest.raises(ValueError, match="'timeout' field"):
        TlUniformReplayBuffer(example=ex, size=100, B=2)


def test_sequence_errors():
    ex = rnn_example()
    with pytest.raises(ValueError, match=r"batch_T=30 is longer than the replay holds: T=20"):
        UniformSequenceReplayBuffer(example=ex, size=40, B=2, rnn_state_interval=4, batch_T=30)
    replay = UniformSequenceReplayBuffer(example=ex, size=40, B=2, rnn_state_interval=4)
    with pytest.raises(ValueError, match="needs batch_T"):
        replay.sample_batch(4)
    with pytest.raises(ValueError, match=r"batch_T=19 is longer"):
        replay.sample_batch(4, batch_T=19)
    h = rnn_history(2, 20, seed=0)
    replay.append_samples(h.rnn_chunk(0, 8))
    with pytest.raises(ValueError, match=r"holds 8 steps per env but sequences of batch_T=5 "
                                         r"need at least 10"):
        replay.sample_batch(4, batch_T=5)
    with pytest.raises(ValueError, match=r"rnn_state_interval=-1"):
        UniformSequenceReplayBuffer(example=ex, size=40, B=2, rnn_state_interval=-1)
    with pytest.raises(ValueError, match=r"no 'prev_rnn_state' field"):
        UniformSequenceReplayBuffer(example=example(), size=40, B=2, rnn_state_interval=2)
    with pytest.raises(ValueError, match=r"needs a fixed batch_T"):
        PrioritizedSequenceReplayBuffer(example=ex, size=40, B=2, rnn_state_interval=4)
