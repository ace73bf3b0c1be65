"""Sample structures shared by samplers, collectors and algorithms."""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING, Any, TypedDict

from rlframe.envs.traj_info import TrajInfo  # noqa: F401  (rlpyt's import path)
from rlframe.utils.buffer import buffer_from_example, torchify_buffer
from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy as np

    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    Samples: TypeAlias = NamedArrayTuple
    AgentSamples: TypeAlias = NamedArrayTuple
    AgentSamplesBsv: TypeAlias = NamedArrayTuple
    EnvSamples: TypeAlias = NamedArrayTuple
    StepBuffer: TypeAlias = NamedArrayTuple
else:
    Samples = namedarraytuple("Samples", ["agent", "env"])
    AgentSamples = namedarraytuple("AgentSamples", ["action", "prev_action", "agent_info"])
    AgentSamplesBsv = namedarraytuple("AgentSamplesBsv",
                                      ["action", "prev_action", "agent_info", "bootstrap_value"])
    EnvSamples = namedarraytuple("EnvSamples",
                                 ["observation", "reward", "prev_reward", "done", "env_info"])
    # One step of a GPU sampler's envs, shared between its workers (which step
    # the envs) and the master (which reads observations and writes actions).
    StepBuffer = namedarraytuple("StepBuffer",
                                 ["observation", "action", "reward", "done", "agent_info"])


class Examples(TypedDict, total=False):
    """One step of every sampled field, unbatched: what the sampler's ``[T, B]``
    buffers and an algorithm's replay are allocated from. ``get_example_outputs``
    fills every key."""

    observation: SpaceValue  # A value of the observation space (arrays, or a namedarraytuple).
    reward: np.ndarray  # float32, shape ().
    done: np.ndarray  # bool, shape ().
    env_info: Any  # The env's info namedtuple: its fields are the env's own.
    action: SpaceValue  # A value of the action space, as numpy.
    agent_info: NamedArrayTuple  # The agent's step info, as numpy.


class BatchSpec(namedtuple("BatchSpec", "T B")):
    """Sampler batch shape: ``T`` time steps by ``B`` parallel environments."""

    __slots__ = ()

    @property
    def size(self) -> int:
        """Number of env steps in one batch, ``T * B``."""
        return self.T * self.B


def build_step_buffer(examples: Examples, B: int) -> tuple[StepBuffer, StepBuffer]:
    """Shared [B] buffer of one step's env and agent values (GPU samplers).

    Returns:
        ``(step_buffer_pyt, step_buffer_np)``, torch and numpy views of it.
    """
    step_bufs = {k: buffer_from_example(examples[k], B, share_memory=True)
                 for k in ["observation", "action", "reward", "done", "agent_info"]}
    step_buffer_np = StepBuffer(**step_bufs)
    return torchify_buffer(step_buffer_np), step_buffer_np
