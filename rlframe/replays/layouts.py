"""What one training item looks like: a single step, or a sequence of steps.

Every batch field is a torch tensor. Batch types grow with the replay's other
parts: time-limit targets add ``timeout`` and ``timeout_n``, prioritized
sampling adds ``is_weights`` ``[batch_B]``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlframe.agents.base import AgentInputs
from rlframe.replays.samples import (  # noqa: F401  (also importable from here)
    SamplesFromReplay, SamplesFromReplayPri, SamplesFromReplayPriTL, SamplesFromReplayTL,
    SequenceSamplesFromReplay, SequenceSamplesFromReplayPri, SequenceSamplesFromReplayPriTL,
    SequenceSamplesFromReplayTL)
from rlframe.utils.buffer import buffer_func, torchify_buffer
from rlframe.utils.misc import extract_sequences

if TYPE_CHECKING:
    from rlframe.replays.view import ReplayView
    from rlframe.utils.buffer import ArrayTree
    from rlframe.utils.collections import NamedArrayTuple

# Batch type by (time-limit targets, prioritized).
_TRANSITION_BATCHES = {(False, False): SamplesFromReplay, (False, True): SamplesFromReplayPri,
                       (True, False): SamplesFromReplayTL, (True, True): SamplesFromReplayPriTL}
_SEQUENCE_BATCHES = {
    (False, False): SequenceSamplesFromReplay, (False, True): SequenceSamplesFromReplayPri,
    (True, False): SequenceSamplesFromReplayTL, (True, True): SequenceSamplesFromReplayPriTL}


class TransitionLayout:
    """Items are single steps; a batch at rows ``T_idxs`` of envs ``B_idxs`` ([batch_B]) is:

    * ``agent_inputs``: ``AgentInputs(observation[t], action[t-1], reward[t-1])``,
      the previous action and reward zeroed where ``done[t-1]`` (a new episode);
    * ``action``: ``action[t]``;
    * ``return_``, ``done``, ``done_n``: ``[batch_B]`` (see
      :class:`~rlframe.replays.targets.NStepTargets`);
    * ``target_inputs``: ``AgentInputs`` at ``t + n_step_return``, for the bootstrap.
    """

    start_interval: int = 1
    batch_T: int = 1
    stored_state_field: str | None = None
    rnn_state_interval: int = 0  # No RNN states are stored with single steps ...
    prev_rnn_state: None = None  # ... so there are none to read.

    def check_example(self, example: NamedArrayTuple) -> None:
        """Single steps need nothing beyond the common fields."""

    def build(self, replay: ReplayView, example: NamedArrayTuple) -> None:
        """Attach to ``replay``."""
        self._replay = replay

    def round_T(self, T: int) -> int:
        """Steps per env to allocate for a requested ``T``."""
        return T

    def write(self, t: int, T_new: int, samples: NamedArrayTuple) -> None:
        """Nothing beyond the storage's own fields."""

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray, L: int = 1,
                      is_weights: torch.Tensor | None = None) -> SamplesFromReplay:
        """Batch of single steps (torch), with ``is_weights`` when given (``L`` is 1)."""
        r = self._replay
        s, T, B = r.storage.samples, r.storage.T, r.storage.B
        n = len(T_idxs)
        target_T_idxs = (T_idxs + r.n_step_return) % T
        # One gather per field for the step, its predecessor and the target's predecessor
        # (rewards of the predecessors only: the step's own is in ``return_``).
        rows = np.concatenate((T_idxs, (T_idxs - 1) % T, (target_T_idxs - 1) % T))
        flat = rows * B + np.concatenate((B_idxs, B_idxs, B_idxs))
        action = _gather(s.action, flat)
        prev_reward = _gather(s.reward, flat[n:])
        done = _gather(s.done, flat[:2 * n])
        prev_done = done[n:].astype(bool, copy=False)
        if prev_done.any():  # A new episode: no previous action or reward.
            buffer_func(action, _zero_where, n, prev_done)
            prev_reward[:n][prev_done] = 0
        action, prev_reward = torchify_buffer(action), torch.from_numpy(prev_reward)
        observation = torchify_buffer(r.extract_observation(
            np.concatenate((T_idxs, target_T_idxs)), np.concatenate((B_idxs, B_idxs))))
        fields = dict(
            agent_inputs=AgentInputs(observation=observation[:n], prev_action=action[n:2 * n],
                                     prev_reward=prev_reward[:n]),
            action=action[:n],
            done=torch.from_numpy(done[:n]),
            target_inputs=AgentInputs(observation=observation[n:], prev_action=action[2 * n:],
                                      prev_reward=prev_reward[n:]))
        for name, value in r.targets.at(T_idxs, B_idxs).items():
            fields[name] = torch.from_numpy(value)
        if is_weights is not None:
            fields["is_weights"] = is_weights
        return _TRANSITION_BATCHES[(r.targets.time_limit, is_weights is not None)](**fields)


def _gather(array: Any, flat_idxs: np.ndarray) -> Any:
    """``array[T_idx, B_idx]`` for flat indices ``T_idx * B + B_idx`` of ``[T, B, ...]`` arrays
    (nested namedarraytuples too): one gather on a flat view."""
    if isinstance(array, np.ndarray):
        return array.reshape((-1,) + array.shape[2:])[flat_idxs]
    return buffer_func(array, _gather, flat_idxs)


def _zero_where(array: np.ndarray, n: int, mask: np.ndarray) -> None:
    """Zero rows ``n + i`` of ``array`` where ``mask[i]``."""
    array[n:n + len(mask)][mask] = 0


class SequenceLayout:
    """Items are ``[L, batch_B]`` sequences starting where an RNN state was stored.

    The agent's recurrent state before each step (``prev_rnn_state`` in the
    example) is kept only every ``rnn_state_interval`` steps, at rows that are
    multiples of it, and sequences start only at those rows so training can
    begin from a recorded state. ``T`` is rounded up to a multiple of the
    interval. A batch of sequences of length ``L`` starting at rows ``t`` is:

    * ``all_observation``: ``[L + n, batch_B, ...]``, observations ``t .. t+L+n-1``
      (the agent's inputs, then those of the n-step targets);
    * ``all_action``, ``all_reward``: ``[L + n, batch_B, ...]``, steps
      ``t-1 .. t+L+n-2``, i.e. the previous action/reward of each observation;
      entry 0 is zeroed where ``done[t-1]``;
    * ``return_``, ``done``, ``done_n`` (and ``timeout``, ``timeout_n``): ``[L, batch_B]``;
    * ``init_rnn_state``: ``[batch_B, ...]``, the stored state before step ``t``
      (None when ``rnn_state_interval == 0``).

    Args:
        rnn_state_interval: store the RNN state every this many steps (0: never,
            1: every step).
        batch_T: default sequence length ``L`` (required by prioritized sampling).

    Attributes:
        prev_rnn_state: ``[T // rnn_state_interval, B, ...]`` stored states (with
            interval 1, the storage's own ``prev_rnn_state`` field; None with 0).
    """

    def __init__(self, rnn_state_interval: int, batch_T: int | None = None):
        if int(rnn_state_interval) != rnn_state_interval or rnn_state_interval < 0:
            raise ValueError(f"rnn_state_interval={rnn_state_interval!r} must be an integer >= 0 "
                             "(0: no RNN state stored, 1: every step).")
        if batch_T is not None and (int(batch_T) != batch_T or batch_T < 1):
            raise ValueError(f"batch_T={batch_T!r} must be None or an integer >= 1.")
        self.rnn_state_interval: int = int(rnn_state_interval)
        self.batch_T: int | None = None if batch_T is None else int(batch_T)
        self.start_interval: int = max(1, self.rnn_state_interval)
        # The field kept out of the common storage (states are stored sparsely).
        self.stored_state_field: str | None = ("prev_rnn_state"
                                               if self.rnn_state_interval != 1 else None)
        self.prev_rnn_state: ArrayTree | None = None

    def check_example(self, example: NamedArrayTuple) -> None:
        """Raise unless the example carries what this layout stores."""
        if self.rnn_state_interval > 0 and not hasattr(example, "prev_rnn_state"):
            raise ValueError(f"rnn_state_interval={self.rnn_state_interval} stores RNN states, "
                             f"but the example has no 'prev_rnn_state' field (fields: "
                             f"{getattr(example, '_fields', None)}); use rnn_state_interval=0.")

    def round_T(self, T: int) -> int:
        """``T`` rounded up to a multiple of the RNN-state interval."""
        return self.start_interval * math.ceil(T / self.start_interval)

    def build(self, replay: ReplayView, example: NamedArrayTuple) -> None:
        """Allocate the sparse RNN-state rows."""
        self._replay = replay
        s = replay.storage
        if self.rnn_state_interval > 1:
            self.prev_rnn_state = s.allocate(example.prev_rnn_state,
                                             (s.T // self.rnn_state_interval, s.B))
        elif self.rnn_state_interval == 1:
            self.prev_rnn_state = s.samples.prev_rnn_state

    def write(self, t: int, T_new: int, samples: NamedArrayTuple) -> None:
        """Keep the states of the chunk's rows that are multiples of the interval."""
        rsi = self.rnn_state_interval
        if rsi <= 1:
            return
        if not hasattr(samples, "prev_rnn_state"):
            raise ValueError(f"append_samples needs a 'prev_rnn_state' field with "
                             f"rnn_state_interval={rsi}; got fields "
                             f"{getattr(samples, '_fields', None)}.")
        offsets = np.arange((-t) % rsi, T_new, rsi)
        if len(offsets) > 0:
            rows = ((t + offsets) % self._replay.storage.T) // rsi
            self.prev_rnn_state[rows] = samples.prev_rnn_state[offsets]

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray, L: int,
                      is_weights: torch.Tensor | None = None) -> SequenceSamplesFromReplay:
        """Batch of sequences of length ``L`` (torch), with ``is_weights`` when given."""
        r = self._replay
        s, T, n = r.storage.samples, r.storage.T, r.n_step_return
        rows = (np.asarray(T_idxs)[None, :] + np.arange(L + n)[:, None]) % T
        B_rows = np.broadcast_to(np.asarray(B_idxs)[None, :], rows.shape)
        prev_T_idxs = (T_idxs - 1) % T
        fields = dict(
            all_observation=r.extract_observation(rows, B_rows),
            all_action=buffer_func(s.action, extract_sequences, prev_T_idxs, B_idxs, L + n),
            all_reward=extract_sequences(s.reward, prev_T_idxs, B_idxs, L + n),
            done=extract_sequences(s.done, T_idxs, B_idxs, L),
            init_rnn_state=self.extract_rnn_state(T_idxs, B_idxs))
        targets = r.targets
        fields.update(return_=extract_sequences(targets.return_, T_idxs, B_idxs, L),
                      done_n=extract_sequences(targets.done_n, T_idxs, B_idxs, L))
        if targets.time_limit:
            fields.update(timeout=extract_sequences(s.timeout, T_idxs, B_idxs, L),
                          timeout_n=extract_sequences(targets.timeout_n, T_idxs, B_idxs, L))
        if is_weights is not None:
            fields["is_weights"] = is_weights
        batch = _SEQUENCE_BATCHES[(targets.time_limit, is_weights is not None)](**fields)
        new_episode = np.asarray(s.done[prev_T_idxs, B_idxs], dtype=bool)
        if new_episode.any():
            batch.all_action[0, new_episode] = 0
            batch.all_reward[0, new_episode] = 0
        return torchify_buffer(batch)

    def extract_rnn_state(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> ArrayTree | None:
        """Stored RNN states before steps ``T_idxs`` (multiples of the interval), [batch_B, ...]."""
        if self.prev_rnn_state is None:
            return None
        return self.prev_rnn_state[T_idxs // self.start_interval, B_idxs]
