"""Every benchmark script runs end to end (with tiny sizes) and prints its ratios.

The figures themselves are not checked here: they depend on the machine and
its load. This only keeps the scripts working as the framework changes.
"""
import importlib.util
import csv
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")

CASES = {
    "sampler_throughput.py": ["--steps", "512", "--batch_B", "1", "2", "--batch_T", "16",
                              "--rounds", "1"],
    "parallel_sampling.py": ["--env_id", "Pendulum-v1", "--batch_T", "16", "--batch_B", "2",
                             "--rounds", "1", "--n_itr", "1"],
    "replay_throughput.py": ["--seconds", "0.05"],
    "dqn_updates.py": ["--rounds", "1", "--updates", "4"],
    "sac_updates.py": ["--rounds", "1", "--updates", "4"],
    "vs_sb3_scale.py": ["--quick", "--rounds", "1", "--only", "atari_ppo", "mujoco_ppo"],
    "scale_profile.py": ["--case", "mujoco_ppo", "--steps", "512", "--top", "3"],
    "sb3_suite.py": [os.path.join(ROOT, "benchmarks", "suite", "mujoco_1m.json"), "-o", "out",
                     "--only", "ppo_Hopper-v5", "td3_Hopper-v5", "--n-steps", "600",
                     "--seeds", "1", "--evals", "2", "--eval-episodes", "1"],
    "vs_sb3.py": ["--only", "sampling", "ppo", "--seeds", "1", "--batch_B", "2",
                  "--sampling_steps", "128", "--rounds", "1", "--ppo_steps", "2048",
                  "--json", "vs_sb3.json"],
    "pg_updates.py": ["--rounds", "1", "--iterations", "1"],
    "autotune_check.py": ["--algo", "ppo", "--env_id", "CartPole-v1", "--quick", "--batch_T",
                          "32", "--seconds", "0.2", "--grid_seconds", "0.2"],
    # The session's inductor cache (conftest): what test_compile compiled is not compiled
    # again; a cold cache is what a first run on a new machine times. The PPO case only:
    # the DQN case's code is the same, and test_compile compiles DQN's update too.
    "compile_speedup.py": ["--rounds", "1", "--iterations", "1", "--updates", "4",
                           "--warm_cache", "--only", "ppo"],
    "async_vs_sync.py": ["--n_steps", "4096", "--rounds", "1", "--heavy_us", "0"],
    "atari_env_throughput.py": ["--steps", "200", "--rounds", "1", "--batch_B", "2",
                                "--n_itr", "2"],
    "sync_scaling.py": ["--env_id", "Pendulum-v1", "--batch_T", "64", "--itrs", "3",
                        "--rounds", "1"],
    "ray_sampling.py": ["--quick", "--env_id", "Pendulum-v1"],
    # On the CPU, small batches: GpuSampler, SyncRl, AsyncGpuSampler and AsyncRl plumbing.
    "gpu_check.py": ["--cuda_idx", "-1", "--quick", "--steps", "128", "--only", "sync_nccl",
                     "async_dqn"],
}
RATIO = {  # What each script's table prints next to its figures.
    "sampler_throughput.py": r"\d+\.\d\d\s+\d+\.\d\d",
    "parallel_sampling.py": (r"(?s)ceiling: 2 x Serial\s+2\s+[\d,]+\s+\d+\.\d\d\n.*"
                             r"Cpu, 2 workers, per iteration: [\d.]+ ms wall; CPU: workers "
                             r"[\d.]+ and [\d.]+ ms, master [\d.]+ ms; .* [\d.]+ ms \(\d+%\)"),
    "replay_throughput.py": r"append\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+\d+\.\d",
    "dqn_updates.py": r"ratio \d\.\d{3}",
    "sac_updates.py": r"ratio \d\.\d{3}",
    "vs_sb3.py": (r"(?s)rlframe/ceiling.*\n\s+2(\s+[\d,]+){3}(\s+\d+\.\d\d){3}\n"
                  r".*ppo rlframe seed 0: .*ppo SB3     seed 0: "
                  r".*rlframe/SB3 median peak RSS: \d+\.\d\d"),
    "pg_updates.py": r"ratio \d\.\d{3}",
    "vs_sb3_scale.py": (r"(?s)atari_ppo: median frames/s.*\n\s+rlframe\s+[\d,.]+ \(.*"
                        r"mujoco_ppo: median s/10k steps.*\n\s+ceiling\s+[\d,.]+ \("),
    "scale_profile.py": (r"rlframe mujoco_ppo: [\d,.]+ s/10k steps under the profiler .*\n"
                         r"part\s+seconds\s+share\n(.+\s+\d+\.\d\d\s+\d+\.\d%\n){3,}"),
    "sb3_suite.py": (r"ppo_Hopper-v5_sb3/run_0: training 600 steps\n"
                     r"td3_Hopper-v5_sb3/run_0: training 600 steps"),
    "autotune_check.py": r"autotune's choice in the grid: [\d,]+ env steps/s = \d\.\d\d of",
    # Where torch.compile cannot run, the script says so instead.
    "compile_speedup.py": r"speedup \d+\.\d\d|torch.compile cannot run here",
    "async_vs_sync.py": r"AsyncRl, sampler lead\s+\d+\s+\d+\s+\d+\.\d\d\s+\d+\.\d\dx",
    "atari_env_throughput.py": (r"(?s)AtariEnv\s+[\d,]+\s+\d\.\d\d\n.*"
                                r"Cpu, 2 workers\s+[\d,]+\s+\d+\.\d\d"),
    "sync_scaling.py": r"2 ranks x 1 thread\s+\d+\s+\d+\.\d\s+\d+\.\d\dx",
    "gpu_check.py": (r"(?s)sync_nccl:\s+[\d,]+ frames/s \(128 steps in [\d.]+ s, model on cpu\)"
                     r".*async_dqn:\s+[\d,]+ frames/s"),
    "ray_sampling.py": (r"(?s)\n\s+4\s+16(\s+[\d,]+){2}\s+\d+\.\d\d.*"
                        r"all data movement per iteration\s+\d+\.\d\d ms.*"
                        r"32x32 model: .*with transfers: .*N\* = \d+ node"),
}
# Optional packages a script compares against or needs.
NEEDS = {"vs_sb3.py": "stable_baselines3", "vs_sb3_scale.py": "stable_baselines3",
         "sb3_suite.py": "stable_baselines3",
         "ray_sampling.py": "ray"}
JSON_OUTPUTS = {"vs_sb3.py": ("vs_sb3.json", ["sampling", "ppo"])}  # File, top-level keys.


def test_every_benchmark_has_a_case():
    scripts = sorted(f for f in os.listdir(BENCHMARKS) if f.endswith(".py") and f[0] != "_")
    assert scripts == sorted(CASES)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(CASES))
def test_benchmark_runs(script, tmp_path, warm_python):
    if script in NEEDS and importlib.util.find_spec(NEEDS[script]) is None:
        pytest.skip(f"{script} needs {NEEDS[script]}, which is not installed (not a "
                    "core dependency of rlframe)")
    env = dict(os.environ, RLFRAME_PROGRESS="0", RLFRAME_DATA_DIR=str(tmp_path))
    result = warm_python.run(os.path.join(BENCHMARKS, script), CASES[script], tmp_path, env,
                             timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(RATIO[script], result.stdout), result.stdout[-3000:]
    if script in JSON_OUTPUTS:
        name, keys = JSON_OUTPUTS[script]
        with open(tmp_path / name) as f:
            assert set(keys) <= set(json.load(f))


@pytest.mark.parametrize("script", ["vs_sb3.py", "vs_sb3_scale.py"])
def test_vs_sb3_without_sb3_says_how_to_install(script, tmp_path):
    """Where stable-baselines3 cannot be imported, the comparisons explain and exit with 2."""
    hidden = tmp_path / "hidden" / "stable_baselines3"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    python_path = [str(hidden.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(python_path))
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, script)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install stable-baselines3" in result.stderr
    assert "not a dependency" in result.stderr
    assert "hidden by the test" in result.stderr


def test_scale_summary_reads_each_row_against_its_ceiling(monkeypatch):
    """Ratios of the scale comparison: rows against SB3 with 1 and 2 threads; the rows on
    two threads against the two-thread ceiling where it ran, the others against the
    one-thread ceiling."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    from vs_sb3_scale import summary
    seconds = dict(rlframe=120., rlframe_2threads=90., sb3=150., sb3_2threads=100.,
                   ceiling=100., ceiling_2threads=80.)
    runs = {name: [dict(steps=10_000, seconds=s, peak_rss_mib=1.)]
            for name, s in seconds.items()}
    table = summary("mujoco_sac", runs)
    assert table["rlframe_2threads"]["vs_sb3"] == pytest.approx(90 / 150)
    assert table["rlframe_2threads"]["vs_sb3_2threads"] == pytest.approx(90 / 100)
    assert table["rlframe_2threads"]["of_ceiling"] == pytest.approx(80 / 90)
    assert table["sb3_2threads"]["of_ceiling"] == pytest.approx(80 / 100)
    assert table["rlframe"]["of_ceiling"] == pytest.approx(100 / 120)
    assert "of_ceiling" not in table["ceiling"] and "of_ceiling" not in table["ceiling_2threads"]
    del runs["ceiling_2threads"]  # Without it, every row is read against the one-thread one.
    assert summary("mujoco_sac", runs)["rlframe_2threads"]["of_ceiling"] == pytest.approx(100 / 90)


def test_gpu_atari_ppo_refuses_a_resume_folder_without_a_snapshot(tmp_path):
    """benchmarks/gpu_atari_ppo.sh names RESUME_FROM when it holds no snapshot, and
    starts nothing."""
    env = dict(os.environ, RUNS=str(tmp_path / "runs"), RESUME_FROM=str(tmp_path))
    result = subprocess.run(["bash", os.path.join(BENCHMARKS, "gpu_atari_ppo.sh"), "pong", "5"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"RESUME_FROM={tmp_path} holds no snapshot (params.pkl)" in result.stderr
    assert os.listdir(tmp_path / "runs" / "ppo_pong_gpu") == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sb3_suite_keeps_final_models_and_evaluates_them(tmp_path):
    """A finished SB3 run keeps its final model; --evaluate-final plays it (with PPO's
    observation statistics) and writes final_policy_eval.json as `rlframe evaluate --json`
    lays it out, and TD3's episode reset with the seed of training's last evaluation returns
    what that evaluation logged (PPO's final model has also learned from the rest of its last
    rollout); a run without a final model is named and left out."""
    pytest.importorskip("stable_baselines3")
    suite = os.path.join(ROOT, "benchmarks", "suite", "mujoco_1m.json")
    script = [sys.executable, os.path.join(BENCHMARKS, "sb3_suite.py"), suite, "-o", "out",
              "--only", "ppo_Hopper-v5", "td3_Hopper-v5"]
    train = subprocess.run(script + ["--seeds", "1", "--n-steps", "300", "--evals", "1",
                                     "--eval-episodes", "1"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=250)
    assert train.returncode == 0, train.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "out/ppo_Hopper-v5_sb3/run_0/final_model")) == [
        "model.zip", "vecnormalize.pkl"]
    # Seed 1 was not trained. Training's evaluation episode 0 of seed 0 resets with 10,000.
    evaluate = subprocess.run(script + ["--seeds", "2", "--evaluate-final", "2",
                                        "--eval-seed", "10000"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=250)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    for label in ("ppo_Hopper-v5_sb3", "td3_Hopper-v5_sb3"):
        assert re.search(label + r"/run_0: final policy, 2 episodes: return -?\d+\.\d",
                         evaluate.stdout), evaluate.stdout
        assert f"{label}/run_1: no final model" in evaluate.stdout
        with open(tmp_path / "out" / label / "run_0/final_policy_eval.json") as f:
            result = json.load(f)
        assert (result["cum_steps"], result["seed"], result["deterministic"]) == (
            300, 10000, True)
        returns = [episode["return"] for episode in result["episodes"]]
        assert len(returns) == 2 and all(episode["length"] > 0
                                         for episode in result["episodes"])
        assert result["summary"]["return"]["mean"] == pytest.approx(sum(returns) / 2)
    with open(tmp_path / "out/td3_Hopper-v5_sb3/run_0/progress.csv") as f:
        last = list(csv.DictReader(f))[-1]
    assert (int(last["Diagnostics/CumSteps"]), int(last["TrajsInEval"])) == (300, 1)
    assert returns[0] == pytest.approx(float(last["ReturnAverage"]))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sb3_suite_ends_a_run_at_its_stop_at_return(tmp_path):
    """An entry's stop_at_return ends SB3's run at the first evaluation that reaches it,
    as it ends rlframe's: Hopper's return is above -1,000 at once."""
    pytest.importorskip("stable_baselines3")
    suite = tmp_path / "stop.json"
    suite.write_text(json.dumps(dict(name="stop", runs=[dict(
        algo="td3", env_id="Hopper-v5", n_steps=900, seeds=1,
        config=dict(stop_at_return=-1000))])))
    run = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "sb3_suite.py"), str(suite),
                          "-o", "out", "--evals", "3", "--eval-episodes", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=250)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(tmp_path / "out/td3_Hopper-v5_sb3/run_0/progress.csv") as f:
        assert [int(row["Diagnostics/CumSteps"]) for row in csv.DictReader(f)] == [300]
    with open(tmp_path / "out/td3_Hopper-v5_sb3/run_0/suite_done.json") as f:
        done = json.load(f)
    assert (done["n_steps"], done["stopped_at_return"]) == (300, -1000)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sb3_suite_plays_atari_games_and_logs_the_game_score(tmp_path):
    """SB3 on the Atari entries: RL Zoo's PPO on BreakoutNoFrameskip-v4 and DQN on Pong,
    evaluated on whole games; progress.csv holds the clipped return and the game score, and
    the final policy's episodes are played as its evaluations were."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("ale_py")
    suite = os.path.join(ROOT, "benchmarks", "suite", "atari_3m.json")
    script = [sys.executable, os.path.join(BENCHMARKS, "sb3_suite.py"), suite, "-o", "out",
              "--only", "ppo_breakout", "dqn_pong", "--seeds", "1"]
    train = subprocess.run(script + ["--n-steps", "1024", "--evals", "1", "--eval-episodes",
                                     "1"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=350)
    assert train.returncode == 0, train.stderr[-3000:]
    run_dir = tmp_path / "out/ppo_breakout_sb3/run_0"
    with open(run_dir / "progress.csv") as f:
        row, = list(csv.DictReader(f))
    assert (int(row["Diagnostics/CumSteps"]), int(row["TrajsInEval"])) == (1024, 1)
    assert float(row["GameScoreAverage"]) >= float(row["ReturnAverage"]) >= 0
    with open(run_dir / "params.json") as f:
        params = json.load(f)
    assert (params["env_id"], params["hyperparameters"]["n_envs"]) == ("breakout", 8)
    evaluate = subprocess.run(script + ["--evaluate-final", "1"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=200)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    with open(run_dir / "final_policy_eval.json") as f:
        result = json.load(f)
    episode, = result["episodes"]
    assert result["deterministic"] is False and episode["game_score"] >= episode["return"]
    with open(tmp_path / "out/dqn_pong_sb3/run_0/final_policy_eval.json") as f:
        episode, = json.load(f)["episodes"]
    # An untrained DQN loses almost every point of a whole game (to 21), which is longer than
    # one point; Pong's rewards are +-1, so clipping leaves its score as it is.
    assert episode["game_score"] == episode["return"] <= -15 and episode["length"] > 500
