"""Learning tests train until the evaluation return reaches a threshold, then stop."""
import math

import torch

from rlframe.runners.callbacks import StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.utils.logging.context import logger_context


def train_until_threshold(threshold, algo, agent, sampler, n_steps, log_interval_steps, seed,
                          name="learning", affinity=None):
    """Train with one torch thread until ``threshold`` or ``n_steps``; return the history.

    The history holds ``(env steps, average evaluation return)`` per evaluation
    that completed a trajectory, the first one before any training (0 steps).
    """
    affinity = dict(master_torch_threads=1, **(affinity or {}))
    stop = StopAtReturn(threshold)
    runner = MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                             log_interval_steps=log_interval_steps, seed=seed,
                             affinity=affinity, callbacks=[stop])
    n_threads = torch.get_num_threads()
    try:
        with logger_context(name, seed, name, {}, snapshot_mode="none"):
            runner.train()
    finally:
        torch.set_num_threads(n_threads)
    # An evaluation without a completed trajectory has no return to compare.
    return [(steps, ret) for steps, ret in stop.history if not math.isnan(ret)]


def assert_learned(history, threshold, max_steps, untrained_below):
    """The first evaluation is below ``untrained_below``; some evaluation within
    ``max_steps`` env steps reaches ``threshold``."""
    assert history[0][1] < untrained_below, history
    reached = [steps for steps, ret in history if ret >= threshold]
    assert reached and reached[0] <= max_steps, history
