"""Model helpers: conv output shapes, orthogonal initialisation, gradient scaling, (soft)
state-dict copies, mode switches."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

import torch

if TYPE_CHECKING:
    from torch.autograd.function import FunctionCtx

    from rlframe.utils.collections import NamedArrayTuple


def conv2d_output_shape(h: int, w: int, kernel_size: int = 1, stride: int = 1,
                        padding: int = 0, dilation: int = 1) -> tuple[int, int]:
    """Spatial output ``(h, w)`` of a Conv2d or MaxPool2d with square parameters."""
    def out(size: int) -> int:
        return (size + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1
    return out(h), out(w)


def orthogonal_init_(module: torch.nn.Module, output_gain: float) -> None:
    """Orthogonal weights (gain sqrt(2) on hidden layers, ``output_gain`` on the last
    layer) and zero biases for every ``Conv2d`` and ``Linear`` in ``module`` (in the order
    they were registered), in place: the usual PPO/A2C initialisation. A conv's weight
    is orthogonal as a matrix [out_channels, in_channels * kh * kw], whatever its memory
    layout (channels-last included)."""
    layers = [m for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    for i, layer in enumerate(layers):
        gain = output_gain if i == len(layers) - 1 else math.sqrt(2)
        values = torch.empty(layer.weight.shape, dtype=layer.weight.dtype,
                             device=layer.weight.device)
        torch.nn.init.orthogonal_(values, gain=gain)
        with torch.no_grad():
            layer.weight.copy_(values)  # Keeps the weight's own layout.
        if layer.bias is not None:
            torch.nn.init.zeros_(layer.bias)


class ScaleGrad(torch.autograd.Function):
    """Identity in the forward pass; multiplies the gradient by ``scale`` in the backward pass."""

    @staticmethod
    def forward(ctx: FunctionCtx, tensor: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: FunctionCtx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_output * ctx.scale, None


def scale_grad(tensor: torch.Tensor, scale: float) -> torch.Tensor:
    """``tensor`` unchanged, with its gradient scaled by ``scale`` on the way back."""
    return ScaleGrad.apply(tensor, scale)


def set_training(mode: bool, *models: torch.nn.Module) -> None:
    """``model.train(mode)`` for each of ``models``, at about a third of its cost.

    Agents switch between training and sampling every iteration, and off-policy runs
    iterate at every env step, where ``Module.train`` (a walk of the module tree that
    sets each flag through ``Module.__setattr__``, about 40 us for a 3-layer MLP) is a
    tenth of a small network's update. Here the ``training`` flag of each module is set
    in its ``__dict__``, where ``Module.train`` keeps it. A tree with a module that
    overrides ``train`` or ``__setattr__`` (a scripted module, a module that keeps its
    batch norms frozen) goes through ``model.train(mode)``, so the override runs.
    """
    for model in models:
        modules = list(model.modules())
        if all(type(m).train is _MODULE_TRAIN and type(m).__setattr__ is _MODULE_SETATTR
               for m in modules):
            for m in modules:
                m.__dict__["training"] = mode
        else:
            model.train(mode)


_MODULE_TRAIN = torch.nn.Module.train
_MODULE_SETATTR = torch.nn.Module.__setattr__


def strip_ddp_state_dict(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Remove the ``module.`` key prefix that DistributedDataParallel adds."""
    prefix = "module."
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


def update_state_dict(model: torch.nn.Module, state_dict: Mapping[str, Any],
                      tau: float = 1, strip_ddp: bool = True) -> None:
    """Load ``state_dict`` into ``model``, or blend it in: ``tau * new + (1 - tau) * old``.

    Args:
        model: module to update in place (e.g. a target network).
        state_dict: source parameters and buffers.
        tau: 1 copies; 0 < tau < 1 is a Polyak (soft) update. Non-float entries
            (integer counters) are always copied.
        strip_ddp: drop a ``module.`` prefix from the source keys first.
    """
    if strip_ddp:
        state_dict = strip_ddp_state_dict(state_dict)
    if tau == 1:
        model.load_state_dict(state_dict)
        return
    blended = {}
    for key, old in model.state_dict().items():
        new = state_dict[key]
        if torch.is_floating_point(old):
            blended[key] = tau * new.to(old.device) + (1 - tau) * old
        else:
            blended[key] = new
    model.load_state_dict(blended)


def scale_image(image: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Pixels in [0, 255] (uint8 or float) as ``dtype`` in [0, 1], in a new tensor (the
    converted copy is scaled in place: one pass over the batch instead of two)."""
    if image.dtype == dtype:
        return image * (1. / 255)
    return image.to(dtype).mul_(1. / 255)


def run_lstm(lstm: torch.nn.LSTM, features: torch.Tensor, prev_action: torch.Tensor,
             prev_reward: torch.Tensor, init_rnn_state: NamedArrayTuple | None, T: int, B: int
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Run ``lstm`` over T steps whose input is ``[features, prev_action, prev_reward]``,
    the recurrent models' common input (the action and reward let the model infer what
    the observations alone do not show).

    Args:
        lstm: a single-layer ``torch.nn.LSTM`` (not batch-first).
        features: [T * B, F] (or [T, B, F]) per-step features.
        prev_action: [T, B, A] one-hot previous actions (or continuous actions).
        prev_reward: [T, B] previous rewards.
        init_rnn_state: an ``RnnState`` with ``h``, ``c`` [1, B, H], or None for zeros.
        T, B: leading dims.

    Returns:
        ``(output [T, B, H], (h, c))``, h and c [1, B, H] after the last step.
    """
    dtype = lstm.weight_ih_l0.dtype
    lstm_input = torch.cat([
        features.reshape(T, B, -1).to(dtype),
        prev_action.reshape(T, B, -1).to(dtype),
        prev_reward.reshape(T, B, 1).to(dtype),
    ], dim=2)
    hx = None if init_rnn_state is None else (init_rnn_state.h, init_rnn_state.c)
    return lstm(lstm_input, hx)
