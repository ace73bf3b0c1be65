"""Recurrent agents: RNN state kept between steps, set aside while training.

Mix :class:`RecurrentAgentMixin` (one state for all envs) or
:class:`AlternatingRecurrentAgentMixin` (one state per env half, for
alternating samplers) in front of an agent class whose model takes
``init_rnn_state`` and returns the next state. Training inputs of recurrent
agents are :data:`AgentInputsRnn`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlframe.utils.buffer import buffer_func, buffer_method
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the class is built in the else branch.
    AgentInputsRnn: TypeAlias = NamedArrayTuple
else:
    AgentInputsRnn = namedarraytuple("AgentInputsRnn",
                                     ["observation", "prev_action", "prev_reward",
                                      "init_rnn_state"])

__all__ = ["AgentInputsRnn", "RecurrentAgentMixin", "AlternatingRecurrentAgentMixin",
           "zeros_like_rnn_state", "rnn_state_batch_first"]


class RecurrentAgentMixin:
    """RNN state bookkeeping for agents whose model takes ``init_rnn_state``.

    The state is ``[N, B, H]`` (or a namedarraytuple of such, e.g. LSTM (h, c));
    ``None`` means zeros. The sampling state is set aside while training or
    evaluating and restored on returning to sample mode.
    """

    recurrent = True
    step_inference_mode = False  # The RNN state lives on between steps.
    _mode: str | None  # BaseAgent's: "train", "sample", "eval" or None.

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._prev_rnn_state: TensorTree | None = None
        self._sample_rnn_state: TensorTree | None = None

    def reset(self) -> None:
        super().reset()
        self._prev_rnn_state = None

    def reset_one(self, idx: int) -> None:
        if self._prev_rnn_state is not None:
            self._prev_rnn_state[:, idx] = 0

    def advance_rnn_state(self, new_rnn_state: TensorTree) -> None:
        """Keep the state the model returned for the next step."""
        self._prev_rnn_state = new_rnn_state

    @property
    def prev_rnn_state(self) -> TensorTree | None:
        return self._prev_rnn_state

    def train_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state = self._prev_rnn_state
        self._prev_rnn_state = None
        super().train_mode(itr)

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            self._prev_rnn_state = self._sample_rnn_state
        super().sample_mode(itr)

    def eval_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state = self._prev_rnn_state
        self._prev_rnn_state = None
        super().eval_mode(itr)


class AlternatingRecurrentAgentMixin:
    """Two RNN states, one per half of the envs, for alternating samplers.

    The agent steps one half, then the other; each ``advance_rnn_state`` stores
    the state of the current half and switches to the other.
    """

    recurrent = True
    alternating = True
    step_inference_mode = False  # The RNN states live on between steps.
    _mode: str | None  # BaseAgent's: "train", "sample", "eval" or None.

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._prev_rnn_state_pair: list[TensorTree | None] = [None, None]
        self._sample_rnn_state_pair: list[TensorTree | None] = [None, None]
        self._alt = 0

    def reset(self) -> None:
        super().reset()
        self._prev_rnn_state_pair = [None, None]
        self._alt = 0

    def reset_one(self, idx: int) -> None:
        # idx is within the current half.
        state = self._prev_rnn_state_pair[self._alt]
        if state is not None:
            state[:, idx] = 0

    def advance_rnn_state(self, new_rnn_state: TensorTree) -> None:
        self._prev_rnn_state_pair[self._alt] = new_rnn_state
        self._alt ^= 1

    @property
    def prev_rnn_state(self) -> TensorTree | None:
        return self._prev_rnn_state_pair[self._alt]

    def toggle_alt(self) -> None:
        self._alt ^= 1

    def train_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state_pair = self._prev_rnn_state_pair
        self._prev_rnn_state_pair = [None, None]
        self._alt = 0
        super().train_mode(itr)

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            self._prev_rnn_state_pair = self._sample_rnn_state_pair
            self._alt = 0
        super().sample_mode(itr)

    def eval_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state_pair = self._prev_rnn_state_pair
        self._prev_rnn_state_pair = [None, None]
        self._alt = 0
        super().eval_mode(itr)


def zeros_like_rnn_state(rnn_state: TensorTree) -> TensorTree:
    """Zeros with the structure and shape of ``rnn_state``."""
    return buffer_func(rnn_state, torch.zeros_like)


def rnn_state_batch_first(rnn_state: TensorTree) -> TensorTree:
    """[N, B, H] -> [B, N, H] (how agent_info stores prev_rnn_state per env)."""
    return buffer_method(rnn_state, "transpose", 0, 1)
