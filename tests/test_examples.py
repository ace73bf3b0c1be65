"""Every example script runs end to end with a tiny budget."""
import importlib.util
import os

import pytest

from conftest import run_dirs

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None
HAS_RAY = importlib.util.find_spec("ray") is not None

CASES = {
    "quickstart.py": ["--n_steps", "2048"],
    "example_ppo_gym.py": ["--n_steps", "2048", "--log_interval_steps", "1024", "--seed", "1"],
    "example_parallel_ppo.py": ["--sample_mode", "cpu", "--n_parallel", "2", "--n_steps", "2048",
                                "--log_interval_steps", "1024", "--seed", "1"],
    "example_dqn_gym.py": ["--n_steps", "1536", "--log_interval_steps", "768", "--seed", "1"],
    "example_r2d1_gym.py": ["--n_steps", "6400", "--log_interval_steps", "3200", "--seed", "1"],
    "example_ppo_mujoco.py": ["--n_steps", "256", "--log_interval_steps", "128",
                              "--batch_T", "64", "--batch_B", "2", "--seed", "1"],
    "example_sac_mujoco.py": ["--n_steps", "200", "--log_interval_steps", "100",
                              "--min_steps_learn", "100", "--eval_max_trajectories", "2",
                              "--seed", "1"],
    "example_ppo_ray.py": ["--n_workers", "2", "--n_steps", "2048", "--log_interval_steps",
                           "1024", "--seed", "1"],
    "example_sync_ppo.py": ["--n_rank", "2", "--n_steps", "2048", "--log_interval_steps", "1024",
                            "--seed", "1"],
    "example_dqn_async.py": ["--sampler", "cpu", "--n_steps", "2048", "--log_interval_steps",
                             "1024", "--seed", "1"],
    "example_dqn_async_ray.py": ["--n_workers", "2", "--n_steps", "2048",
                                 "--log_interval_steps", "1024", "--seed", "1"],
    "example_sac_async.py": ["--n_steps", "400", "--log_interval_steps", "200",
                             "--min_steps_learn", "100", "--seed", "1"],
    "example_dqn_atari.py": ["--n_steps", "400", "--log_interval_steps", "200",
                             "--min_steps_learn", "100", "--replay_size", "1000",
                             "--eval_n_envs", "1", "--eval_max_steps", "200", "--seed", "1"],
    "example_a2c_atari.py": ["--sample_mode", "cpu", "--n_steps", "320",
                             "--log_interval_steps", "160", "--batch_B", "4",
                             "--max_decorrelation_steps", "10", "--seed", "1"],
    "example_a2c_lstm_atari.py": ["--n_steps", "640", "--log_interval_steps", "320",
                                  "--batch_B", "4", "--max_decorrelation_steps", "10",
                                  "--seed", "1"],
    "example_dqn_atari_gpu_sampler.py": ["--n_steps", "256", "--log_interval_steps", "128",
                                         "--batch_B", "4", "--batch_size", "32",
                                         "--min_steps_learn", "64", "--replay_size", "1000",
                                         "--eval_n_envs", "1", "--eval_max_steps", "200",
                                         "--seed", "1"],
    "example_dqn_atari_async.py": ["--sampler", "cpu", "--n_steps", "2000",
                                   "--log_interval_steps", "1000", "--min_steps_learn", "200",
                                   "--replay_size", "2000", "--eval_max_steps", "200",
                                   "--seed", "1"],
    "example_td3_pendulum.py": ["--n_steps", "200", "--log_interval_steps", "100",
                                "--min_steps_learn", "100", "--seed", "1"],
}
# The launcher runs its child script once per run (2 settings x 2 runs, one core each):
# test_example_launch covers both.
LAUNCHER_CASES = {"example_launch.py": ["--n_steps", "512", "--log_interval_steps", "256"]}
LAUNCHED = {"example_launch_child.py"}


def test_every_example_is_covered():
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py")}
    assert scripts == set(CASES) | set(LAUNCHER_CASES) | LAUNCHED


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_example_runs(script, in_tmp_cwd, warm_python):
    if "mujoco" in script and not HAS_MUJOCO:
        pytest.skip("mujoco extra not installed")
    if script.endswith("_ray.py") and not HAS_RAY:
        pytest.skip("ray extra not installed")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = warm_python.run(os.path.join(EXAMPLES, script), CASES[script], in_tmp_cwd, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Training complete." in proc.stdout
    (run_dir,) = run_dirs(in_tmp_cwd)
    for name in ("params.json", "progress.csv", "debug.log", "params.pkl"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    if script == "quickstart.py":
        assert f"Run directory: {run_dir}" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(LAUNCHER_CASES))
def test_example_launch(script, in_tmp_cwd, warm_python):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = warm_python.run(os.path.join(EXAMPLES, script), LAUNCHER_CASES[script], in_tmp_cwd,
                           env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 succeeded, 0 failed" in proc.stdout
    found = run_dirs(in_tmp_cwd)
    assert sorted(os.path.basename(d) for d in found) == ["run_0", "run_0", "run_1", "run_1"]
    for run_dir in found:
        for name in ("params.json", "progress.csv", "debug.log", "params.pkl", "launch.log"):
            assert os.path.exists(os.path.join(run_dir, name)), (run_dir, name)
        with open(os.path.join(run_dir, "launch.log")) as f:
            assert "Training complete." in f.read()
        assert os.path.exists(os.path.join(os.path.dirname(run_dir), "variant_config.json"))
