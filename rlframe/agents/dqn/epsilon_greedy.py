"""Epsilon schedule for Q-learning agents: linear decay, optional vector epsilon per env."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from rlframe.utils.buffer import np_mp_array
from rlframe.utils.logging import logger

if TYPE_CHECKING:
    from rlframe.envs.base import EnvSpaces


class EpsilonGreedyAgentMixin:
    """Anneals the sampling epsilon linearly over iterations; fixed epsilon in eval.

    In sample mode at iteration ``itr`` the epsilon is ``eps_init`` until
    ``eps_itr_min``, then moves linearly to ``eps_final``, reached at
    ``eps_itr_max``. The algorithm usually sets those two iterations in its
    ``initialize`` (from ``min_steps_learn`` and ``eps_steps``) with
    :meth:`set_epsilon_itr_min_max`; they live on shared memory so that
    sampler workers started earlier see the new values.

    With ``eps_final_min`` set, each env gets its own final epsilon, spaced
    log-uniformly from ``eps_final_min`` to ``eps_final`` over all envs of the
    run (Ape-X style): some envs keep exploring while others act almost greedily.

    Args:
        eps_init: epsilon at the start of training.
        eps_final: epsilon after the decay (the largest final epsilon with a vector).
        eps_final_min: smallest per-env final epsilon (None: one epsilon for all envs).
        eps_itr_min: iteration at which the decay starts.
        eps_itr_max: iteration at which ``eps_final`` is reached.
        eps_eval: epsilon in evaluation (after iteration 0; the evaluation
            before any training acts uniformly at random).
    """

    def __init__(self, eps_init: float = 1, eps_final: float = 0.01,
                 eps_final_min: float | None = None, eps_itr_min: int = 50,
                 eps_itr_max: int = 1000, eps_eval: float = 0.001, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for name, value in (("eps_init", eps_init), ("eps_final", eps_final),
                            ("eps_eval", eps_eval)):
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {value}.")
        if eps_final_min is not None and not 0 < eps_final_min <= eps_final:
            raise ValueError(f"eps_final_min must lie in (0, eps_final={eps_final}] "
                             f"(it is the low end of log-spaced epsilons), got {eps_final_min}.")
        self._eps_init_scalar = float(eps_init)
        self._eps_final_scalar = float(eps_final)
        self.eps_final_min = eps_final_min
        self.eps_eval = float(eps_eval)
        # Scalars, or [n_envs] tensors once make_vec_eps builds a vector epsilon.
        self.eps_init: float | torch.Tensor = float(eps_init)
        self.eps_final: float | torch.Tensor = float(eps_final)
        self.eps_sample: float | torch.Tensor = float(eps_init)
        # Shared memory: set by the algorithm after parallel workers may have forked.
        self._eps_itr_min_max = np_mp_array(2, "int64")
        self._eps_itr_min_max[:] = (int(eps_itr_min), int(eps_itr_max))
        self._eps_logged: tuple[int, int, int] | None = None  # (itr, itr_min, itr_max)

    @property
    def eps_itr_min(self) -> int:
        return int(self._eps_itr_min_max[0])

    @property
    def eps_itr_max(self) -> int:
        return int(self._eps_itr_min_max[1])

    def set_epsilon_itr_min_max(self, eps_itr_min: int, eps_itr_max: int) -> None:
        """Set the decay's start and end iterations (seen by all sampler workers)."""
        self._eps_itr_min_max[:] = (int(eps_itr_min), int(eps_itr_max))

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Sequence[int] | None = None) -> None:
        super().initialize(env_spaces, share_memory)
        self.make_vec_eps(global_B, env_ranks)

    def collector_initialize(self, global_B: int = 1,
                             env_ranks: Sequence[int] | None = None) -> None:
        """Select this collector's slice of the per-env epsilons."""
        self.make_vec_eps(global_B, env_ranks)

    def make_vec_eps(self, global_B: int, env_ranks: Sequence[int] | None) -> None:
        """Per-env final epsilons, if ``eps_final_min`` asks for them.

        Args:
            global_B: number of envs over all samplers / workers.
            env_ranks: global indexes of the envs this agent copy acts in
                (default: all of them).
        """
        if self.eps_final_min is None or self.eps_final_min == self._eps_final_scalar:
            return
        env_ranks = list(range(global_B)) if env_ranks is None else [int(r) for r in env_ranks]
        if self.alternating:
            # The agent acts on half of the envs at a time; both halves use one vector.
            if global_B % 2:
                raise ValueError(f"Alternating sampling needs an even number of envs, "
                                 f"got global_B={global_B}.")
            global_B //= 2
            env_ranks = sorted({r // 2 for r in env_ranks})
        all_final = np.geomspace(self.eps_final_min, self._eps_final_scalar, global_B)
        self.eps_final = torch.as_tensor(all_final[env_ranks], dtype=torch.float32)
        self.eps_init = torch.full((len(env_ranks),), self._eps_init_scalar)
        self.eps_sample = self.eps_init

    def epsilon_at(self, itr: int) -> float | torch.Tensor:
        """The sampling epsilon of iteration ``itr`` (scalar or [n_envs])."""
        itr_min, itr_max = self.eps_itr_min, self.eps_itr_max
        if itr_max > itr_min:
            prog = min(1., max(0., (itr - itr_min) / (itr_max - itr_min)))
        else:
            prog = 1. if itr >= itr_min else 0.
        return prog * self.eps_final + (1 - prog) * self.eps_init

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        self.eps_sample = self.epsilon_at(itr)
        itr_max = self.eps_itr_max
        # Keyed on the schedule too: the algorithm sets it after the sampler's first
        # sample_mode, and iteration 0 is then logged again with the schedule in use.
        logged = (itr, self.eps_itr_min, itr_max)
        if itr <= itr_max and itr % max(1, itr_max // 10) == 0 and logged != self._eps_logged:
            self._eps_logged = logged
            eps = self.eps_sample
            shown = f"{eps:.4g}" if isinstance(eps, float) else \
                f"min {float(eps.min()):.4g}, max {float(eps.max()):.4g}"
            logger.log(f"Agent at itr {itr}, sample eps {shown} "
                       f"(min itr: {self.eps_itr_min}, max_itr: {itr_max})")
        self.distribution.set_epsilon(self.eps_sample)

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        # Before any training (itr 0) the agent's greedy actions mean nothing.
        self.distribution.set_epsilon(self.eps_eval if itr > 0 else 1.)
