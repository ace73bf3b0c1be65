import math

import pytest
import torch

from rlframe.distributions.base import Distribution
from rlframe.distributions.categorical import Categorical, DistInfo
from rlframe.distributions.discrete import DiscreteMixin
from rlframe.distributions.gaussian import DistInfo as GaussDistInfo
from rlframe.distributions.gaussian import DistInfoStd, Gaussian


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- Categorical -----------------------------------------------------------------------

def test_categorical_sample_frequencies():
    probs = torch.tensor([0.1, 0.2, 0.7])
    dist = Categorical(dim=3)
    samples = dist.sample(DistInfo(prob=probs.expand(200, 100, 3)))
    assert samples.shape == (200, 100) and samples.dtype == torch.long
    freq = torch.bincount(samples.reshape(-1), minlength=3).float() / samples.numel()
    assert torch.allclose(freq, probs, atol=0.01)


@pytest.mark.parametrize("lead", [(), (5,), (4, 3), (2, 3, 4)])
def test_categorical_sample_any_leading_rank(lead):
    prob = torch.softmax(torch.randn(*lead, 6), dim=-1)
    sample = Categorical(dim=6).sample(DistInfo(prob=prob))
    assert sample.shape == lead
    assert ((sample >= 0) & (sample < 6)).all()


def test_categorical_loglik_entropy_kl():
    dist = Categorical(dim=4)
    prob = torch.softmax(torch.randn(3, 5, 4), dim=-1)
    other = torch.softmax(torch.randn(3, 5, 4), dim=-1)
    idx = torch.randint(0, 4, (3, 5))
    ref = torch.distributions.Categorical(probs=prob)
    ref_other = torch.distributions.Categorical(probs=other)
    assert torch.allclose(dist.log_likelihood(idx, DistInfo(prob)), ref.log_prob(idx), atol=1e-5)
    assert torch.allclose(dist.entropy(DistInfo(prob)), ref.entropy(), atol=1e-5)
    assert torch.allclose(dist.perplexity(DistInfo(prob)), ref.entropy().exp(), atol=1e-5)
    assert torch.allclose(dist.kl(DistInfo(prob), DistInfo(prob)), torch.zeros(3, 5), atol=1e-6)
    assert torch.allclose(dist.kl(DistInfo(prob), DistInfo(other)),
                          torch.distributions.kl_divergence(ref, ref_other), atol=1e-5)
    ratio = dist.likelihood_ratio(idx, DistInfo(prob), DistInfo(other))
    assert torch.allclose(ratio, (ref_other.log_prob(idx) - ref.log_prob(idx)).exp(), rtol=1e-4)


def test_categorical_masked_means():
    dist = Categorical(dim=2)
    prob = torch.tensor([[[0.5, 0.5], [1.0, 0.0]]])  # [1, 2, 2]
    valid = torch.tensor([[1.0, 0.0]])
    assert math.isclose(dist.mean_entropy(DistInfo(prob), valid).item(), math.log(2), rel_tol=1e-5)
    assert math.isclose(dist.mean_perplexity(DistInfo(prob), valid).item(), 2.0, rel_tol=1e-5)
    assert dist.mean_kl(DistInfo(prob), DistInfo(prob), valid).item() == pytest.approx(0, abs=1e-6)


def test_discrete_onehot_roundtrip():
    dist = Categorical(dim=5)
    assert isinstance(dist, DiscreteMixin) and isinstance(dist, Distribution) and dist.dim == 5
    idx = torch.tensor([[0, 4, 2], [1, 3, 3]])
    onehot = dist.to_onehot(idx)
    assert onehot.shape == (2, 3, 5) and onehot.dtype == torch.float
    assert torch.equal(onehot.sum(-1), torch.ones(2, 3))
    back = dist.from_onehot(onehot)
    assert torch.equal(back, idx) and back.dtype == torch.long
    assert dist.from_onehot(onehot, dtype=torch.int32).dtype == torch.int32
    assert dist.to_onehot(idx, dtype=torch.uint8).dtype == torch.uint8


# --- Gaussian --------------------------------------------------------------------------

def _normal(mean, log_std):
    return torch.distributions.Normal(mean, log_std.exp())


def test_gaussian_loglik_kl_entropy_match_torch():
    dist = Gaussian(dim=3)
    mean, log_std = torch.randn(4, 2, 3), 0.3 * torch.randn(4, 2, 3)
    mean2, log_std2 = torch.randn(4, 2, 3), 0.3 * torch.randn(4, 2, 3)
    x = torch.randn(4, 2, 3)
    info, info2 = DistInfoStd(mean, log_std), DistInfoStd(mean2, log_std2)
    ref, ref2 = _normal(mean, log_std), _normal(mean2, log_std2)
    assert torch.allclose(dist.log_likelihood(x, info), ref.log_prob(x).sum(-1), atol=1e-5)
    assert torch.allclose(dist.entropy(info), ref.entropy().sum(-1), atol=1e-5)
    assert torch.allclose(dist.kl(info, info2),
                          torch.distributions.kl_divergence(ref, ref2).sum(-1), atol=1e-4)
    assert torch.allclose(dist.kl(info, info), torch.zeros(4, 2), atol=1e-6)
    ratio = dist.likelihood_ratio(x, info, info2)
    assert torch.allclose(ratio, (ref2.log_prob(x) - ref.log_prob(x)).sum(-1).exp(), rtol=1e-4)


def test_gaussian_fixed_std_overrides_log_std():
    dist = Gaussian(dim=2, std=0.5)
    mean, x = torch.randn(7, 2), torch.randn(7, 2)
    ref = torch.distributions.Normal(mean, 0.5).log_prob(x).sum(-1)
    assert torch.allclose(dist.log_likelihood(x, GaussDistInfo(mean)), ref, atol=1e-5)
    ignored = DistInfoStd(mean, torch.full((7, 2), 3.0))
    assert torch.allclose(dist.log_likelihood(x, ignored), ref, atol=1e-5)
    samples = dist.sample(GaussDistInfo(torch.zeros(20000, 2)))
    assert abs(samples.std().item() - 0.5) < 0.02
    dist.set_std(None)
    with pytest.raises(ValueError):
        dist.sample(GaussDistInfo(mean))
    dist.set_std([0.1, 2.0])
    assert torch.equal(dist.std, torch.tensor([0.1, 2.0]))
    # The same number again keeps the tensor; another number, or a std assigned
    # directly in between, gives the new value.
    dist.set_std(0.3)
    first = dist.std
    dist.set_std(0.3)
    assert dist.std is first
    dist.set_std(0.4)
    assert torch.allclose(dist.std, torch.tensor([0.4, 0.4]))
    dist.std = torch.tensor([1.0, 1.0])
    dist.set_std(0.4)
    assert torch.allclose(dist.std, torch.tensor([0.4, 0.4]))
    dist.set_std(None)
    dist.set_std(0.4)
    assert torch.allclose(dist.std, torch.tensor([0.4, 0.4]))


def test_gaussian_sample_statistics_and_gradient():
    dist = Gaussian(dim=2)
    mean = torch.tensor([1.0, -2.0], requires_grad=True)
    log_std = torch.log(torch.tensor([0.5, 2.0])).requires_grad_()
    s = dist.sample(DistInfoStd(mean.expand(50000, 2), log_std.expand(50000, 2)))
    assert torch.allclose(s.mean(0), mean.detach(), atol=0.05)
    assert torch.allclose(s.std(0), torch.tensor([0.5, 2.0]), atol=0.05)
    s.sum().backward()  # reparameterised: gradients reach mean and log_std
    assert mean.grad is not None and log_std.grad is not None


def test_gaussian_min_max_std_clamp():
    dist = Gaussian(dim=1, min_std=0.1, max_std=1.0)
    mean = torch.zeros(2, 1)
    log_std = torch.tensor([[5.0], [-10.0]])
    expected = torch.log(torch.tensor([1.0, 0.1])) + 0.5 * math.log(2 * math.pi * math.e)
    assert torch.allclose(dist.entropy(DistInfoStd(mean, log_std)), expected, atol=1e-5)


def test_gaussian_noise_clip_and_clip():
    info = DistInfoStd(torch.zeros(5000, 3), torch.full((5000, 3), math.log(10.0)))
    noisy = Gaussian(dim=3, noise_clip=0.5).sample(info)
    assert noisy.abs().max() <= 0.5 + 1e-6 and noisy.abs().max() > 0.49
    info = DistInfoStd(torch.full((5000, 3), 0.8), torch.zeros(5000, 3))
    clipped = Gaussian(dim=3, clip=1.0).sample(info)
    assert clipped.max() <= 1.0 and clipped.min() >= -1.0
    assert (clipped == 1.0).float().mean() > 0.3  # P(x > 1) for N(0.8, 1) is ~0.42
    both = Gaussian(dim=3, noise_clip=0.1, clip=0.85).sample(info)
    assert both.min() >= 0.7 - 1e-6 and both.max() <= 0.85


def test_gaussian_clip_squash_exclusive():
    with pytest.raises(ValueError):
        Gaussian(dim=1, clip=1.0, squash=1.0)
    dist = Gaussian(dim=1, clip=1.0)
    with pytest.raises(ValueError):
        dist.set_squash(1.0)
    dist.set_clip(None)
    dist.set_squash(2.0)
    dist.set_noise_clip(0.3)
    assert dist.squash == 2.0 and dist.noise_clip == 0.3


def test_squashed_loglik_change_of_variables():
    # Density of y = s * tanh(x), x ~ N(m, sd): p_y(y) = p_x(x) / (dy/dx).
    s, m, sd = 2.0, 0.3, 0.8
    dist = Gaussian(dim=1, squash=s)
    x = torch.linspace(-3, 3, 61, dtype=torch.float64).unsqueeze(-1)
    info = DistInfoStd(torch.full_like(x, m), torch.full_like(x, math.log(sd)))
    h = 1e-6
    dydx = (s * torch.tanh(x + h) - s * torch.tanh(x - h)) / (2 * h)
    expected = torch.distributions.Normal(m, sd).log_prob(x) - torch.log(dydx)
    assert torch.allclose(dist.log_likelihood(x, info), expected.squeeze(-1), atol=1e-6)


def test_squashed_loglik_matches_histogram():
    s, m, sd = 1.0, 0.5, 0.7
    dist = Gaussian(dim=1, squash=s)
    n = 400000
    info = DistInfoStd(torch.full((n, 1), m), torch.full((n, 1), math.log(sd)))
    y = dist.sample(info).squeeze(-1)
    assert y.abs().max() < s
    edges = torch.linspace(-0.9, 0.9, 19)
    counts = torch.histc(y, bins=18, min=-0.9, max=0.9)
    width = edges[1] - edges[0]
    empirical = counts / (n * width)
    centers = (edges[:-1] + edges[1:]) / 2
    pre = torch.atanh(centers / s).unsqueeze(-1)
    centers_info = DistInfoStd(torch.full((18, 1), m), torch.full((18, 1), math.log(sd)))
    predicted = dist.log_likelihood(pre, centers_info).exp()
    assert torch.allclose(empirical, predicted, rtol=0.05, atol=0.01)


def test_squashed_loglik_is_stable_for_large_inputs():
    dist = Gaussian(dim=1, squash=1.0)
    x = torch.tensor([[30.0], [-30.0]])
    info = DistInfoStd(x.clone(), torch.zeros(2, 1))
    logli = dist.log_likelihood(x, info)
    # log(1 - tanh(x)^2) ~= log 4 - 2|x| for large |x|
    expected = -0.5 * math.log(2 * math.pi) - (math.log(4) - 60.0)
    assert torch.isfinite(logli).all()
    assert torch.allclose(logli, torch.full((2,), expected), atol=1e-4)


def test_sample_loglikelihood_squashed():
    dist = Gaussian(dim=2, squash=1.5)
    mean = torch.randn(1000, 2).mul(0.3).requires_grad_()
    log_std = torch.full((1000, 2), -0.5, requires_grad=True)
    info = DistInfoStd(mean, log_std)
    sample, logli = dist.sample_loglikelihood(info)
    assert sample.shape == (1000, 2) and logli.shape == (1000,)
    assert sample.abs().max() < 1.5
    pre = torch.atanh(sample.detach().double() / 1.5).float()
    recomputed = dist.log_likelihood(pre, DistInfoStd(mean.detach(), log_std.detach()))
    assert torch.allclose(logli.detach(), recomputed, atol=1e-3)
    (sample.sum() + logli.sum()).backward()
    assert mean.grad is not None and log_std.grad is not None
