"""Aggregate scores of many runs over many tasks, with confidence intervals.

Follows the practice of Agarwal et al., "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS 2021): point estimates over all runs of all tasks
(mean, median, interquartile mean), 95% confidence intervals from a *stratified*
bootstrap (the runs of each task are resampled with replacement, each task on its own,
so every resample keeps every task's number of runs), and performance profiles (the
fraction of runs scoring above each threshold). Two groups of runs of one task (a setting
against a baseline) are compared by the difference of their aggregates and by the
probability of improvement (the chance that a run of one ends above a run of the other),
each with an interval from resampling both groups.

Scores come as ``{task: scores of its runs}``. The aggregates pool the runs of all
tasks, so a task with more runs weighs more; give every task the same number of runs
for the paper's definitions (a runs x tasks matrix). Scores of different tasks are
comparable only once normalized (e.g. ``(score - random) / (reference - random)``).

The resampling is scipy's (``scipy.stats.bootstrap``, percentile intervals; ``pip
install rlframe[report]``): one sample per task, not paired, which is the stratified
bootstrap.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, Sequence

import numpy as np

ScoresByTask = Mapping[str, Sequence[float]]
STATISTICS = ("mean", "median", "iqm")
"""Names of the aggregates :func:`aggregate` and :func:`interval_estimate` compute."""


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval (``low``, ``high``: NaN where no
    interval exists, e.g. a task with one run)."""

    point: float
    low: float
    high: float


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along ``axis``: the mean of the scores left after the lowest
    and the highest quarter are cut (``scipy.stats.trim_mean(scores, 0.25)``: of n
    scores, ``floor(n / 4)`` cut at each end)."""
    from scipy.stats import trim_mean
    return trim_mean(scores, 0.25, axis=axis)


def _statistic(name: str) -> Callable[..., np.ndarray]:
    if name not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {name!r}.")
    return {"mean": np.mean, "median": np.median, "iqm": iqm}[name]


def _check_bootstrap(confidence: float, n_resamples: int) -> None:
    """A ValueError naming ``confidence`` or ``n_resamples`` unless they are in (0, 1)
    and a positive int."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive int, got {n_resamples!r}.")


def _checked(scores_by_task: ScoresByTask) -> list[np.ndarray]:
    """The tasks' scores as 1-D float arrays; a ValueError for none, an empty task or a
    non-finite score, naming the task."""
    if not scores_by_task:
        raise ValueError("scores_by_task is empty: give at least one task with scores.")
    arrays = []
    for task, scores in scores_by_task.items():
        array = np.asarray(scores, dtype=np.float64).reshape(-1)
        if array.size == 0:
            raise ValueError(f"task {task!r} has no scores.")
        if not np.isfinite(array).all():
            raise ValueError(f"task {task!r} has non-finite scores: {array.tolist()}.")
        arrays.append(array)
    return arrays


def aggregate(scores_by_task: ScoresByTask, statistic: str = "iqm") -> float:
    """``statistic`` (``"mean"``, ``"median"`` or ``"iqm"``) over the runs of all tasks."""
    fn = _statistic(statistic)
    return float(fn(np.concatenate(_checked(scores_by_task))))


def interval_estimate(scores_by_task: ScoresByTask, statistic: str = "iqm",
                      confidence: float = 0.95, n_resamples: int = 2000,
                      seed: int | None = 0) -> Estimate:
    """``statistic`` over the runs of all tasks, with a stratified bootstrap interval.

    Args:
        scores_by_task: task -> the scores of its runs.
        statistic: ``"mean"``, ``"median"`` or ``"iqm"``.
        confidence: the interval's confidence level, in (0, 1).
        n_resamples: bootstrap resamples.
        seed: seed of the resampling (None: fresh entropy).

    Returns:
        :class:`Estimate`; its interval is NaN where a task has a single run (one run
        cannot be resampled into a spread).
    """
    fn = _statistic(statistic)
    _check_bootstrap(confidence, n_resamples)
    samples = _checked(scores_by_task)
    point = float(fn(np.concatenate(samples)))
    if min(len(s) for s in samples) < 2:
        return Estimate(point, math.nan, math.nan)
    low, high = _bootstrap(samples, lambda pooled: fn(pooled, axis=-1), confidence,
                           n_resamples, seed)
    return Estimate(point, float(low), float(high))


def performance_profile(scores_by_task: ScoresByTask, thresholds: Sequence[float],
                        confidence: float = 0.95, n_resamples: int = 2000,
                        seed: int | None = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fraction of runs (of all tasks) scoring above each threshold, with stratified
    bootstrap intervals.

    Returns:
        ``(fraction, low, high)``, each [len(thresholds)]; ``low`` and ``high`` are NaN
        where a task has a single run.
    """
    taus = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    samples = _checked(scores_by_task)
    pooled = np.concatenate(samples)
    fraction = (pooled[:, None] > taus).mean(axis=0)
    if min(len(s) for s in samples) < 2:
        nan = np.full_like(fraction, math.nan)
        return fraction, nan, nan.copy()
    low, high = np.empty_like(fraction), np.empty_like(fraction)
    for i, tau in enumerate(taus):
        low[i], high[i] = _bootstrap(
            samples, lambda resampled, tau=tau: (resampled > tau).mean(axis=-1), confidence,
            n_resamples, seed)
    return fraction, low, high


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One sample of runs against another (e.g. a framework against a baseline).

    Attributes:
        difference: ``statistic(x) - statistic(y)`` with its interval.
        probability: the probability of improvement ``P(X > Y)``, a run of ``x`` against
            a run of ``y`` (ties count half; 0.5: neither ends above the other more
            often), with its interval.
    """

    difference: Estimate
    probability: Estimate


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``P(X > Y) + P(X = Y) / 2`` over all pairs of a run of ``x`` [..., n] and a run
    of ``y`` [..., m] (the Mann-Whitney U statistic over ``n * m``); leading dimensions
    are batch dimensions."""
    x, y = np.asarray(x)[..., :, None], np.asarray(y)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def compare(x: Sequence[float], y: Sequence[float], statistic: str = "iqm",
            confidence: float = 0.95, n_resamples: int = 2000,
            seed: int | None = 0) -> Comparison:
    """Runs ``x`` against runs ``y`` of the same task: the difference of ``statistic``
    and the probability of improvement, each with a bootstrap interval in which ``x``
    and ``y`` are resampled each on its own (two independent groups of runs).

    Returns:
        :class:`Comparison`; its intervals are NaN where ``x`` or ``y`` has a single run.
    """
    fn = _statistic(statistic)
    _check_bootstrap(confidence, n_resamples)
    x, y = _checked({"x": x, "y": y})
    difference = float(fn(x) - fn(y))
    probability = float(probability_of_improvement(x, y))
    if min(len(x), len(y)) < 2:
        return Comparison(Estimate(difference, math.nan, math.nan),
                          Estimate(probability, math.nan, math.nan))
    def resampled_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return fn(a, axis=axis) - fn(b, axis=axis)

    def resampled_probability(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return probability_of_improvement(a, b)  # The runs are on the last axis.

    bounds = [_bootstrap_samples((x, y), f, confidence, n_resamples, seed)
              for f in (resampled_difference, resampled_probability)]
    return Comparison(Estimate(difference, *map(float, bounds[0])),
                      Estimate(probability, *map(float, bounds[1])))


def _bootstrap(samples: list[np.ndarray], pooled_statistic: Callable[[np.ndarray], np.ndarray],
               confidence: float, n_resamples: int, seed: int | None) -> tuple[float, float]:
    """Percentile interval of ``pooled_statistic`` over the tasks' samples resampled
    each on its own (scipy's multi-sample, unpaired bootstrap)."""
    def statistic(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        return pooled_statistic(np.concatenate(resampled, axis=axis))

    return _bootstrap_samples(samples, statistic, confidence, n_resamples, seed)


def _bootstrap_samples(samples: Sequence[np.ndarray], statistic: Callable[..., np.ndarray],
                       confidence: float, n_resamples: int, seed: int | None
                       ) -> tuple[float, float]:
    """Percentile interval of ``statistic(*samples, axis=-1)`` (runs on the last axis,
    resamples on the leading ones), each sample resampled on its own."""
    from scipy.stats import bootstrap

    if all(np.ptp(s) == 0 for s in samples):  # Every resample gives the same value.
        value = float(statistic(*samples))
        return value, value
    result = bootstrap(tuple(samples), statistic, n_resamples=n_resamples,
                       confidence_level=confidence, method="percentile", vectorized=True,
                       paired=False, rng=np.random.default_rng(seed))
    return result.confidence_interval.low, result.confidence_interval.high
