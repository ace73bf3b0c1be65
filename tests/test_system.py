"""rlframe.utils.system: the machine and commit a benchmark run records."""
import json
import re
import shutil
import subprocess

import pytest

from rlframe.utils.system import cpu_model, git_commit, system_record


def test_the_record_names_the_cpu_cores_and_versions():
    record = system_record()
    json.dumps(record)  # JSON-ready.
    assert record["cpu"] == cpu_model() and record["cpu"]
    assert record["logical_cpus"] >= 1 and record["memory_gib"] > 0
    assert record["packages"]["torch"].split("+")[0].count(".") >= 1
    assert "ray-nonexistent" not in record["packages"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_of_a_checkout_and_of_a_plain_folder(tmp_path):
    assert git_commit(str(tmp_path)) is None  # Not a checkout.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("1")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "a.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    commit = git_commit(str(tmp_path))
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    (tmp_path / "a.txt").write_text("2")
    assert git_commit(str(tmp_path)) == commit + "-dirty"
    (tmp_path / "a.txt").write_text("1")
    (tmp_path / "b.txt").write_text("untracked files do not count")
    assert git_commit(str(tmp_path)) == commit
