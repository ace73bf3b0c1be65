"""Model kwargs of the Atari agents, at rlpyt's DQN path.

rlpyt defines the same mixin twice (for DQN and policy-gradient agents); here
both paths name one class, :class:`rlframe.agents.pg.atari.AtariMixin`: it
gives the model ``image_shape=env_spaces.observation.shape`` and
``output_size=env_spaces.action.n``.
"""
from rlframe.agents.pg.atari import AtariMixin

__all__ = ["AtariMixin"]
