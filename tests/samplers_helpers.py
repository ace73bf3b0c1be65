"""Test helpers for sampler tests (importable by worker processes under spawn)."""
import os
import threading
import time

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


# Restart r of a Ray sampler worker adds r * this to its env seeds (RESTART_SEED_OFFSET).
RAY_RESTART_SEED_OFFSET = 1_000_003


class MarkerCrashEnv(GymEnvWrapper):
    """CartPole that raises "env exploded" at its ``crash_at``-th step while the file
    ``marker`` exists, in the env seeded ``crash_seed`` (modulo a Ray sampler
    restart's seed offset, so that restarted envs are the same env ranks).

    Args:
        marker: path of the marker file; with ``once``, the crashing env removes
            it, so only one env crashes (the first to remove it) and later ones run.
        crash_at: step count of the crash (counted from this env's construction).
        crash_seed: seed of the env that crashes.
        once: remove the marker at the crash.
        step_sleep: seconds every step sleeps (a slow env, to act mid-batch).
    """

    def __init__(self, marker, crash_at=5, crash_seed=2, once=True, step_sleep=0.):
        super().__init__(gym.make("CartPole-v1"))
        self.marker, self.crash_at, self.crash_seed = marker, crash_at, crash_seed
        self.once, self.step_sleep = once, step_sleep
        self.count = 0
        self.crash = False

    def seed(self, seed=None):
        super().seed(seed)
        self.crash = seed is not None and seed % RAY_RESTART_SEED_OFFSET == self.crash_seed

    def step(self, action):
        self.count += 1
        if self.step_sleep:
            time.sleep(self.step_sleep)
        if self.crash and self.count >= self.crash_at and os.path.exists(self.marker):
            if not self.once:
                raise RuntimeError("env exploded")
            try:
                os.remove(self.marker)
            except FileNotFoundError:
                pass  # Another env crashed first.
            else:
                raise RuntimeError("env exploded")
        return super().step(action)


RAY_PROCESS_NAMES = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard",
                     "log_monitor.py", "monitor.py", "runtime_env_agent")


def is_ray_command(cmd):
    """Whether a command line is one of Ray's daemons or workers."""
    return any(name in cmd for name in RAY_PROCESS_NAMES) and "pytest" not in cmd


def is_raylet(cmd):
    """Whether a command line is a raylet's (its program, whatever the install path)."""
    return bool(cmd) and os.path.basename(cmd.split()[0]) == "raylet"


def command(process):
    """A psutil.Process's command line ("" once it exited)."""
    import psutil
    try:
        return " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return ""


def is_ray_process(process):
    """Whether a running psutil.Process is one of Ray's daemons or workers."""
    return is_ray_command(command(process))


def descendants(pid=None):
    """Live descendants of process ``pid`` (default: this process)."""
    import psutil
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def alive(process):
    """Whether a recorded psutil.Process still runs (not a zombie; a reused pid is
    told apart by its start time)."""
    import psutil
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def assert_all_gone(processes, timeout=15.):
    """Every process of ``processes`` (psutil.Process) exits within ``timeout`` s."""
    deadline = time.time() + timeout
    left = [p for p in processes if alive(p)]
    while left and time.time() < deadline:
        time.sleep(0.3)
        left = [p for p in left if alive(p)]
    names = []
    for p in left:
        try:
            names.append(f"{p.pid}: {' '.join(p.cmdline())}")
        except Exception:  # noqa: BLE001 - it exited while being named.
            pass
    assert not names, names


class TreeRecorder:
    """Records every process in the tree under ``pid`` while it runs (a thread polls
    it), so that processes which outlive their parent are still known afterwards.

    Use as a context manager; ``seen`` maps ``(pid, create_time)`` to the process,
    ``commands`` to its last command line seen (a forked child's changes at exec).
    Processes already in the tree at the start are not recorded.
    """

    def __init__(self, pid=None, interval=0.2):
        self.pid, self.interval = pid, interval
        self.seen = {}
        self.commands = {}
        self._before = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _key(self, p):
        try:
            return p.pid, p.create_time()
        except Exception:  # noqa: BLE001 - it exited meanwhile.
            return None

    def record(self):
        for p in descendants(self.pid):
            key = self._key(p)
            if key is not None and key not in self._before:
                self.seen.setdefault(key, p)
                self.commands[key] = command(p) or self.commands.get(key, "")

    def _poll(self):
        while not self._stop.wait(self.interval):
            self.record()

    def __enter__(self):
        self._before = {k for k in map(self._key, descendants(self.pid)) if k is not None}
        self.record()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.record()
        self._stop.set()
        self._thread.join()

    @property
    def processes(self):
        return list(self.seen.values())

    def ray_commands(self):
        """Command lines of the recorded processes that are Ray's."""
        return [cmd for cmd in self.commands.values() if is_ray_command(cmd)]


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
    """Child processes other than the long-lived helpers that outlive individual
    samplers (conftest.long_lived_helper)."""
    import psutil
    from conftest import long_lived_helper
    children = []
    for c in psutil.Process(pid).children(recursive=True):
        try:
            if not long_lived_helper(c):
                children.append(c)
        except psutil.Error:
            continue
    return children


ORPHAN_CODE = """
import os, sys, time
if os.fork():
    os._exit(0)  # The grandchild is handed to init (or a subreaper).
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(300)
"""


def orphan_leaving_env(pid_file=None, **kwargs):
    """A gymnasium env (``gym_make(**kwargs)``) whose making in a Ray worker also leaves
    a sleeping process that no longer descends from its maker (its pid appended to
    ``pid_file``), as a process the raylet starts late and loses to init would be."""
    import subprocess
    import sys

    import psutil

    from rlframe.envs.gym import make as gym_make
    if pid_file is not None and psutil.Process().cmdline()[0].startswith("ray::"):
        subprocess.run([sys.executable, "-c", ORPHAN_CODE, pid_file], check=True)
    return gym_make(**kwargs)


class _LengthByParityEnv(gym.Env):
    """Episodes of ``short`` steps in envs seeded with an even seed, ``long`` otherwise;
    reward 1 per step (so the return is the length)."""

    observation_space = gym.spaces.Box(-1., 1., (4,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, short=2, long=9):
        self.short, self.long, self.length, self.t = short, long, long, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.length = self.short if seed % 2 == 0 else self.long
        self.t = 0
        return self.observation_space.low * 0, {}

    def step(self, action):
        self.t += 1
        return self.observation_space.low * 0, 1., self.t >= self.length, False, {}


def length_by_parity_env(short=2, long=9):
    """An rlframe env whose episodes are short where its seed is even (evaluation
    envs b = 0, 2, ... of a sampler seeded with an even seed), long otherwise."""
    return GymEnvWrapper(_LengthByParityEnv(short, long))
