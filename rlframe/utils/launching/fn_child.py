"""The process of one run of :func:`~rlframe.utils.launching.exp_launcher.run_experiments_fn`.

``python -m rlframe.utils.launching.fn_child <slot_affinity_code> <log_dir> <run_ID>``
loads the function saved in ``<log_dir>/experiment_fn.pkl`` and calls
``fn(slot_affinity_code, log_dir, int(run_ID), load_variant(log_dir), *args)``.
"""
from __future__ import annotations

import os
import pickle
import sys

from rlframe.utils.launching.variant import load_variant

FN_FILE = "experiment_fn.pkl"  # The saved function, in each variant directory.


def main(argv: list[str]) -> None:
    """Run the saved function for ``argv = [slot_affinity_code, log_dir, run_ID]``."""
    if len(argv) != 3:
        raise SystemExit(f"usage: python -m {__spec__.name if __spec__ else 'fn_child'} "
                         f"<slot_affinity_code> <log_dir> <run_ID>; got {argv}")
    slot_affinity_code, log_dir, run_ID = argv
    with open(os.path.join(log_dir, FN_FILE), "rb") as f:
        saved = pickle.load(f)
    # The launcher's import path first, so that fn's module imports as it did there.
    sys.path[:] = saved["sys_path"] + [p for p in sys.path if p not in saved["sys_path"]]
    payload = pickle.loads(saved["payload"])
    payload["fn"](slot_affinity_code, log_dir, int(run_ID), load_variant(log_dir),
                  *payload["args"])


if __name__ == "__main__":
    main(sys.argv[1:])
