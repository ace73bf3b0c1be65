"""Helpers of the asynchronous-runner tests (importable by child processes)."""
import time

import gymnasium

from rlframe.envs.gym import GymEnvWrapper
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.async_.gpu_sampler import AsyncGpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler


class SlowStep(gymnasium.Wrapper):
    """Each step also sleeps ``step_seconds`` (in the gymnasium env itself, so every
    stepping path of the wrapper pays it)."""

    def __init__(self, env, step_seconds):
        super().__init__(env)
        self.step_seconds = step_seconds

    def step(self, action):
        time.sleep(self.step_seconds)
        return self.env.step(action)


def slow_env(step_seconds=0., **kwargs):
    """A gymnasium env whose every step also takes ``step_seconds``: CartPole steps in
    microseconds, so without this a sampler outruns any optimizer."""
    if step_seconds <= 0:
        return gym_make(**kwargs)
    return GymEnvWrapper(SlowStep(gymnasium.make(**kwargs), step_seconds))


def params_digest(model):
    """A digest of a model's parameters."""
    import hashlib
    return hashlib.sha1(b"".join(p.detach().cpu().numpy().tobytes()
                                 for p in model.parameters())).hexdigest()


class RecordingSerialSampler(AsyncSerialSampler):
    """Appends ``"<itr> <digest of the acting model>"`` to the file ``record_path``
    after every batch (in the sampler process)."""

    record_path = None

    def obtain_samples(self, itr, db_idx):
        infos = super().obtain_samples(itr, db_idx)
        with open(self.record_path, "a") as f:
            f.write(f"{itr} {params_digest(self.agent.model)}\n")
        return infos


class RecordingGpuSampler(AsyncGpuSampler):
    """Appends ``"<first env> <itr> <digest of the acting model>"`` to the file
    ``record_path`` after every batch, in each process that serves actions."""

    record_path = None

    def obtain_samples(self, itr, db_idx):
        infos = super().obtain_samples(itr, db_idx)
        if self.server_group is None:  # This process acts (not the one driving servers).
            with open(self.record_path, "a") as f:
                f.write(f"{self.env_offset} {itr} {params_digest(self.agent.model)}\n")
        return infos


class FailingGpuSampler(AsyncGpuSampler):
    """Raises in the sampler process at iteration ``fail_itr``."""

    fail_itr = 5

    def obtain_samples(self, itr, db_idx):
        if itr == self.fail_itr:
            raise ValueError("boom in obtain_samples")
        return super().obtain_samples(itr, db_idx)


class ProbeSerialSampler(AsyncSerialSampler):
    """Reports one fixed figure through diagnostics()."""

    def diagnostics(self):
        return {"SamplerProbe": 7.}
