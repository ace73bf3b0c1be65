"""Feed-forward categorical policy and value model for Atari frames."""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from rlframe.models.conv2d import Conv2dHeadModel
from rlframe.models.utils import orthogonal_init_, scale_image
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


class AtariFfModel(torch.nn.Module):
    """Conv body and fully connected layer shared by a softmax policy head and a value head.

    Args:
        image_shape: ``(C, H, W)`` of one observation (e.g. stacked grayscale frames).
        output_size: number of discrete actions.
        fc_sizes: hidden size(s) of the fully connected layer(s) after the convs.
        use_maxpool: downsample with max-pooling instead of strided convs.
        channels: conv channels (default ``[16, 32]``).
        kernel_sizes: conv kernel sizes (default ``[8, 4]``).
        strides: conv strides (default ``[4, 2]``).
        paddings: conv paddings (default ``[0, 1]``).
        conv_autocast: None, ``"bfloat16"`` or ``"float16"``: the convolutions' arithmetic
            in that dtype (:class:`~rlframe.models.conv2d.Conv2dModel`'s ``autocast``);
            the fully connected layers and the outputs stay float32.
        orthogonal_init: orthogonal weights and zero biases in every layer (gain sqrt(2)
            in the convs and the fully connected layers, 0.01 on the policy's output, 1
            on the value's), as CleanRL's ppo_atari.py and SB3 start; False keeps
            PyTorch's default initialisation (rlpyt's).
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
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
        self.pi = torch.nn.Linear(self.conv.output_size, output_size)
        self.value = torch.nn.Linear(self.conv.output_size, 1)
        if orthogonal_init:
            orthogonal_init_(self.conv, output_gain=math.sqrt(2))
            orthogonal_init_(self.pi, output_gain=0.01)
            orthogonal_init_(self.value, output_gain=1.)

    def forward(self, image: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and value.

        Args:
            image: [T, B, C, H, W], [B, C, H, W] or [C, H, W], pixel values in [0, 255]
                (uint8 or float); scaled by 1/255 here.
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            ``(pi [*lead, A] softmax probabilities, v [*lead])``.
        """
        lead_dim, T, B, img_shape = infer_leading_dims(image, 3)
        img = scale_image(image, self.pi.weight.dtype)
        features = self.conv(img.reshape(T * B, *img_shape))
        pi = F.softmax(self.pi(features), dim=-1)
        v = self.value(features).squeeze(-1)
        return restore_leading_dims((pi, v), lead_dim, T, B)
