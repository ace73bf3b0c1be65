"""Convolutional bodies for image observations."""
from __future__ import annotations

from typing import Sequence

import torch

from rlframe.models.mlp import MlpModel
from rlframe.models.utils import conv2d_output_shape


AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
"""Names ``autocast`` takes, and their dtypes."""


def autocast_dtype(name: str | None,
                   parameter: str = "autocast (the Atari models' conv_autocast)"
                   ) -> torch.dtype | None:
    """The dtype named by a model's ``autocast`` keyword (None: none), or a ValueError
    naming ``parameter``, the value and the names allowed."""
    if name is None:
        return None
    if not isinstance(name, str) or name not in AUTOCAST_DTYPES:
        raise ValueError(f"{parameter} must be None (float32 convolutions) or one of "
                         f"{sorted(AUTOCAST_DTYPES)}, got {name!r}.")
    return AUTOCAST_DTYPES[name]


class Conv2dModel(torch.nn.Module):
    """Stack of Conv2d layers, each followed by ``nonlinearity`` (and a max-pool if asked).

    Args:
        in_channels: channels of the input image.
        channels: output channels per layer.
        kernel_sizes: square kernel size per layer.
        strides: stride per layer; with ``use_maxpool`` the convs use stride 1 and a
            MaxPool2d of this size follows instead (when it is > 1).
        paddings: padding per layer (default all 0).
        nonlinearity: module class applied after each conv.
        use_maxpool: downsample with max-pooling instead of strided convs.
        head_sizes: accepted for compatibility and unused (see :class:`Conv2dHeadModel`).
        channels_last: keep the conv weights in channels-last memory order (the
            layout only; shapes, values and state dicts are as in the default order).
            Convolutions then run in that order, input in either: on CPUs, a training
            pass (forward and backward) of the Nature DQN network on a batch of 256
            takes 0.6x the time, an acting pass on a few frames about the same.
        autocast: None, or ``"bfloat16"`` / ``"float16"``: run the convolutions
            under ``torch.autocast`` with that dtype (the weights, their gradients and
            the output stay float32; only the convolutions' arithmetic is in the lower
            precision, with its 8 or 11 significant bits). On CPUs with bfloat16
            instructions (AVX512-BF16, AMX) and on GPUs a training pass takes less
            time; elsewhere it may take more.

    Input ``[N, C, H, W]`` gives ``[N, channels[-1], H', W']`` (float32 when ``input``
    is, also with ``autocast``).
    """

    def __init__(
        self,
        in_channels: int,
        channels: Sequence[int],
        kernel_sizes: Sequence[int],
        strides: Sequence[int],
        paddings: Sequence[int] | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        use_maxpool: bool = False,
        head_sizes: Sequence[int] | None = None,
        channels_last: bool = True,
        autocast: str | None = None,
    ) -> None:
        super().__init__()
        self.autocast = autocast
        self._autocast_dtype = autocast_dtype(autocast)
        if paddings is None:
            paddings = [0] * len(channels)
        if not len(channels) == len(kernel_sizes) == len(strides) == len(paddings):
            raise ValueError(
                f"Conv2dModel: channels {list(channels)}, kernel_sizes {list(kernel_sizes)}, "
                f"strides {list(strides)} and paddings {list(paddings)} must have equal length.")
        if use_maxpool:
            pool_strides = list(strides)
            strides = [1] * len(channels)
        else:
            pool_strides = [1] * len(channels)
        layers: list[torch.nn.Module] = []
        in_ch = in_channels
        for out_ch, k, s, p, pool in zip(channels, kernel_sizes, strides, paddings, pool_strides):
            layers.append(torch.nn.Conv2d(in_ch, out_ch, kernel_size=k, stride=s, padding=p))
            layers.append(nonlinearity())
            if pool > 1:
                layers.append(torch.nn.MaxPool2d(pool))
            in_ch = out_ch
        self.conv = torch.nn.Sequential(*layers)
        if channels_last:
            self.conv.to(memory_format=torch.channels_last)
        self.head_sizes = head_sizes

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Apply the conv stack to ``input`` [N, C, H, W]."""
        if self._autocast_dtype is None:
            return self.conv(input)
        with torch.autocast(input.device.type, dtype=self._autocast_dtype):
            output = self.conv(input)
        return output.to(input.dtype)

    def conv_out_size(self, h: int, w: int, c: int | None = None) -> int:
        """Number of output features ``C' * H' * W'`` for an ``h`` x ``w`` input."""
        for layer in self.conv:
            if isinstance(layer, torch.nn.Conv2d):
                h, w = conv2d_output_shape(h, w, layer.kernel_size[0], layer.stride[0],
                                           layer.padding[0])
                c = layer.out_channels
            elif isinstance(layer, torch.nn.MaxPool2d):
                h, w = conv2d_output_shape(h, w, layer.kernel_size, layer.stride, layer.padding)
        return h * w * c


class Conv2dHeadModel(torch.nn.Module):
    """Conv stack, flattened, then an MLP head.

    Args:
        image_shape: ``(C, H, W)``.
        channels, kernel_sizes, strides, paddings, use_maxpool: as :class:`Conv2dModel`.
        hidden_sizes: MLP hidden sizes (int, list or None).
        output_size: MLP output size; with neither hidden sizes nor output size the
            flattened conv features are returned.
        nonlinearity: used in both the conv stack and the MLP.
        channels_last, autocast: as :class:`Conv2dModel` (the MLP head runs in the
            input's dtype).

    Input ``[N, C, H, W]`` gives ``[N, output_size]``.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        channels: Sequence[int],
        kernel_sizes: Sequence[int],
        strides: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        output_size: int | None = None,
        paddings: Sequence[int] | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        use_maxpool: bool = False,
        channels_last: bool = True,
        autocast: str | None = None,
    ) -> None:
        super().__init__()
        c, h, w = image_shape
        self.conv = Conv2dModel(in_channels=c, channels=channels, kernel_sizes=kernel_sizes,
                                strides=strides, paddings=paddings, nonlinearity=nonlinearity,
                                use_maxpool=use_maxpool, channels_last=channels_last,
                                autocast=autocast)
        self._conv_out_size: int = self.conv.conv_out_size(h, w)
        self.head: torch.nn.Module
        if hidden_sizes or output_size:
            self.head = MlpModel(self._conv_out_size, hidden_sizes, output_size=output_size,
                                 nonlinearity=nonlinearity)
            self._output_size: int = self.head.output_size
        else:
            self.head = torch.nn.Identity()
            self._output_size = self._conv_out_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """``input`` [N, C, H, W] -> [N, output_size]."""
        return self.head(self.conv(input).reshape(input.shape[0], -1))

    @property
    def output_size(self) -> int:
        """Size of the output features."""
        return self._output_size

    @property
    def conv_out_size(self) -> int:
        """Size of the flattened conv features feeding the head."""
        return self._conv_out_size
