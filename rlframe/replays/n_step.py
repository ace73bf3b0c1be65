"""rlpyt's path of the n-step replay base (:class:`BaseNStepReturnBuffer`).

The storage, return targets and sampling now live in parts
(:mod:`~rlframe.replays.replay_buffer`); this module keeps rlpyt's name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.replays.replay_buffer import ReplayBuffer
from rlframe.replays.targets import NStepTargets, n_step_sums

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple

__all__ = ["BaseNStepReturnBuffer", "n_step_sums"]


class BaseNStepReturnBuffer(ReplayBuffer):
    """Uniformly sampled single steps with n-step returns (see :class:`ReplayBuffer`).

    Args:
        example: namedtuple of one step with ``reward`` and ``done`` fields.
        size: capacity in transitions.
        B: envs appended together.
        discount: discount inside the n-step return.
        n_step_return: rewards summed per return.
    """

    def __init__(self, example: NamedArrayTuple, size: int | float, B: int, discount: float = 1,
                 n_step_return: int = 1):
        super().__init__(example, size, B, targets=NStepTargets(discount, n_step_return),
                         shared=self.async_)
