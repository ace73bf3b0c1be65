"""Sampling on Ray actors, on one machine or across a cluster (the ``ray`` extra).

Ray itself is imported only when a sampler is initialized.
"""
from rlframe.samplers.ray.sampler import RaySampler

__all__ = ["RaySampler"]
