"""Sampling on Ray actors, on one machine or across a cluster (the ``ray`` extra):
:class:`RaySampler` for the synchronous runners, :class:`AsyncRaySampler` for
:class:`~rlframe.runners.async_rl.AsyncRl`.

Ray itself is imported only when a sampler is initialized.
"""
from rlframe.samplers.ray.async_sampler import AsyncRaySampler
from rlframe.samplers.ray.sampler import RaySampler

__all__ = ["AsyncRaySampler", "RaySampler"]
