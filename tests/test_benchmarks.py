"""Every benchmark script runs end to end (with tiny sizes) and prints its ratios.

The figures themselves are not checked here: they depend on the machine and
its load. This only keeps the scripts working as the framework changes.
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")

CASES = {
    "sampler_throughput.py": ["--steps", "512", "--batch_B", "1", "2", "--batch_T", "16"],
    "parallel_sampling.py": ["--env_id", "Pendulum-v1", "--batch_T", "16", "--batch_B", "2",
                             "--n_itr", "1"],
    "replay_throughput.py": ["--seconds", "0.05"],
    "dqn_updates.py": ["--rounds", "1", "--updates", "4"],
    "sac_updates.py": ["--rounds", "1", "--updates", "4"],
    "pg_updates.py": ["--rounds", "1", "--iterations", "1"],
    "compile_speedup.py": ["--rounds", "1", "--iterations", "1", "--updates", "4"],
}
RATIO = {  # What each script's table prints next to its figures.
    "sampler_throughput.py": r"\d+\.\d\d",
    "parallel_sampling.py": r"ceiling: 2 x Serial\s+2\s+[\d,]+\s+\d+\.\d\d",
    "replay_throughput.py": r"append\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+\d+\.\d",
    "dqn_updates.py": r"ratio \d\.\d{3}",
    "sac_updates.py": r"ratio \d\.\d{3}",
    "pg_updates.py": r"ratio \d\.\d{3}",
    # Where torch.compile cannot run, the script says so instead.
    "compile_speedup.py": r"speedup \d+\.\d\d|torch.compile cannot run here",
}


def test_every_benchmark_has_a_case():
    scripts = sorted(f for f in os.listdir(BENCHMARKS) if f.endswith(".py") and f[0] != "_")
    assert scripts == sorted(CASES)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(CASES))
def test_benchmark_runs(script, tmp_path):
    env = dict(os.environ, RLFRAME_PROGRESS="0", RLFRAME_DATA_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, script)] + CASES[script],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(RATIO[script], result.stdout), result.stdout[-3000:]
