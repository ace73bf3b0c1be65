"""Fully connected network."""
from __future__ import annotations

from typing import Sequence

import torch


class MlpModel(torch.nn.Module):
    """Linear layers with a nonlinearity after each hidden layer (none after the output).

    Args:
        input_size: size of the last input dim.
        hidden_sizes: hidden layer sizes: a list, a single int, or None for no hidden layer.
        output_size: size of a final linear layer; None leaves it out, so the output is
            the last hidden layer's activations.
        nonlinearity: module class, instantiated once per hidden layer.

    Input ``[N, input_size]`` (any leading dims) gives ``[N, output_size]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int] | None,
        output_size: int | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
    ) -> None:
        super().__init__()
        if hidden_sizes is None:
            hidden_sizes = []
        elif isinstance(hidden_sizes, int):
            hidden_sizes = [hidden_sizes]
        hidden_sizes = [int(h) for h in hidden_sizes]
        layers: list[torch.nn.Module] = []
        last_size = int(input_size)
        for size in hidden_sizes:
            layers.extend([torch.nn.Linear(last_size, size), nonlinearity()])
            last_size = size
        if output_size is not None:
            layers.append(torch.nn.Linear(last_size, int(output_size)))
            last_size = int(output_size)
        self.model = torch.nn.Sequential(*layers)
        self._output_size: int = last_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the layers to ``input`` [..., input_size]."""
        return self.model(input)

    @property
    def output_size(self) -> int:
        """Last output dim: ``output_size``, else the last hidden size, else the input size."""
        return self._output_size
