"""rlframe tune (rlframe.tune): search spaces, studies checked before any trial, trials in
worker processes that report to Optuna, prune, resume after a kill and share a study."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from rlframe.tune import TuneError, prepare  # noqa: E402
from rlframe.tune.space import SpaceError, apply, default_space, parse_space  # noqa: E402
from rlframe.tune.settings import TuneSettings  # noqa: E402
from rlframe.tune.study import load_study  # noqa: E402
from rlframe.tune.trials import objective_value, trial_dirs  # noqa: E402
from rlframe.tune.summary import trial_config  # noqa: E402

# A fast trial: PPO on CartPole, 4 log rows of 256 steps, 4 evaluation episodes each.
FAST = dict(batch_T=64, batch_B=2, torch_threads=1, kwargs=dict(sampler=dict(eval_n_envs=2,
                                                            eval_max_trajectories=4)))
SPACE = {"algo.learning_rate": {"low": 1e-4, "high": 3e-2, "log": True},
         "algo.epochs": {"low": 1, "high": 4}}


def test_space_keys_and_distributions():
    space = parse_space({"algo.learning_rate": {"low": 1e-5, "high": 1e-2, "log": True},
                         "kwargs.algo.epochs": {"low": 1, "high": 8},
                         "batch_T": {"choices": [64, 128]},
                         "agent.model_kwargs.hidden_sizes": {"choices": [[64], [32, 32]]},
                         "algo.discount": {"low": 0, "high": 1, "type": "float"}})
    assert list(space) == ["kwargs.algo.learning_rate", "kwargs.algo.epochs", "batch_T",
                           "kwargs.agent.model_kwargs.hidden_sizes", "kwargs.algo.discount"]
    assert space["kwargs.algo.epochs"].integer and not space["kwargs.algo.discount"].integer
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    values = {key: dist.suggest(trial) for key, dist in space.items()}
    assert 1e-5 <= values["kwargs.algo.learning_rate"] <= 1e-2
    assert values["kwargs.agent.model_kwargs.hidden_sizes"] in ([64], [32, 32])
    assert isinstance(values["kwargs.algo.epochs"], int) and 1 <= values["kwargs.algo.epochs"] <= 8
    stored = trial.params["kwargs.agent.model_kwargs.hidden_sizes"]  # Optuna holds JSON text.
    assert space["kwargs.agent.model_kwargs.hidden_sizes"].decode(stored) == values[
        "kwargs.agent.model_kwargs.hidden_sizes"]
    config = apply(dict(algo="ppo", kwargs=dict(algo=dict(epochs=2))), values)
    assert config["kwargs"]["algo"]["epochs"] == values["kwargs.algo.epochs"]
    assert config["kwargs"]["agent"]["model_kwargs"]["hidden_sizes"] in ([64], [32, 32])
    assert config["batch_T"] in (64, 128)
    for algo in ("ppo", "a2c", "dqn", "catdqn", "r2d1", "sac", "td3", "ddpg"):
        for profile in ("discrete", "continuous", "atari"):
            assert default_space(algo, profile)
    assert "kwargs.agent.model_kwargs.hidden_sizes" not in default_space("ppo", "atari")
    assert default_space("ppo", "discrete")["batch_T"].choices == (32, 64, 128, 256)


@pytest.mark.parametrize("raw, message", [
    ({"algo.learning_rate": {"low": 1e-2, "high": 1e-5}}, "low must be below high"),
    ({"algo.learning_rate": {"low": 0, "high": 1, "log": True}}, "a log distribution needs "
                                                                 "low > 0"),
    ({"batch_T": {"choices": []}}, "choices must be a non-empty list"),
    ({"batch_T": {"choices": [1], "low": 1}}, "choices cannot go with low"),
    ({"algo.epochs": {"low": 1, "hihg": 3}}, r"unknown field 'hihg'. Did you mean 'high'\?"),
    ({"algo.epochs": {"low": 1.5, "high": 3, "type": "int"}}, "an int distribution needs "
                                                              "whole bounds"),
    ({"batch_t": {"choices": [1]}}, r"unknown key 'batch_t'. Did you mean 'batch_T'"),
    ({"agnt.x": {"choices": [1]}}, r"unknown key 'agnt.x'"),
    ({"kwargs.algoo.x": {"choices": [1]}}, r"Did you mean 'algo'\?"),
    ({}, "must be a non-empty object"),
])
def test_bad_spaces_name_the_key(raw, message):
    with pytest.raises(SpaceError, match=message):
        parse_space(raw)


@pytest.mark.slow
def test_bad_set_ups_are_refused_before_any_trial(tmp_path):
    def bad(message, **kwargs):
        args = dict(algo="ppo", env_id="CartPole-v1", out_dir=str(tmp_path / "t"),
                    n_steps=512, space=SPACE, config=FAST)
        args.update(kwargs)
        with pytest.raises(TuneError, match=message):
            prepare(**args)

    bad(r"PPO takes no keyword 'learning_rat'.*Did you mean 'learning_rate'\?",
        space={"algo.learning_rat": {"low": 1e-4, "high": 1e-2}})
    bad("low must be below high", space={"algo.learning_rate": {"low": 1, "high": 0.1}})
    bad("trials must be a positive whole number, got 0", trials=0)
    bad("pruner must be one of median, halving, none, got 'mean'", pruner="mean")
    bad(r"--storage 'sqlite:////no/such/dir/study.db' cannot be used",
        storage="sqlite:////no/such/dir/study.db")
    for algo, env_id in (("ppo", "CartPole-v1"), ("a2c", "Pendulum-v1"), ("dqn", "CartPole-v1"),
                         ("sac", "Pendulum-v1")):  # The default spaces build.
        assert prepare(algo, env_id, str(tmp_path / "d" / algo), n_steps=512).space
    settings = prepare("ppo", "CartPole-v1", str(tmp_path / "a"), n_steps=512, space=SPACE,
                       config=FAST, storage=f"sqlite:///{tmp_path}/shared.db", study_name="s")
    assert settings.config["log_interval_steps"] == 51  # Rows for the pruner.
    bad(r"--study-name 's' in .* is a study of another set-up \(algo: the study's 'ppo', "
        r"here 'a2c'", algo="a2c", storage=f"sqlite:///{tmp_path}/shared.db", study_name="s",
        space={"algo.learning_rate": SPACE["algo.learning_rate"]})
    optuna.create_study(storage=f"sqlite:///{tmp_path}/shared.db", study_name="min",
                        direction="minimize")
    bad("exists with another direction", storage=f"sqlite:///{tmp_path}/shared.db",
        study_name="min")
    assert not os.path.exists(tmp_path / "t" / "tune.json")


def test_objective_is_the_iqm_or_the_mean():
    assert objective_value([1., 2., 3., 100.], "iqm") == 2.5  # 1 and 100 cut.
    assert objective_value([1., 2., 3., 100.], "mean") == 26.5
    assert objective_value([4., 6.], "iqm") == 5.


@pytest.fixture
def tune_command(tmp_path):
    """``rlframe tune`` of PPO on CartPole with SPACE, 1024 steps a run, 5 rows each."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPACE))

    def command(out, *extra, trials=3):
        return [sys.executable, "-m", "rlframe", "tune", "ppo", "CartPole-v1", "-o", str(out),
                "--trials", str(trials), "--n-steps", "1024", "--space", str(space),
                "--config", json.dumps(dict(FAST, log_interval_steps=256)), *extra]
    return command


def study_of(out):
    settings = TuneSettings(**json.load(open(os.path.join(out, "tune.json"))))
    return settings, load_study(settings)


@pytest.mark.slow
def test_tune_runs_its_trials_and_its_best_config_trains(tmp_path, tune_command):
    out = tmp_path / "tune"
    done = subprocess.run([*tune_command(out, trials=3), "--seeds", "2", "--pruner", "none"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    settings, study = study_of(out)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:  # Each trial's value is the IQM (here the mean) of its two seeds.
        finals = t.user_attrs["finals"]
        assert len(finals) == 2 and t.value == pytest.approx(sum(finals) / 2)
        # 4 trained rows a seed, at seed * n_steps + steps.
        assert sorted(t.intermediate_values) == [256, 512, 768, 1024, 1280, 1536, 1792, 2048]
    best = json.load(open(out / "best_config.json"))
    assert best == trial_config(settings, study.best_trial.params)
    assert best["kwargs"]["algo"]["learning_rate"] == study.best_trial.params[
        "kwargs.algo.learning_rate"]
    from rlframe.presets import build_experiment
    build_experiment(best)  # rlframe train --config takes it.
    params = json.load(open(out / "trial_0" / "run_1" / "params.json"))
    assert params["kwargs"]["algo"]["epochs"] == trials[0].params["kwargs.algo.epochs"]
    assert "Best: trial" in done.stdout and "optuna-dashboard" in done.stdout
    assert (out / "trials.md").is_file() and (out / "history.png").is_file()


def tune_workers():
    import psutil
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if (p.info["status"] != psutil.STATUS_ZOMBIE
                and "rlframe.tune.trials" in " ".join(p.info["cmdline"] or [])):
            found.append(p.pid)
    return found


@pytest.mark.slow
def test_a_killed_tune_resumes_its_running_trial_from_its_snapshot(tmp_path, tune_command):
    out = tmp_path / "tune"
    command = tune_command(out, "--pruner", "none", trials=2)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    progress = out / "trial_1" / "run_0" / "progress.csv"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # Trial 1 has written two rows (and snapshots).
        if progress.is_file() and len(progress.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rows_before = progress.read_text().splitlines()
    _, study = study_of(out)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "RUNNING"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and tune_workers():  # They end with their parent.
        time.sleep(0.2)
    assert not tune_workers()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _, study = study_of(out)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "COMPLETE"]
    rows_after = progress.read_text().splitlines()
    assert rows_after[:2] == rows_before[:2]  # Continued, not started again from step 0.
    steps = [int(float(r.split(",")[i])) for r in rows_after[1:]
             for i in [rows_after[0].split(",").index("Diagnostics/CumSteps")]]
    assert steps == sorted(set(steps)) and steps[-1] == 1024
    assert "Resuming the run from" in (out / "trial_1" / "run_0" / "debug.log").read_text()
    assert len(trial_dirs(str(out))) == 2


@pytest.mark.slow
def test_two_tune_commands_share_one_study(tmp_path, tune_command):
    storage = f"journal:{tmp_path}/study.log"
    commands = [tune_command(tmp_path / name, "--storage", storage, "--study-name", "shared",
                             "--sampler", "random", trials=2) for name in ("a", "b")]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in commands]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    _, study = study_of(tmp_path / "a")
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    numbers = [int(os.path.basename(d)[6:]) for name in ("a", "b")
               for d in trial_dirs(str(tmp_path / name))]
    assert sorted(numbers) == [0, 1, 2, 3]  # Each trial ran in one directory only.


def test_the_trials_table_ranks_complete_trials_and_counts_the_rest():
    from optuna.trial import TrialState
    from rlframe.tune.summary import trials_table
    study = optuna.create_study(direction="maximize")
    for value, state in ((1., None), (3., None), (None, TrialState.PRUNED)):
        trial = study.ask()
        trial.suggest_categorical("kwargs.agent.model_kwargs.hidden_sizes", ["[64]", "[32]"])
        trial.suggest_float("batch_T", 1, 2)
        study.tell(trial, value, state=state)
    lines = trials_table(study).splitlines()
    assert lines[0] == "| trial | value | batch_T | agent.model_kwargs.hidden_sizes |"
    assert [line.split(" | ")[0] for line in lines[2:4]] == ["| 1", "| 0"]
    assert lines[-1] == "Trials: 2 complete, 1 pruned, 0 fail, 0 running."


@pytest.mark.slow
def test_a_pruned_trial_stops_with_its_snapshot_and_is_marked_pruned(tmp_path, monkeypatch):
    """A pruner that prunes at the first report: the run ends at its first trained row,
    its snapshot is of that row, and Optuna has the trial as pruned. Its tracked run is in
    the study's group."""
    import torch
    from rlframe.utils.logging import tracking
    pytest.importorskip("mlflow")
    started = []

    class Recorder(tracking.Tracker):
        name = "mlflow"

        def start(self, run_dir, run_name, group, params, state):
            started.append((run_name, group))
            return {}

        def log_row(self, metrics, step):
            pass

        def finish(self, run_dir, files, status):
            started.append(status)
    monkeypatch.setattr(tracking, "make_tracker", lambda name: Recorder())
    from optuna.trial import TrialState
    from rlframe.tune.space import space_to_json
    from rlframe.tune.trials import PRUNED_FILE, run_trial
    settings = TuneSettings(
        algo="ppo", env_id="CartPole-v1", n_steps=1024, trials=1, seeds=[0, 1],
        objective="iqm", space=space_to_json(parse_space(SPACE)),
        config=dict(FAST, log_interval_steps=256), storage="", study_name="s",
        pruner="none", sampler="random", slots=1, track=["mlflow"])
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.ThresholdPruner(lower=1e9))
    trial = study.ask()
    folder = tmp_path / "trial_0"
    folder.mkdir()
    run_trial(study, settings, trial._trial_id, str(folder))
    frozen, = study.get_trials()
    assert frozen.state == TrialState.PRUNED
    assert list(frozen.intermediate_values) == [256]
    assert json.load(open(folder / PRUNED_FILE)) == dict(step=256)
    rows = (folder / "run_0" / "progress.csv").read_text().splitlines()
    assert len(rows) == 3  # Header, the untrained agent's row, the first trained row.
    snapshot = torch.load(folder / "run_0" / "params.pkl", weights_only=True)
    assert snapshot["cum_steps"] == 256
    assert not (folder / "run_1").exists()  # The other seed never started.
    assert started == [("s_trial_0_0", "s"), "FINISHED"]
