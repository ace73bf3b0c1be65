"""Allocation of the ``[T, B]`` sample buffers that collectors write in place."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collections import (AgentSamples, AgentSamplesBsv, BatchSpec,
                                          EnvSamples, Samples)
from rlframe.envs.vector import VecEnv
from rlframe.utils.buffer import (buffer_from_example, buffer_method, numpify_buffer,
                                  torchify_buffer)

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.envs.base import Env
    from rlframe.samplers.collections import Examples


def build_samples_buffer(agent: BaseAgent, env: Env, batch_spec: BatchSpec,
                         bootstrap_value: bool = False, agent_shared: bool = True,
                         env_shared: bool = True, subprocess: bool = True,
                         examples: Examples | None = None) -> tuple[Samples, Samples, Examples]:
    """Allocate the sample buffer for ``batch_spec`` from one example step.

    Args:
        agent: an initialized agent (its ``step`` output sets agent_info's layout).
        env: an env used for the example step (it is reset and stepped once).
        batch_spec: ``BatchSpec(T, B)``.
        bootstrap_value: add ``agent.bootstrap_value`` of shape [1, B].
        agent_shared, env_shared: put the agent / env halves on shared memory.
        subprocess: accepted for rlpyt compatibility; the example step runs in
            this process under ``torch.no_grad`` (the agent is already built here).
        examples: precomputed examples (skips the example step).

    Returns:
        ``(samples_pyt, samples_np, examples)``: torch and numpy views of the
        same memory, with ``action``/``prev_action`` and ``reward``/``prev_reward``
        as offset views of one [T + 1, B] array each.
    """
    if examples is None:
        examples = get_example_outputs(agent, env)
    T, B = batch_spec
    all_action = buffer_from_example(examples["action"], (T + 1, B), agent_shared)
    agent_info = buffer_from_example(examples["agent_info"], (T, B), agent_shared)
    if bootstrap_value:
        value_example = getattr(examples["agent_info"], "value", None)
        if value_example is None:
            raise ValueError("bootstrap_value=True needs an agent whose agent_info has a "
                             f"'value' field; {type(agent).__name__} returns "
                             f"{type(examples['agent_info']).__name__}.")
        bv = buffer_from_example(value_example, (1, B), agent_shared)
        agent_buffer = AgentSamplesBsv(all_action[1:], all_action[:-1], agent_info, bv)
    else:
        agent_buffer = AgentSamples(all_action[1:], all_action[:-1], agent_info)

    observation = buffer_from_example(examples["observation"], (T, B), env_shared)
    all_reward = buffer_from_example(examples["reward"], (T + 1, B), env_shared)
    done = buffer_from_example(examples["done"], (T, B), env_shared)
    env_info = buffer_from_example(examples["env_info"], (T, B), env_shared)
    env_buffer = EnvSamples(observation, all_reward[1:], all_reward[:-1], done, env_info)

    samples_np = Samples(agent_buffer, env_buffer)
    samples_pyt = torchify_buffer(samples_np)
    return samples_pyt, samples_np, examples


@torch.no_grad()
def get_example_outputs(agent: BaseAgent, env: Env | VecEnv, examples: Examples | None = None,
                        subprocess: bool = False) -> Examples:
    """One reset and one random step of ``env`` and one ``agent.step``.

    Args:
        agent: an initialized agent.
        env: an rlframe env, or a VecEnv (its first env's values are used).
        examples: dict to fill (a new one if None).
        subprocess: accepted for rlpyt compatibility (ignored).

    Returns:
        dict with keys ``observation, reward, done, env_info, action, agent_info``
        holding single (unbatched) values whose shapes and dtypes size the buffers.
    """
    examples = {} if examples is None else examples
    if isinstance(env, VecEnv):
        env.reset()
        actions = env.sample_actions()
        o, r, d, env_info = (buffer_method(x[0], "copy") for x in env.step(actions))
        a = buffer_method(actions[0], "copy")
    else:
        env.reset()
        a = env.action_space.sample()
        o, r, d, env_info = env.step(a)
    r = np.asarray(r, dtype="float32")
    agent.reset()
    agent_inputs = torchify_buffer(AgentInputs(o, a, r))
    a, agent_info = agent.step(*agent_inputs)
    if "prev_rnn_state" in agent_info:
        # Stored per env as [N, H]: drop the B=1 dim of the unbatched example.
        agent_info = agent_info._replace(prev_rnn_state=agent_info.prev_rnn_state[0])
    examples["observation"] = o
    examples["reward"] = r
    examples["done"] = np.asarray(d, dtype=bool)
    examples["env_info"] = env_info
    examples["action"] = numpify_buffer(a)
    examples["agent_info"] = numpify_buffer(agent_info)
    agent.reset()
    return examples
