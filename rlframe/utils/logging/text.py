"""Text output of a run: prefixed, timestamped lines to stdout and to text files.

:class:`TextOutput` formats a ``log`` line (``"<timestamp> | <prefixes><message>"``)
and writes it to stdout (coloured on a terminal) and to every text file added
(e.g. the run's ``debug.log``). The :class:`~rlframe.utils.logging.run_logger.Logger`
owns one and decides when nothing is written (disabled, tabular-only).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys
import types
from typing import IO, Iterator, Mapping

_COLOR_CODES: Mapping[str, int] = types.MappingProxyType({
    "gray": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34,
    "magenta": 35, "cyan": 36, "white": 37, "crimson": 38,
})


def _colorize(text: str, color: str) -> str:
    if color not in _COLOR_CODES:
        raise ValueError(f"color must be one of {sorted(_COLOR_CODES)} or None, got {color!r}.")
    return f"\x1b[{_COLOR_CODES[color]}m{text}\x1b[0m"


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def _open_output(file_name: str, mode: str) -> IO[str]:
    """Open a text or CSV output, creating its directory first."""
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return open(file_name, mode, newline="", encoding="utf-8")


class TextOutput:
    """Prefixes and text files of one logger; writes each line to stdout and the files."""

    def __init__(self) -> None:
        self._prefixes: list[str] = []
        self.disable_prefix = False
        # Outputs are keyed by absolute path.
        self._files: dict[str, IO[str]] = {}

    # ------------------------------------------------------------------------- lines

    def write(self, s: object, with_prefix: bool = True, with_timestamp: bool = True,
              color: str | None = None) -> None:
        """Print one line to stdout and append it to every text file.

        Args:
            s: message; non-strings are converted with ``str``.
            with_prefix: prepend the pushed prefixes (unless ``disable_prefix``).
            with_timestamp: prepend ``"<YYYY-mm-dd HH:MM:SS.ffffff> | "`` (local time).
            color: colour for a terminal stdout (``"green"``, ``"red"``, ...); files stay plain.
        """
        line = str(s)
        if with_prefix and not self.disable_prefix:
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
        for fd in self._files.values():
            fd.write(line + "\n")
            fd.flush()

    # ------------------------------------------------------------------------- prefixes

    def push_prefix(self, prefix: str) -> None:
        """Add ``prefix`` to the text written before every line."""
        self._prefixes.append(str(prefix))

    def pop_prefix(self) -> None:
        """Remove the most recently pushed prefix (no-op when none is left)."""
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

    # ------------------------------------------------------------------------- files

    def add_file(self, file_name: str) -> None:
        """Append every line to ``file_name`` (opened in append mode)."""
        path = os.path.abspath(file_name)
        if path not in self._files:
            self._files[path] = _open_output(path, "a")

    def remove_file(self, file_name: str) -> None:
        """Stop writing to ``file_name`` and close it (no-op if unknown)."""
        fd = self._files.pop(os.path.abspath(file_name), None)
        if fd is not None:
            fd.close()

    def has_files(self) -> bool:
        """Whether any text file is attached."""
        return bool(self._files)

    def flush(self) -> None:
        """Flush every text file."""
        for fd in self._files.values():
            fd.flush()

    def detach(self) -> list[IO[str]]:
        """Forget every text file and return them, still open, for the caller to close."""
        files = list(self._files.values())
        self._files.clear()
        return files
