"""Proportional prioritized sampling of single steps (Schaul et al., 2016)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlframe.replays.non_sequence.n_step import NStepReturnBuffer, SamplesFromReplay
from rlframe.replays.sum_tree import SumTree
from rlframe.utils.buffer import numpify_buffer
from rlframe.utils.collections import namedarraytuple

SamplesFromReplayPri = namedarraytuple("SamplesFromReplayPri",
                                       SamplesFromReplay._fields + ("is_weights",))


class PrioritizedReplay:
    """Mixin: draws steps with probability ``p_i^alpha / sum_k p_k^alpha``.

    New steps get ``default_priority`` (or the priority given with them, see
    ``input_priorities``); the algorithm reports new priorities for the last
    batch (e.g. TD errors) with :meth:`update_batch_priorities`. Batches gain
    ``is_weights`` ``[batch_B]``, the importance-sampling correction
    ``(1 / (p + 1e-6))^beta`` divided by its batch maximum, where ``p`` is the
    drawn step's stored ``priority^alpha``.

    Args:
        alpha: priority exponent (0 = uniform).
        beta: importance-sampling exponent (annealed by the algorithm via
            :meth:`set_beta`).
        default_priority: priority of new steps.
        unique: draw a batch without repeated steps.
        input_priorities: ``append_samples`` takes ``(priorities, samples)``
            namedtuples carrying a priority per appended step.
        input_priority_shift: rows by which input priorities are moved back.
        **kwargs: the storage class's arguments (example, size, B, ...).

    Attributes:
        priority_tree: the :class:`SumTree`.
    """

    SumTreeCls: type = SumTree
    SamplesFromReplayPriCls: type = SamplesFromReplayPri

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0, **kwargs: Any):
        if alpha < 0:
            raise ValueError(f"alpha={alpha} must be >= 0.")
        if beta < 0:
            raise ValueError(f"beta={beta} must be >= 0.")
        if not default_priority > 0:
            raise ValueError(f"default_priority={default_priority} must be > 0.")
        super().__init__(**kwargs)
        self.alpha: float = alpha
        self.beta: float = beta
        self.default_priority: float = default_priority
        self.unique: bool = unique
        self.input_priorities: bool = input_priorities
        self.input_priority_shift: int = int(input_priority_shift)
        self.init_priority_tree()

    def priority_tree_geometry(self) -> tuple[int, int, int]:
        """``(rows per env, off_backward, off_forward)`` of the tree, in tree rows."""
        return self.T, self.off_backward, self.off_forward

    def init_priority_tree(self) -> None:
        """Build ``priority_tree`` for this buffer's geometry."""
        T, off_backward, off_forward = self.priority_tree_geometry()
        self.priority_tree = self.SumTreeCls(
            T=T, B=self.B, off_backward=off_backward, off_forward=off_forward,
            default_value=self.default_priority ** self.alpha,
            enable_input_priorities=self.input_priorities,
            input_priority_shift=self.input_priority_shift,
        )

    def set_beta(self, beta: float) -> None:
        """Set the importance-sampling exponent."""
        self.beta = beta

    def append_samples(self, samples: Any) -> tuple[int, Any]:
        """Store a ``[T, B]`` chunk and switch on priorities of the steps now complete.

        Args:
            samples: the storage's samples namedarraytuple; with ``input_priorities``,
                a namedtuple ``(priorities, samples)`` whose ``priorities`` are
                ``[T, B]`` raw priorities (raised to ``alpha`` here).
        """
        priorities = None
        if self.input_priorities:
            if not hasattr(samples, "priorities") or not hasattr(samples, "samples"):
                raise ValueError("With input_priorities=True, append_samples takes a namedtuple "
                                 "with fields (priorities, samples); got "
                                 f"{getattr(samples, '_fields', type(samples).__name__)}.")
            priorities = np.asarray(numpify_buffer(samples.priorities), dtype=np.float64)
            priorities = priorities ** self.alpha
            samples = samples.samples
        T, idxs = super().append_samples(samples)
        self.priority_tree.advance(self.tree_rows_appended(T), priorities=priorities)
        return T, idxs

    def tree_rows_appended(self, T: int) -> int:
        """Tree rows covered by ``T`` appended steps."""
        return T

    def sample_batch(self, batch_B: int) -> Any:
        """Draw ``batch_B`` steps by priority; the batch adds ``is_weights`` [batch_B]."""
        self.check_can_sample()
        (T_idxs, B_idxs), priorities = self.priority_tree.sample(batch_B, unique=self.unique)
        batch = self.extract_batch(T_idxs, B_idxs)
        return self.with_is_weights(batch, priorities)

    def check_can_sample(self) -> None:
        """Raise a clear error while no step can be sampled yet."""
        b, f = self.off_backward, self.off_forward
        if self.n_stored < b + f + 1:
            raise ValueError(
                f"{type(self).__name__}.sample_batch: the replay holds {self.n_stored} steps per "
                f"env but needs at least {b + f + 1} to sample (the newest {b} and oldest {f} "
                "are not sampled); append more samples first.")

    def with_is_weights(self, batch: Any, priorities: np.ndarray) -> Any:
        """``batch`` extended with normalised importance weights from drawn ``priorities``."""
        is_weights = (1. / (priorities + 1e-6)) ** self.beta
        is_weights /= is_weights.max()
        return self.SamplesFromReplayPriCls(
            *batch, is_weights=torch.from_numpy(is_weights.astype(np.float32)))

    def update_batch_priorities(self, priorities: Any) -> None:
        """New raw priorities ``[batch_B]`` for the last batch (stored as ``priorities^alpha``)."""
        p = np.asarray(numpify_buffer(priorities), dtype=np.float64)
        self.priority_tree.update_batch_priorities(p ** self.alpha)


class PrioritizedReplayBuffer(PrioritizedReplay, NStepReturnBuffer):
    """Prioritized n-step replay; batches are :data:`SamplesFromReplayPri`.

    Args:
        example: namedtuple of one step, e.g. ``SamplesToBuffer(observation, action,
            reward, done)``.
        size: capacity in transitions.
        B: envs appended together.
        discount: discount inside the n-step return.
        n_step_return: rewards summed per return.
        alpha, beta, default_priority, unique, input_priorities, input_priority_shift:
            see :class:`PrioritizedReplay`.
    """

    def __init__(self, example: Any, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0):
        super().__init__(example=example, size=size, B=B, discount=discount,
                         n_step_return=n_step_return, alpha=alpha, beta=beta,
                         default_priority=default_priority, unique=unique,
                         input_priorities=input_priorities,
                         input_priority_shift=input_priority_shift)
