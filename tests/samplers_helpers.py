"""Test helpers for sampler tests (importable by worker processes under spawn)."""
import torch

from rlframe.agents.base import AgentStep
from rlframe.agents.pg.base import AgentInfo
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.distributions.categorical import DistInfo
from rlframe.envs.gym import GymEnvWrapper
import gymnasium as gym


class GreedyAgent(CategoricalPgAgent):
    """Deterministic: always the most probable action."""

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward):
        pi, value = self.model(*self._model_inputs(observation, prev_action, prev_reward))
        action = torch.argmax(pi, dim=-1)
        return AgentStep(action=action, agent_info=AgentInfo(dist_info=DistInfo(prob=pi),
                                                            value=value))


def crashing_step(count, crash_at):
    if count >= crash_at:
        raise RuntimeError("env exploded")


class CrashingEnv(GymEnvWrapper):
    """CartPole whose step raises after ``crash_at`` steps in the env of global rank 1
    (the first env of the second worker when batch_B=4 and two workers)."""

    n_made = 0

    def __init__(self, crash_at=0, crash_rank=1):
        super().__init__(gym.make("CartPole-v1"))
        self.crash_at = crash_at
        self.count = 0
        self.crash = False
        self.crash_rank = crash_rank

    def seed(self, seed=None):
        super().seed(seed)
        # Envs are seeded with base seed + global env index (base seed 1 here).
        self.crash = seed == self.crash_rank * 2 + 1

    def step(self, action):
        self.count += 1
        if self.crash:
            crashing_step(self.count, self.crash_at)
        return super().step(action)


def flat_leaves(structure):
    leaves = []

    def walk(s):
        if isinstance(s, (tuple, list)):
            for v in s:
                walk(v)
        elif s is not None:
            leaves.append(s)
    walk(structure)
    return leaves


def worker_children(pid=None):
    """Child processes other than multiprocessing's long-lived helpers (the
    resource tracker and the forkserver), which outlive individual samplers."""
    import psutil
    children = []
    for c in psutil.Process(pid).children(recursive=True):
        try:
            cmd = " ".join(c.cmdline())
        except psutil.Error:
            continue
        if "resource_tracker" not in cmd and "forkserver" not in cmd:
            children.append(c)
    return children
