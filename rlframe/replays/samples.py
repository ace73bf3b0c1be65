"""The batch types replays return: single steps or sequences, with the
time-limit fields (``timeout``, ``timeout_n``) and importance weights
(``is_weights``) where the replay has those parts.

A leaf module: replays, their parts and the algorithms that read the batches
import these types from here without importing one another.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

_TL_FIELDS = ("timeout", "timeout_n")
_PRI_FIELDS = ("is_weights",)

if TYPE_CHECKING:
    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    SamplesFromReplay: TypeAlias = NamedArrayTuple
    SamplesFromReplayPri: TypeAlias = NamedArrayTuple
    SamplesFromReplayTL: TypeAlias = NamedArrayTuple
    SamplesFromReplayPriTL: TypeAlias = NamedArrayTuple
    SequenceSamplesFromReplay: TypeAlias = NamedArrayTuple
    SequenceSamplesFromReplayPri: TypeAlias = NamedArrayTuple
    SequenceSamplesFromReplayTL: TypeAlias = NamedArrayTuple
    SequenceSamplesFromReplayPriTL: TypeAlias = NamedArrayTuple
else:
    SamplesFromReplay = namedarraytuple(
        "SamplesFromReplay",
        ["agent_inputs", "action", "return_", "done", "done_n", "target_inputs"])
    SamplesFromReplayPri = namedarraytuple("SamplesFromReplayPri",
                                           SamplesFromReplay._fields + _PRI_FIELDS)
    SamplesFromReplayTL = namedarraytuple("SamplesFromReplayTL",
                                          SamplesFromReplay._fields + _TL_FIELDS)
    SamplesFromReplayPriTL = namedarraytuple("SamplesFromReplayPriTL",
                                             SamplesFromReplayTL._fields + _PRI_FIELDS)

    SequenceSamplesFromReplay = namedarraytuple(
        "SamplesFromReplay",
        ["all_observation", "all_action", "all_reward", "return_", "done", "done_n",
         "init_rnn_state"])
    SequenceSamplesFromReplayPri = namedarraytuple(
        "SamplesFromReplayPri", SequenceSamplesFromReplay._fields + _PRI_FIELDS)
    SequenceSamplesFromReplayTL = namedarraytuple("SamplesFromReplayTL",
                                                  SequenceSamplesFromReplay._fields + _TL_FIELDS)
    SequenceSamplesFromReplayPriTL = namedarraytuple(
        "SamplesFromReplayPriTL", SequenceSamplesFromReplayTL._fields + _PRI_FIELDS)
