"""Recurrent Q-value model for Atari frames (R2D1/R2D2, Kapturowski et al., 2019)."""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.models.dqn.atari_dqn_model import check_image_shape, dqn_conv
from rlframe.models.dqn.dueling import DuelingHeadModel
from rlframe.models.dqn.mlp_models import RnnState
from rlframe.models.mlp import MlpModel
from rlframe.models.utils import run_lstm, scale_image
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["AtariR2d1Model", "RnnState"]


class AtariR2d1Model(torch.nn.Module):
    """Conv body and a fully connected layer, then an LSTM, then a Q head.

    The LSTM input at each step is ``[fc(conv(observation)), one-hot prev_action,
    prev_reward]``.

    Args:
        image_shape: ``(C, H, W)`` of one observation.
        output_size: number of discrete actions.
        fc_size: size of the fully connected layer after the convs.
        lstm_size: LSTM hidden size.
        head_size: hidden size of the Q head (of each stream when dueling).
        dueling: use a :class:`~rlframe.models.dqn.dueling.DuelingHeadModel`.
        use_maxpool, channels, kernel_sizes, strides, paddings, conv_autocast: as in
            :class:`~rlframe.models.dqn.atari_dqn_model.AtariDqnModel` (same defaults).
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_size: int = 512,
        lstm_size: int = 512,
        head_size: int = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        conv_autocast: str | None = None,
    ) -> None:
        super().__init__()
        image_shape = check_image_shape(type(self).__name__, image_shape)
        self.conv, conv_out_size = dqn_conv(image_shape, use_maxpool, channels, kernel_sizes,
                                            strides, paddings, conv_autocast)
        self.fc = MlpModel(conv_out_size, fc_size)  # Linear + ReLU.
        self.lstm = torch.nn.LSTM(self.fc.output_size + output_size + 1, lstm_size)
        self.dueling = dueling
        if dueling:
            self.head: torch.nn.Module = DuelingHeadModel(lstm_size, head_size, output_size)
        else:
            self.head = MlpModel(lstm_size, head_size, output_size=output_size)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: RnnState | None,
    ) -> tuple[torch.Tensor, RnnState]:
        """Run the LSTM over the T steps of the input.

        Args:
            observation: [T, B, C, H, W], [B, C, H, W] or [C, H, W], pixels in
                [0, 255] (uint8 or float); scaled by 1/255 here.
            prev_action: [*lead, output_size] one-hot previous action.
            prev_reward: [*lead] previous reward.
            init_rnn_state: ``RnnState`` with h, c [1, B, lstm_size], or None for zeros.

        Returns:
            ``(q [*lead, output_size], RnnState)``: the state after the last step,
            h and c [1, B, lstm_size].
        """
        lead_dim, T, B, img_shape = infer_leading_dims(observation, 3)
        dtype = self.lstm.weight_ih_l0.dtype
        img = scale_image(observation, dtype).reshape(T * B, *img_shape)
        features = self.fc(self.conv(img).reshape(T * B, -1))
        lstm_out, (h, c) = run_lstm(self.lstm, features, prev_action, prev_reward,
                                    init_rnn_state, T, B)
        q = self.head(lstm_out.reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B), RnnState(h=h, c=c)
