"""Distributional (C51) Q-models: the head, and the model for Atari frames."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from rlframe.models.dqn.atari_dqn_model import check_image_shape, dqn_conv
from rlframe.models.dqn.dueling import DistributionalDuelingHeadModel
from rlframe.models.mlp import MlpModel
from rlframe.models.utils import scale_image
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


class DistributionalHeadModel(torch.nn.Module):
    """MLP whose output is reshaped to logits per action and atom.

    Args:
        input_size: feature size.
        layer_sizes: hidden layer sizes (int, list or None).
        output_size: number of actions.
        n_atoms: atoms of each return distribution.

    ``forward(features [N, input_size])`` -> logits [N, output_size, n_atoms]
    (apply a softmax over the last dim for probabilities).
    """

    def __init__(self, input_size: int, layer_sizes: int | Sequence[int] | None,
                 output_size: int, n_atoms: int):
        super().__init__()
        self.mlp = MlpModel(input_size, layer_sizes, output_size=output_size * n_atoms)
        self.output_size = int(output_size)
        self.n_atoms = int(n_atoms)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.mlp(input).view(-1, self.output_size, self.n_atoms)


class AtariCatDqnModel(torch.nn.Module):
    """Conv body, then a head giving a return distribution over ``n_atoms`` per action.

    Args:
        image_shape: ``(C, H, W)`` of one observation.
        output_size: number of discrete actions.
        n_atoms: atoms of each return distribution.
        fc_sizes: hidden size(s) of the head (of each stream when dueling).
        dueling: use a :class:`~rlframe.models.dqn.dueling.DistributionalDuelingHeadModel`.
        use_maxpool, channels, kernel_sizes, strides, paddings, conv_autocast: as in
            :class:`~rlframe.models.dqn.atari_dqn_model.AtariDqnModel` (same defaults).
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        n_atoms: int = 51,
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
            self.head: torch.nn.Module = DistributionalDuelingHeadModel(
                conv_out_size, fc_sizes, output_size, n_atoms)
        else:
            self.head = DistributionalHeadModel(conv_out_size, fc_sizes, output_size, n_atoms)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor) -> torch.Tensor:
        """Atom probabilities.

        Args:
            observation: [T, B, C, H, W], [B, C, H, W] or [C, H, W], pixels in
                [0, 255] (uint8 or float); scaled by 1/255 here.
            prev_action, prev_reward: unused (part of the common model signature).

        Returns:
            p [*lead, output_size, n_atoms], summing to 1 over the last dim.
        """
        lead_dim, T, B, img_shape = infer_leading_dims(observation, 3)
        dtype = next(self.head.parameters()).dtype
        img = scale_image(observation, dtype).reshape(T * B, *img_shape)
        p = F.softmax(self.head(self.conv(img).reshape(T * B, -1)), dim=-1)
        return restore_leading_dims(p, lead_dim, T, B)
