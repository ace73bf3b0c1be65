"""Agent info structures of policy-gradient agents, and the check of their
``deterministic_eval`` keyword."""
from typing import TYPE_CHECKING

from rlframe.utils.collections import namedarraytuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from rlframe.utils.collections import NamedArrayTuple

    # Type checkers see every namedarraytuple type as NamedArrayTuple (see
    # rlframe.utils.collections); the classes are built in the else branch.
    AgentInfo: TypeAlias = NamedArrayTuple
    AgentInfoRnn: TypeAlias = NamedArrayTuple
else:
    AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
    AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])



def check_deterministic_eval(value: object) -> bool:
    """``value`` if it is a bool, else a TypeError naming ``deterministic_eval``."""
    if not isinstance(value, bool):
        raise TypeError(f"deterministic_eval must be True or False, got {value!r}.")
    return value
