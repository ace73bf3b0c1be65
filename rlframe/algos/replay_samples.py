"""What off-policy algorithms store: the replay layout of a sampler batch.

DQN-family and Q-policy-gradient algorithms keep observation, action, reward
and done of every step, plus ``timeout`` (a time limit cut the episode) when
they bootstrap through time limits.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

from rlframe.utils.collections import namedarraytuple
from rlframe.utils.logging import logger

SamplesToBuffer = namedarraytuple("SamplesToBuffer",
                                  ["observation", "action", "reward", "done"])
SamplesToBufferTl = namedarraytuple("SamplesToBufferTl",
                                    ["observation", "action", "reward", "done", "timeout"])


def replay_example(examples: dict, timelimit: bool) -> Any:
    """One example step (the sampler's ``examples`` dict) in the replay layout."""
    fields = dict(observation=examples["observation"], action=examples["action"],
                  reward=examples["reward"], done=examples["done"])
    if timelimit:
        return SamplesToBufferTl(**fields, timeout=examples["env_info"].timeout)
    return SamplesToBuffer(**fields)


def replay_samples(samples: Any, timelimit: bool) -> Any:
    """The sampler's ``[T, B]`` batch in the replay layout (views, no copies)."""
    fields = dict(observation=samples.env.observation, action=samples.agent.action,
                  reward=samples.env.reward, done=samples.env.done)
    if timelimit:
        return SamplesToBufferTl(**fields, timeout=samples.env.env_info.timeout)
    return SamplesToBuffer(**fields)


def async_replay_class(ReplayCls: type) -> type:
    """The shared-memory variant ``Async<Name>`` defined next to ``ReplayCls``."""
    name = "Async" + ReplayCls.__name__
    AsyncCls = getattr(sys.modules[ReplayCls.__module__], name, None)
    if AsyncCls is None:
        raise NotImplementedError(f"{ReplayCls.__module__} defines no {name} for asynchronous "
                                  "runners; pass ReplayBufferCls explicitly.")
    return AsyncCls


def check_replay_length(replay_size: int, B: int, n_step_return: int) -> None:
    """Raise unless ``replay_size`` over ``B`` envs holds more than ``n_step_return + 1`` steps."""
    replay_T = math.ceil(replay_size / B)
    if replay_T <= n_step_return + 1:
        raise ValueError(
            f"replay_size={replay_size} over B={B} envs holds only {replay_T} steps per env; "
            f"n_step_return={n_step_return} needs more than {n_step_return + 1} "
            "(raise replay_size).")


def choose_replay_class(given: type | None, default: Callable[[], type]) -> type:
    """The user's ``ReplayBufferCls`` (with a warning in the log), else ``default()``."""
    if given is None:
        return default()
    logger.log(f"WARNING: ignoring the default replay buffer class; using {given.__name__} "
               "as given.")
    return given


def check_mid_batch_reset(algo: Any, mid_batch_reset: bool) -> None:
    """Raise unless the sampler resets envs mid-batch, as a step-stream replay needs."""
    if not mid_batch_reset:
        raise ValueError(
            f"{type(algo).__name__} needs a sampler whose collector resets envs mid-batch "
            "(mid_batch_reset=True, e.g. CpuResetCollector, the default), got "
            "mid_batch_reset=False: its replay stores each env's steps as one continuous "
            "stream.")
