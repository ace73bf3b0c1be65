"""Interface shared by all action distributions.

A distribution object holds no parameters of its own: each method receives a
``dist_info`` namedarraytuple (for example the model's output probabilities)
whose fields carry the leading ``[T, B]`` (or ``[B]``) dims of the batch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlframe.utils.tensor import valid_mean

if TYPE_CHECKING:
    from rlframe.utils.collections import NamedArrayTuple


class Distribution:
    """Base class: sampling, likelihoods, KL and entropy from a ``dist_info``."""

    @property
    def dim(self) -> int:
        """Size of the event (number of actions, or action vector length)."""
        raise NotImplementedError

    def sample(self, dist_info: NamedArrayTuple | torch.Tensor) -> torch.Tensor:
        """Draw one sample per leading position of ``dist_info``.

        ``dist_info`` is what the distribution samples from: its parameters as a
        namedarraytuple, or (epsilon-greedy) the Q-value tensor itself.
        """
        raise NotImplementedError

    def mode(self, dist_info: NamedArrayTuple | torch.Tensor) -> torch.Tensor:
        """The most likely value per leading position of ``dist_info`` (deterministic
        acting); same shape and dtype as :meth:`sample`."""
        raise NotImplementedError(f"{type(self).__name__} defines no mode().")

    def kl(self, old_dist_info: NamedArrayTuple, new_dist_info: NamedArrayTuple) -> torch.Tensor:
        """KL(old || new), shape [*lead]."""
        raise NotImplementedError

    def mean_kl(self, old_dist_info: NamedArrayTuple, new_dist_info: NamedArrayTuple,
                valid: torch.Tensor | None = None) -> torch.Tensor:
        """Scalar mean of :meth:`kl` over entries where ``valid`` [*lead] is nonzero."""
        return valid_mean(self.kl(old_dist_info, new_dist_info), valid)

    def log_likelihood(self, x: torch.Tensor, dist_info: NamedArrayTuple) -> torch.Tensor:
        """Log-probability (or log-density) of ``x``, shape [*lead]."""
        raise NotImplementedError

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: NamedArrayTuple,
                         new_dist_info: NamedArrayTuple) -> torch.Tensor:
        """``p_new(x) / p_old(x)``, shape [*lead]."""
        raise NotImplementedError

    def entropy(self, dist_info: NamedArrayTuple) -> torch.Tensor:
        """Entropy, shape [*lead]."""
        raise NotImplementedError

    def perplexity(self, dist_info: NamedArrayTuple) -> torch.Tensor:
        """``exp(entropy)``, shape [*lead]."""
        return torch.exp(self.entropy(dist_info))

    def mean_entropy(self, dist_info: NamedArrayTuple,
                     valid: torch.Tensor | None = None) -> torch.Tensor:
        """Scalar mean entropy over entries where ``valid`` [*lead] is nonzero."""
        return valid_mean(self.entropy(dist_info), valid)

    def mean_perplexity(self, dist_info: NamedArrayTuple,
                        valid: torch.Tensor | None = None) -> torch.Tensor:
        """Scalar mean perplexity over entries where ``valid`` [*lead] is nonzero."""
        return valid_mean(self.perplexity(dist_info), valid)
