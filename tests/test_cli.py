"""The rlframe command end to end: train, then evaluate, plot and resume the run."""
import csv
import json
import os
import subprocess
import sys

import pytest

RLFRAME = [sys.executable, "-m", "rlframe"]


def rlframe(*args, timeout=300):
    result = subprocess.run(RLFRAME + list(args), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_train_then_evaluate_plot_and_resume_the_run(in_tmp_cwd):
    pytest.importorskip("matplotlib")
    out = rlframe("train", "ppo", "CartPole-v1", "--n-steps", "20000", "--log-dir", "runs",
                  "--run-id", "0", "--seed", "0")
    run_dir = os.path.abspath(os.path.join("runs", "run_0"))
    assert f"Run directory: {run_dir}" in out
    assert {"params.json", "progress.csv", "params.pkl"} <= set(os.listdir(run_dir))

    rlframe("evaluate", run_dir, "--episodes", "3", "--deterministic", "--json", "eval.json",
            "--seed", "1")
    with open("eval.json") as f:
        results = json.load(f)
    returns = [episode["return"] for episode in results["episodes"]]
    assert len(returns) == 3 and all(r > 20 for r in returns)  # Better than random (~20).

    out = rlframe("plot", run_dir, "-o", "curves.png")
    assert out.strip().endswith("curves.png") and os.path.getsize("curves.png") > 10000

    rlframe("resume", run_dir)  # Already complete: nothing left to train, nothing lost.
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        iterations = [float(row["Diagnostics/Iteration"]) for row in csv.DictReader(f)]
    assert iterations == [-1, 9, 19]  # 20480 steps of 1024, a row every 10 iterations.
