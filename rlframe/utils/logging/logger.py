"""Process-wide experiment logger: text lines, a tabular row per iteration, snapshots.

All state lives at module level, so every component logs with
``from rlframe.utils.logging import logger`` and ``logger.log(...)`` without
passing a logger object around. ``logger_context`` (``context.py``) attaches
the run directory's outputs; outside of it, text goes to stdout only.

Per training iteration the runner typically does::

    logger.record_tabular("Iteration", itr)
    logger.record_tabular_misc_stat("Return", returns)   # ReturnAverage, ReturnStd, ...
    logger.dump_tabular(with_prefix=False)               # table to stdout, row to progress.csv
    logger.save_itr_params(itr, snapshot_dict)           # honours the snapshot mode

Tabular values may be Python numbers, strings, ``None``, numpy scalars or
one-element arrays/tensors (converted with ``.item()``).
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import io
import math
import numbers
import os
import sys
import tempfile
from typing import IO, Any, Iterator

import numpy as np
import torch

SNAPSHOT_MODES = ("all", "last", "gap", "last+gap", "none")

_COLOR_CODES = {
    "gray": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34,
    "magenta": 35, "cyan": 36, "white": 37, "crimson": 38,
}

_prefixes: list[str] = []
_prefix_str: str = ""
_tabular_prefixes: list[str] = []
_tabular_prefix_str: str = ""

# Pending tabular row: (key with tabular prefix, value) in recording order.
_tabular: list[tuple[str, Any]] = []

# Outputs are keyed by absolute path.
_text_fds: dict[str, IO[str]] = {}
_tabular_fds: dict[str, IO[str]] = {}
_tabular_fds_held: dict[str, IO[str]] = {}
_tabular_fieldnames: dict[str, list[str]] = {}

_snapshot_dir: str | None = None
_snapshot_mode: str = "all"
_snapshot_gap: int = 1

_log_tabular_only: bool = False
_disable_prefix: bool = False
_disabled: bool = False
_tabular_disabled: bool = False

_tf_summary_writer: Any = None
_tf_summary_dir: str | None = None
_iteration: int = 0


# ----------------------------------------------------------------------------- text

def _colorize(text: str, color: str) -> str:
    if color not in _COLOR_CODES:
        raise ValueError(f"color must be one of {sorted(_COLOR_CODES)} or None, got {color!r}.")
    return f"\x1b[{_COLOR_CODES[color]}m{text}\x1b[0m"


def log(s: Any, with_prefix: bool = True, with_timestamp: bool = True,
        color: str | None = None) -> None:
    """Print a line to stdout and append it to every text output (e.g. ``debug.log``).

    The line reads ``"<YYYY-mm-dd HH:MM:SS.ffffff> | <prefix><s>"`` (local time).
    Nothing is written while the logger is disabled or in tabular-only mode.

    Args:
        s: message; non-strings are converted with ``str``.
        with_prefix: prepend the prefixes pushed with ``push_prefix``.
        with_timestamp: prepend the timestamp.
        color: colour for a terminal stdout (``"green"``, ``"red"``, ...); files stay plain.
    """
    if _disabled or _log_tabular_only:
        return
    line = str(s)
    if with_prefix and not _disable_prefix:
        line = _prefix_str + line
    if with_timestamp:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        line = f"{stamp} | {line}"
    stdout_line = line
    if color is not None:
        colored = _colorize(line, color)  # validates the name even when not a terminal
        if _is_terminal(sys.stdout):
            stdout_line = colored
    print(stdout_line, flush=True)
    for fd in _text_fds.values():
        fd.write(line + "\n")
        fd.flush()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def push_prefix(prefix: str) -> None:
    """Add ``prefix`` to the text written before every ``log`` line."""
    global _prefix_str
    _prefixes.append(str(prefix))
    _prefix_str = "".join(_prefixes)


def pop_prefix() -> None:
    """Remove the most recently pushed text prefix (no-op when none is left)."""
    global _prefix_str
    if _prefixes:
        _prefixes.pop()
    _prefix_str = "".join(_prefixes)


@contextlib.contextmanager
def prefix(key: str) -> Iterator[None]:
    """Context manager: ``push_prefix(key)`` on entry, ``pop_prefix()`` on exit."""
    push_prefix(key)
    try:
        yield
    finally:
        pop_prefix()


def push_tabular_prefix(key: str) -> None:
    """Add ``key`` to the text prepended to every recorded tabular key."""
    global _tabular_prefix_str
    _tabular_prefixes.append(str(key))
    _tabular_prefix_str = "".join(_tabular_prefixes)


def pop_tabular_prefix() -> None:
    """Remove the most recently pushed tabular prefix (no-op when none is left)."""
    global _tabular_prefix_str
    if _tabular_prefixes:
        _tabular_prefixes.pop()
    _tabular_prefix_str = "".join(_tabular_prefixes)


@contextlib.contextmanager
def tabular_prefix(key: str) -> Iterator[None]:
    """Context manager: ``push_tabular_prefix(key)`` on entry, pop on exit."""
    push_tabular_prefix(key)
    try:
        yield
    finally:
        pop_tabular_prefix()


# ----------------------------------------------------------------------------- outputs

def _open_output(file_name: str, mode: str) -> IO[str]:
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return open(file_name, mode, newline="", encoding="utf-8")


def add_text_output(file_name: str) -> None:
    """Append every ``log`` line to ``file_name`` (opened in append mode)."""
    path = os.path.abspath(file_name)
    if path not in _text_fds:
        _text_fds[path] = _open_output(path, "a")


def remove_text_output(file_name: str) -> None:
    """Stop writing ``log`` lines to ``file_name`` and close it (no-op if unknown)."""
    fd = _text_fds.pop(os.path.abspath(file_name), None)
    if fd is not None:
        fd.close()


def add_tabular_output(file_name: str) -> None:
    """Write every dumped tabular row to the CSV file ``file_name``.

    A new output truncates the file. A file put on hold with
    ``hold_tabular_output`` is resumed where it stopped instead.
    """
    path = os.path.abspath(file_name)
    if path in _tabular_fds:
        return
    held = _tabular_fds_held.pop(path, None)
    if held is not None:
        _tabular_fds[path] = held
        return
    _tabular_fds[path] = _open_output(path, "w")
    _tabular_fieldnames.pop(path, None)


def remove_tabular_output(file_name: str) -> None:
    """Stop writing rows to ``file_name`` and close it, whether active or held."""
    path = os.path.abspath(file_name)
    for table in (_tabular_fds, _tabular_fds_held):
        fd = table.pop(path, None)
        if fd is not None:
            fd.close()
    _tabular_fieldnames.pop(path, None)


def hold_tabular_output(file_name: str) -> None:
    """Pause writing rows to ``file_name`` but keep it open; ``add_tabular_output`` resumes."""
    path = os.path.abspath(file_name)
    fd = _tabular_fds.pop(path, None)
    if fd is not None:
        _tabular_fds_held[path] = fd


def flush_all() -> None:
    """Flush every open text and tabular output and the summary writer."""
    for fd in (*_text_fds.values(), *_tabular_fds.values(), *_tabular_fds_held.values()):
        fd.flush()
    if _tf_summary_writer is not None:
        _tf_summary_writer.flush()


# ----------------------------------------------------------------------------- tabular

def _as_scalar(key: str, val: Any) -> Any:
    """Plain Python scalar for ``val``; multi-element arrays are an error."""
    if isinstance(val, torch.Tensor):
        if val.numel() != 1:
            raise ValueError(f"record_tabular(key={key!r}) needs a scalar value, got a tensor "
                             f"of shape {tuple(val.shape)}; use record_tabular_misc_stat "
                             "for many values.")
        return val.detach().cpu().item()
    if isinstance(val, np.ndarray):
        if val.size != 1:
            raise ValueError(f"record_tabular(key={key!r}) needs a scalar value, got an array "
                             f"of shape {val.shape}; use record_tabular_misc_stat "
                             "for many values.")
        return val.item()
    if isinstance(val, np.generic):
        return val.item()
    return val


def record_tabular(key: str, val: Any) -> None:
    """Add ``key: val`` to the pending tabular row (the tabular prefix is prepended).

    With a summary writer set, numeric values are also sent as scalars at the
    iteration given to ``set_iteration``.

    Args:
        key: column name.
        val: a number, string, bool, ``None``, numpy scalar or one-element array/tensor.
    """
    full_key = _tabular_prefix_str + str(key)
    val = _as_scalar(full_key, val)
    _tabular.append((full_key, val))
    if (_tf_summary_writer is not None and isinstance(val, numbers.Real)):
        _tf_summary_writer.add_scalar(full_key, float(val), _iteration)


def record_tabular_misc_stat(key: str, values: Any, placement: str = "back") -> None:
    """Record Average, Std (population), Median, Min and Max of ``values``.

    Columns are ``<key>Average`` ... (``placement="back"``, or ``key/Average``
    when a summary writer is set) or ``Average<key>`` ... (``placement="front"``).
    Empty ``values`` record NaN in all five.

    Args:
        key: base name of the five columns.
        values: list, numpy array or tensor of numbers (flattened).
        placement: ``"back"`` or ``"front"``: where the statistic name goes.
    """
    if placement not in ("back", "front"):
        raise ValueError(f"placement must be 'back' or 'front', got {placement!r}.")
    if isinstance(values, torch.Tensor):
        array = values.detach().cpu().numpy()
    elif isinstance(values, np.ndarray):
        array = values
    else:  # list, tuple, deque, generator; items may be one-element tensors
        array = np.asarray([v.item() if isinstance(v, torch.Tensor) else v for v in values])
    array = array.astype(np.float64).ravel()
    stats = {"Average": np.nan, "Std": np.nan, "Median": np.nan, "Min": np.nan, "Max": np.nan}
    if array.size > 0:
        stats = {"Average": np.mean(array), "Std": np.std(array), "Median": np.median(array),
                 "Min": np.min(array), "Max": np.max(array)}
    for stat_name, stat in stats.items():
        if placement == "front":
            name = stat_name + key
        elif _tf_summary_writer is not None:
            name = f"{key}/{stat_name}"
        else:
            name = key + stat_name
        record_tabular(name, float(stat))


def _format_cell(val: Any) -> str:
    if isinstance(val, float) and not isinstance(val, bool):
        return f"{val:.6g}"
    return str(val)


def _format_table(rows: list[tuple[str, Any]]) -> list[str]:
    """Two aligned columns (key left, value right) framed by dashed rules."""
    keys = [key for key, _ in rows]
    cells = [_format_cell(val) for _, val in rows]
    key_width = max(len(k) for k in keys)
    val_width = max(len(c) for c in cells)
    rule = "-" * key_width + "  " + "-" * val_width
    lines = [rule]
    lines += [f"{k:<{key_width}}  {c:>{val_width}}" for k, c in zip(keys, cells)]
    lines.append(rule)
    return lines


def _csv_cell(val: Any) -> Any:
    if isinstance(val, float) and math.isnan(val):
        return "nan"
    return val


def _rewrite_with_fieldnames(path: str, fieldnames: list[str]) -> IO[str]:
    """Rewrite a CSV output under a wider header; returns the reopened append handle."""
    _tabular_fds[path].close()
    tmp_path = None
    try:
        with open(path, "r", newline="", encoding="utf-8") as f:
            old_rows = list(csv.DictReader(f))
        fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".progress-",
                                        suffix=".tmp")
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames, restval="nan")
            writer.writeheader()
            writer.writerows(old_rows)
        os.replace(tmp_path, path)  # readers never see a half-written file
    except BaseException:
        if tmp_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
        raise
    finally:
        _tabular_fds[path] = open(path, "a", newline="", encoding="utf-8")
    return _tabular_fds[path]


def dump_tabular(*args: Any, **kwargs: Any) -> None:
    """Print the pending row as a table and append it to every tabular output.

    The first row of an output writes its header. When a later row brings new
    keys, the file is rewritten with the union of keys (existing columns keep
    their order, new ones are appended); cells a row lacks are ``nan``.
    The pending row is then cleared.

    Args:
        *args, **kwargs: passed to ``log`` for each table line (e.g.
            ``with_prefix=False``), except ``write_header``: ``True`` writes the
            header before this row again, ``False`` never writes it.
    """
    write_header = kwargs.pop("write_header", None)
    if not _tabular:
        return
    try:
        if _disabled:
            return
        lines = _format_table(_tabular)
        if _log_tabular_only:
            print("\n".join(lines), flush=True)
        else:
            for line in lines:
                log(line, *args, **kwargs)
        if _tabular_disabled:
            return
        row: dict[str, Any] = {}
        for key, val in _tabular:
            row[key] = _csv_cell(val)
        for path in list(_tabular_fds):
            _write_row(path, row, write_header)
        if _tf_summary_writer is not None:
            _tf_summary_writer.flush()
    finally:
        _tabular.clear()


def _write_row(path: str, row: dict[str, Any], write_header: bool | None) -> None:
    fd = _tabular_fds[path]
    fieldnames = _tabular_fieldnames.get(path)
    first_row = fieldnames is None
    if first_row:
        fieldnames = list(row)
    else:
        new_keys = [k for k in row if k not in fieldnames]
        if new_keys:
            fieldnames = fieldnames + new_keys
            fd = _rewrite_with_fieldnames(path, fieldnames)
    _tabular_fieldnames[path] = fieldnames
    writer = csv.DictWriter(fd, fieldnames=fieldnames, restval="nan")
    if write_header or (write_header is None and first_row):
        writer.writeheader()
    writer.writerow(row)
    fd.flush()


# ----------------------------------------------------------------------------- snapshots

def set_snapshot_dir(dir_name: str | None) -> None:
    """Directory that ``save_itr_params`` writes to (``None``: no snapshots)."""
    global _snapshot_dir
    _snapshot_dir = None if dir_name is None else os.path.abspath(dir_name)


def get_snapshot_dir() -> str | None:
    """Current snapshot directory (the run directory inside ``logger_context``)."""
    return _snapshot_dir


def _check_snapshot_mode(mode: Any) -> str:
    if mode not in SNAPSHOT_MODES:
        raise ValueError(f"snapshot_mode must be one of {list(SNAPSHOT_MODES)}, got {mode!r}.")
    return mode


def set_snapshot_mode(mode: str) -> None:
    """Which iterations ``save_itr_params`` keeps: one of ``SNAPSHOT_MODES``.

    ``"all"``: ``itr_<N>.pkl`` every call; ``"last"``: overwrite ``params.pkl``;
    ``"gap"``: ``itr_<N>.pkl`` when ``N == 0`` or ``(N + 1) % gap == 0``;
    ``"last+gap"``: both; ``"none"``: nothing.
    """
    global _snapshot_mode
    _snapshot_mode = _check_snapshot_mode(mode)


def get_snapshot_mode() -> str:
    """Current snapshot mode (``"all"`` until set; ``logger_context`` sets ``"none"`` by default)."""
    return _snapshot_mode


def set_snapshot_gap(gap: int) -> None:
    """Iteration gap used by the ``"gap"`` and ``"last+gap"`` modes (a positive integer)."""
    global _snapshot_gap
    if isinstance(gap, bool) or not isinstance(gap, numbers.Integral) or gap < 1:
        raise ValueError(f"snapshot gap must be a positive integer, got {gap!r}.")
    _snapshot_gap = int(gap)


def get_snapshot_gap() -> int:
    """Current snapshot gap (default 1)."""
    return _snapshot_gap


def _atomic_write_bytes(path: str, payload: bytes) -> None:
    fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(path),
                                    prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


def save_itr_params(itr: int, params: Any) -> None:
    """Save ``params`` with ``torch.save`` according to the snapshot mode.

    Nothing happens without a snapshot directory. Each file is written to a
    temporary name and renamed, so a crash never leaves a truncated snapshot.
    Keep ``params`` to tensors, numbers, strings, lists and dicts so that
    ``torch.load(path, weights_only=True)`` reads it.

    Args:
        itr: iteration number, used in ``itr_<itr>.pkl`` and by the ``"gap"`` rule.
        params: the snapshot, e.g. ``dict(itr=..., agent_state_dict=...)``.
    """
    mode = _check_snapshot_mode(_snapshot_mode)
    if _snapshot_dir is None or mode == "none":
        return
    names = []
    if mode == "all":
        names.append(f"itr_{itr}.pkl")
    if mode in ("last", "last+gap"):
        names.append("params.pkl")
    if mode in ("gap", "last+gap") and (itr == 0 or (itr + 1) % _snapshot_gap == 0):
        names.append(f"itr_{itr}.pkl")
    if not names:
        return
    buffer = io.BytesIO()
    torch.save(params, buffer)  # serialise once, before touching any file
    payload = buffer.getvalue()
    os.makedirs(_snapshot_dir, exist_ok=True)
    for name in names:
        _atomic_write_bytes(os.path.join(_snapshot_dir, name), payload)


# ----------------------------------------------------------------------------- switches

def set_iteration(itr: int) -> None:
    """Step attached to summary-writer scalars recorded from now on."""
    global _iteration
    _iteration = int(itr)


def set_log_tabular_only(log_tabular_only: bool) -> None:
    """When ``True``, ``log`` writes nothing and only tables are printed."""
    global _log_tabular_only
    _log_tabular_only = bool(log_tabular_only)


def get_log_tabular_only() -> bool:
    """Whether the logger is in tabular-only mode."""
    return _log_tabular_only


def set_disable_prefix(disable_prefix: bool) -> None:
    """When ``True``, ``log`` ignores the pushed prefixes."""
    global _disable_prefix
    _disable_prefix = bool(disable_prefix)


def disable() -> None:
    """Silence ``log`` and ``dump_tabular`` entirely (pending rows are discarded)."""
    global _disabled
    _disabled = True


def enable() -> None:
    """Undo ``disable``."""
    global _disabled
    _disabled = False


def disable_tabular() -> None:
    """Keep printing tables but stop writing rows to the tabular outputs."""
    global _tabular_disabled
    _tabular_disabled = True


def enable_tabular() -> None:
    """Undo ``disable_tabular``."""
    global _tabular_disabled
    _tabular_disabled = False


def set_tf_summary_writer(writer: Any) -> None:
    """TensorBoard ``SummaryWriter`` that also receives every numeric tabular value."""
    global _tf_summary_writer
    _tf_summary_writer = writer


def get_tf_summary_writer() -> Any:
    """The summary writer, or ``None``."""
    return _tf_summary_writer


def set_tf_summary_dir(dir_name: str | None) -> None:
    """Remember the summary writer's directory (informational)."""
    global _tf_summary_dir
    _tf_summary_dir = dir_name


def get_tf_summary_dir() -> str | None:
    """The directory given to ``set_tf_summary_dir``, or ``None``."""
    return _tf_summary_dir
