"""Reports over many runs: aggregate scores with confidence intervals.

:mod:`rlframe.utils.report.stats` holds the statistics (mean, median and interquartile
mean over runs and tasks, stratified bootstrap intervals, performance profiles, one
group of runs against another); they need scipy (``pip install rlframe[report]``).
"""
from rlframe.utils.report.stats import (STATISTICS, Comparison, Estimate, aggregate, compare,
                                        interval_estimate, iqm, performance_profile,
                                        probability_of_improvement)

__all__ = ["STATISTICS", "Comparison", "Estimate", "aggregate", "compare",
           "interval_estimate", "iqm", "performance_profile", "probability_of_improvement"]
