"""Variants: grids of configuration changes, one log directory per combination.

A *variant* is a nested dict holding only the entries that differ from a
default config, e.g. ``{"algo": {"learning_rate": 1e-3}, "env": {"game": "pong"}}``.
:func:`make_variants` crosses :class:`VariantLevel` s into the full grid and
names a log directory for each combination; the launcher saves each variant
into its directory (:func:`save_variant`), and the training script reads it
back and applies it to its default config::

    variant = load_variant(log_dir)
    config = update_config(default_config, variant)
"""
from __future__ import annotations

import copy
import difflib
import json
import os
from collections import namedtuple
from typing import Any, Iterable

from rlframe.utils.files import write_json_atomic

__all__ = ["VARIANT", "VariantLevel", "make_variants", "save_variant", "load_variant",
           "update_config"]

VARIANT = "variant_config.json"  # The file a variant is saved to, inside its log directory.

VariantLevel = namedtuple("VariantLevel", ["keys", "values", "dir_names"])
VariantLevel.__doc__ = """One level of a variant grid: settings that change together.

    keys: key paths into the config, e.g. ``[("algo", "learning_rate"), ("sampler", "batch_B")]``.
    values: one tuple per combination, aligned with ``keys``, e.g. ``[(7e-4, 16), (1e-3, 32)]``.
    dir_names: one directory name per combination, e.g. ``["0.0007lr_16B", "0.001lr_32B"]``.
"""


def _key_path(key: Any) -> tuple:
    """A key path as a tuple; a bare string is a path of one key."""
    if isinstance(key, str):
        return (key,)
    path = tuple(key)
    if not path:
        raise ValueError("VariantLevel keys must be non-empty key paths such as "
                         "('algo', 'learning_rate'); got an empty one.")
    return path


def _path_str(path: Iterable[Any]) -> str:
    return ".".join(str(k) for k in path)


def _check_level(index: int, level: Any) -> tuple[list[tuple], list[tuple], list[str]]:
    """Validate one level; returns ``(key paths, value tuples, dir names)``."""
    try:
        keys, values, dir_names = level
    except (TypeError, ValueError):
        raise TypeError(f"variant level {index} must be a VariantLevel(keys, values, "
                        f"dir_names), got {level!r}.") from None
    key_paths = [_key_path(k) for k in keys]
    values = list(values)
    dir_names = [str(n) for n in dir_names]
    if len(values) != len(dir_names):
        raise ValueError(f"variant level {index} has {len(values)} value tuples but "
                         f"{len(dir_names)} dir_names; give one directory name per combination.")
    rows = []
    for i, row in enumerate(values):
        if not isinstance(row, (tuple, list)) or len(row) != len(key_paths):
            raise ValueError(
                f"variant level {index}: values[{i}]={row!r} must be a tuple with one value per "
                f"key ({len(key_paths)} keys: {[_path_str(p) for p in key_paths]}); for a single "
                "key write [(a,), (b,)], e.g. list(zip(values)).")
        rows.append(tuple(row))
    return key_paths, rows, dir_names


def _set_path(variant: dict, path: tuple, value: Any) -> None:
    """``variant[path[0]][path[1]]... = value``, creating dicts on the way."""
    node = variant
    for depth, key in enumerate(path[:-1]):
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise TypeError(f"variant key path {_path_str(path)!r}: "
                            f"{_path_str(path[:depth + 1])!r} already holds the value "
                            f"{node!r}, not a dict, so it cannot hold sub-keys.")
    node[path[-1]] = value


def make_variants(*variant_levels: VariantLevel) -> tuple[list[dict], list[str]]:
    """Cross variant levels into every combination.

    Each level is crossed with all combinations of the levels before it (earlier
    levels vary slowest), and each combination's log directory joins the
    directory names of its levels.

    Args:
        *variant_levels: :class:`VariantLevel` s.

    Returns:
        ``(variants, log_dirs)``: one nested dict and one relative path per
        combination, e.g. ``{"algo": {"learning_rate": 0.0007}, "env": {"game": "pong"}}``
        and ``"0.0007lr/pong"``.

    Raises:
        ValueError: two combinations get the same log directory ("Names must be
            unique."), or a level's values and dir_names do not line up.
        TypeError: a key path runs through a key that already holds a non-dict.
    """
    variants: list[dict] = [{}]
    log_dirs: list[str] = [""]
    for index, level in enumerate(variant_levels):
        key_paths, rows, dir_names = _check_level(index, level)
        new_variants: list[dict] = []
        new_log_dirs: list[str] = []
        seen: set[str] = set()
        for prev_variant, prev_log_dir in zip(variants, log_dirs):
            for row, name in zip(rows, dir_names):
                log_dir = os.path.join(prev_log_dir, name)
                if log_dir in seen:
                    raise ValueError(f"Names must be unique. The log directory {log_dir!r} "
                                     f"comes twice (variant level {index}, dir_names "
                                     f"{dir_names}).")
                variant = copy.deepcopy(prev_variant)
                for path, value in zip(key_paths, row):
                    _set_path(variant, path, value)
                new_variants.append(variant)
                new_log_dirs.append(log_dir)
                seen.add(log_dir)
        variants, log_dirs = new_variants, new_log_dirs
    return variants, log_dirs


def _find_unjsonable(value: Any, path: tuple = ()) -> tuple[tuple, str] | None:
    """``(key path, description)`` of the first entry JSON cannot hold, or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return path + (key,), f"the key {key!r} ({type(key).__name__}, not str)"
            found = _find_unjsonable(item, path + (key,))
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _find_unjsonable(item, path + (i,))
            if found is not None:
                return found
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    return path, f"the value {value!r} ({type(value).__name__})"


def save_variant(variant: dict, log_dir: str) -> str:
    """Write ``variant`` to ``<log_dir>/variant_config.json`` (the directory is created).

    Tuples are written as JSON lists, so they load back as lists.

    Returns:
        The file's path.

    Raises:
        TypeError: a value (or key) JSON cannot hold; the message names its key path.
    """
    if not isinstance(variant, dict):
        raise TypeError(f"variant must be a dict, got {type(variant).__name__}: {variant!r}.")
    bad = _find_unjsonable(variant)
    if bad is not None:
        path, what = bad
        raise TypeError(f"variant entry {_path_str(path)!r} holds {what}, which cannot be saved "
                        f"to {VARIANT}: variants hold JSON values only (numbers, strings, "
                        "booleans, None, lists, and dicts with string keys).")
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, VARIANT)
    write_json_atomic(path, variant)
    return path


def load_variant(log_dir: str) -> dict:
    """Read the variant saved in ``<log_dir>/variant_config.json``.

    Raises:
        FileNotFoundError: no variant file there (the message names the path).
    """
    path = os.path.join(log_dir, VARIANT)
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"No variant file {path}: the launcher (run_experiments) writes one into each "
            "variant's log directory; save_variant(variant, log_dir) writes one by hand."
        ) from None


def update_config(default: dict, variant: dict) -> dict:
    """Apply a variant to a default config; neither argument is changed.

    Returns a shallow copy of ``default`` in which every entry named by
    ``variant`` is replaced, recursing into sub-dicts (so a variant may change
    one key of a sub-dict and keep the others).

    Args:
        default: the complete config, e.g. ``dict(algo=dict(learning_rate=1e-3, ...), ...)``.
        variant: entries to change, nested like ``default``.

    Returns:
        The updated config.

    Raises:
        KeyError: a variant key is not in ``default`` (the message names the key path).
        TypeError: a dict in one of them meets a non-dict in the other.
    """
    if not isinstance(default, dict) or not isinstance(variant, dict):
        raise TypeError(f"update_config needs two dicts, got default: {type(default).__name__},"
                        f" variant: {type(variant).__name__}.")
    return _update(default, variant, ())


def _kind(value: Any) -> str:
    return "a dict" if isinstance(value, dict) else f"{type(value).__name__} {value!r}"


def _update(default: dict, variant: dict, path: tuple) -> dict:
    new = default.copy()
    for key, value in variant.items():
        key_path = path + (key,)
        if key not in new:
            close = difflib.get_close_matches(str(key), [str(k) for k in new], n=3)
            hint = f" Did you mean {close}?" if close else ""
            raise KeyError(f"variant key {_path_str(key_path)!r} is not in the default config "
                           f"(keys there: {sorted(map(str, new))}).{hint}")
        if isinstance(value, dict) != isinstance(new[key], dict):
            raise TypeError(f"variant key {_path_str(key_path)!r} holds {_kind(value)} but the "
                            f"default config holds {_kind(new[key])} there; a variant must "
                            "follow the default's nesting.")
        new[key] = _update(new[key], value, key_path) if isinstance(value, dict) else value
    return new
