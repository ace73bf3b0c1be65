"""Recurrent categorical policy and value model for Atari frames."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from rlframe.models.conv2d import Conv2dHeadModel
from rlframe.models.utils import orthogonal_init_, run_lstm, scale_image
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    RnnState: TypeAlias = NamedArrayTuple
else:
    RnnState = namedarraytuple("RnnState", ["h", "c"])
    """LSTM state: ``h``, ``c`` each [1, B, lstm_size]."""


class AtariLstmModel(torch.nn.Module):
    """Conv body and fully connected layer, then an LSTM, then policy and value heads.

    The LSTM input at each step is ``[conv_features, one-hot prev_action, prev_reward]``.

    Args:
        image_shape: ``(C, H, W)`` of one observation.
        output_size: number of discrete actions.
        fc_sizes: hidden size(s) of the fully connected layer(s) after the convs.
        lstm_size: LSTM hidden size.
        use_maxpool, channels, kernel_sizes, strides, paddings, conv_autocast: as in
            :class:`~rlframe.models.pg.atari_ff_model.AtariFfModel` (same defaults).
        orthogonal_init: as in :class:`~rlframe.models.pg.atari_ff_model.AtariFfModel`,
            the LSTM's weights orthogonal with gain 1 and its biases zero (as CleanRL's
            ppo_atari_lstm.py starts).
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
        lstm_size: int = 512,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        conv_autocast: str | None = None,
        orthogonal_init: bool = False,
    ) -> None:
        super().__init__()
        self.conv = Conv2dHeadModel(
            image_shape=image_shape,
            channels=channels or [16, 32],
            kernel_sizes=kernel_sizes or [8, 4],
            strides=strides or [4, 2],
            paddings=paddings or [0, 1],
            use_maxpool=use_maxpool,
            hidden_sizes=fc_sizes,
            autocast=conv_autocast,
        )
        self.lstm = torch.nn.LSTM(self.conv.output_size + output_size + 1, lstm_size)
        self.pi = torch.nn.Linear(lstm_size, output_size)
        self.value = torch.nn.Linear(lstm_size, 1)
        if orthogonal_init:
            orthogonal_init_(self.conv, output_gain=math.sqrt(2))
            for name, param in self.lstm.named_parameters():
                if name.startswith("weight"):
                    torch.nn.init.orthogonal_(param, gain=1.)
                else:
                    torch.nn.init.zeros_(param)
            orthogonal_init_(self.pi, output_gain=0.01)
            orthogonal_init_(self.value, output_gain=1.)

    def forward(
        self,
        image: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: RnnState | None,
    ) -> tuple[torch.Tensor, torch.Tensor, RnnState]:
        """Run the LSTM over the T steps of the batch.

        Args:
            image: [T, B, C, H, W], [B, C, H, W] or [C, H, W], pixels in [0, 255].
            prev_action: [*lead, A] one-hot previous action (the agent converts it).
            prev_reward: [*lead] previous reward.
            init_rnn_state: ``RnnState`` with h, c [1, B, lstm_size], or None for zeros.

        Returns:
            ``(pi [*lead, A] probabilities, v [*lead], RnnState)``, the state after the
            last step with h, c [1, B, lstm_size].
        """
        lead_dim, T, B, img_shape = infer_leading_dims(image, 3)
        dtype = self.pi.weight.dtype
        img = scale_image(image, dtype)
        features = self.conv(img.reshape(T * B, *img_shape))
        lstm_out, (h, c) = run_lstm(self.lstm, features, prev_action, prev_reward,
                                    init_rnn_state, T, B)
        lstm_flat = lstm_out.reshape(T * B, -1)
        pi = F.softmax(self.pi(lstm_flat), dim=-1)
        v = self.value(lstm_flat).squeeze(-1)
        pi, v = restore_leading_dims((pi, v), lead_dim, T, B)
        return pi, v, RnnState(h=h, c=c)
