"""Aggregate scores with stratified bootstrap intervals (rlframe.utils.report.stats)."""
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from rlframe.utils.report import (Estimate, aggregate, compare,  # noqa: E402
                                  interval_estimate, iqm, performance_profile,
                                  probability_of_improvement)

# Two tasks x 5 runs (seeds).
SCORES = {"a": [1., 2., 3., 4., 100.], "b": [10., 20., 30., 40., 50.]}


def test_iqm_cuts_a_quarter_at_each_end():
    # Pooled and sorted: 1 2 | 3 4 10 20 30 40 | 50 100: floor(10 / 4) = 2 cut each end.
    assert aggregate(SCORES, "iqm") == pytest.approx((3 + 4 + 10 + 20 + 30 + 40) / 6)
    assert aggregate(SCORES, "mean") == pytest.approx(26.)
    assert aggregate(SCORES, "median") == pytest.approx(15.)
    assert iqm(np.array([5., 1., 3., 2.])) == pytest.approx(2.5)  # 1 | 2 3 | 5


def by_hand(scores, n_resamples, rng):
    """Percentile interval of the pooled IQM, each task's runs resampled on their own."""
    values = []
    for _ in range(n_resamples):
        pooled = np.sort(np.concatenate([rng.choice(s, size=len(s)) for s in scores.values()]))
        cut = len(pooled) // 4
        values.append(pooled[cut:len(pooled) - cut].mean())
    return np.percentile(values, [2.5, 97.5])


def test_interval_matches_a_stratified_bootstrap_by_hand():
    estimate = interval_estimate(SCORES, "iqm", n_resamples=20000, seed=0)
    low, high = by_hand(SCORES, 20000, np.random.default_rng(1))
    assert estimate.point == pytest.approx(aggregate(SCORES, "iqm"))
    spread = high - low
    assert abs(estimate.low - low) < 0.05 * spread and abs(estimate.high - high) < 0.05 * spread
    assert estimate.low < estimate.point < estimate.high


def test_interval_of_a_distribution_known_exactly():
    # Two tasks of runs [0, 1]: a resample's pooled mean is k/4, k ~ Binomial(4, 1/2), so
    # P(0) = P(1) = 1/16 > 2.5%: the 95% interval is [0, 1].
    estimate = interval_estimate({"a": [0., 1.], "b": [0., 1.]}, "mean", n_resamples=4000)
    assert (estimate.point, estimate.low, estimate.high) == (0.5, 0., 1.)


def test_the_bootstrap_is_stratified_by_task():
    # Unstratified, a resample could hold mostly task a's zeros (pooled mean below 0.5);
    # stratified, it holds 5 runs of each: 5 zeros and 5 draws of b's 1s and 2, a mean in
    # [0.5, 1].
    estimate = interval_estimate({"a": [0.] * 5, "b": [1., 1., 1., 1., 2.]}, "mean")
    assert estimate.point == pytest.approx(0.6)
    assert 0.5 <= estimate.low < estimate.high <= 1.


def test_degenerate_intervals():
    assert interval_estimate({"a": [3., 3.], "b": [5., 5.]}, "mean") == Estimate(4., 4., 4.)
    one_run = interval_estimate({"a": [3.], "b": [5., 6.]}, "mean")
    assert one_run.point == pytest.approx(14 / 3)
    assert math.isnan(one_run.low) and math.isnan(one_run.high)


def test_performance_profile():
    taus = [0., 15., 60.]
    fraction, low, high = performance_profile(SCORES, taus, n_resamples=4000)
    np.testing.assert_allclose(fraction, [1., 0.5, 0.1])  # Of the 10 runs: 10, 5, 1 above.
    assert low[0] == high[0] == 1.  # Every resample: all runs above 0.
    assert (low <= fraction).all() and (fraction <= high).all() and low[1] < high[1]
    # Task b's runs never exceed 60; only task a's 100 can: at most 5 of 10 runs.
    assert high[2] <= 0.5


@pytest.mark.parametrize("call, message", [
    (lambda: aggregate(SCORES, "max"), r"statistic must be one of \('mean', 'median', 'iqm'\), "
                                       r"got 'max'"),
    (lambda: aggregate({}, "iqm"), "scores_by_task is empty"),
    (lambda: aggregate({"a": []}), "task 'a' has no scores"),
    (lambda: aggregate({"a": [1., float("nan")]}), r"task 'a' has non-finite scores"),
    (lambda: interval_estimate(SCORES, confidence=95), r"confidence must be in \(0, 1\), got 95"),
    (lambda: interval_estimate(SCORES, n_resamples=0), "n_resamples must be a positive int"),
])
def test_bad_input_names_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_comparison_of_two_groups_by_hand():
    x, y = SCORES["a"], SCORES["b"]
    result = compare(x, y, "iqm", n_resamples=20000, seed=0)
    # IQM of 5 runs: the middle 3. a: mean(2, 3, 4) = 3; b: mean(20, 30, 40) = 30.
    assert result.difference.point == pytest.approx(3. - 30.)
    # Only a's 100 ends above b's runs (all 5 of them): 5 of 25 pairs.
    assert result.probability.point == pytest.approx(5 / 25)
    assert probability_of_improvement(np.array([1., 2.]), np.array([2., 0.])) == 0.625
    # By hand: x and y resampled each on its own, the statistic of each resample.
    rng = np.random.default_rng(1)
    differences, probabilities = [], []
    for _ in range(20000):
        rx, ry = np.sort(rng.choice(x, 5)), np.sort(rng.choice(y, 5))
        differences.append(rx[1:4].mean() - ry[1:4].mean())
        probabilities.append(np.mean([(i > j) + 0.5 * (i == j) for i in rx for j in ry]))
    for estimate, values in ((result.difference, differences),
                             (result.probability, probabilities)):
        # Resampled values take few distinct values: each bound must be one the hand-made
        # distribution has within a percentile point of 2.5% and 97.5%.
        low_range = np.percentile(values, [1.5, 3.5])
        high_range = np.percentile(values, [96.5, 98.5])
        assert low_range[0] - 1e-9 <= estimate.low <= low_range[1] + 1e-9
        assert high_range[0] - 1e-9 <= estimate.high <= high_range[1] + 1e-9


def test_comparison_degenerate_cases():
    one = compare([5.], [1., 2.], "mean")
    assert one.difference.point == 3.5 and one.probability.point == 1.
    assert math.isnan(one.difference.low) and math.isnan(one.probability.high)
    constant = compare([3., 3.], [1., 1.], "median")
    assert constant.difference == Estimate(2., 2., 2.)
    assert constant.probability == Estimate(1., 1., 1.)
    same = compare([1., 2., 3.], [1., 2., 3.])
    assert same.difference.point == 0. and same.probability.point == 0.5
    assert same.difference.low < 0 < same.difference.high
    with pytest.raises(ValueError, match="task 'y' has no scores"):
        compare([1.], [])
    with pytest.raises(ValueError, match="statistic must be one of"):
        compare([1.], [2.], "max")
