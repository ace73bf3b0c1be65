"""Algorithm interface: optimizes an agent from samples (or its own replay)."""
from __future__ import annotations

from typing import Any


class RlAlgorithm:
    """Base class of all algorithms.

    Runners read ``opt_info_fields`` (logged statistics), ``bootstrap_value``
    (whether the sampler stores the value after each batch), ``update_counter``
    and ``batch_size``.
    """

    opt_info_fields: tuple = ()
    bootstrap_value: bool = False
    update_counter: int = 0

    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool = False,
                   examples: dict | None = None, world_size: int = 1, rank: int = 0) -> None:
        """Attach the agent and build the optimizer (synchronous runners)."""
        raise NotImplementedError

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: dict, world_size: int = 1) -> Any:
        """Asynchronous runners: build the shared replay buffer and return it."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous "
                                  "runners (it has no replay buffer).")

    def optim_initialize(self, rank: int = 0) -> None:
        """Asynchronous runners: build the optimizer in the optimizer process."""
        raise NotImplementedError(f"{type(self).__name__} does not support asynchronous runners.")

    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """One iteration of training; returns an OptInfo namedtuple of lists/scalars."""
        raise NotImplementedError

    def optim_state_dict(self) -> dict:
        """Optimizer state for snapshots."""
        return self.optimizer.state_dict()

    def load_optim_state_dict(self, state_dict: dict) -> None:
        """Restore optimizer state from a snapshot."""
        self.optimizer.load_state_dict(state_dict)

    @property
    def batch_size(self) -> int:
        """Samples consumed per gradient update."""
        return self._batch_size
