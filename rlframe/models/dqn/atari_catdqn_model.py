"""Distributional (C51) Q-model heads."""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.models.mlp import MlpModel


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
