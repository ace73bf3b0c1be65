"""rlpyt's older module path of :class:`AsyncSerialSampler`, which its
``atari_dqn_async_serial`` example imports; the class lives in
:mod:`rlframe.samplers.async_.serial_sampler`."""
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler

__all__ = ["AsyncSerialSampler"]
