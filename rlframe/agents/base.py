"""Agent base classes: a model, a distribution, and action selection.

An agent owns a torch model and turns ``(observation, prev_action,
prev_reward)`` into actions (``step``, no grad, outputs on CPU) and into
training outputs (``__call__``, with grad). Samplers call ``step``; algorithms
call ``__call__``. Recurrent agents keep their RNN state between steps.

The parts every agent shares live beside this module: the RNN state mixins
(:mod:`.recurrent`), parameter hand-over to samplers through a shared-memory
model (:mod:`.sharing`), DistributedDataParallel wrapping (:mod:`.ddp`) and the
checks of a model's outputs (:mod:`.model_checks`). Their names stay importable
from here (rlpyt's path).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import torch

from rlframe.agents.ddp import DDP, StepDDP, unwrap_ddp, wrap_ddp
from rlframe.agents.model_checks import (check_output_count, check_output_size,
                                         check_probabilities, check_value_output)
from rlframe.agents.recurrent import (AgentInputsRnn, AlternatingRecurrentAgentMixin,
                                      RecurrentAgentMixin, rnn_state_batch_first,
                                      zeros_like_rnn_state)
from rlframe.agents.sharing import ParameterSharingMixin
from rlframe.models.utils import set_training, strip_ddp_state_dict
from rlframe.utils.buffer import buffer_func, buffer_to, torchify_buffer
from rlframe.utils.checks import check_keywords, state_dict_mismatch
from rlframe.utils.collections import namedarraytuple
from rlframe.utils.logging import logger

# Names this module held before its parts moved out, kept importable from here.
from rlframe.agents.ddp import _NO_FORWARD_BUFFER_SYNC  # noqa: F401, E402
from rlframe.utils.buffer import buffer_method  # noqa: F401, E402
from rlframe.utils.distributed import is_gloo_pair, pair_mean_hook  # noqa: F401, E402
from rlframe.utils.synchronize import RWLock  # noqa: F401, E402

if TYPE_CHECKING:
    from typing import TypeAlias

    from numpy.typing import ArrayLike

    from rlframe.distributions.base import Distribution
    from rlframe.envs.base import EnvSpaces
    from rlframe.utils.buffer import TensorTree
    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInputs: TypeAlias = NamedArrayTuple
    AgentStep: TypeAlias = NamedArrayTuple
else:
    AgentInputs = namedarraytuple("AgentInputs", ["observation", "prev_action", "prev_reward"])
    AgentStep = namedarraytuple("AgentStep", ["action", "agent_info"])

# Names kept importable from here (rlpyt's path), defined in the modules they come from.
__all__ = [
    "AgentInputs", "AgentStep", "BaseAgent", "step_without_grad",
    # rlframe.agents.recurrent
    "AgentInputsRnn", "RecurrentAgentMixin", "AlternatingRecurrentAgentMixin",
    "zeros_like_rnn_state", "rnn_state_batch_first",
    # rlframe.agents.ddp
    "DDP", "StepDDP", "wrap_ddp", "unwrap_ddp",
    # rlframe.agents.model_checks
    "check_output_size", "check_output_count", "check_value_output", "check_probabilities",
]

_Method = TypeVar("_Method", bound=Callable[..., Any])
_Agent = TypeVar("_Agent", bound="BaseAgent")
_Tree = TypeVar("_Tree")  # Tensors, (namedarray)tuples of them, or None.
_CPU = torch.device("cpu")


def step_without_grad(method: _Method) -> _Method:
    """``@torch.no_grad()`` for agent methods that samplers call every step.

    Where gradients are already off (collectors step agents under
    ``torch.inference_mode()`` or ``torch.no_grad()``, see
    :attr:`BaseAgent.step_inference_mode`) no context is entered: entering one
    costs about as much as a layer of a small policy. Called with gradients on,
    the method runs under ``torch.no_grad()``, as decorated by it.
    """
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            with torch.no_grad():
                return method(*args, **kwargs)
        return method(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


class BaseAgent(ParameterSharingMixin):
    """Holds the model; subclasses add a distribution and ``step``/``__call__``.

    Args:
        ModelCls: torch.nn.Module class, built in :meth:`initialize` with
            ``ModelCls(**make_env_to_model_kwargs(env_spaces), **model_kwargs)``.
        model_kwargs: extra model constructor arguments.
        initial_model_state_dict: loaded into the model after it is built.
    """

    recurrent: bool = False  # Keeps an RNN state between steps (RecurrentAgentMixin).
    alternating: bool = False  # Keeps one RNN state per env half (alternating samplers).
    step_inference_mode: bool = True
    """Collectors that act in the envs' process (serial and CPU samplers, and
    their evaluation) call ``step`` (and ``value``) of this agent under
    ``torch.inference_mode()``, cheaper per torch call than ``no_grad``: its
    outputs are only copied into the sample buffers. Tensors made there are
    inference tensors, which cannot be changed in place or saved for backward
    afterwards; an agent that keeps such tensors between steps (recurrent
    agents keep their RNN state, and reset rows of it in place) sets False and
    is stepped under ``torch.no_grad()``."""

    def __new__(cls: type[_Agent], *args: Any, **kwargs: Any) -> _Agent:
        agent = super().__new__(cls)
        # Kept for snapshots, which record how to rebuild the agent (see
        # constructor_args): every subclass's arguments, with no code in the subclass.
        agent._constructor_args = (args, dict(kwargs))
        return agent

    def __init__(self, ModelCls: type | None = None, model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None):
        self.ModelCls = ModelCls
        if model_kwargs is not None and not isinstance(model_kwargs, dict):
            raise TypeError(f"{type(self).__name__}: model_kwargs must be a dict of keyword "
                            f"arguments for the model (or None), got "
                            f"{type(model_kwargs).__name__}: {model_kwargs!r}.")
        self.model_kwargs = dict() if model_kwargs is None else dict(model_kwargs)
        self.initial_model_state_dict = initial_model_state_dict
        self.model: torch.nn.Module | None = None
        self.shared_model: torch.nn.Module | None = None
        self.distribution: Distribution | None = None
        self.deterministic_eval = False  # Policy-gradient agents take it as a keyword.
        self.device = torch.device("cpu")
        self.env_spaces: EnvSpaces | None = None
        self.env_model_kwargs: dict = {}
        self.share_memory = False
        self._mode: str | None = None
        self._ddp = False
        self._init_parameter_sharing()  # Hand-over to samplers (rlframe.agents.sharing).
        self._act_prev_action: torch.Tensor | None = None  # act()'s last actions [B, ...].

    @property
    def constructor_args(self) -> tuple[tuple, dict] | None:
        """``(args, kwargs)`` the agent's class was called with (None if unknown), from
        which :func:`rlframe.utils.loading.agent_spec` records how to rebuild it."""
        return getattr(self, "_constructor_args", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Training forward pass (with grad); defined by subclasses."""
        raise NotImplementedError(f"{type(self).__name__} defines no training forward pass.")

    def check_env_spaces(self, env_spaces: EnvSpaces) -> None:
        """Raise a clear error if this agent cannot act in ``env_spaces``.

        Called before any work by runners and in :meth:`initialize`. The base check:
        rlframe's own models take one array observation, so a Dict or Tuple
        observation (a :class:`Composite` space) needs a model written for it.
        """
        observation = env_spaces.observation
        builtin = [cls.__name__ for cls in (self.ModelCls, getattr(self, "QModelCls", None))
                   if isinstance(cls, type) and cls.__module__.startswith("rlframe.models.")]
        if observation.is_composite and builtin:
            raise TypeError(
                f"{type(self).__name__}'s model {', '.join(builtin)} takes one array "
                f"observation, but the env's observations are a Dict/Tuple with fields "
                f"{list(observation.names)}. Flatten them (wrap the gymnasium env in "
                "gymnasium.wrappers.FlattenObservation before GymEnvWrapper), or pass "
                "ModelCls= a model whose forward reads observation.<field> tensors (they "
                "arrive as a namedarraytuple with the usual leading [T, B] dims).")

    def check_model(self, env_spaces: EnvSpaces) -> None:
        """Build a throwaway model for ``env_spaces`` and check what it returns for one
        observation (see :meth:`check_model_outputs`), so that a model of the wrong
        shape is reported before any work, not deep inside a distribution. First
        ``model_kwargs`` must hold only keywords ``ModelCls`` takes."""
        if self.ModelCls is None:
            return
        env_model_kwargs = self.make_env_to_model_kwargs(env_spaces)
        check_keywords("model_kwargs", self.model_kwargs, self.ModelCls,
                       f"ModelCls={self.ModelCls.__name__}",
                       reserved={key: "the agent sets it from the env's spaces"
                                 for key in env_model_kwargs})
        if type(self).check_model_outputs is BaseAgent.check_model_outputs:
            return
        model = self.ModelCls(**env_model_kwargs, **self.model_kwargs)
        observation = buffer_func(torchify_buffer(env_spaces.observation.null_value()),
                                  lambda t: t.unsqueeze(0))
        action_space = env_spaces.action
        n = getattr(action_space, "n", None)
        prev_action = (torch.zeros(1, n) if n is not None and not action_space.shape
                       else torch.as_tensor(action_space.null_value()).unsqueeze(0).float())
        inputs = (observation, prev_action, torch.zeros(1))
        if self.recurrent:
            inputs += (None,)
        with torch.no_grad():
            outputs = model(*inputs)
        self.check_model_outputs(outputs, env_spaces)

    def check_initial_state_dicts(self, env_spaces: EnvSpaces) -> None:
        """Initialize a throwaway copy of this agent for ``env_spaces`` when any
        ``initial_*state_dict`` argument was given, so that one that does not fit
        its model is reported before any work (runners call this first)."""
        given = [name for name, value in vars(self).items() if value is not None
                 and name.startswith("initial_") and name.endswith("state_dict")]
        if not given or self.constructor_args is None:
            return
        args, kwargs = self.constructor_args
        try:
            type(self)(*args, **kwargs).initialize(env_spaces)
        except RuntimeError as error:  # torch's own loading error, from a subclass's loader.
            if "state_dict" not in str(error):
                raise
            text = " ".join(str(error).split())
            raise ValueError(f"{' or '.join(given)} does not fit {type(self).__name__}'s "
                             f"models: {text[:600]}{'...' if len(text) > 600 else ''}") from None

    def check_model_outputs(self, outputs: object, env_spaces: EnvSpaces) -> None:
        """Raise a clear error if ``outputs``, the model's for one observation (leading
        dim [1]), do not fit this agent (agents that know their model's outputs
        override this)."""

    def initialize(self, env_spaces: EnvSpaces, share_memory: bool = False,
                   **kwargs: Any) -> None:
        """Build the model for ``env_spaces``.

        Args:
            env_spaces: ``EnvSpaces(observation, action)``.
            share_memory: put the model's parameters on shared memory, so that
                parallel sampler workers read the parameters the master trains.
        """
        self.check_env_spaces(env_spaces)
        if self.ModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a ModelCls (got None).")
        self.env_model_kwargs = self.make_env_to_model_kwargs(env_spaces)
        self.model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        if share_memory:
            self.model.share_memory()
            self.shared_model = self.model
        if self.initial_model_state_dict is not None:
            initial = strip_ddp_state_dict(self.initial_model_state_dict)
            self.check_initial_state(initial)
            self.model.load_state_dict(initial)
        self.env_spaces = env_spaces
        self.share_memory = share_memory

    def check_initial_state(self, state_dict: Mapping[str, Any]) -> None:
        """Raise a ValueError naming what does not fit if the model state dict
        ``state_dict`` (from ``initial_model_state_dict``) cannot be loaded into the
        model built for the env (:meth:`initialize` has built it)."""
        state_dict = strip_ddp_state_dict(state_dict)
        mismatch = state_dict_mismatch(self.model, state_dict)
        if mismatch is not None:
            hint = (self.initial_state_hint(state_dict)
                    or "Pass the state_dict() of a model built with the same ModelCls, "
                       "model_kwargs and env.")
            raise ValueError(f"initial_model_state_dict does not fit {type(self).__name__}'s "
                             f"model {self.ModelCls.__name__}: {mismatch}. {hint}")

    def initial_state_hint(self, state_dict: Mapping[str, Any]) -> str:
        """What to do about an ``initial_model_state_dict`` that does not fit the model
        (agents that know what it was made for say so); empty for the generic advice.
        ``state_dict`` comes without DistributedDataParallel prefixes."""
        return ""

    def make_env_to_model_kwargs(self, env_spaces: EnvSpaces) -> dict:
        """Model constructor kwargs that depend on the env (shapes, action count)."""
        return {}

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move the model to ``cuda:<cuda_idx>`` (no-op for None).

        A shared-memory model stays on CPU for the samplers; the agent trains a
        copy on the GPU and :meth:`sync_shared_memory` copies parameters back.
        """
        if cuda_idx is None:
            return
        if self.shared_model is not None:
            self.model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
            self.model.load_state_dict(self.shared_model.state_dict())
        self.device = torch.device("cuda", index=cuda_idx)
        self.model.to(self.device)
        logger.log(f"Initialized agent model on device: {self.device}.")

    def to_model_device(self, tree: _Tree) -> _Tree:
        """``tree`` (tensors, nested tuples, None) on the model's device.

        Returned as it is when the model is on the CPU, where the samplers' and
        replays' tensors already are: no call per leaf in every forward pass.
        """
        device = self.device
        # Comparing devices costs less than reading device.type (a new str every call).
        return tree if device == _CPU or device.type == "cpu" else buffer_to(tree, device=device)

    def to_cpu(self, tree: _Tree) -> _Tree:
        """``tree`` on the CPU, where agents return their outputs (as it is from a CPU model)."""
        device = self.device
        return tree if device == _CPU or device.type == "cpu" else buffer_to(tree, device="cpu")

    def to_device_of(self, tree: _Tree, inputs: TensorTree) -> _Tree:
        """``tree`` where ``inputs`` came from: the CPU for CPU inputs (where agents
        return their outputs), the model's device for inputs already there.

        Off-policy algorithms move replay batches to the model's device once, and the
        losses then read the model's outputs beside the batch's actions and returns.
        """
        device = self.device
        if device == _CPU or device.type == "cpu":
            return tree
        leaf = inputs
        while not isinstance(leaf, torch.Tensor):
            leaf = leaf[0]  # The first field of a namedarraytuple or tuple.
        return tree if leaf.device == device else buffer_to(tree, device="cpu")

    def data_parallel(self) -> int | None:
        """Wrap the model in DistributedDataParallel (process group must exist).

        Returns:
            the CUDA device index, or None on CPU (gloo).
        """
        device_id = self.device.index if self.device.type == "cuda" else None
        self.model = wrap_ddp(self.model, self.device)
        self._ddp = True
        logger.log(f"Initialized DistributedDataParallel agent model on device {self.device}.")
        return device_id

    def collector_initialize(self, global_B: int = 1,
                             env_ranks: Sequence[int] | None = None) -> None:
        """Called in each collector with the global env layout (e.g. for vector epsilon)."""

    @step_without_grad
    def step(self, observation: TensorTree, prev_action: torch.Tensor,
             prev_reward: torch.Tensor) -> AgentStep:
        """Select actions for [B] (or [T, B]) inputs; returns CPU ``AgentStep``."""
        raise NotImplementedError(f"{type(self).__name__} defines no step().")

    @torch.no_grad()
    def value(self, observation: TensorTree, prev_action: torch.Tensor,
              prev_reward: torch.Tensor) -> torch.Tensor:
        """State value [B] of the inputs (no grad, CPU), for ``bootstrap_value`` samplers.

        Agents of algorithms that bootstrap from a value (policy gradient) define it.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no value().")

    def act(self, observation: ArrayLike, deterministic: bool = True,
            prev_reward: ArrayLike | None = None) -> np.ndarray:
        """Actions for one observation or a batch, numpy in and out (to use a trained agent).

        Acts as in the agent's current mode (:func:`rlframe.utils.loading.load_agent`
        leaves it in eval mode). Between calls the agent keeps its last actions (the
        next ``prev_action``) and, if recurrent, its RNN state; call :meth:`reset` at
        the start of new episodes. A batch of another size than the last also starts
        new episodes.

        Args:
            observation: one observation [*obs_shape] or a batch [B, *obs_shape]
                (array observations only).
            deterministic: the most likely action (argmax Q for DQN-family agents,
                most probable action or Gaussian mean for policy gradient, mu for
                DDPG/TD3, ``squash * tanh(mean)`` for SAC); False: sampled as
                :meth:`step` does.
            prev_reward: the reward(s) after the previous action, [] or [B], for
                models that read it (default 0).

        Returns:
            action [*action_shape] for one observation, [B, *action_shape] for a batch.
        """
        observation, single = self._act_observation(observation)
        B = observation.shape[0]
        prev_action = self._act_prev_action
        if prev_action is None or prev_action.shape[0] != B:
            if prev_action is not None:
                self.reset()
            null = np.asarray(self.env_spaces.action.null_value())
            prev_action = torch.from_numpy(np.stack([null] * B))
        prev_reward = torch.zeros(B) if prev_reward is None else \
            torch.as_tensor(np.asarray(prev_reward, dtype=np.float32).reshape(B))
        distribution = self.distribution
        if deterministic:
            self.distribution = _ModeSampler(distribution)
        try:
            action = self.step(observation, prev_action, prev_reward).action
        finally:
            self.distribution = distribution
        if self.alternating:
            self.toggle_alt()  # Stepping switched to the other env half's state: one half here.
        self._act_prev_action = action
        action = action.numpy()
        return action[0] if single else action

    def _act_observation(self, observation: ArrayLike) -> tuple[torch.Tensor, bool]:
        """``(observation [B, *obs_shape] tensor, whether one was given unbatched)``."""
        if self.env_spaces is None:
            raise RuntimeError(f"{type(self).__name__}.act() needs an initialized agent "
                               "(initialize(env_spaces), or rlframe.utils.loading.load_agent).")
        space = self.env_spaces.observation
        if space.is_composite:
            raise TypeError(f"{type(self).__name__}.act() takes array observations; the env's "
                            f"are {list(space.names)}: call step() with a namedarraytuple.")
        null = np.asarray(space.null_value())
        observation = np.asarray(observation, dtype=null.dtype)
        shape = observation.shape
        single = shape == null.shape
        if not single and shape[1:] != null.shape:
            raise ValueError(f"{type(self).__name__}.act(): observation of shape {shape}; the "
                             f"env's observations are {null.shape} (one) or "
                             f"[B, *{null.shape}] (a batch).")
        observation = observation[None] if single else observation
        return torch.from_numpy(np.ascontiguousarray(observation)), single

    def update_obs_rms(self, observation: TensorTree) -> None:
        """Update running observation statistics with a [T, B] batch before training.

        Called by the policy-gradient algorithms every iteration. Nothing to do
        here; agents whose model normalizes observations override it.
        """

    def reset(self) -> None:
        """Start of new episodes in every env (recurrent agents clear state)."""
        self._act_prev_action = None

    def reset_one(self, idx: int) -> None:
        """Start of a new episode in env ``idx``."""

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Parameters trained by the algorithm."""
        return self.model.parameters()

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        """Named parameters of the model."""
        return self.model.named_parameters()

    def state_dict(self) -> dict:
        """Model parameters, without DistributedDataParallel's ``module.`` prefix."""
        return strip_ddp_state_dict(self.model.state_dict())

    def load_state_dict(self, state_dict: dict) -> None:
        """Load parameters saved by :meth:`state_dict` (DDP prefixes tolerated)."""
        target = self.model.module if self._ddp else self.model
        target.load_state_dict(strip_ddp_state_dict(state_dict))

    def train_mode(self, itr: int) -> None:
        """Before optimization at iteration ``itr``."""
        set_training(True, self.model)
        self._mode = "train"
        self._act_with_mode(False)

    def sample_mode(self, itr: int) -> None:
        """Before collecting training samples at iteration ``itr``."""
        set_training(False, self.model)
        self._mode = "sample"
        self._act_with_mode(False)

    def eval_mode(self, itr: int) -> None:
        """Before collecting evaluation trajectories at iteration ``itr``; agents built
        with ``deterministic_eval=True`` then act with their distribution's mode."""
        set_training(False, self.model)
        self._mode = "eval"
        self._act_with_mode(self.deterministic_eval)

    def _act_with_mode(self, mode: bool) -> None:
        """Make ``step`` take the distribution's mode (True) or sample it (False)."""
        wrapped = isinstance(self.distribution, _ModeSampler)
        if mode and not wrapped and self.distribution is not None:
            self.distribution = _ModeSampler(self.distribution)
        elif not mode and wrapped:
            self.distribution = self.distribution.distribution

    def toggle_alt(self) -> None:
        """Alternating samplers switch env halves (alternating agents override)."""


class _ModeSampler:
    """Stands for an agent's distribution while :meth:`BaseAgent.act` acts
    deterministically, and in eval mode for agents built with ``deterministic_eval``:
    every agent's ``step`` then picks the distribution's mode where it would sample,
    with no deterministic variant of each ``step``."""

    def __init__(self, distribution: Distribution):
        self.distribution = distribution

    def sample(self, dist_info: NamedArrayTuple) -> torch.Tensor:
        return self.distribution.mode(dist_info)

    def __getattr__(self, name: str) -> Any:
        if name == "distribution":  # Not set yet: an object being unpickled.
            raise AttributeError(name)
        return getattr(self.distribution, name)
