"""Learning tests train until the evaluation return reaches a threshold, then stop."""
import torch

from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.utils.logging.context import logger_context


class ReachedThreshold(Exception):
    """Raised by :class:`EvalUntilThreshold` to end training early."""


class EvalUntilThreshold(MinibatchRlEval):
    """Evaluates at every log interval and stops once the average evaluation return
    reaches ``threshold``, so a passing run costs only the steps it needs.

    ``history`` holds ``(env steps, average evaluation return)`` per evaluation,
    the first one before any training.
    """

    def __init__(self, threshold, **kwargs):
        super().__init__(**kwargs)
        self.threshold = threshold
        self.history = []

    def log_diagnostics(self, itr, eval_traj_infos, eval_time, prefix="Diagnostics/"):
        super().log_diagnostics(itr, eval_traj_infos, eval_time, prefix=prefix)
        returns = [info["Return"] for info in eval_traj_infos]
        if returns:
            steps = 0 if itr == 0 and not self.history else (itr + 1) * self.itr_batch_size
            self.history.append((steps, sum(returns) / len(returns)))
            if steps > 0 and self.history[-1][1] >= self.threshold:
                raise ReachedThreshold


def train_until_threshold(threshold, algo, agent, sampler, n_steps, log_interval_steps, seed,
                          name="learning", affinity=None):
    """Train with one torch thread until ``threshold`` or ``n_steps``; return the history."""
    affinity = dict(master_torch_threads=1, **(affinity or {}))
    runner = EvalUntilThreshold(threshold=threshold, algo=algo, agent=agent, sampler=sampler,
                                n_steps=n_steps, log_interval_steps=log_interval_steps,
                                seed=seed, affinity=affinity)
    n_threads = torch.get_num_threads()
    try:
        with logger_context(name, seed, name, {}, snapshot_mode="none"):
            runner.train()
    except ReachedThreshold:
        pass
    finally:
        torch.set_num_threads(n_threads)
    return runner.history


def assert_learned(history, threshold, max_steps, untrained_below):
    """The first evaluation is below ``untrained_below``; some evaluation within
    ``max_steps`` env steps reaches ``threshold``."""
    assert history[0][1] < untrained_below, history
    reached = [steps for steps, ret in history if ret >= threshold]
    assert reached and reached[0] <= max_steps, history
