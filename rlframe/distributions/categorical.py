"""Categorical distribution over ``dim`` discrete actions, parameterised by probabilities."""
from __future__ import annotations

from typing import TYPE_CHECKING
import torch

from rlframe.distributions.base import Distribution
from rlframe.distributions.discrete import DiscreteMixin
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.tensor import select_at_indexes, valid_mean

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

EPS = 1e-8

if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    DistInfo: TypeAlias = NamedArrayTuple
else:
    DistInfo = namedarraytuple("DistInfo", ["prob"])
    """``prob``: [*lead, dim] probabilities summing to 1 over the last dim."""


class Categorical(DiscreteMixin, Distribution):
    """Categorical distribution; ``dist_info`` is a :data:`DistInfo`.

    ``EPS`` is added inside every log so that zero probabilities give finite
    (large negative) values instead of ``-inf``.
    """

    def kl(self, old_dist_info: DistInfo, new_dist_info: DistInfo) -> torch.Tensor:
        """KL(old || new) = sum_a p_old (log p_old - log p_new), shape [*lead]."""
        p = old_dist_info.prob
        q = new_dist_info.prob
        return torch.sum(p * (torch.log(p + EPS) - torch.log(q + EPS)), dim=-1)

    def mean_kl(self, old_dist_info: DistInfo, new_dist_info: DistInfo,
                valid: torch.Tensor | None = None) -> torch.Tensor:
        """Scalar mean KL over entries where ``valid`` is nonzero."""
        return valid_mean(self.kl(old_dist_info, new_dist_info), valid)

    def sample(self, dist_info: DistInfo) -> torch.Tensor:
        """One index per leading position: prob [*lead, dim] -> [*lead] of ``self.dtype``."""
        prob = dist_info.prob
        # Inverse-CDF sampling: the first index whose cumulative probability exceeds
        # u ~ U[0, total). Several times faster than torch.multinomial for small batches;
        # each torch call costs about a microsecond here, so none is spent on no-op
        # reshapes or casts.
        flat = prob.dim() == 2
        cdf = (prob if flat else prob.reshape(-1, self.dim)).cumsum(-1)
        u = torch.rand(cdf.shape[0], 1, dtype=cdf.dtype, device=cdf.device)
        u *= cdf[:, -1:]
        sample = torch.searchsorted(cdf, u, right=True).clamp_max_(self.dim - 1)
        sample = sample.squeeze(-1) if flat else sample.view(prob.shape[:-1])
        return sample if sample.dtype == self.dtype else sample.to(self.dtype)

    def mode(self, dist_info: DistInfo) -> torch.Tensor:
        """The most probable index: prob [*lead, dim] -> [*lead] of ``self.dtype``."""
        return torch.argmax(dist_info.prob, dim=-1).to(self.dtype)

    def entropy(self, dist_info: DistInfo) -> torch.Tensor:
        """-sum_a p log p, shape [*lead]."""
        p = dist_info.prob
        return -torch.sum(p * torch.log(p + EPS), dim=-1)

    def log_likelihood(self, indexes: torch.Tensor, dist_info: DistInfo) -> torch.Tensor:
        """log p[indexes]: indexes [*lead] integer, returns [*lead]."""
        selected = select_at_indexes(indexes.long(), dist_info.prob)
        return torch.log(selected + EPS)

    def likelihood_ratio(self, indexes: torch.Tensor, old_dist_info: DistInfo,
                         new_dist_info: DistInfo) -> torch.Tensor:
        """p_new[indexes] / p_old[indexes], shape [*lead]."""
        indexes = indexes.long()
        num = select_at_indexes(indexes, new_dist_info.prob)
        den = select_at_indexes(indexes, old_dist_info.prob)
        return num / (den + EPS)
