"""DDPG, TD3 and SAC with their stock agents learn Pendulum-v1 (return >= -250).

A random policy scores about -1200 to -1500; swinging up and balancing scores
about -150. Training stops at the first evaluation (every 1000 steps) that
reaches -250, at most 20k env steps; with these settings each algorithm
got there in 5k-8k steps for every seed tried (0-3; the tests use seed 0).
"""
import pytest
import torch

from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context

SEED = 0
THRESHOLD = -250
MAX_STEPS = 20000


class ReachedThreshold(Exception):
    """Raised by :class:`EvalUntilThreshold` to end training early."""


class EvalUntilThreshold(MinibatchRlEval):
    """Evaluates at every log interval and stops once the average return reaches
    ``THRESHOLD`` (so a passing run costs only the steps it needs)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.history = []  # (env steps, average evaluation return)

    def log_diagnostics(self, itr, eval_traj_infos, eval_time, prefix="Diagnostics/"):
        super().log_diagnostics(itr, eval_traj_infos, eval_time, prefix=prefix)
        returns = [info["Return"] for info in eval_traj_infos]
        if returns:
            steps = 0 if itr == 0 and not self.history else (itr + 1) * self.itr_batch_size
            self.history.append((steps, sum(returns) / len(returns)))
            if steps > 0 and self.history[-1][1] >= THRESHOLD:
                raise ReachedThreshold


def pendulum_setups():
    """name -> (algo, agent): every algorithm learns from 1000 steps on."""
    common = dict(min_steps_learn=1000, replay_size=int(1e5))
    return dict(
        # One update of 128 transitions per step (SAC's default batch is 256).
        sac=(SAC(batch_size=128, replay_ratio=128, **common), SacAgent()),
        td3=(TD3(**common), Td3Agent()),
        ddpg=(DDPG(**common), DdpgAgent()),
    )


def train_pendulum(algo, agent, seed=SEED, n_steps=MAX_STEPS, log_interval_steps=1000):
    """Train until the evaluation return reaches THRESHOLD or ``n_steps`` pass.

    Returns:
        ``[(env steps, average evaluation return)]``, the first entry before training.
    """
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="Pendulum-v1"),
                            eval_env_kwargs=dict(id="Pendulum-v1"), batch_T=1, batch_B=1,
                            max_decorrelation_steps=0, eval_n_envs=5, eval_max_steps=1000,
                            eval_max_trajectories=5)
    runner = EvalUntilThreshold(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                                log_interval_steps=log_interval_steps, seed=seed,
                                affinity=dict(master_torch_threads=1))
    n_threads = torch.get_num_threads()
    try:
        with logger_context("qpg_learning", seed, "pendulum", {}, snapshot_mode="none"):
            runner.train()
    except ReachedThreshold:
        pass
    finally:
        torch.set_num_threads(n_threads)
    return runner.history


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_learns_pendulum(name, in_tmp_cwd):
    algo, agent = pendulum_setups()[name]
    history = train_pendulum(algo, agent)
    assert history[0][1] < -700  # Untrained.
    steps, best = max(history, key=lambda h: h[1])
    assert best >= THRESHOLD and steps <= MAX_STEPS, history
