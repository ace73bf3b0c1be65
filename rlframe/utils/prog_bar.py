"""Terminal progress bar between two logging points of a training run."""
from __future__ import annotations

import os
import sys
from tqdm import tqdm

from rlframe.utils.logging import logger

PROGRESS_ENV_VAR = "RLFRAME_PROGRESS"


def _bar_enabled() -> bool:
    """Shown on an interactive stdout; ``RLFRAME_PROGRESS=1`` forces it, ``=0`` turns it off."""
    if logger.get_log_tabular_only():
        return False
    forced = os.environ.get(PROGRESS_ENV_VAR, "").strip()
    if forced == "0":
        return False
    if forced == "1":
        return True
    try:
        return bool(sys.stdout.isatty())
    except (AttributeError, ValueError):
        return False


class ProgBarCounter:
    """Progress towards ``total_count`` (e.g. iterations until the next log).

    Silent when stdout is not a terminal (logs piped to a file) or the logger is
    in tabular-only mode; see ``RLFRAME_PROGRESS`` to force either way.

    Args:
        total_count: count at which the bar is full; 0 or less gives a silent bar.
    """

    def __init__(self, total_count: int) -> None:
        self.total_count: int = max(int(total_count), 0)
        self.cur_count: int = 0
        self._bar: tqdm | None = None
        if self.total_count > 0 and _bar_enabled():
            self._bar = tqdm(total=self.total_count, file=sys.stdout, leave=False,
                             dynamic_ncols=True)

    def update(self, current_count: int) -> None:
        """Move the bar to ``current_count`` (clipped to ``[0, total_count]``)."""
        self.cur_count = min(max(int(current_count), 0), self.total_count)
        if self._bar is not None:
            self._bar.n = self.cur_count
            self._bar.refresh()

    def stop(self) -> None:
        """Close the bar; further calls do nothing."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
