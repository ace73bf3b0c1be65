"""Diagonal Gaussian distribution, optionally clipped or tanh-squashed."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from rlframe.distributions.base import Distribution
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

EPS = 1e-8

if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    DistInfo: TypeAlias = NamedArrayTuple
    DistInfoStd: TypeAlias = NamedArrayTuple
else:
    DistInfo = namedarraytuple("DistInfo", ["mean"])
    """``mean``: [*lead, dim]; the std comes from the distribution's fixed ``std``."""
    DistInfoStd = namedarraytuple("DistInfoStd", ["mean", "log_std"])
    """``mean``, ``log_std``: [*lead, dim] each."""

_LOG_2PI = math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


class Gaussian(Distribution):
    """Diagonal Gaussian over ``dim``-vectors with optional clipping or tanh squashing.

    Args:
        dim: length of the action vector.
        std: fixed standard deviation (scalar or [dim]); when set it overrides any
            ``log_std`` in ``dist_info``, and ``DistInfo(mean)`` suffices.
        clip: samples are clamped to ``[-clip, clip]`` (exclusive with ``squash``).
        noise_clip: the noise ``std * N(0, 1)`` is clamped to ``[-noise_clip, noise_clip]``
            before it is added to the mean (e.g. TD3 target smoothing).
        min_std: lower bound applied to a learned std (via ``log_std``).
        max_std: upper bound applied to a learned std.
        squash: samples become ``squash * tanh(x)``; log-likelihoods then include the
            change-of-variables correction (exclusive with ``clip``).
    """

    def __init__(
        self,
        dim: int,
        std: float | Sequence[float] | torch.Tensor | None = None,
        clip: float | None = None,
        noise_clip: float | None = None,
        min_std: float | None = None,
        max_std: float | None = None,
        squash: float | None = None,
    ) -> None:
        if clip is not None and squash is not None:
            raise ValueError(f"Gaussian: clip ({clip}) and squash ({squash}) are exclusive; "
                             "set at most one.")
        self._dim: int = int(dim)
        self.std: torch.Tensor | None = None
        # (number, tensor) of the last set_std(number): agents set the same std before
        # every sampling iteration, and the tensor need not be rebuilt each time.
        self._std_from_number: tuple[float, torch.Tensor] | None = None
        self.set_std(std)
        self.clip: float | None = clip
        self.noise_clip: float | None = noise_clip
        self.min_std: float | None = min_std
        self.max_std: float | None = max_std
        self.min_log_std: float | None = None if min_std is None else math.log(min_std)
        self.max_log_std: float | None = None if max_std is None else math.log(max_std)
        self.squash: float | None = squash

    @property
    def dim(self) -> int:
        """Length of the action vector."""
        return self._dim

    # --- parameters --------------------------------------------------------------------

    def _std_and_log_std(
        self, dist_info: DistInfo | DistInfoStd
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(std, log_std)`` broadcastable to ``dist_info.mean`` [*lead, dim]."""
        mean = dist_info.mean
        if self.std is not None:
            std = self.std.to(device=mean.device, dtype=mean.dtype)
            return std, torch.log(std)
        log_std = getattr(dist_info, "log_std", None)
        if log_std is None:
            raise ValueError("Gaussian has no fixed std, so dist_info must be a DistInfoStd "
                             "with a log_std field.")
        if self.min_log_std is not None or self.max_log_std is not None:
            log_std = torch.clamp(log_std, min=self.min_log_std, max=self.max_log_std)
        return torch.exp(log_std), log_std

    def _squash_log_det(self, x: torch.Tensor) -> torch.Tensor:
        """log |d(squash * tanh(x))/dx| summed over the last dim, shape [*lead].

        Uses log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x)), which stays
        finite and accurate for large |x| where 1 - tanh(x)^2 underflows.
        """
        log_det = 2.0 * (_LOG_2 - x - F.softplus(-2.0 * x))
        return torch.sum(log_det, dim=-1) + self._dim * math.log(self.squash)

    # --- sampling ----------------------------------------------------------------------

    def _pre_squash_sample(self, dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """``mean + clamp(std * N(0, 1))``, differentiable in mean and std."""
        mean = dist_info.mean
        std, _ = self._std_and_log_std(dist_info)
        noise = std * torch.randn_like(mean)
        if self.noise_clip is not None:
            noise = torch.clamp(noise, -self.noise_clip, self.noise_clip)
        return mean + noise

    def sample(self, dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """Reparameterised sample [*lead, dim]: noise-clipped, then clipped or squashed."""
        x = self._pre_squash_sample(dist_info)
        if self.clip is not None:
            return torch.clamp(x, -self.clip, self.clip)
        if self.squash is not None:
            return self.squash * torch.tanh(x)
        return x

    def mode(self, dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """The mean [*lead, dim], clipped or squashed as samples are (no noise)."""
        mean = dist_info.mean
        if self.clip is not None:
            return torch.clamp(mean, -self.clip, self.clip)
        if self.squash is not None:
            return self.squash * torch.tanh(mean)
        return mean

    def sample_loglikelihood(
        self, dist_info: DistInfo | DistInfoStd
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample and its log-likelihood together (for SAC-style losses).

        Returns:
            ``(sample [*lead, dim], logli [*lead])``: the sample is squashed (or
            clipped) as in :meth:`sample`; ``logli`` is the density of the squashed
            value, computed from the pre-squash draw (clipping is not accounted for).
        """
        x = self._pre_squash_sample(dist_info)
        logli = self.log_likelihood(x, dist_info)
        if self.squash is not None:
            sample = self.squash * torch.tanh(x)
        elif self.clip is not None:
            sample = torch.clamp(x, -self.clip, self.clip)
        else:
            sample = x
        return sample, logli

    # --- densities ---------------------------------------------------------------------

    def log_likelihood(self, x: torch.Tensor, dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """Log-density of ``x`` [*lead, dim], shape [*lead].

        With ``squash`` set, ``x`` must be the *pre-squash* value and the result is
        the log-density of ``squash * tanh(x)``:
        ``log N(x) - sum log(squash * (1 - tanh(x)^2))``.
        """
        mean = dist_info.mean
        std, log_std = self._std_and_log_std(dist_info)
        z = (x - mean) / std
        logli = -(torch.sum(log_std + 0.5 * z ** 2, dim=-1) + 0.5 * self._dim * _LOG_2PI)
        if self.squash is not None:
            logli = logli - self._squash_log_det(x)
        return logli

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: DistInfo | DistInfoStd,
                         new_dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """``p_new(x) / p_old(x)``, shape [*lead] (squash corrections cancel)."""
        return torch.exp(self.log_likelihood(x, new_dist_info)
                         - self.log_likelihood(x, old_dist_info))

    def kl(self, old_dist_info: DistInfo | DistInfoStd,
           new_dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """KL(old || new) of the (pre-squash) Gaussians, shape [*lead]."""
        old_std, old_log_std = self._std_and_log_std(old_dist_info)
        new_std, new_log_std = self._std_and_log_std(new_dist_info)
        mean_diff_sq = (old_dist_info.mean - new_dist_info.mean) ** 2
        vals = (new_log_std - old_log_std
                + (old_std ** 2 + mean_diff_sq) / (2 * new_std ** 2 + EPS) - 0.5)
        return torch.sum(vals, dim=-1)

    def entropy(self, dist_info: DistInfo | DistInfoStd) -> torch.Tensor:
        """Entropy of the pre-squash Gaussian, shape [*lead].

        With ``squash`` set this ignores the tanh (the squashed entropy has no closed
        form); it is a usable bonus term, not the entropy of the squashed action.
        """
        _, log_std = self._std_and_log_std(dist_info)
        log_std = log_std.expand_as(dist_info.mean)
        return torch.sum(log_std, dim=-1) + 0.5 * self._dim * (_LOG_2PI + 1.0)

    # --- setters -----------------------------------------------------------------------

    def set_std(self, std: float | Sequence[float] | torch.Tensor | None) -> None:
        """Fix the std (scalar or [dim]), or ``None`` to read ``log_std`` from dist_info."""
        if std is None:
            self.std = None
            return
        number = std if isinstance(std, (int, float)) else None
        last = self._std_from_number
        if number is not None and last is not None and last[0] == number and \
                last[1] is self.std:
            return
        std = torch.as_tensor(std, dtype=torch.float32).detach().clone()
        if std.numel() == 1:
            std = std.reshape(()) * torch.ones(self._dim)
        if std.shape != (self._dim,):
            raise ValueError(f"Gaussian.set_std: std must be a scalar or have shape "
                             f"({self._dim},), got {tuple(std.shape)}.")
        self.std = std
        self._std_from_number = None if number is None else (number, std)

    def set_clip(self, clip: float | None) -> None:
        """Set the sample clip (must stay exclusive with ``squash``)."""
        if clip is not None and self.squash is not None:
            raise ValueError(f"Gaussian.set_clip: cannot set clip={clip} while "
                             f"squash={self.squash}.")
        self.clip = clip

    def set_squash(self, squash: float | None) -> None:
        """Set the tanh squash scale (must stay exclusive with ``clip``)."""
        if squash is not None and self.clip is not None:
            raise ValueError(f"Gaussian.set_squash: cannot set squash={squash} while "
                             f"clip={self.clip}.")
        self.squash = squash

    def set_noise_clip(self, noise_clip: float | None) -> None:
        """Set the clamp applied to the sampled noise."""
        self.noise_clip = noise_clip
