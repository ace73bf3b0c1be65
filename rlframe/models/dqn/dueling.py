"""Dueling Q-value heads (Wang et al., 2016): Q = V + (A - mean_a A).

Both heads take features ``[N, input_size]`` (flatten leading dims first) and
scale the gradient flowing back into those features by ``grad_scale``; the
default ``2**-0.5`` compensates for the two streams both backpropagating into
a shared body.
"""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.models.mlp import MlpModel
from rlframe.models.utils import scale_grad


class DuelingHeadModel(torch.nn.Module):
    """Value and advantage MLPs combined into Q-values.

    Args:
        input_size: feature size.
        hidden_sizes: hidden sizes of each stream (int, list or None).
        output_size: number of actions.
        grad_scale: factor applied to the gradient w.r.t. the input features.

    ``forward(features [N, input_size])`` -> q [N, output_size].
    """

    def __init__(self, input_size: int, hidden_sizes: int | Sequence[int] | None,
                 output_size: int, grad_scale: float = 2 ** -0.5):
        super().__init__()
        self.advantage = MlpModel(input_size, hidden_sizes, output_size=output_size)
        self.value = MlpModel(input_size, hidden_sizes, output_size=1)
        self.grad_scale = grad_scale

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = scale_grad(input, self.grad_scale)
        advantage = self.advantage(x)
        # Centring the advantages makes V and A identifiable.
        return self.value(x) + advantage - advantage.mean(dim=-1, keepdim=True)


class DistributionalDuelingHeadModel(torch.nn.Module):
    """Dueling head over return distributions: logits per action and atom.

    Args:
        input_size: feature size.
        hidden_sizes: hidden sizes of each stream.
        output_size: number of actions.
        n_atoms: atoms of each return distribution.
        grad_scale: factor applied to the gradient w.r.t. the input features.

    ``forward(features [N, input_size])`` -> logits [N, output_size, n_atoms]
    (apply a softmax over the last dim for probabilities).
    """

    def __init__(self, input_size: int, hidden_sizes: int | Sequence[int] | None,
                 output_size: int, n_atoms: int, grad_scale: float = 2 ** -0.5):
        super().__init__()
        self.advantage = MlpModel(input_size, hidden_sizes, output_size=output_size * n_atoms)
        self.value = MlpModel(input_size, hidden_sizes, output_size=n_atoms)
        self.output_size = int(output_size)
        self.n_atoms = int(n_atoms)
        self.grad_scale = grad_scale

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = scale_grad(input, self.grad_scale)
        advantage = self.advantage(x).view(-1, self.output_size, self.n_atoms)
        value = self.value(x).view(-1, 1, self.n_atoms)
        return value + advantage - advantage.mean(dim=1, keepdim=True)
