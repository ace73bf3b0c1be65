"""A run's ``params.json``: writing its settings as JSON, and comparing them on resume.

``params.json`` holds ``log_params`` as JSON can hold them (``_jsonable``); when
some values could not be held, the whole dict is also pickled to
``log_params.pkl``. A resumed run must have been made with the same settings
(``check_same_params``). ``add_exp_param`` adds a key to the ``params.json`` files
of finished runs.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
from typing import Any

import numpy as np
import torch

from rlframe.utils.files import atomic_write_bytes, write_json_atomic
from rlframe.utils.logging.current import current_logger
from rlframe.utils.logging.run_logger import Logger


def _jsonable(value: Any, lossy: list | None = None) -> Any:
    """JSON-ready copy: containers kept, numpy/torch scalars and small arrays unwrapped,
    callables by their qualified name, other objects by a (shortened) repr.

    Args:
        value: the value to convert.
        lossy: when given, receives one entry per value that JSON could not hold.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (bool, int, float, str)) else k:
                _jsonable(v, lossy) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, lossy) for v in value]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if (isinstance(value, np.ndarray) and value.size <= _MAX_ARRAY_SIZE
            and value.dtype.kind in "biuf"):
        return value.tolist()
    if lossy is not None:
        lossy.append(value)
    if isinstance(value, type) or callable(value):
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if name is not None:
            kind = "class" if isinstance(value, type) else "function"
            return f"<{kind} {module}.{name}>" if module else f"<{kind} {name}>"
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[:_MAX_REPR - 3] + "..."


_MAX_ARRAY_SIZE = 1000  # Larger arrays are shortened to a repr in params.json.
_MAX_REPR = 300


def check_same_params(exp_dir: str, params_json: dict) -> None:
    """Check that the run in ``exp_dir`` was made with the settings ``params_json`` (as
    ``_jsonable`` gives them); a run without ``params.json`` passes.

    Raises:
        ValueError: naming the run directory and up to five settings that differ, or
            saying that its ``params.json`` cannot be read.
    """
    params_path = os.path.join(exp_dir, "params.json")
    if not os.path.exists(params_path):
        return
    saved = _read_params(params_path)
    now = json.loads(json.dumps(params_json))  # As params.json holds it.
    changed = sorted(k for k in set(saved) | set(now) if k != "run_ID"
                     and not _same_param(saved.get(k, "<absent>"), now.get(k, "<absent>")))
    if changed:
        details = "; ".join(f"{k}: {saved.get(k, '<absent>')!r} in the run, "
                            f"{now.get(k, '<absent>')!r} now" for k in changed[:5])
        raise ValueError(
            f"logger_context(resume=True): the run in {exp_dir} was made by a different "
            f"setting ({details}). Resume it with its own settings, or choose another "
            "run_ID for the new setting.")


def _read_params(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"logger_context(resume=True): {path} cannot be read as JSON "
                         f"({error}); the run's settings are unknown, so it is not "
                         "resumed.") from None
    if not isinstance(saved, dict):
        raise ValueError(f"logger_context(resume=True): {path} holds a JSON "
                         f"{type(saved).__name__}, not the object of a run's settings; it is "
                         "not resumed.")
    return saved


# A default repr's address (`<foo.Bar object at 0x7f...>`) differs between processes.
_ADDRESS = re.compile(r"(<[\w.]+ object) at 0x[0-9a-fA-F]+>")


def _same_param(saved: Any, now: Any) -> bool:
    """Whether a value of params.json and one of the resumed run's settings (both as
    JSON holds them) are the same: NaN equals NaN, default reprs compare by class."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return saved.keys() == now.keys() and all(_same_param(saved[k], now[k]) for k in saved)
    if isinstance(saved, list) and isinstance(now, list):
        return len(saved) == len(now) and all(map(_same_param, saved, now))
    if isinstance(saved, float) and isinstance(now, float) and math.isnan(saved):
        return math.isnan(now)
    if isinstance(saved, str) and isinstance(now, str):
        return _ADDRESS.sub(r"\1>", saved) == _ADDRESS.sub(r"\1>", now)
    return saved == now


def _pickle_params(exp_dir: str, log_params: dict, run_logger: Logger) -> None:
    """Keep ``log_params`` in full beside ``params.json``, which holds only reprs of
    values JSON cannot hold."""
    try:
        payload = pickle.dumps(log_params)
    except Exception as err:  # noqa: BLE001 - a lambda, an open file, ...: keep the reprs.
        run_logger.log(f"params.json holds reprs of values JSON cannot hold; they do not "
                       f"pickle either ({type(err).__name__}: {err}), so no log_params.pkl.")
        return
    atomic_write_bytes(os.path.join(exp_dir, "log_params.pkl"), payload)


def add_exp_param(param_name: str, param_val: object, exp_dir: str | None = None,
                  overwrite: bool = False) -> list[str]:
    """Add a key to every ``params.json`` found under ``exp_dir`` (recursively).

    An existing key is left alone unless ``overwrite``; when both the existing
    and the new value are dicts, missing sub-keys are added either way (and
    existing sub-keys replaced only with ``overwrite``).

    Args:
        param_name: key to add.
        param_val: value (JSON-converted like ``log_params``).
        exp_dir: directory to search; default the current working directory.
        overwrite: replace an existing value.

    Returns:
        Paths of the files that changed.
    """
    search_dir = os.getcwd() if exp_dir is None else exp_dir
    if not os.path.isdir(search_dir):
        raise ValueError(f"exp_dir must be an existing directory, got {search_dir!r}.")
    new_val = _jsonable(param_val)
    changed = []
    for dir_path, _, file_names in os.walk(search_dir):
        if "params.json" not in file_names:
            continue
        path = os.path.join(dir_path, "params.json")
        with open(path, "r", encoding="utf-8") as f:
            params = json.load(f)
        old_val = params.get(param_name)
        if isinstance(old_val, dict) and isinstance(new_val, dict):
            merged = dict(old_val)
            for key, val in new_val.items():
                if overwrite or key not in merged:
                    merged[key] = val
            if merged == old_val:
                continue
            params[param_name] = merged
        elif param_name in params and not overwrite:
            current_logger().log(f"{path}: keeping existing {param_name}={old_val!r} (overwrite=False).")
            continue
        else:
            params[param_name] = new_val
        write_json_atomic(path, params)
        changed.append(path)
    return changed


