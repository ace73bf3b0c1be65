"""Reports over many runs: aggregate scores with confidence intervals.

:mod:`rlframe.utils.report.stats` holds the statistics (mean, median and interquartile
mean over runs and tasks, stratified bootstrap intervals, performance profiles); they
need scipy (``pip install rlframe[report]``).
"""
from rlframe.utils.report.stats import (STATISTICS, Estimate, aggregate, interval_estimate,
                                        iqm, performance_profile)

__all__ = ["STATISTICS", "Estimate", "aggregate", "interval_estimate", "iqm",
           "performance_profile"]
