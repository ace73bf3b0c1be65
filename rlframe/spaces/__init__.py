"""Action and observation spaces."""
from rlframe.spaces.base import Space
from rlframe.spaces.composite import Composite
from rlframe.spaces.float_box import FloatBox
from rlframe.spaces.gym_wrapper import GymSpaceWrapper
from rlframe.spaces.int_box import IntBox

__all__ = ["Space", "IntBox", "FloatBox", "Composite", "GymSpaceWrapper"]
