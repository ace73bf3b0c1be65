"""Single-step samples with n-step returns and target inputs (rlpyt's module path)."""
from __future__ import annotations

from rlframe.replays.layouts import SamplesFromReplay
from rlframe.replays.n_step import BaseNStepReturnBuffer

__all__ = ["NStepReturnBuffer", "SamplesFromReplay"]


class NStepReturnBuffer(BaseNStepReturnBuffer):
    """Single steps drawn as :data:`SamplesFromReplay` (see
    :class:`~rlframe.replays.layouts.TransitionLayout`)."""
