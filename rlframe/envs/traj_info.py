"""Trajectory statistics that samplers keep per env and log when a trajectory ends.

:class:`TrajInfo` lives with the envs, below the samplers, so that an env
module can define its own statistics (as :mod:`rlframe.envs.atari.atari_env`
does with ``AtariTrajInfo``); ``rlframe.samplers.collections.TrajInfo`` (rlpyt's
path) names the same class.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlframe.utils.collections import AttrDict

if TYPE_CHECKING:
    from rlframe.spaces.base import SpaceValue
    from rlframe.utils.collections import NamedArrayTuple


class TrajInfo(AttrDict):
    """Running statistics of one trajectory; keys are logged when it completes.

    Keys starting with ``_`` are bookkeeping and never logged. Subclass it to
    log more: override :meth:`step` and call ``super().step``; a subclass that
    defines ``__init__`` takes ``**kwargs`` and passes them to
    ``super().__init__(**kwargs)``, so that the sampler's ``traj_info_kwargs``
    (e.g. ``discount``) reach this class.

    How samplers use it (:class:`~rlframe.samplers.stepping.TrajTracker`): while
    ``step`` is this class's own, the four statistics are kept in arrays over
    all envs and copied into a new instance when a trajectory ends, so a
    subclass that only adds keys in ``__init__`` or overrides :meth:`terminate`
    costs nothing per step. A subclass that overrides ``step`` gets one
    instance per env and a ``step`` call per env step, with that env's
    observation, action, reward, done, agent_info and env_info.

    Args:
        discount: discount of ``DiscountedReturn``, stored on the instance as
            ``_discount`` (samplers pass the algorithm's ``discount``).
        **kwargs: initial keys, as for any AttrDict.
    """

    def __init__(self, discount: float = 1.0, **kwargs: Any):  # Keys of any value.
        super().__init__(**kwargs)
        self.Length = 0
        self.Return = 0
        self.NonzeroRewards = 0
        self.DiscountedReturn = 0
        # Per instance, not per class: two samplers in one process may use two discounts.
        self._discount = discount
        self._cur_discount = 1

    def step(self, observation: SpaceValue, action: SpaceValue, reward: float, done: bool,
             agent_info: NamedArrayTuple | None, env_info: tuple) -> None:
        """Account for one environment step (``env_info``: the env's info namedtuple)."""
        # Item access, not attributes: this runs once per env step.
        reward = float(reward)
        self["Length"] += 1
        self["Return"] += reward
        self["NonzeroRewards"] += reward != 0
        self["DiscountedReturn"] += self["_cur_discount"] * reward
        self["_cur_discount"] *= self["_discount"]

    def terminate(self, observation: SpaceValue) -> TrajInfo:
        """Finish the trajectory; returns itself for the completed list."""
        return self
