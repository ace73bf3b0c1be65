import csv
import os

import pytest


@pytest.fixture
def in_tmp_cwd(tmp_path, monkeypatch):
    """Run the test in an empty working directory, logging under its ./data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLFRAME_DATA_DIR", raising=False)
    return tmp_path


def run_dirs(root):
    """All run_<ID> directories written under root/data/local."""
    found = []
    for dirpath, dirnames, _ in os.walk(os.path.join(root, "data", "local")):
        found.extend(os.path.join(dirpath, d) for d in dirnames if d.startswith("run_"))
    return found


def read_csv(path):
    """``(header, rows)`` of a CSV file such as progress.csv."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]
