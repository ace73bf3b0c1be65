"""The ``Logger`` of one run: text output, tabular output and snapshots behind one object.

A ``Logger`` composes a :class:`~rlframe.utils.logging.text.TextOutput` (prefixes,
stdout and ``debug.log``), a :class:`~rlframe.utils.logging.tabular.TabularOutput`
(the pending row, ``progress.csv``, TensorBoard scalars) and a
:class:`~rlframe.utils.snapshot_files.SnapshotWriter` (snapshot directory, mode and
gap), and holds the switches that silence them. ``logger_context`` creates one per
run; a runner reaches it as ``runner.logger``; rlpyt's module functions
(``logger.log``, ...) act on the current one (:mod:`rlframe.utils.logging.current`).
"""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Iterator

from rlframe.utils.logging.tabular import (SummaryWriterLike, TabularOutput, TabularValue,
                                           TabularValues, _format_table, summary_stats)
from rlframe.utils.logging.text import TextOutput
from rlframe.utils.snapshot_files import SnapshotWriter

if TYPE_CHECKING:
    from rlframe.utils.logging.tracking import RunTracking


class Logger:
    """The logging state of one run: prefixes, pending row, outputs, snapshots, switches.

    A new logger prints text to stdout only, has no tabular outputs, no
    snapshot directory, snapshot mode ``"all"`` and gap 1. ``logger_context``
    creates one per run; the module functions act on ``current_logger()``.
    """

    def __init__(self) -> None:
        self._text = TextOutput()
        self._tabular = TabularOutput()
        self._snapshots = SnapshotWriter()
        self._resume_snapshot: str | None = None
        self._resume_rows_through: float | None = None
        self._log_tabular_only = False
        self._disabled = False
        self._tabular_disabled = False
        self._tracking: RunTracking | None = None

    # ------------------------------------------------------------------------- text

    def log(self, s: object, with_prefix: bool = True, with_timestamp: bool = True,
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
        self._text.write(s, with_prefix=with_prefix, with_timestamp=with_timestamp,
                         color=color)

    def push_prefix(self, prefix: str) -> None:
        """Add ``prefix`` to the text written before every ``log`` line."""
        self._text.push_prefix(prefix)

    def pop_prefix(self) -> None:
        """Remove the most recently pushed text prefix (no-op when none is left)."""
        self._text.pop_prefix()

    def prefix(self, key: str) -> contextlib.AbstractContextManager[None]:
        """Context manager: ``push_prefix(key)`` on entry, ``pop_prefix()`` on exit."""
        return self._text.prefix(key)

    def push_tabular_prefix(self, key: str) -> None:
        """Add ``key`` to the text prepended to every recorded tabular key."""
        self._tabular.push_prefix(key)

    def pop_tabular_prefix(self) -> None:
        """Remove the most recently pushed tabular prefix (no-op when none is left)."""
        self._tabular.pop_prefix()

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
        self._text.add_file(file_name)

    def remove_text_output(self, file_name: str) -> None:
        """Stop writing ``log`` lines to ``file_name`` and close it (no-op if unknown)."""
        self._text.remove_file(file_name)

    def add_tabular_output(self, file_name: str, append: bool = False) -> None:
        """Write every dumped tabular row to the CSV file ``file_name``.

        A new output truncates the file, or with ``append`` (a resumed run) adds rows
        under the header the file already has. A file put on hold with
        ``hold_tabular_output`` is resumed where it stopped instead.
        """
        self._tabular.add_output(file_name, append=append)

    def remove_tabular_output(self, file_name: str) -> None:
        """Stop writing rows to ``file_name`` and close it, whether active or held."""
        self._tabular.remove_output(file_name)

    def hold_tabular_output(self, file_name: str) -> None:
        """Pause writing rows to ``file_name`` but keep it open; ``add_tabular_output`` resumes."""
        self._tabular.hold_output(file_name)

    def flush_all(self) -> None:
        """Flush every open text and tabular output and the summary writer."""
        self._text.flush()
        self._tabular.flush()

    def close(self) -> None:
        """Close every text and tabular output and the summary writer, and detach them.

        The logger stays usable afterwards and prints to stdout only.
        """
        text_files = self._text.detach()
        tabular_files, writer = self._tabular.detach()
        # Detach first: a failing close must not leave the logger writing to a closed file.
        with contextlib.ExitStack() as closing:
            for fd in (*text_files, *tabular_files):
                closing.callback(fd.close)
            if writer is not None:
                closing.callback(writer.close)

    # ------------------------------------------------------------------------- tabular

    def record_tabular(self, key: str, val: TabularValue) -> None:
        """Add ``key: val`` to the pending tabular row (the tabular prefix is prepended).

        With a summary writer set, numeric values are also sent as scalars at the
        iteration given to ``set_iteration``.

        Args:
            key: column name.
            val: a number, string, bool, ``None``, numpy scalar or one-element array/tensor.
        """
        self._tabular.record(key, val)

    def record_tabular_misc_stat(self, key: str, values: TabularValues,
                                 placement: str = "back") -> None:
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
        for stat_name, stat in summary_stats(values).items():
            if placement == "front":
                name = stat_name + key
            elif self._tabular.summary_writer is not None:
                name = f"{key}/{stat_name}"
            else:
                name = key + stat_name
            self.record_tabular(name, stat)

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
        pending = self._tabular.pending
        row: dict[str, Any] = dict(pending)
        if not pending:
            return row
        try:
            if self._disabled:
                return row
            lines = _format_table(pending)
            if self._log_tabular_only:
                print("\n".join(lines), flush=True)
            else:
                for line in lines:
                    self.log(line, *args, **kwargs)
            if not self._tabular_disabled:
                self._tabular.write_row(row, write_header)
                if self._tracking is not None:
                    self._tracking.log_row(row, self._tabular.iteration)
        finally:
            pending.clear()
        return row

    # ------------------------------------------------------------------------- snapshots

    def set_snapshot_dir(self, dir_name: str | None) -> None:
        """Directory that ``save_itr_params`` writes to (``None``: no snapshots)."""
        self._snapshots.set_dir(dir_name)

    def set_resume_snapshot(self, path: str | None, rows_through: float | None = None) -> None:
        """The snapshot a resumed run continues from (set by ``logger_context(resume=True)``;
        the runner reads it at startup), and the ``Iteration`` of the last row its
        ``progress.csv`` kept (None: no rows)."""
        self._resume_snapshot = None if path is None else os.path.abspath(path)
        self._resume_rows_through = rows_through

    def get_resume_snapshot(self) -> str | None:
        """The snapshot to resume from, or None for a fresh run."""
        return self._resume_snapshot

    def resume_row_missing(self, itr: int) -> bool:
        """Whether a resumed run's ``progress.csv`` lacks the row of iteration ``itr``,
        the log point of its snapshot: the run stopped after writing the snapshot and
        before the row (SIGTERM or Ctrl-C during the evaluation that precedes it)."""
        if self._resume_snapshot is None:
            return False
        through = self._resume_rows_through
        return through is None or through < itr

    def get_snapshot_dir(self) -> str | None:
        """Snapshot directory (the run directory inside ``logger_context``)."""
        return self._snapshots.snapshot_dir

    def set_snapshot_mode(self, mode: str) -> None:
        """Which iterations ``save_itr_params`` keeps: one of ``SNAPSHOT_MODES``.

        ``"all"``: ``itr_<N>.pkl`` every call; ``"last"``: overwrite ``params.pkl``;
        ``"gap"``: ``itr_<N>.pkl`` when ``N == 0`` or ``(N + 1) % gap == 0``;
        ``"last+gap"``: both; ``"none"``: nothing.
        """
        self._snapshots.mode = mode

    def get_snapshot_mode(self) -> str:
        """Snapshot mode (``"all"`` until set; ``logger_context`` sets ``"none"`` by default)."""
        return self._snapshots.mode

    def set_snapshot_gap(self, gap: int) -> None:
        """Iteration gap used by the ``"gap"`` and ``"last+gap"`` modes (a positive integer)."""
        self._snapshots.gap = gap

    def get_snapshot_gap(self) -> int:
        """Snapshot gap (default 1)."""
        return self._snapshots.gap

    def save_itr_params(self, itr: int, params: object, final: bool = False) -> list[str]:
        """Save the snapshot ``params`` of iteration ``itr`` as the snapshot mode says;
        see :meth:`rlframe.utils.snapshot_files.SnapshotWriter.save_itr_params` (arguments,
        returned file names, and the OSError naming a file that could not be written)."""
        return self._snapshots.save_itr_params(itr, params, final=final)

    def snapshot_names_at(self, itr: int, final: bool = False) -> list[str]:
        """The snapshot files :meth:`save_itr_params` would write for iteration ``itr``
        (none in mode ``"none"`` or without a snapshot directory)."""
        return self._snapshots.names_at(itr, final)

    def writes_files(self) -> bool:
        """Whether anything of the run reaches a file (a text or tabular output, or a
        snapshot directory)."""
        return (self._text.has_files() or self._tabular.has_outputs()
                or bool(self._snapshots.snapshot_dir))

    # ------------------------------------------------------------------------- switches

    def set_iteration(self, itr: int) -> None:
        """Step attached to summary-writer scalars recorded from now on."""
        self._tabular.iteration = int(itr)

    def set_log_tabular_only(self, log_tabular_only: bool) -> None:
        """When ``True``, ``log`` writes nothing and only tables are printed."""
        self._log_tabular_only = bool(log_tabular_only)

    def get_log_tabular_only(self) -> bool:
        """Whether the logger is in tabular-only mode."""
        return self._log_tabular_only

    def set_disable_prefix(self, disable_prefix: bool) -> None:
        """When ``True``, ``log`` ignores the pushed prefixes."""
        self._text.disable_prefix = bool(disable_prefix)

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

    def set_tracking(self, tracking: RunTracking | None) -> None:
        """Experiment trackers (MLflow, W&B) that also receive every dumped row
        (``logger_context(outputs=...)`` sets them)."""
        self._tracking = tracking

    def set_tf_summary_writer(self, writer: SummaryWriterLike | None) -> None:
        """TensorBoard ``SummaryWriter`` that also receives every numeric tabular value."""
        self._tabular.summary_writer = writer

    def get_tf_summary_writer(self) -> SummaryWriterLike | None:
        """The summary writer, or ``None``."""
        return self._tabular.summary_writer

    def set_tf_summary_dir(self, dir_name: str | None) -> None:
        """Remember the summary writer's directory (informational)."""
        self._tabular.summary_dir = dir_name

    def get_tf_summary_dir(self) -> str | None:
        """The directory given to ``set_tf_summary_dir``, or ``None``."""
        return self._tabular.summary_dir
