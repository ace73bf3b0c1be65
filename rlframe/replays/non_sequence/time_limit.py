"""Replays that keep the env's ``timeout`` flag, for bootstrapping through time limits.

An episode cut by a time limit ends with ``done`` and ``timeout`` both true;
its last return should still be bootstrapped, but the state after it was never
stored (the env was reset). These buffers report which samples are affected so
the algorithm can leave them out of the loss:

* ``timeout``: ``[batch_B]``, the step itself was cut by the time limit;
* ``timeout_n``: ``[batch_B]``, the n-step return was cut short by a time limit,
  i.e. the first ``done`` within ``t .. t+n-1`` came with ``timeout``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlframe.replays.non_sequence.n_step import NStepReturnBuffer, SamplesFromReplay
from rlframe.replays.non_sequence.prioritized import PrioritizedReplay
from rlframe.replays.non_sequence.uniform import UniformReplay
from rlframe.utils.buffer import buffer_from_example, torchify_buffer
from rlframe.utils.collections import namedarraytuple

SamplesFromReplayTL = namedarraytuple("SamplesFromReplayTL",
                                      SamplesFromReplay._fields + ("timeout", "timeout_n"))
SamplesFromReplayPriTL = namedarraytuple("SamplesFromReplayPriTL",
                                         SamplesFromReplayTL._fields + ("is_weights",))


class NStepTimeLimitBuffer(NStepReturnBuffer):
    """:class:`NStepReturnBuffer` whose example has a ``timeout`` field.

    Args:
        example: namedtuple of one step with ``timeout``, e.g.
            ``SamplesToBuffer(observation, action, reward, done, timeout)``.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.

    Attributes:
        samples_timeout_n: ``[T, B]`` bool (``samples.timeout`` when n = 1).
    """

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        if not hasattr(example, "timeout"):
            raise ValueError(f"{type(self).__name__} needs a 'timeout' field in the example; got "
                             f"fields {getattr(example, '_fields', None)}.")
        super().__init__(example=example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return)
        if self.n_step_return > 1:
            self.samples_timeout_n: np.ndarray = buffer_from_example(
                example.timeout, (self.T, self.B), share_memory=self.async_)
        else:
            self.samples_timeout_n = self.samples.timeout

    def compute_returns(self, T_new: int) -> None:
        """n-step returns, plus ``timeout_n``: did a time limit end the n-step window?"""
        super().compute_returns(T_new)
        if self.n_step_return == 1:
            return
        found = self.n_step_window(T_new)
        if found is None:
            return
        rows, window = found
        M = len(rows)
        done = self.samples.done[window].astype(bool)
        timeout = self.samples.timeout[window].astype(bool)
        timeout_n = timeout[:M].copy()
        ended = done[:M].copy()
        for k in range(1, self.n_step_return):
            timeout_n |= timeout[k:k + M] & ~ended
            ended |= done[k:k + M]
        self.samples_timeout_n[rows] = timeout_n

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """The :class:`NStepReturnBuffer` batch plus ``timeout`` and ``timeout_n`` [batch_B]."""
        batch = super().extract_batch(T_idxs, B_idxs)
        return SamplesFromReplayTL(
            *batch,
            timeout=torchify_buffer(self.samples.timeout[T_idxs, B_idxs]),
            timeout_n=torchify_buffer(self.samples_timeout_n[T_idxs, B_idxs]),
        )


class TlUniformReplayBuffer(UniformReplay, NStepTimeLimitBuffer):
    """Uniform replay with ``timeout``/``timeout_n``; batches are :data:`SamplesFromReplayTL`.

    Args:
        example: namedtuple of one step with a ``timeout`` field.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
    """


class TlPrioritizedReplayBuffer(PrioritizedReplay, NStepTimeLimitBuffer):
    """Prioritized replay with ``timeout``/``timeout_n``.

    Batches are :data:`SamplesFromReplayPriTL`.

    Args:
        example: namedtuple of one step with a ``timeout`` field.
        size, B, discount, n_step_return: see :class:`BaseNStepReturnBuffer`.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`~rlframe.replays.non_sequence.prioritized.PrioritizedReplay`.
    """

    SamplesFromReplayPriCls = SamplesFromReplayPriTL

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0):
        super().__init__(example=example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return, alpha=alpha, beta=beta,
                         default_priority=default_priority, unique=unique,
                         input_priorities=input_priorities,
                         input_priority_shift=input_priority_shift)
