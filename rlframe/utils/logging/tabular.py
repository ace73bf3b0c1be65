"""Tabular output of a run: the pending row, CSV files, the printed table, TensorBoard.

:class:`TabularOutput` collects ``record_tabular`` values into a pending row,
writes each dumped row to its CSV outputs (e.g. the run's ``progress.csv``;
when a row brings new keys the file is rewritten under the wider header) and
sends numeric values to a TensorBoard summary writer when one is set.
``_format_table`` lays a row out as the two-column table the logger prints.

Tabular values may be Python numbers, strings, ``None``, numpy scalars or
one-element arrays/tensors (converted with ``.item()``).
"""
from __future__ import annotations

import contextlib
import csv
import math
import numbers
import os
import tempfile
from typing import IO, Any, Iterable, Protocol, Union

import numpy as np
import torch

from rlframe.utils.checkpoint import write_error
from rlframe.utils.logging.text import _open_output

# A value ``record_tabular`` takes; arrays and tensors must hold one element.
TabularValue = Union[float, int, bool, str, None, np.generic, np.ndarray, torch.Tensor]
# The values ``record_tabular_misc_stat`` summarises.
TabularValues = Union[np.ndarray, torch.Tensor, Iterable[Union[float, int, np.generic,
                                                                torch.Tensor]]]


class SummaryWriterLike(Protocol):
    """What the logger uses of ``torch.utils.tensorboard.SummaryWriter``."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> object: ...

    def flush(self) -> object: ...

    def close(self) -> object: ...


def _as_scalar(key: str, val: TabularValue) -> Any:
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


def _format_cell(val: object) -> str:
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



def _csv_cell(val: object) -> object:
    if isinstance(val, float) and math.isnan(val):
        return "nan"
    return val


def summary_stats(values: TabularValues) -> dict[str, float]:
    """Average, Std (population), Median, Min and Max of ``values`` (flattened); all NaN
    for no values."""
    if isinstance(values, torch.Tensor):
        array = values.detach().cpu().numpy()
    elif isinstance(values, np.ndarray):
        array = values
    else:  # list, tuple, deque, generator; items may be one-element tensors
        array = np.asarray([v.item() if isinstance(v, torch.Tensor) else v for v in values])
    array = array.astype(np.float64).ravel()
    if array.size == 0:
        return dict.fromkeys(("Average", "Std", "Median", "Min", "Max"), math.nan)
    return {"Average": float(np.mean(array)), "Std": float(np.std(array)),
            "Median": float(np.median(array)), "Min": float(np.min(array)),
            "Max": float(np.max(array))}


class TabularOutput:
    """Tabular prefixes, the pending row, CSV outputs and the summary writer of one logger."""

    def __init__(self) -> None:
        self._prefixes: list[str] = []
        # Pending row: (key with tabular prefix, value) in recording order.
        self.pending: list[tuple[str, Any]] = []
        # Outputs are keyed by absolute path.
        self._fds: dict[str, IO[str]] = {}
        self._fds_held: dict[str, IO[str]] = {}
        self._fieldnames: dict[str, list[str]] = {}
        self.summary_writer: SummaryWriterLike | None = None
        self.summary_dir: str | None = None
        self.iteration = 0

    # ------------------------------------------------------------------------- recording

    def push_prefix(self, key: str) -> None:
        """Add ``key`` to the text prepended to every recorded key."""
        self._prefixes.append(str(key))

    def pop_prefix(self) -> None:
        """Remove the most recently pushed tabular prefix (no-op when none is left)."""
        if self._prefixes:
            self._prefixes.pop()

    def record(self, key: str, val: TabularValue) -> None:
        """Add ``key: val`` to the pending row (prefixed); numeric values also go to the
        summary writer at ``iteration``."""
        full_key = "".join(self._prefixes) + str(key)
        val = _as_scalar(full_key, val)
        self.pending.append((full_key, val))
        if self.summary_writer is not None and isinstance(val, numbers.Real):
            self.summary_writer.add_scalar(full_key, float(val), self.iteration)

    # ------------------------------------------------------------------------- outputs

    def add_output(self, file_name: str, append: bool = False) -> None:
        """Write every dumped row to the CSV file ``file_name`` (see ``Logger``)."""
        path = os.path.abspath(file_name)
        if path in self._fds:
            return
        held = self._fds_held.pop(path, None)
        if held is not None:
            self._fds[path] = held
            return
        fieldnames = None
        if append and os.path.exists(path):
            with open(path, "r", newline="", encoding="utf-8") as f:
                fieldnames = next(csv.reader(f), None)
        self._fds[path] = _open_output(path, "a" if fieldnames else "w")
        if fieldnames:
            self._fieldnames[path] = fieldnames
        else:
            self._fieldnames.pop(path, None)

    def remove_output(self, file_name: str) -> None:
        """Stop writing rows to ``file_name`` and close it, whether active or held."""
        path = os.path.abspath(file_name)
        for table in (self._fds, self._fds_held):
            fd = table.pop(path, None)
            if fd is not None:
                fd.close()
        self._fieldnames.pop(path, None)

    def hold_output(self, file_name: str) -> None:
        """Pause writing rows to ``file_name`` but keep it open; ``add_output`` resumes."""
        path = os.path.abspath(file_name)
        fd = self._fds.pop(path, None)
        if fd is not None:
            self._fds_held[path] = fd

    def has_outputs(self) -> bool:
        """Whether any CSV output is active (held ones do not count)."""
        return bool(self._fds)

    def flush(self) -> None:
        """Flush every CSV output, active or held, and the summary writer."""
        for fd in (*self._fds.values(), *self._fds_held.values()):
            fd.flush()
        if self.summary_writer is not None:
            self.summary_writer.flush()

    def detach(self) -> tuple[list[IO[str]], SummaryWriterLike | None]:
        """Forget every CSV output and the summary writer; return them, still open."""
        files = [*self._fds.values(), *self._fds_held.values()]
        writer = self.summary_writer
        self._fds.clear()
        self._fds_held.clear()
        self._fieldnames.clear()
        self.summary_writer = None
        self.summary_dir = None
        return files, writer

    # ------------------------------------------------------------------------- writing rows

    def write_row(self, row: dict[str, Any], write_header: bool | None) -> None:
        """Append ``row`` to every active CSV output and flush the summary writer.

        Args:
            row: the row, keyed by column.
            write_header: ``True`` writes the header before this row again, ``False``
                never writes it, ``None`` writes it before a file's first row.

        Raises:
            OSError: naming the CSV file that could not be written.
        """
        csv_row = {key: _csv_cell(val) for key, val in row.items()}
        for path in list(self._fds):
            try:
                self._write_row(path, csv_row, write_header)
            except OSError as error:  # e.g. a full disk: say which file
                raise write_error(path, error, kept="the rows written before are "
                                  "kept; a resumed run cuts off a half-written "
                                  "one") from error
        if self.summary_writer is not None:
            self.summary_writer.flush()

    def _write_row(self, path: str, row: dict[str, Any], write_header: bool | None) -> None:
        fd = self._fds[path]
        fieldnames = self._fieldnames.get(path)
        first_row = fieldnames is None
        if fieldnames is None:
            fieldnames = list(row)
        else:
            new_keys = [k for k in row if k not in fieldnames]
            if new_keys:
                fieldnames = fieldnames + new_keys
                fd = self._rewrite_with_fieldnames(path, fieldnames)
        self._fieldnames[path] = fieldnames
        writer = csv.DictWriter(fd, fieldnames=fieldnames, restval="nan")
        if write_header or (write_header is None and first_row):
            writer.writeheader()
        writer.writerow(row)
        fd.flush()

    def _rewrite_with_fieldnames(self, path: str, fieldnames: list[str]) -> IO[str]:
        """Rewrite a CSV output under a wider header; returns the reopened append handle."""
        self._fds[path].close()
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
            self._fds[path] = open(path, "a", newline="", encoding="utf-8")
        return self._fds[path]
