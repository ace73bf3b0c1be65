"""Frame replay with real Atari observations.

Breakout is played with random actions by three ``AtariEnv``s (one per replay
column ``b``), recorded as a sampler with mid-batch resets records it: the
observation of step ``t`` is the stack the agent acted on, ``reward``, ``done``
and ``env_info.timeout`` come from that step, and an env whose game is over
(``traj_done``) is reset before its next step. The envs differ so that every
kind of episode end occurs: lost lives that zero the frame stack
(``episodic_lives``), game overs, ``horizon`` cuts, and lives lost without an
episode end.

Each replay configuration an Atari agent can use is fed the recording in
sampler-sized chunks over a ring small enough to wrap many times (also in the
middle of a chunk). After every chunk, every item the replay may sample is
rebuilt and compared with what the env returned: the observation, the n-step
target observation and the sequences of sequence replays; the replay's own
draws are checked to come only from those items, and to reach all of them.
The configurations include the replays DQN and R2D1 build for AtariEnv, and
shared replays appended to by another process.

Last, 1M-transition replays are built as Atari runs build them, to count what
they allocate per transition (one 104x80 frame, not a 4-frame stack, plus small
per-step fields) and to check that memory is taken only where written.
"""
import math
import multiprocessing as mp
import os
from collections import namedtuple

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from rlframe.algos.dqn.dqn import DQN  # noqa: E402
from rlframe.algos.dqn.r2d1 import (R2D1, PrioritiesSamplesToBuffer,  # noqa: E402
                                    SamplesToBufferRnn, SamplesToBufferTlRnn)
from rlframe.algos.off_policy import SamplesToBuffer, SamplesToBufferTl  # noqa: E402
from rlframe.envs.atari import AtariEnv  # noqa: E402
from rlframe.replays.layouts import SequenceLayout  # noqa: E402
from rlframe.replays.non_sequence.frame import (AsyncPrioritizedReplayFrameBuffer,  # noqa: E402
                                                AsyncUniformReplayFrameBuffer,
                                                PrioritizedReplayFrameBuffer,
                                                UniformReplayFrameBuffer)
from rlframe.replays.non_sequence.time_limit import (AsyncTlUniformReplayBuffer,  # noqa: E402
                                                     TlPrioritizedReplayBuffer,
                                                     TlUniformReplayBuffer)
from rlframe.replays.replay_buffer import ReplayBuffer  # noqa: E402
from rlframe.replays.sequence.frame import (  # noqa: E402
    AsyncPrioritizedSequenceReplayFrameBuffer, AsyncUniformSequenceReplayFrameBuffer,
    PrioritizedSequenceReplayFrameBuffer, UniformSequenceReplayFrameBuffer)
from rlframe.replays.targets import NStepTargets  # noqa: E402
from rlframe.samplers.collections import BatchSpec  # noqa: E402
from rlframe.utils.buffer import numpify_buffer, torchify_buffer  # noqa: E402
from rlframe.utils.collections import namedarraytuple  # noqa: E402

N_FRAMES, H, W = 4, 104, 80
ENVS = (  # Column b of the replay is played by AtariEnv(game="breakout", **ENVS[b]).
    dict(frame_skip=8, episodic_lives=True, horizon=10_000),  # lost lives, game overs
    dict(frame_skip=4, episodic_lives=True, horizon=45),  # lost lives, horizon cuts
    dict(frame_skip=8, episodic_lives=False, horizon=150),  # lives lost within an episode
)
B = len(ENVS)
N_STEPS = 360  # Steps recorded per env.
REPLAY_T = 38  # Steps per env kept: the ring wraps 9 times, at and inside chunks.
STEP_CHUNK_T = 5  # The sampler's batch_T: the cursor stops at every row of the ring.
SEQ_CHUNK_T = 6  # A multiple of RSI, as prioritized sequence replays need.
RSI, SEQ_T = 2, 5  # Sequence replays: RNN state every 2 steps, sequences of 5.
RnnState = namedarraytuple("RnnState", ["h", "c"])


class Recording:
    """``[N, B]`` arrays of what B Atari envs returned, in a sampler's layout."""

    def __init__(self, n_steps, seed=0):
        rng = np.random.default_rng(seed)
        envs = []
        for b, kwargs in enumerate(ENVS):
            env = AtariEnv(game="breakout", max_start_noops=2, **kwargs)
            env.seed(seed + b)
            envs.append(env)
        shape = (n_steps, B)
        self.observation = np.zeros(shape + (N_FRAMES, H, W), np.uint8)
        self.action = rng.integers(envs[0].action_space.n, size=shape)
        self.reward = np.zeros(shape, np.float32)
        self.done = np.zeros(shape, bool)
        self.timeout = np.zeros(shape, bool)
        self.traj_done = np.zeros(shape, bool)
        self.lives_lost = np.zeros(shape, bool)
        # The agent's recurrent state before each step, made to name its (step, env).
        steps, cols = np.meshgrid(np.arange(n_steps), np.arange(B), indexing="ij")
        self.rnn_state = RnnState(h=np.stack([steps, cols], -1)[:, :, None].astype(np.float32),
                                  c=-np.stack([steps, cols], -1)[:, :, None].astype(np.float32))
        observation = [env.reset() for env in envs]
        for t in range(n_steps):
            for b, env in enumerate(envs):
                lives = env.ale.lives()
                self.observation[t, b] = observation[b]
                o, r, d, info = env.step(self.action[t, b])
                self.reward[t, b], self.done[t, b] = r, d
                self.timeout[t, b], self.traj_done[t, b] = info.timeout, info.traj_done
                self.lives_lost[t, b] = 0 < env.ale.lives() < lives
                observation[b] = env.reset() if info.traj_done else o
        self.n_steps = n_steps

    def chunk(self, ExampleCls, start, stop):
        """Steps ``start:stop`` as the algorithm hands them to ``append_samples``: views of
        the sampler's torch batch."""
        s = slice(start, stop)
        fields = dict(observation=self.observation[s], action=self.action[s],
                      reward=self.reward[s], done=self.done[s], timeout=self.timeout[s],
                      prev_rnn_state=self.rnn_state[s])
        return torchify_buffer(ExampleCls(**{f: fields[f] for f in ExampleCls._fields}))

    def example(self, ExampleCls):
        """One step, as the sampler's examples give it (numpy)."""
        return numpify_buffer(self.chunk(ExampleCls, 0, 1)[0, 0])


def assert_equal(actual, expected):
    """``np.testing.assert_array_equal``, which is slow on large arrays, when they differ."""
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected)


@pytest.fixture(scope="module")
def recording():
    return Recording(N_STEPS)


def test_recording_has_every_kind_of_episode_end(recording):
    """The corners the replays must reproduce occur, and look as the env makes them."""
    rec, episodic = recording, np.array([e["episodic_lives"] for e in ENVS])
    life_end = rec.done & ~rec.traj_done
    game_over = rec.traj_done & ~rec.timeout
    assert life_end[:, 0].sum() >= 5 and life_end[:, 1].sum() >= 5
    assert game_over[:, 0].sum() >= 2 and game_over[:, 2].sum() >= 1
    assert rec.timeout[:, 1].sum() >= 5
    assert (rec.lives_lost & ~rec.done)[:, 2].sum() >= 3  # No episode end without episodic lives.
    assert not (rec.done & ~rec.traj_done)[:, ~episodic].any()
    # After any episode end the stack is the new episode's first frame alone ...
    t, b = np.nonzero(rec.done[:-1])
    assert not rec.observation[t + 1, b, :-1].any()
    assert rec.observation[t + 1, b, -1].reshape(len(t), -1).any(axis=1).all()
    # ... while within an episode every frame of a stack is a screen (never all zero).
    steps = np.arange(rec.n_steps)[:, None]
    last_end = np.maximum.accumulate(np.where(rec.done, steps, -1), axis=0)
    since_start = steps - np.concatenate([np.full((1, B), -1), last_end[:-1]]) - 1
    frame_seen = rec.observation.reshape(rec.n_steps, B, N_FRAMES, -1).any(axis=-1)
    k = np.arange(N_FRAMES)
    expect_seen = since_start[:, :, None] >= (N_FRAMES - 1 - k)
    assert_equal(frame_seen, expect_seen)


# ------------------------------------------------------------- what the algorithms build
AgentInfo = namedtuple("AgentInfo", ["q", "prev_rnn_state"])  # What an R2D1 agent records.
LSTM_STATE = RnnState(h=np.zeros((1, 512), np.float32), c=np.zeros((1, 512), np.float32))


def atari_examples(rnn_state=LSTM_STATE):
    """The sampler's examples of an Atari run: one step of every field."""
    env = AtariEnv(game="breakout")
    observation = env.reset()
    action = np.int64(1)
    _, reward, done, env_info = env.step(action)
    return dict(observation=observation, action=action, reward=reward, done=np.bool_(done),
                env_info=env_info,
                agent_info=AgentInfo(q=np.zeros(4, np.float32), prev_rnn_state=rnn_state))


def dqn_replay(async_=False, **kwargs):
    """The replay DQN builds for AtariEnv (shared, as in async_initialize, with async_)."""
    return DQN(**kwargs).initialize_replay_buffer(atari_examples(), BatchSpec(T=5, B=B),
                                                  async_=async_)


def r2d1_replay(rnn_state=LSTM_STATE, **kwargs):
    """The replay R2D1 builds for AtariEnv."""
    return R2D1(**kwargs).initialize_replay_buffer(atari_examples(rnn_state),
                                                   BatchSpec(T=40, B=B))


def test_atari_algorithms_pick_frame_replays():
    """Atari observations (uint8 [C, H, W]) are stored one frame per step by every
    algorithm, with time-limit flags since AtariEnv reports ``env_info.timeout``."""
    for replay, prioritized, time_limit in [
            (dqn_replay(replay_size=1000), False, True),
            (dqn_replay(replay_size=1000, bootstrap_timelimit=False), False, False),
            (dqn_replay(replay_size=1000, prioritized_replay=True, async_=True), True, True),
            (r2d1_replay(replay_size=1000, batch_T=20, warmup_T=10,
                         store_rnn_state_interval=10), True, True)]:
        assert replay.observations is not None and replay.n_frames == N_FRAMES
        assert "observation" not in replay.samples._fields
        assert replay.samples_frames.shape == (replay.T + N_FRAMES - 1, B, H, W)
        assert replay.targets.time_limit == time_limit
        assert replay.sampling.prioritized == prioritized
    assert isinstance(replay.layout, SequenceLayout) and replay.sampling.input_priorities


# ----------------------------------------------------------------- checking a replay
def valid_items(replay, n_appended, frames, seq_T=None):
    """Global ``(steps, envs)`` of every item a replay holding the first ``n_appended``
    steps of each env may sample, worked out from what each item needs: its own step
    (and its sequence), the ``n_step_return`` steps after it, and the steps whose frames
    and previous action it uses before it; sequences start where RNN states are kept."""
    oldest = max(0, n_appended - replay.T)
    before = N_FRAMES - 1 if frames else 1
    length = 1 if seq_T is None else seq_T
    steps = np.arange(oldest + before, n_appended - replay.n_step_return - length + 1)
    if seq_T is not None:
        steps = steps[steps % replay.start_interval == 0]  # Row = step % T; T is a multiple.
    return np.repeat(steps, B), np.tile(np.arange(B), len(steps))


def step_of_rows(replay, n_appended, T_idxs):
    """Global step held by rows ``T_idxs``."""
    return n_appended - 1 - (n_appended - 1 - np.asarray(T_idxs)) % replay.T


def check_draws(replay, n_appended, steps, envs, seq_T=None):
    """The replay's draws are valid items, and it reaches every one of them."""
    valid = set(zip(steps.tolist(), envs.tolist()))
    L = 1 if seq_T is None else seq_T
    T_idxs, B_idxs, _ = replay.sampling.starts(30 * len(valid), L)
    drawn = set(zip(step_of_rows(replay, n_appended, T_idxs).tolist(), B_idxs.tolist()))
    assert drawn <= valid, sorted(drawn - valid)[:5]
    assert drawn == valid, sorted(valid - drawn)[:5]
    if replay.sampling.prioritized:  # Exactly the valid start rows have a priority.
        on = replay.priority_tree.priorities > 0
        rows, cols = np.nonzero(on)
        on_items = set(zip(step_of_rows(replay, n_appended, rows * replay.start_interval
                                        ).tolist(), cols.tolist()))
        assert on_items == valid


def check_steps(replay, rec, n_appended, frames, time_limit):
    """Every sampleable step, and its n-step target, against the recording."""
    steps, envs = valid_items(replay, n_appended, frames)
    if len(steps) == 0:
        return steps, envs
    n = replay.n_step_return
    batch = replay.extract_batch(steps % replay.T, envs)
    assert_equal(batch.action.numpy(), rec.action[steps, envs])
    assert_equal(batch.done.numpy(), rec.done[steps, envs])
    assert_equal(batch.done_n.numpy(), np.any([rec.done[steps + k, envs] for k in range(n)], 0))
    if time_limit:
        assert_equal(batch.timeout.numpy(), rec.timeout[steps, envs])
    assert_equal(batch.agent_inputs.observation.numpy(), rec.observation[steps, envs])
    assert_equal(batch.target_inputs.observation.numpy(), rec.observation[steps + n, envs])
    check_draws(replay, n_appended, steps, envs)
    return steps, envs


def check_sequences(replay, rec, n_appended, frames, time_limit):
    """Every sampleable sequence (and its targets' observations) against the recording."""
    starts, envs = valid_items(replay, n_appended, frames, SEQ_T)
    if len(starts) == 0:
        return starts, envs
    n = replay.n_step_return
    batch = replay.extract_batch(starts % replay.T, envs, SEQ_T)
    k = np.arange(SEQ_T + n)[:, None]
    assert_equal(batch.all_observation.numpy(), rec.observation[starts + k, envs])
    assert_equal(batch.all_action[1:].numpy(), rec.action[starts + k[:-1], envs])
    assert_equal(batch.done.numpy(), rec.done[starts + k[:SEQ_T], envs])
    if time_limit:
        assert_equal(batch.timeout.numpy(), rec.timeout[starts + k[:SEQ_T], envs])
    assert_equal(batch.init_rnn_state.h.numpy(), rec.rnn_state.h[starts, envs])
    check_draws(replay, n_appended, starts, envs, SEQ_T)
    return starts, envs


# ------------------------------------------------------------------ the configurations
SIZE = REPLAY_T * B


def _timelimit_sequences(ex):
    """Uniform sequences of frames with time-limit flags (R2D1's replay, not prioritized)."""
    return ReplayBuffer(ex, SIZE, B, targets=NStepTargets(0.997, 2, time_limit=True),
                        layout=SequenceLayout(RSI, SEQ_T), frames=True)


STEP_CONFIGS = {  # id: (build(example), example type, frames, time-limit targets)
    "uniform": (lambda ex: UniformReplayFrameBuffer(ex, SIZE, B), SamplesToBuffer, True, False),
    "uniform-nstep3": (lambda ex: UniformReplayFrameBuffer(ex, SIZE, B, discount=0.99,
                                                           n_step_return=3),
                       SamplesToBuffer, True, False),
    "prioritized": (lambda ex: PrioritizedReplayFrameBuffer(ex, SIZE, B),
                    SamplesToBuffer, True, False),
    "prioritized-nstep5": (lambda ex: PrioritizedReplayFrameBuffer(ex, SIZE, B, discount=0.99,
                                                                   n_step_return=5),
                           SamplesToBuffer, True, False),
    "TlUniform-nstep3": (lambda ex: TlUniformReplayBuffer(ex, SIZE, B, 0.99, 3),
                         SamplesToBufferTl, False, True),
    "TlPrioritized": (lambda ex: TlPrioritizedReplayBuffer(ex, SIZE, B), SamplesToBufferTl,
                      False, True),
    "AsyncUniform-nstep3": (lambda ex: AsyncUniformReplayFrameBuffer(ex, SIZE, B, 0.99, 3),
                            SamplesToBuffer, True, False),
    "AsyncPrioritized": (lambda ex: AsyncPrioritizedReplayFrameBuffer(ex, SIZE, B),
                         SamplesToBuffer, True, False),
    "AsyncTlUniform-nstep3": (lambda ex: AsyncTlUniformReplayBuffer(ex, SIZE, B, 0.99, 3),
                              SamplesToBufferTl, False, True),
    "DQN(n_step_return=3)": (lambda ex: dqn_replay(replay_size=SIZE, n_step_return=3),
                             SamplesToBufferTl, True, True),
    "DQN(prioritized_replay=True), async": (
        lambda ex: dqn_replay(replay_size=SIZE, prioritized_replay=True, async_=True),
        SamplesToBufferTl, True, True),
}

SEQUENCE_CONFIGS = {
    "uniform": (lambda ex: UniformSequenceReplayFrameBuffer(ex, SIZE, B, RSI, SEQ_T,
                                                            n_step_return=2),
                SamplesToBufferRnn, False),
    "prioritized": (lambda ex: PrioritizedSequenceReplayFrameBuffer(ex, SIZE, B, RSI, SEQ_T,
                                                                    n_step_return=3),
                    SamplesToBufferRnn, False),
    "AsyncUniform": (lambda ex: AsyncUniformSequenceReplayFrameBuffer(ex, SIZE, B, RSI, SEQ_T,
                                                                      n_step_return=1),
                     SamplesToBufferRnn, False),
    "AsyncPrioritized": (lambda ex: AsyncPrioritizedSequenceReplayFrameBuffer(
        ex, SIZE, B, RSI, SEQ_T, n_step_return=2), SamplesToBufferRnn, False),
    "timelimit-uniform": (lambda ex: _timelimit_sequences(ex), SamplesToBufferTlRnn, True),
    "R2D1()": (lambda ex: r2d1_replay(ex.prev_rnn_state, replay_size=SIZE, batch_T=SEQ_T - 2,
                                      warmup_T=2, store_rnn_state_interval=RSI,
                                      n_step_return=2), SamplesToBufferTlRnn, True),
}


def append_and_check(replay, ExampleCls, rec, check, frames, time_limit, chunk_T):
    """Append the recording in chunks of ``chunk_T`` steps (an int, or a list of lengths),
    checking every sampleable item after each; returns the items checked."""
    assert replay.T == REPLAY_T
    sizes = [chunk_T] * (rec.n_steps // chunk_T) if isinstance(chunk_T, int) else chunk_T
    seen, cursors, start = set(), set(), 0
    input_priorities = replay.sampling.input_priorities
    for size in sizes:
        chunk = rec.chunk(ExampleCls, start, start + size)
        if input_priorities:
            chunk = PrioritiesSamplesToBuffer(priorities=torch.ones(B), samples=chunk)
        replay.append_samples(chunk)
        start += size
        steps, envs = check(replay, rec, start, frames, time_limit)
        seen.update(zip(steps.tolist(), envs.tolist()))
        cursors.add(replay.t)
    if isinstance(chunk_T, int):  # The chunks stopped at every row they can.
        assert len(cursors) == REPLAY_T // math.gcd(chunk_T, REPLAY_T)
    return seen


def assert_corners_seen(seen, rec, replay):
    """The items checked include the corners: stacks after each kind of episode end, and
    stacks reaching over the ring's end into the previous lap."""
    steps, envs = np.array(sorted(seen)).T
    after = rec.done[steps - 1, envs]
    assert (after & ~rec.traj_done[steps - 1, envs]).sum() >= 5  # lost life, episodic
    assert (after & rec.timeout[steps - 1, envs]).sum() >= 3  # horizon cut
    assert (after & rec.traj_done[steps - 1, envs] & ~rec.timeout[steps - 1, envs]).sum() >= 2
    wraps = steps % replay.T < N_FRAMES - 1  # Older frames come from rows T-3 .. T-1.
    assert (wraps & (steps >= replay.T)).sum() >= 10
    ends_in_stack = np.any([rec.done[steps - k, envs] for k in range(1, N_FRAMES)], 0)
    assert (wraps & ends_in_stack).sum() >= 2


@pytest.mark.parametrize("config", list(STEP_CONFIGS))
def test_step_replays_rebuild_env_observations(recording, config):
    build, ExampleCls, frames, time_limit = STEP_CONFIGS[config]
    np.random.seed(0)
    replay = build(recording.example(ExampleCls))
    assert (replay.observations is not None) == frames
    seen = append_and_check(replay, ExampleCls, recording, check_steps, frames, time_limit,
                            STEP_CHUNK_T)
    assert_corners_seen(seen, recording, replay)


@pytest.mark.parametrize("config", ["uniform-nstep3", "prioritized-nstep5"])
def test_chunks_from_one_step_to_the_whole_ring(recording, config):
    """``append_samples`` takes chunks of any length up to the ring's: from one step,
    which refreshes the rows copied for the wrap alone, to the whole ring at once."""
    build, ExampleCls, frames, time_limit = STEP_CONFIGS[config]
    np.random.seed(0)
    replay = build(recording.example(ExampleCls))
    T = REPLAY_T
    sizes = [T, 1, T - 1, 2, T - 2, 3, T - 3, 4, T - 4, 1, 1, 1, T, 2, 5]
    assert sum(sizes) <= recording.n_steps
    seen = append_and_check(replay, ExampleCls, recording, check_steps, frames, time_limit,
                            sizes)
    assert len(seen) > 3 * T


@pytest.mark.parametrize("config", list(SEQUENCE_CONFIGS))
def test_sequence_replays_rebuild_env_observations(recording, config):
    build, ExampleCls, time_limit = SEQUENCE_CONFIGS[config]
    np.random.seed(0)
    replay = build(recording.example(ExampleCls))
    assert replay.observations is not None and replay.start_interval == RSI
    seen = append_and_check(replay, ExampleCls, recording, check_sequences, True, time_limit,
                            SEQ_CHUNK_T)
    assert len(seen) > 100


# ------------------------------------------------------------- another process appends
def _append_all(replay, ExampleCls, rec, chunk_T):
    for start in range(0, rec.n_steps, chunk_T):
        replay.append_samples(rec.chunk(ExampleCls, start, start + chunk_T))


@pytest.mark.parametrize("config", ["AsyncUniform-nstep3", "DQN(prioritized_replay=True), async",
                                    "sequence-AsyncPrioritized"])
def test_shared_replays_rebuild_what_another_process_appended(recording, config):
    """As with an asynchronous runner: a child process (the memory copier) appends, this
    process rebuilds the observations from the shared frames, flags and cursor."""
    if config.startswith("sequence-"):
        build, ExampleCls, time_limit = SEQUENCE_CONFIGS[config[len("sequence-"):]]
        check, frames, chunk_T = check_sequences, True, SEQ_CHUNK_T
    else:
        build, ExampleCls, frames, time_limit = STEP_CONFIGS[config]
        check, chunk_T = check_steps, STEP_CHUNK_T
    replay = build(recording.example(ExampleCls))
    child = mp.get_context("fork").Process(target=_append_all,
                                           args=(replay, ExampleCls, recording, chunk_T))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    n_appended = recording.n_steps
    assert replay.t == n_appended % replay.T and replay.n_stored == replay.T
    np.random.seed(0)
    steps, _ = check(replay, recording, n_appended, frames, time_limit)
    assert len(steps) > 0


# ------------------------------------------------------------------------------ memory
MILLION = int(1e6)
FRAME_BYTES = H * W
def _r2d1_shaped_example(rec):
    return rec.example(SamplesToBufferRnn)._replace(prev_rnn_state=LSTM_STATE)


SUM_TREE_BYTES = 2 * 8 * 2 ** 20 / MILLION  # Two float64 per leaf, leaves padded to 2**20.
R2D1_BYTES = (5  # n-step return_ float32, done_n bool,
              + 2 * 512 * 4 / 40  # the LSTM state (h, c) every 40 steps,
              + 2 * 8 * 2 ** 15 / MILLION + 8 / 40)  # sum tree and input priorities per 40.
MEMORY_CONFIGS = {  # id: (build(recording), bytes per transition besides frames)
    # action int64 8, reward float32 4, done bool 1.
    "UniformReplayFrameBuffer": (
        lambda rec: UniformReplayFrameBuffer(rec.example(SamplesToBuffer), MILLION, B), 13),
    "PrioritizedReplayFrameBuffer": (
        lambda rec: PrioritizedReplayFrameBuffer(rec.example(SamplesToBuffer), MILLION, B),
        13 + SUM_TREE_BYTES),
    "PrioritizedSequenceReplayFrameBuffer": (
        lambda rec: PrioritizedSequenceReplayFrameBuffer(
            _r2d1_shaped_example(rec), MILLION, B, rnn_state_interval=40, batch_T=120,
            discount=0.997, n_step_return=5, input_priorities=True, input_priority_shift=1),
        13 + R2D1_BYTES),
    "AsyncUniformReplayFrameBuffer": (
        lambda rec: AsyncUniformReplayFrameBuffer(rec.example(SamplesToBuffer), MILLION, B), 13),
    # The algorithms' defaults with AtariEnv keep env_info.timeout: + 1 (and timeout_n 1).
    "DQN()": (lambda rec: dqn_replay(), 14),
    "DQN(prioritized_replay=True, n_step_return=3), async": (
        lambda rec: dqn_replay(async_=True, prioritized_replay=True, n_step_return=3),
        14 + 6 + SUM_TREE_BYTES),
    "R2D1()": (lambda rec: r2d1_replay(), 14 + 1 + R2D1_BYTES),
}


def allocated_arrays(replay):
    """Every array a replay allocated, found by walking its parts, each counted once
    (through the array it views); the example it was built from is left out."""
    found, seen, stack = {}, set(), [replay]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            found[id(base_array(obj))] = base_array(obj)
        elif isinstance(obj, (tuple, list)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif type(obj).__module__.startswith("rlframe") and hasattr(obj, "__dict__"):
            stack.extend(value for name, value in vars(obj).items()
                         if name != "_frame_example")  # A view of the caller's example.
    return list(found.values())


def base_array(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
@pytest.mark.parametrize("config", list(MEMORY_CONFIGS))
def test_million_transition_frame_replays_hold_one_frame_per_transition(recording, config):
    """A 1M-transition Atari replay allocates one 104x80 frame per transition (not a
    4-frame stack) plus the small per-step fields, and takes memory only where written."""
    build, other_bytes = MEMORY_CONFIGS[config]
    before = resident_bytes()
    replay = build(recording)
    assert MILLION <= replay.size < MILLION + 40 * B
    assert replay.storage.shared == ("async" in config.lower())
    arrays = allocated_arrays(replay)
    frames = base_array(replay.samples_frames)
    assert frames.shape == (replay.T + N_FRAMES - 1, B, H, W)
    frame_bytes = frames.nbytes / replay.size
    rest = sum(a.nbytes for a in arrays if a is not frames) / replay.size
    assert FRAME_BYTES < frame_bytes < 1.05 * FRAME_BYTES
    assert rest == pytest.approx(other_bytes, abs=0.01), {a.shape: a.dtype for a in arrays}
    # Appending and sampling touch the rows written, not the whole replay.
    ExampleCls = SamplesToBufferTl if replay.targets.time_limit else SamplesToBuffer
    for start in range(0, N_STEPS, 40):  # Chunks of 40: R2D1 keeps a state every 40 steps.
        chunk = recording.chunk(ExampleCls, start, start + 40)
        if replay.layout.rnn_state_interval:
            zeros = torch.zeros(chunk.done.shape + (1, 512))
            Cls = SamplesToBufferTlRnn if replay.targets.time_limit else SamplesToBufferRnn
            chunk = Cls(*chunk, prev_rnn_state=RnnState(h=zeros, c=zeros))
        if replay.sampling.input_priorities:
            chunk = PrioritiesSamplesToBuffer(priorities=torch.ones(B), samples=chunk)
        replay.append_samples(chunk)
    replay.sample_batch(4)
    assert resident_bytes() - before < 64 * 2 ** 20
