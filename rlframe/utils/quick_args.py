"""Store ``__init__`` arguments as attributes in one call (for user code).

rlframe's own classes assign their attributes explicitly; this helper remains
so that code written in the ``save__init__args(locals())`` style keeps working.
"""
from __future__ import annotations

import inspect
from typing import Any


def _init_arg_names(cls: type) -> list[str]:
    """Named parameters of ``cls.__init__`` (without ``self``, ``*args``, ``**kwargs``)."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):  # some builtins have no signature
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    names = [p.name for p in signature.parameters.values() if p.kind in kinds]
    return names[1:]  # drop self


def save__init__args(values: dict[str, Any], underscore: bool = False, overwrite: bool = False,
                     subclass_only: bool = False) -> None:
    """Set ``self.<name> = values[name]`` for the ``__init__`` arguments of ``self``'s classes.

    Call it as ``save__init__args(locals())`` at the start of ``__init__``. The
    arguments of every ``__init__`` defined along the MRO are considered, so a
    subclass that calls it before ``super().__init__(...)`` sets the values
    first; an attribute that already exists is kept unless ``overwrite``.

    Args:
        values: ``locals()`` of an ``__init__``; must contain ``self``.
        underscore: name the attributes ``_<name>``.
        overwrite: replace attributes that already exist.
        subclass_only: only consider the ``__init__`` of ``type(self)`` itself.
    """
    if "self" not in values:
        raise ValueError("save__init__args needs the locals() of an __init__ method "
                         f"(a dict with a 'self' key); got keys {sorted(values)}.")
    self = values["self"]
    attr_prefix = "_" if underscore else ""
    classes = type(self).__mro__[:1] if subclass_only else type(self).__mro__
    arg_names: list[str] = []
    for cls in classes:
        if "__init__" not in vars(cls) or cls is object:
            continue
        arg_names += [name for name in _init_arg_names(cls) if name not in arg_names]
    for name in arg_names:
        attr = attr_prefix + name
        if name in values and (overwrite or not hasattr(self, attr)):
            setattr(self, attr, values[name])
