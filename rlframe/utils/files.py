"""Files written so that a reader never sees half of one."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile


def write_json_atomic(path: str, data: object) -> None:
    """Write ``data`` as indented JSON to ``path`` through a temporary file in the same
    directory and one rename: ``path`` holds the old content or the new, never a part.

    Args:
        path: the file to write; its directory must exist.
        data: JSON-serializable values.
    """
    name = os.path.basename(path)
    fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{name}-",
                                    suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise


def atomic_write_bytes(path: str, payload: bytes) -> None:
    """Write ``payload`` to ``path`` through a temporary file and a rename: readers see
    the old file or the new one, never half of it."""
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
