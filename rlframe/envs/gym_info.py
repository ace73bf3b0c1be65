"""Free-form gymnasium info dicts as fixed-schema namedtuples.

Info values are stored with stable dtypes, so a buffer built from one example
fits every later step:

* python ``bool`` -> ``np.bool_``; python ``int`` -> ``np.int64``;
  python ``float`` -> ``np.float32``;
* numpy scalars and arrays keep their dtype, except ``float64`` -> ``float32``;
  lists/tuples of numbers become arrays by the same rules;
* strings, ``None``, objects and ragged or complex values are dropped.

Scalars are numpy scalars, arrays are copied. Nested dicts become nested namedtuples.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlframe.spaces.gym_wrapper import to_identifier
from rlframe.utils.collections import is_namedtuple, namedtuple_cls

INFO_NAME = "info"
_SCHEMA_MODULE = "rlframe.envs.gym"  # Named in the schemas' classes: GymEnvWrapper's module.


def warn_dropped_info_keys(owner: str, keys: list[str], warned: set[str]) -> None:
    """Warn, once per key and owner, that env info ``keys`` outside the info schema were
    dropped; ``warned`` (the owner's set) remembers the keys already named."""
    new = sorted(set(keys) - warned)
    if new:
        warned.update(new)
        warnings.warn(
            f"{owner}: env info key(s) {new} were not in the info schema learned at "
            "construction (or no longer fit its type/shape) and are dropped; declare them "
            "with make(..., info_example={...}).", stacklevel=4)


def infill_info(info: Mapping, sometimes_info: Mapping) -> dict:
    """A copy of ``info`` with keys missing from it taken from ``sometimes_info`` (recursively)."""
    out = dict(info)
    for key, default in sometimes_info.items():
        if key not in out:
            out[key] = default
        elif isinstance(default, Mapping) and isinstance(out[key], Mapping):
            out[key] = infill_info(out[key], default)
    return out


def build_info_tuples(info: Mapping, name: str = INFO_NAME) -> tuple:
    """An env_info example from a raw info dict.

    Keys become identifiers (:func:`~rlframe.spaces.gym_wrapper.to_identifier`),
    values are kept or dropped as described in the module docstring, nested
    dicts become namedtuples named ``<name>_<key>``. Classes are made with
    ``namedtuple_cls``, so instances pickle into spawned workers.

    Returns:
        a namedtuple instance whose leaves fix each field's dtype and shape.
    """
    return build_example(clean_info(info), name)


def info_to_nt(value: Mapping, example: tuple, dropped: list[str] | None = None) -> tuple:
    """Convert a raw info dict to the type of ``example``.

    Args:
        value: the info dict of one step.
        example: from :func:`build_info_tuples`; fixes fields, dtypes, shapes.
        dropped: if given, receives the (dotted) keys with storable values that
            were dropped because they are not in ``example`` or do not fit its
            type/shape (values of unstorable types are dropped silently).

    Returns:
        an instance of ``type(example)``; fields missing from ``value`` hold zeros.
    """
    return _to_nt(value, example, dropped, "")


class FlatInfoConverter:
    """Fast conversion of info dicts whose values are all scalars (most envs).

    Gives the same result as :func:`info_to_nt` when every key of the info is
    in the schema with a scalar value; returns None otherwise, so the caller
    falls back to the general conversion (which also reports dropped keys).
    """

    _SCALARS = (bool, int, float, np.generic)

    def __init__(self, example: tuple):
        self.cls = type(example)
        self.fields = {f: i for i, f in enumerate(example._fields)}
        self.types = [type(v) for v in example]
        self.zeros = [_zeros_like(v) if not is_namedtuple(v) else None for v in example]
        self.usable = all(not is_namedtuple(v) and np.ndim(v) == 0 for v in example)
        self.timeout_idx = self.fields["timeout"]
        self.index: dict = {}  # raw info key -> field position (None: not in schema)

    def convert(self, info: Mapping, timeout: bool) -> tuple | None:
        if not self.usable:
            return None
        out = list(self.zeros)
        for key, value in info.items():
            i = self.index.get(key, -1)
            if i == -1:
                i = self.index[key] = self.fields.get(to_identifier(key))
            if i is None or not isinstance(value, self._SCALARS):
                return None
            out[i] = self.types[i](value)
        out[self.timeout_idx] = np.bool_(timeout)
        return tuple.__new__(self.cls, out)


def info_leaf(value: object) -> np.generic | np.ndarray | None:
    """The stored form of one info value, or None to drop it."""
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value) if -2 ** 63 <= value < 2 ** 63 else None
    if isinstance(value, float):
        return np.float32(value)
    if not isinstance(value, (np.generic, np.ndarray, list, tuple)):
        return None
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists
        return None
    if a.dtype.kind not in "biuf":
        return None
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return a[()] if a.ndim == 0 else a


def is_storable(value: object) -> bool:
    """Whether a value would be kept (values of other types are dropped silently)."""
    if isinstance(value, Mapping):
        return bool(clean_info(value))
    return info_leaf(value) is not None


def clean_info(info: Mapping) -> dict:
    """Identifier keys and stored values; empty nested dicts and dropped values removed."""
    out: dict = {}
    for key, value in info.items():
        field = to_identifier(key)
        if field in out:
            continue
        if isinstance(value, Mapping):
            sub = clean_info(value)
            if sub:
                out[field] = sub
        else:
            leaf = info_leaf(value)
            if leaf is not None:
                out[field] = leaf
    return out


def merge_infos(first: dict, second: dict) -> dict:
    """Union of two cleaned infos; ``first`` wins where both have a key."""
    out = dict(first)
    for key, value in second.items():
        if key not in out:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = merge_infos(out[key], value)
    return out


def build_example(clean: dict, name: str) -> tuple:
    cls = namedtuple_cls(name, list(clean), module=_SCHEMA_MODULE)
    return cls(*(build_example(v, f"{name}_{k}") if isinstance(v, dict) else np.array(v)[()]
                 for k, v in clean.items()))


def _zeros_like(leaf: Any) -> Any:
    return np.zeros(np.shape(leaf), dtype=leaf.dtype)[()]


def _to_nt(value: Mapping, example: tuple, dropped: list[str] | None, prefix: str) -> tuple:
    given: dict = {}
    for key, v in value.items():
        field = to_identifier(key)
        if field in example._fields and field not in given:
            given[field] = v
        elif dropped is not None and is_storable(v):
            dropped.append(f"{prefix}{key}")
    out = []
    for field, ex in zip(example._fields, example):
        v = given.get(field)
        if is_namedtuple(ex):
            if v is not None and not isinstance(v, Mapping) and dropped is not None:
                dropped.append(f"{prefix}{field}")
            out.append(_to_nt(v if isinstance(v, Mapping) else {}, ex, dropped,
                              f"{prefix}{field}."))
            continue
        leaf = None if v is None else info_leaf(v)
        if leaf is not None and np.shape(leaf) == np.shape(ex):
            out.append(np.array(leaf, dtype=ex.dtype)[()])
        else:
            if v is not None and dropped is not None:
                dropped.append(f"{prefix}{field}")
            out.append(_zeros_like(ex))
    return type(example)(*out)
