"""Experiment logger: text lines, a tabular row per iteration, snapshots.

Each run logs through its own ``Logger``, which holds everything a run
configures: text and tabular prefixes, the pending tabular row, the open
outputs, the snapshot directory, mode and gap, the switches and the summary
writer. The module functions (``log``, ``record_tabular``, ``prefix``,
``save_itr_params``, ...) keep rlpyt's names and act on the *current* logger,
so every component logs with ``from rlframe.utils.logging import logger`` and
``logger.log(...)`` without passing a logger object around.

``logger_context`` (``context.py``) makes a fresh ``Logger`` current for the
duration of its ``with`` block and restores the previous one on exit, also
after an exception, so nothing of one run reaches the next run in the same
process. Outside of any run the current logger is a process-wide default that
writes text to stdout only. ``use_logger`` makes any ``Logger`` current for a
block. The current logger is per process, not per thread (forked worker
processes inherit it): run one ``logger_context`` at a time in a process.

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
import types
from typing import IO, Any, Iterator, Mapping

import numpy as np
import torch

from rlframe.utils.checkpoint import write_error
from rlframe.utils.files import atomic_write_bytes

SNAPSHOT_MODES = ("all", "last", "gap", "last+gap", "none")

_COLOR_CODES: Mapping[str, int] = types.MappingProxyType({
    "gray": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34,
    "magenta": 35, "cyan": 36, "white": 37, "crimson": 38,
})


# ----------------------------------------------------------------------------- helpers

def _colorize(text: str, color: str) -> str:
    if color not in _COLOR_CODES:
        raise ValueError(f"color must be one of {sorted(_COLOR_CODES)} or None, got {color!r}.")
    return f"\x1b[{_COLOR_CODES[color]}m{text}\x1b[0m"


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _open_output(file_name: str, mode: str) -> IO[str]:
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return open(file_name, mode, newline="", encoding="utf-8")


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


def _check_snapshot_mode(mode: Any) -> str:
    if mode not in SNAPSHOT_MODES:
        raise ValueError(f"snapshot_mode must be one of {list(SNAPSHOT_MODES)}, got {mode!r}.")
    return mode


# ----------------------------------------------------------------------------- Logger

class Logger:
    """The logging state of one run: prefixes, pending row, outputs, snapshots, switches.

    A new logger prints text to stdout only, has no tabular outputs, no
    snapshot directory, snapshot mode ``"all"`` and gap 1. ``logger_context``
    creates one per run; the module functions act on ``current_logger()``.
    """

    def __init__(self) -> None:
        self._prefixes: list[str] = []
        self._tabular_prefixes: list[str] = []
        # Pending tabular row: (key with tabular prefix, value) in recording order.
        self._pending: list[tuple[str, Any]] = []
        # Outputs are keyed by absolute path.
        self._text_fds: dict[str, IO[str]] = {}
        self._tabular_fds: dict[str, IO[str]] = {}
        self._tabular_fds_held: dict[str, IO[str]] = {}
        self._tabular_fieldnames: dict[str, list[str]] = {}
        self._snapshot_dir: str | None = None
        self._resume_snapshot: str | None = None
        self._snapshot_mode: str = "all"
        self._snapshot_gap: int = 1
        self._log_tabular_only: bool = False
        self._disable_prefix: bool = False
        self._disabled: bool = False
        self._tabular_disabled: bool = False
        self._tf_summary_writer: Any = None
        self._tf_summary_dir: str | None = None
        self._iteration: int = 0

    # ------------------------------------------------------------------------- text

    def log(self, s: Any, with_prefix: bool = True, with_timestamp: bool = True,
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
        if self._disabled or self._log_tabular_only:
            return
        line = str(s)
        if with_prefix and not self._disable_prefix:
            line = "".join(self._prefixes) + line
        if with_timestamp:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
            line = f"{stamp} | {line}"
        stdout_line = line
        if color is not None:
            colored = _colorize(line, color)  # validates the name even when not a terminal
            if _is_terminal(sys.stdout):
                stdout_line = colored
        print(stdout_line, flush=True)
        for fd in self._text_fds.values():
            fd.write(line + "\n")
            fd.flush()

    def push_prefix(self, prefix: str) -> None:
        """Add ``prefix`` to the text written before every ``log`` line."""
        self._prefixes.append(str(prefix))

    def pop_prefix(self) -> None:
        """Remove the most recently pushed text prefix (no-op when none is left)."""
        if self._prefixes:
            self._prefixes.pop()

    @contextlib.contextmanager
    def prefix(self, key: str) -> Iterator[None]:
        """Context manager: ``push_prefix(key)`` on entry, ``pop_prefix()`` on exit."""
        self.push_prefix(key)
        try:
            yield
        finally:
            self.pop_prefix()

    def push_tabular_prefix(self, key: str) -> None:
        """Add ``key`` to the text prepended to every recorded tabular key."""
        self._tabular_prefixes.append(str(key))

    def pop_tabular_prefix(self) -> None:
        """Remove the most recently pushed tabular prefix (no-op when none is left)."""
        if self._tabular_prefixes:
            self._tabular_prefixes.pop()

    @contextlib.contextmanager
    def tabular_prefix(self, key: str) -> Iterator[None]:
        """Context manager: ``push_tabular_prefix(key)`` on entry, pop on exit."""
        self.push_tabular_prefix(key)
        try:
            yield
        finally:
            self.pop_tabular_prefix()

    # ------------------------------------------------------------------------- outputs

    def add_text_output(self, file_name: str) -> None:
        """Append every ``log`` line to ``file_name`` (opened in append mode)."""
        path = os.path.abspath(file_name)
        if path not in self._text_fds:
            self._text_fds[path] = _open_output(path, "a")

    def remove_text_output(self, file_name: str) -> None:
        """Stop writing ``log`` lines to ``file_name`` and close it (no-op if unknown)."""
        fd = self._text_fds.pop(os.path.abspath(file_name), None)
        if fd is not None:
            fd.close()

    def add_tabular_output(self, file_name: str, append: bool = False) -> None:
        """Write every dumped tabular row to the CSV file ``file_name``.

        A new output truncates the file, or with ``append`` (a resumed run) adds rows
        under the header the file already has. A file put on hold with
        ``hold_tabular_output`` is resumed where it stopped instead.
        """
        path = os.path.abspath(file_name)
        if path in self._tabular_fds:
            return
        held = self._tabular_fds_held.pop(path, None)
        if held is not None:
            self._tabular_fds[path] = held
            return
        fieldnames = None
        if append and os.path.exists(path):
            with open(path, "r", newline="", encoding="utf-8") as f:
                fieldnames = next(csv.reader(f), None)
        self._tabular_fds[path] = _open_output(path, "a" if fieldnames else "w")
        if fieldnames:
            self._tabular_fieldnames[path] = fieldnames
        else:
            self._tabular_fieldnames.pop(path, None)

    def remove_tabular_output(self, file_name: str) -> None:
        """Stop writing rows to ``file_name`` and close it, whether active or held."""
        path = os.path.abspath(file_name)
        for table in (self._tabular_fds, self._tabular_fds_held):
            fd = table.pop(path, None)
            if fd is not None:
                fd.close()
        self._tabular_fieldnames.pop(path, None)

    def hold_tabular_output(self, file_name: str) -> None:
        """Pause writing rows to ``file_name`` but keep it open; ``add_tabular_output`` resumes."""
        path = os.path.abspath(file_name)
        fd = self._tabular_fds.pop(path, None)
        if fd is not None:
            self._tabular_fds_held[path] = fd

    def flush_all(self) -> None:
        """Flush every open text and tabular output and the summary writer."""
        for fd in (*self._text_fds.values(), *self._tabular_fds.values(),
                   *self._tabular_fds_held.values()):
            fd.flush()
        if self._tf_summary_writer is not None:
            self._tf_summary_writer.flush()

    def close(self) -> None:
        """Close every text and tabular output and the summary writer, and detach them.

        The logger stays usable afterwards and prints to stdout only.
        """
        outputs = [*self._text_fds.values(), *self._tabular_fds.values(),
                   *self._tabular_fds_held.values()]
        writer = self._tf_summary_writer
        self._text_fds.clear()
        self._tabular_fds.clear()
        self._tabular_fds_held.clear()
        self._tabular_fieldnames.clear()
        self._tf_summary_writer = None
        self._tf_summary_dir = None
        # Detach first: a failing close must not leave the logger writing to a closed file.
        with contextlib.ExitStack() as closing:
            for fd in outputs:
                closing.callback(fd.close)
            if writer is not None:
                closing.callback(writer.close)

    # ------------------------------------------------------------------------- tabular

    def record_tabular(self, key: str, val: Any) -> None:
        """Add ``key: val`` to the pending tabular row (the tabular prefix is prepended).

        With a summary writer set, numeric values are also sent as scalars at the
        iteration given to ``set_iteration``.

        Args:
            key: column name.
            val: a number, string, bool, ``None``, numpy scalar or one-element array/tensor.
        """
        full_key = "".join(self._tabular_prefixes) + str(key)
        val = _as_scalar(full_key, val)
        self._pending.append((full_key, val))
        if self._tf_summary_writer is not None and isinstance(val, numbers.Real):
            self._tf_summary_writer.add_scalar(full_key, float(val), self._iteration)

    def record_tabular_misc_stat(self, key: str, values: Any, placement: str = "back") -> None:
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
        stats = {"Average": np.nan, "Std": np.nan, "Median": np.nan, "Min": np.nan,
                 "Max": np.nan}
        if array.size > 0:
            stats = {"Average": np.mean(array), "Std": np.std(array),
                     "Median": np.median(array), "Min": np.min(array), "Max": np.max(array)}
        for stat_name, stat in stats.items():
            if placement == "front":
                name = stat_name + key
            elif self._tf_summary_writer is not None:
                name = f"{key}/{stat_name}"
            else:
                name = key + stat_name
            self.record_tabular(name, float(stat))

    def dump_tabular(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Print the pending row as a table and append it to every tabular output.

        The first row of an output writes its header. When a later row brings new
        keys, the file is rewritten with the union of keys (existing columns keep
        their order, new ones are appended); cells a row lacks are ``nan``.
        The pending row is then cleared.

        Args:
            *args, **kwargs: passed to ``log`` for each table line (e.g.
                ``with_prefix=False``), except ``write_header``: ``True`` writes the
                header before this row again, ``False`` never writes it.

        Returns:
            The row, keyed like the CSV columns, values as recorded (empty when
            nothing was pending).
        """
        write_header = kwargs.pop("write_header", None)
        row: dict[str, Any] = dict(self._pending)
        if not self._pending:
            return row
        try:
            if self._disabled:
                return row
            lines = _format_table(self._pending)
            if self._log_tabular_only:
                print("\n".join(lines), flush=True)
            else:
                for line in lines:
                    self.log(line, *args, **kwargs)
            if self._tabular_disabled:
                return row
            csv_row = {key: _csv_cell(val) for key, val in row.items()}
            for path in list(self._tabular_fds):
                try:
                    self._write_row(path, csv_row, write_header)
                except OSError as error:  # e.g. a full disk: say which file
                    raise write_error(path, error, kept="the rows written before are "
                                      "kept; a resumed run cuts off a half-written "
                                      "one") from error
            if self._tf_summary_writer is not None:
                self._tf_summary_writer.flush()
        finally:
            self._pending.clear()
        return row

    def _write_row(self, path: str, row: dict[str, Any], write_header: bool | None) -> None:
        fd = self._tabular_fds[path]
        fieldnames = self._tabular_fieldnames.get(path)
        first_row = fieldnames is None
        if first_row:
            fieldnames = list(row)
        else:
            new_keys = [k for k in row if k not in fieldnames]
            if new_keys:
                fieldnames = fieldnames + new_keys
                fd = self._rewrite_with_fieldnames(path, fieldnames)
        self._tabular_fieldnames[path] = fieldnames
        writer = csv.DictWriter(fd, fieldnames=fieldnames, restval="nan")
        if write_header or (write_header is None and first_row):
            writer.writeheader()
        writer.writerow(row)
        fd.flush()

    def _rewrite_with_fieldnames(self, path: str, fieldnames: list[str]) -> IO[str]:
        """Rewrite a CSV output under a wider header; returns the reopened append handle."""
        self._tabular_fds[path].close()
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
            self._tabular_fds[path] = open(path, "a", newline="", encoding="utf-8")
        return self._tabular_fds[path]

    # ------------------------------------------------------------------------- snapshots

    def set_snapshot_dir(self, dir_name: str | None) -> None:
        """Directory that ``save_itr_params`` writes to (``None``: no snapshots)."""
        self._snapshot_dir = None if dir_name is None else os.path.abspath(dir_name)

    def set_resume_snapshot(self, path: str | None) -> None:
        """The snapshot a resumed run continues from (set by ``logger_context(resume=True)``;
        the runner reads it at startup)."""
        self._resume_snapshot = None if path is None else os.path.abspath(path)

    def get_resume_snapshot(self) -> str | None:
        """The snapshot to resume from, or None for a fresh run."""
        return self._resume_snapshot

    def get_snapshot_dir(self) -> str | None:
        """Snapshot directory (the run directory inside ``logger_context``)."""
        return self._snapshot_dir

    def set_snapshot_mode(self, mode: str) -> None:
        """Which iterations ``save_itr_params`` keeps: one of ``SNAPSHOT_MODES``.

        ``"all"``: ``itr_<N>.pkl`` every call; ``"last"``: overwrite ``params.pkl``;
        ``"gap"``: ``itr_<N>.pkl`` when ``N == 0`` or ``(N + 1) % gap == 0``;
        ``"last+gap"``: both; ``"none"``: nothing.
        """
        self._snapshot_mode = _check_snapshot_mode(mode)

    def get_snapshot_mode(self) -> str:
        """Snapshot mode (``"all"`` until set; ``logger_context`` sets ``"none"`` by default)."""
        return self._snapshot_mode

    def set_snapshot_gap(self, gap: int) -> None:
        """Iteration gap used by the ``"gap"`` and ``"last+gap"`` modes (a positive integer)."""
        if isinstance(gap, bool) or not isinstance(gap, numbers.Integral) or gap < 1:
            raise ValueError(f"snapshot gap must be a positive integer, got {gap!r}.")
        self._snapshot_gap = int(gap)

    def get_snapshot_gap(self) -> int:
        """Snapshot gap (default 1)."""
        return self._snapshot_gap

    def save_itr_params(self, itr: int, params: Any, final: bool = False) -> list[str]:
        """Save ``params`` with ``torch.save`` according to the snapshot mode.

        Nothing happens without a snapshot directory. Each file is written to a
        temporary name and renamed, so a crash never leaves a truncated snapshot.
        Keep ``params`` to tensors, numbers, strings, lists and dicts so that
        ``torch.load(path, weights_only=True)`` reads it.

        Args:
            itr: iteration number, used in ``itr_<itr>.pkl`` and by the ``"gap"`` rule.
            params: the snapshot, e.g. ``dict(itr=..., agent_state_dict=...)``.
            final: the last snapshot of a run that is ending: the ``"gap"`` modes
                write ``itr_<itr>.pkl`` whatever the gap.

        Returns:
            The names of the files written.

        Raises:
            OSError: naming the snapshot file that could not be written (e.g. the disk
                is full); the previous snapshot of that name is left intact.
        """
        mode = _check_snapshot_mode(self._snapshot_mode)
        if self._snapshot_dir is None or mode == "none":
            return []
        names = []
        if mode == "all":
            names.append(f"itr_{itr}.pkl")
        if mode in ("last", "last+gap"):
            names.append("params.pkl")
        on_gap = itr == 0 or (itr + 1) % self._snapshot_gap == 0
        if mode in ("gap", "last+gap") and (on_gap or final):
            names.append(f"itr_{itr}.pkl")
        if not names:
            return []
        buffer = io.BytesIO()
        torch.save(params, buffer)  # serialise once, before touching any file
        payload = buffer.getvalue()
        os.makedirs(self._snapshot_dir, exist_ok=True)
        for name in names:
            path = os.path.join(self._snapshot_dir, name)
            try:
                atomic_write_bytes(path, payload)
            except OSError as error:  # e.g. a full disk: say which file, keep the old one
                raise write_error(path, error) from error
        return names

    def writes_files(self) -> bool:
        """Whether anything of the run reaches a file (a text or tabular output, or a
        snapshot directory)."""
        return bool(self._text_fds or self._tabular_fds or self._snapshot_dir)

    # ------------------------------------------------------------------------- switches

    def set_iteration(self, itr: int) -> None:
        """Step attached to summary-writer scalars recorded from now on."""
        self._iteration = int(itr)

    def set_log_tabular_only(self, log_tabular_only: bool) -> None:
        """When ``True``, ``log`` writes nothing and only tables are printed."""
        self._log_tabular_only = bool(log_tabular_only)

    def get_log_tabular_only(self) -> bool:
        """Whether the logger is in tabular-only mode."""
        return self._log_tabular_only

    def set_disable_prefix(self, disable_prefix: bool) -> None:
        """When ``True``, ``log`` ignores the pushed prefixes."""
        self._disable_prefix = bool(disable_prefix)

    def disable(self) -> None:
        """Silence ``log`` and ``dump_tabular`` entirely (pending rows are discarded)."""
        self._disabled = True

    def enable(self) -> None:
        """Undo ``disable``."""
        self._disabled = False

    def disable_tabular(self) -> None:
        """Keep printing tables but stop writing rows to the tabular outputs."""
        self._tabular_disabled = True

    def enable_tabular(self) -> None:
        """Undo ``disable_tabular``."""
        self._tabular_disabled = False

    def set_tf_summary_writer(self, writer: Any) -> None:
        """TensorBoard ``SummaryWriter`` that also receives every numeric tabular value."""
        self._tf_summary_writer = writer

    def get_tf_summary_writer(self) -> Any:
        """The summary writer, or ``None``."""
        return self._tf_summary_writer

    def set_tf_summary_dir(self, dir_name: str | None) -> None:
        """Remember the summary writer's directory (informational)."""
        self._tf_summary_dir = dir_name

    def get_tf_summary_dir(self) -> str | None:
        """The directory given to ``set_tf_summary_dir``, or ``None``."""
        return self._tf_summary_dir


# ----------------------------------------------------------------------------- current logger

# The only module-level state: the loggers made current by ``use_logger``, innermost
# last, above the process-wide default at index 0.
_loggers: list[Logger] = [Logger()]


def current_logger() -> Logger:
    """The logger the module functions act on.

    Inside ``logger_context`` (or ``use_logger``) it is that block's logger;
    outside of any, the process-wide default, which writes to stdout only.
    """
    return _loggers[-1]


@contextlib.contextmanager
def use_logger(run_logger: Logger) -> Iterator[Logger]:
    """Make ``run_logger`` the current logger for the duration of the ``with`` block.

    On exit, also after an exception, the logger that was current on entry is
    current again. The logger's outputs are left open (see ``Logger.close``).

    Args:
        run_logger: the logger to make current.

    Yields:
        ``run_logger``.
    """
    if not isinstance(run_logger, Logger):
        raise TypeError(f"run_logger must be a Logger, got {type(run_logger).__name__}.")
    depth = len(_loggers)
    _loggers.append(run_logger)
    try:
        yield run_logger
    finally:
        # Truncating (rather than popping one) also drops loggers of inner blocks
        # that were entered but never exited, so the entry state is restored exactly.
        if len(_loggers) > depth and _loggers[depth] is run_logger:
            del _loggers[depth:]


# ----------------------------------------------------------------------------- module front
# rlpyt's module API: each function forwards to the current logger's method of the same name.

def log(s: Any, with_prefix: bool = True, with_timestamp: bool = True,
        color: str | None = None) -> None:
    """``Logger.log`` on the current logger: print a line and append it to the text outputs."""
    current_logger().log(s, with_prefix=with_prefix, with_timestamp=with_timestamp,
                         color=color)


def push_prefix(prefix: str) -> None:
    """``Logger.push_prefix`` on the current logger."""
    current_logger().push_prefix(prefix)


def pop_prefix() -> None:
    """``Logger.pop_prefix`` on the current logger."""
    current_logger().pop_prefix()


def prefix(key: str) -> contextlib.AbstractContextManager[None]:
    """``Logger.prefix`` on the current logger: push ``key`` for a ``with`` block."""
    # Bound now, so the pop reaches the same logger even if the current one changes inside.
    return current_logger().prefix(key)


def push_tabular_prefix(key: str) -> None:
    """``Logger.push_tabular_prefix`` on the current logger."""
    current_logger().push_tabular_prefix(key)


def pop_tabular_prefix() -> None:
    """``Logger.pop_tabular_prefix`` on the current logger."""
    current_logger().pop_tabular_prefix()


def tabular_prefix(key: str) -> contextlib.AbstractContextManager[None]:
    """``Logger.tabular_prefix`` on the current logger: push ``key`` for a ``with`` block."""
    return current_logger().tabular_prefix(key)


def add_text_output(file_name: str) -> None:
    """``Logger.add_text_output`` on the current logger."""
    current_logger().add_text_output(file_name)


def remove_text_output(file_name: str) -> None:
    """``Logger.remove_text_output`` on the current logger."""
    current_logger().remove_text_output(file_name)


def add_tabular_output(file_name: str, append: bool = False) -> None:
    """``Logger.add_tabular_output`` on the current logger."""
    current_logger().add_tabular_output(file_name, append=append)


def remove_tabular_output(file_name: str) -> None:
    """``Logger.remove_tabular_output`` on the current logger."""
    current_logger().remove_tabular_output(file_name)


def hold_tabular_output(file_name: str) -> None:
    """``Logger.hold_tabular_output`` on the current logger."""
    current_logger().hold_tabular_output(file_name)


def flush_all() -> None:
    """``Logger.flush_all`` on the current logger."""
    current_logger().flush_all()


def record_tabular(key: str, val: Any) -> None:
    """``Logger.record_tabular`` on the current logger: add ``key: val`` to the pending row."""
    current_logger().record_tabular(key, val)


def record_tabular_misc_stat(key: str, values: Any, placement: str = "back") -> None:
    """``Logger.record_tabular_misc_stat`` on the current logger."""
    current_logger().record_tabular_misc_stat(key, values, placement=placement)


def dump_tabular(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``Logger.dump_tabular`` on the current logger; returns the row it wrote."""
    return current_logger().dump_tabular(*args, **kwargs)


def set_snapshot_dir(dir_name: str | None) -> None:
    """``Logger.set_snapshot_dir`` on the current logger."""
    current_logger().set_snapshot_dir(dir_name)


def get_resume_snapshot() -> str | None:
    """``Logger.get_resume_snapshot`` of the current logger: the snapshot to resume from."""
    return current_logger().get_resume_snapshot()


def get_snapshot_dir() -> str | None:
    """``Logger.get_snapshot_dir`` on the current logger."""
    return current_logger().get_snapshot_dir()


def set_snapshot_mode(mode: str) -> None:
    """``Logger.set_snapshot_mode`` on the current logger."""
    current_logger().set_snapshot_mode(mode)


def get_snapshot_mode() -> str:
    """``Logger.get_snapshot_mode`` on the current logger."""
    return current_logger().get_snapshot_mode()


def set_snapshot_gap(gap: int) -> None:
    """``Logger.set_snapshot_gap`` on the current logger."""
    current_logger().set_snapshot_gap(gap)


def get_snapshot_gap() -> int:
    """``Logger.get_snapshot_gap`` on the current logger."""
    return current_logger().get_snapshot_gap()


def save_itr_params(itr: int, params: Any, final: bool = False) -> list[str]:
    """``Logger.save_itr_params`` on the current logger: snapshot per the snapshot mode."""
    return current_logger().save_itr_params(itr, params, final=final)


def writes_files() -> bool:
    """``Logger.writes_files`` of the current logger: False outside ``logger_context``."""
    return current_logger().writes_files()


def set_iteration(itr: int) -> None:
    """``Logger.set_iteration`` on the current logger."""
    current_logger().set_iteration(itr)


def set_log_tabular_only(log_tabular_only: bool) -> None:
    """``Logger.set_log_tabular_only`` on the current logger."""
    current_logger().set_log_tabular_only(log_tabular_only)


def get_log_tabular_only() -> bool:
    """``Logger.get_log_tabular_only`` on the current logger."""
    return current_logger().get_log_tabular_only()


def set_disable_prefix(disable_prefix: bool) -> None:
    """``Logger.set_disable_prefix`` on the current logger."""
    current_logger().set_disable_prefix(disable_prefix)


def disable() -> None:
    """``Logger.disable`` on the current logger."""
    current_logger().disable()


def enable() -> None:
    """``Logger.enable`` on the current logger."""
    current_logger().enable()


def disable_tabular() -> None:
    """``Logger.disable_tabular`` on the current logger."""
    current_logger().disable_tabular()


def enable_tabular() -> None:
    """``Logger.enable_tabular`` on the current logger."""
    current_logger().enable_tabular()


def set_tf_summary_writer(writer: Any) -> None:
    """``Logger.set_tf_summary_writer`` on the current logger."""
    current_logger().set_tf_summary_writer(writer)


def get_tf_summary_writer() -> Any:
    """``Logger.get_tf_summary_writer`` on the current logger."""
    return current_logger().get_tf_summary_writer()


def set_tf_summary_dir(dir_name: str | None) -> None:
    """``Logger.set_tf_summary_dir`` on the current logger."""
    current_logger().set_tf_summary_dir(dir_name)


def get_tf_summary_dir() -> str | None:
    """``Logger.get_tf_summary_dir`` on the current logger."""
    return current_logger().get_tf_summary_dir()
