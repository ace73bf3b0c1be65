"""A run's ``progress.csv`` as a resumed run finds it: cutting off an incomplete last
row and the rows written after the snapshot it resumes from; counting rows.
"""
from __future__ import annotations

import csv
import io
import math
import os
from typing import Iterator

from rlframe.utils.files import atomic_write_bytes
from rlframe.utils.logging.current import current_logger


def _cut_incomplete_rows(progress_path: str) -> str | None:
    """Cut ``progress.csv`` back to its last complete row: one ended by a line break,
    without NUL bytes, with as many fields as the header. A run stopped mid-write (a
    crash, a full disk) leaves half a row, and the file system may add NUL bytes.

    Returns:
        A warning saying what was dropped, or None if the file was whole.
    """
    if not os.path.exists(progress_path):
        return None
    with open(progress_path, "rb") as f:
        data = f.read()
    end = _complete_part(data)
    if end == len(data):
        return None
    dropped = data[end:]
    n_rows = sum(1 for line in dropped.split(b"\n") if line.strip(b"\x00\r\t "))
    nul = ", NUL bytes among them" if b"\x00" in dropped else ""
    atomic_write_bytes(progress_path, data[:end])
    what = "the header and " if end == 0 else ""
    n_rows -= 1 if end == 0 and n_rows else 0  # The header is not a row.
    return (f"{progress_path} ended in an incomplete row (the run stopped while writing "
            f"it): cut back to its last complete row, dropping {what}{n_rows} incomplete "
            f"row(s), {len(dropped)} bytes{nul}.")


def _complete_part(data: bytes) -> int:
    """The length of the leading part of CSV ``data`` made of whole records: the header,
    then each row until the first that is incomplete (0 if the header is)."""
    consumed = [0]

    def lines() -> Iterator[str]:
        position = 0
        while position < len(data):
            stop = data.find(b"\n", position)
            if stop < 0 or b"\x00" in data[position:stop]:
                return  # No line break, or NUL bytes: never a whole row.
            try:
                line = data[position:stop + 1].decode("utf-8")
            except UnicodeDecodeError:
                return
            position = consumed[0] = stop + 1
            yield line

    end, n_fields = 0, None
    try:
        for record in csv.reader(lines()):
            if n_fields is None:
                n_fields = len(record)
            elif len(record) != n_fields:
                break
            end = consumed[0]
    except csv.Error:  # A quoted field that never ends.
        pass
    return end


def _drop_rows_after(progress_path: str, itr: int) -> float | None:
    """Keep the rows of ``progress.csv`` up to ``Iteration`` ``itr`` (a resumed run
    writes the later ones again).

    Returns:
        The ``Iteration`` of the last row kept (None: no rows), so that a run resumed
        from the snapshot of a log point whose row was never written (stopped between
        the two) can write it.
    """
    if not os.path.exists(progress_path):
        return None
    with open(progress_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fieldnames, rows = reader.fieldnames, list(reader)
    kept = [row for row in rows if _row_itr(row) <= itr]
    last_itr = max((_row_itr(row) for row in kept), default=None)
    if fieldnames is None or len(kept) == len(rows):
        return last_itr
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fieldnames, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(kept)
    atomic_write_bytes(progress_path, text.getvalue().encode("utf-8"))
    return last_itr


def _row_itr(row: dict) -> float:
    for key, value in row.items():
        if key == "Iteration" or key.endswith("/Iteration"):
            try:
                return float(value)
            except (TypeError, ValueError):
                return -math.inf
    return -math.inf


def check_progress(exp_dir: str | None = None) -> dict[str, int]:
    """Count the data rows of every ``progress.csv`` under ``exp_dir`` and log them.

    Args:
        exp_dir: directory to search; default the current working directory.

    Returns:
        ``{path: number of rows after the header}``.
    """
    search_dir = os.getcwd() if exp_dir is None else exp_dir
    counts = {}
    for dir_path, _, file_names in sorted(os.walk(search_dir)):
        if "progress.csv" not in file_names:
            continue
        path = os.path.join(dir_path, "progress.csv")
        with open(path, "r", encoding="utf-8") as f:
            n_lines = sum(1 for _ in f)
        counts[path] = max(n_lines - 1, 0)
        current_logger().log(f"{path}: {counts[path]} rows", with_prefix=False)
    return counts
