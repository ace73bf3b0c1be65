"""Q-value model for Atari frames (Mnih et al., 2015), optionally dueling."""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.models.conv2d import Conv2dModel
from rlframe.models.dqn.dueling import DuelingHeadModel
from rlframe.models.mlp import MlpModel
from rlframe.models.utils import scale_image
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


def check_image_shape(model: str, image_shape: Sequence[int]) -> tuple[int, int, int]:
    """``image_shape`` as ``(C, H, W)``, or a ValueError naming ``model`` and the shape."""
    shape = tuple(int(d) for d in image_shape)
    if len(shape) != 3:
        raise ValueError(f"{model} takes image observations: image_shape must be (C, H, W), "
                         f"got {shape}. For vector observations use an MLP model (the DQN-family "
                         "agents without 'Atari' in their name default to one).")
    return shape


def dqn_conv(image_shape: Sequence[int], use_maxpool: bool = False,
             channels: Sequence[int] | None = None, kernel_sizes: Sequence[int] | None = None,
             strides: Sequence[int] | None = None, paddings: Sequence[int] | None = None,
             autocast: str | None = None) -> tuple[Conv2dModel, int]:
    """The conv body of the Atari DQN models and its flattened output size.

    Unset arguments take rlpyt's defaults: the Nature-DQN channels ``[32, 64, 64]``,
    kernel sizes ``[8, 4, 3]`` and strides ``[4, 2, 1]``, with paddings ``[0, 1, 1]``
    (Nature's has none: ``paddings=[0, 0, 0]`` gives its 64x7x7 output on 84x84).
    ``autocast`` is :class:`Conv2dModel`'s (the models' ``conv_autocast``).

    Returns:
        ``(conv, conv_out_size)``; ``conv`` maps [N, C, H, W] to [N, C', H', W'].
    """
    c, h, w = image_shape
    conv = Conv2dModel(
        in_channels=c,
        channels=[32, 64, 64] if channels is None else channels,
        kernel_sizes=[8, 4, 3] if kernel_sizes is None else kernel_sizes,
        strides=[4, 2, 1] if strides is None else strides,
        paddings=[0, 1, 1] if paddings is None else paddings,
        use_maxpool=use_maxpool,
        autocast=autocast,
    )
    return conv, conv.conv_out_size(h, w)


class AtariDqnModel(torch.nn.Module):
    """Conv body, then an MLP (or a dueling head) giving one Q-value per action.

    Args:
        image_shape: ``(C, H, W)`` of one observation (e.g. 4 stacked grayscale frames).
        output_size: number of discrete actions.
        fc_sizes: hidden size(s) of the head (of each stream when dueling).
        dueling: use a :class:`~rlframe.models.dqn.dueling.DuelingHeadModel`.
        use_maxpool: downsample with max-pooling instead of strided convs.
        channels: conv channels (default ``[32, 64, 64]``).
        kernel_sizes: conv kernel sizes (default ``[8, 4, 3]``).
        strides: conv strides (default ``[4, 2, 1]``).
        paddings: conv paddings (default ``[0, 1, 1]``).
        conv_autocast: None, ``"bfloat16"`` or ``"float16"``: the convolutions' arithmetic
            in that dtype (:class:`~rlframe.models.conv2d.Conv2dModel`'s ``autocast``);
            the head and the Q-values stay float32.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] = 512,
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
        self.dueling = dueling
        if dueling:
            self.head: torch.nn.Module = DuelingHeadModel(conv_out_size, fc_sizes, output_size)
        else:
            self.head = MlpModel(conv_out_size, fc_sizes, output_size=output_size)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Q-values.

        Args:
            observation: [T, B, C, H, W], [B, C, H, W] or [C, H, W], pixels in
                [0, 255] (uint8 or float); scaled by 1/255 here.
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            q [*lead, output_size].
        """
        lead_dim, T, B, img_shape = infer_leading_dims(observation, 3)
        dtype = next(self.head.parameters()).dtype
        img = scale_image(observation, dtype).reshape(T * B, *img_shape)
        q = self.head(self.conv(img).reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B)
