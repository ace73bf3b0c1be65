"""Writing a run's snapshots: which iterations are kept, and writing them safely.

A run saves ``params.pkl`` and/or ``itr_<N>.pkl`` in its snapshot directory as
its snapshot mode says (:data:`SNAPSHOT_MODES`). :class:`SnapshotWriter` holds one
run's directory, mode and gap; ``Logger.save_itr_params`` (and rlpyt's module
function ``logger.save_itr_params``) call it. Reading snapshots back, and the
side files a resumed run needs, live in :mod:`rlframe.utils.checkpoint`.
"""
from __future__ import annotations

import io
import numbers
import os

import torch

from rlframe.utils.checkpoint import write_error
from rlframe.utils.files import atomic_write_bytes

SNAPSHOT_MODES = ("all", "last", "gap", "last+gap", "none")


def check_snapshot_mode(mode: object) -> str:
    """``mode`` if it is one of :data:`SNAPSHOT_MODES`.

    Raises:
        ValueError: naming the mode given and the allowed ones.
    """
    if mode not in SNAPSHOT_MODES:
        raise ValueError(f"snapshot_mode must be one of {list(SNAPSHOT_MODES)}, got {mode!r}.")
    return str(mode)


def check_snapshot_gap(gap: object) -> int:
    """``gap`` as an ``int`` if it is a positive integer (not a bool).

    Raises:
        ValueError: naming the gap given.
    """
    if isinstance(gap, bool) or not isinstance(gap, numbers.Integral) or gap < 1:
        raise ValueError(f"snapshot gap must be a positive integer, got {gap!r}.")
    return int(gap)


def snapshot_names(itr: int, mode: str, gap: int = 1, final: bool = False) -> list[str]:
    """The files a snapshot of iteration ``itr`` is written to under ``mode``.

    ``"all"``: ``itr_<itr>.pkl``; ``"last"``: ``params.pkl``; ``"gap"``:
    ``itr_<itr>.pkl`` when ``itr == 0`` or ``(itr + 1) % gap == 0`` (or ``final``);
    ``"last+gap"``: both rules; ``"none"``: nothing.

    Args:
        itr: iteration number.
        mode: one of :data:`SNAPSHOT_MODES`.
        gap: iteration gap of the ``"gap"`` modes.
        final: the last snapshot of a run that is ending (the gap modes keep it).
    """
    mode = check_snapshot_mode(mode)
    names = []
    if mode == "all":
        names.append(f"itr_{itr}.pkl")
    if mode in ("last", "last+gap"):
        names.append("params.pkl")
    on_gap = itr == 0 or (itr + 1) % gap == 0
    if mode in ("gap", "last+gap") and (on_gap or final):
        names.append(f"itr_{itr}.pkl")
    return names


def write_snapshot(snapshot_dir: str, names: list[str], params: object) -> None:
    """Serialise ``params`` once with ``torch.save`` and write it to each of ``names``
    in ``snapshot_dir`` (created if missing), each through a temporary file and a
    rename, so that a crash never leaves a truncated snapshot.

    Raises:
        OSError: naming the snapshot file that could not be written (e.g. the disk
            is full); the previous snapshot of that name is left intact.
    """
    buffer = io.BytesIO()
    torch.save(params, buffer)  # serialise once, before touching any file
    payload = buffer.getvalue()
    os.makedirs(snapshot_dir, exist_ok=True)
    for name in names:
        path = os.path.join(snapshot_dir, name)
        try:
            atomic_write_bytes(path, payload)
        except OSError as error:  # e.g. a full disk: say which file, keep the old one
            raise write_error(path, error) from error


class SnapshotWriter:
    """One run's snapshot policy: directory, mode and gap, and the writing itself.

    A new writer has no directory (it writes nothing), mode ``"all"`` and gap 1.
    """

    def __init__(self) -> None:
        self.snapshot_dir: str | None = None
        self._mode = "all"
        self._gap = 1

    @property
    def mode(self) -> str:
        """One of :data:`SNAPSHOT_MODES` (checked when set)."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        self._mode = check_snapshot_mode(mode)

    @property
    def gap(self) -> int:
        """Iteration gap of the ``"gap"`` and ``"last+gap"`` modes (a positive integer)."""
        return self._gap

    @gap.setter
    def gap(self, gap: int) -> None:
        self._gap = check_snapshot_gap(gap)

    def set_dir(self, dir_name: str | None) -> None:
        """Directory to write to (made absolute); ``None``: write nothing."""
        self.snapshot_dir = None if dir_name is None else os.path.abspath(dir_name)

    def save_itr_params(self, itr: int, params: object, final: bool = False) -> list[str]:
        """Save ``params`` with ``torch.save`` as the mode says (see :func:`snapshot_names`).

        Nothing happens without a directory. Keep ``params`` to tensors, numbers,
        strings, lists and dicts so that ``torch.load(path, weights_only=True)`` reads it.

        Args:
            itr: iteration number, used in ``itr_<itr>.pkl`` and by the ``"gap"`` rule.
            params: the snapshot, e.g. ``dict(itr=..., agent_state_dict=...)``.
            final: the last snapshot of a run that is ending: the ``"gap"`` modes
                write ``itr_<itr>.pkl`` whatever the gap.

        Returns:
            The names of the files written.

        Raises:
            OSError: naming the snapshot file that could not be written.
        """
        names = self.names_at(itr, final)
        if names:
            write_snapshot(self.snapshot_dir, names, params)
        return names

    def names_at(self, itr: int, final: bool = False) -> list[str]:
        """The files :meth:`save_itr_params` would write for iteration ``itr``: none
        without a directory or in mode ``"none"``, else :func:`snapshot_names`'s."""
        if self.snapshot_dir is None or self._mode == "none":
            return []
        return snapshot_names(itr, self._mode, self._gap, final)
