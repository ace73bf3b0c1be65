"""rlpyt's import path for the return and advantage functions (``rlpyt.algos.utils``).

The code lives in :mod:`rlframe.algos.returns`; this module re-exports it so
that scripts written for rlpyt keep working after the package rename.
"""
from rlframe.algos.returns import (
    Array, discount_return, discount_return_n_step, discount_return_tl,
    generalized_advantage_estimation, generalized_advantage_estimation_tl, valid_from_done,
)

__all__ = [
    "Array", "discount_return", "discount_return_n_step", "discount_return_tl",
    "generalized_advantage_estimation", "generalized_advantage_estimation_tl", "valid_from_done",
]
