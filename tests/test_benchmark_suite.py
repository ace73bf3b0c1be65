"""``rlframe benchmark``: a suite's runs over run slots, kept, resumed or restarted."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from rlframe.algos.pg.ppo import PPO
from rlframe.cli import main
from rlframe.presets import ALGOS, build_experiment
from rlframe.presets.suite import load_suite
from rlframe.utils.plotting import format_count
from rlframe.utils.system import cpu_model

pytest.importorskip("scipy")


def tiny_suite(path, n_steps=2048, seeds=2, log_interval=1024):
    path.write_text(json.dumps(dict(name="tiny", runs=[dict(
        algo="ppo", env_id="CartPole-v1", n_steps=n_steps, seeds=seeds,
        config=dict(log_interval_steps=log_interval, batch_B=2, batch_T=256,
                    kwargs=dict(sampler=dict(eval_n_envs=0), algo=dict(epochs=1))),
        reference=dict(score=500, steps=100000, source="CartPole-v1's maximum return"))])))
    return str(path)


def cum_steps(run_dir):
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    return [int(float(row["Diagnostics/CumSteps"])) for row in rows]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_suite_runs_over_two_slots_and_a_second_call_runs_nothing(in_tmp_cwd, capsys):
    suite = tiny_suite(in_tmp_cwd / "tiny.json")
    assert main(["benchmark", suite, "-o", "out", "--slots", "2"]) == 0
    for seed in (0, 1):
        run_dir = os.path.join("out", "ppo_CartPole-v1", f"run_{seed}")
        assert os.path.isfile(os.path.join(run_dir, "suite_done.json"))
        assert cum_steps(run_dir) == [1024, 2048]
        with open(os.path.join(run_dir, "params.json")) as f:
            assert json.load(f)["seed"] == seed
        with open(os.path.join(run_dir, "system.json")) as f:
            record, = json.load(f)
        assert record["start"] == "new" and record["cpu"] == cpu_model()
        assert record["packages"]["torch"] and "commit" in record
        # The CPUs other processes kept busy at the start (the other slot's run is not
        # on this run's core), and those processes.
        assert set(record["busy_cpus"]) <= {str(c) for c in record["usable_cpus"]}
        assert isinstance(record["other_processes"], list)
    capsys.readouterr()
    assert main(["benchmark", suite, "-o", "out"]) == 0
    assert "0 to run" in capsys.readouterr().out
    assert main(["report", "out", "--suite", suite]) == 0
    out = capsys.readouterr().out
    assert "| ppo_CartPole-v1 | CartPole-v1 | 2 | 2.05k |" in out
    assert "500 at 100k (CartPole-v1's maximum return)" in out
    assert "Trained for fewer steps than their reference: ppo_CartPole-v1." in out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_suite_completes_when_run_again(in_tmp_cwd):
    """SIGKILL to the launcher while its second run trains: that run stops too (no
    orphan); the same command then keeps the finished run and resumes the other from its
    snapshot instead of starting it over."""
    suite = tiny_suite(in_tmp_cwd / "tiny.json", n_steps=10240, log_interval=1024)
    command = [sys.executable, "-m", "rlframe", "benchmark", suite, "-o", "out"]
    launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    first = os.path.join("out", "ppo_CartPole-v1", "run_0")
    second = os.path.join("out", "ppo_CartPole-v1", "run_1")
    try:
        deadline = time.monotonic() + 200
        while not (os.path.isfile(os.path.join(second, "params.pkl"))
                   and os.path.isfile(os.path.join(second, "progress.csv"))
                   and len(cum_steps(second)) >= 2):
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        children = psutil.Process(launcher.pid).children(recursive=True)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"runs left behind by the killed launcher: {alive}"
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert os.path.isfile(os.path.join(first, "suite_done.json"))
    assert not os.path.isfile(os.path.join(second, "suite_done.json"))
    first_mtime = os.path.getmtime(os.path.join(first, "progress.csv"))
    killed_at = cum_steps(second)[-1]
    assert 0 < killed_at < 10240
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "run_0: done" in result.stdout
    assert f"run_1: resume (logged {format_count(killed_at)} of 10.2k steps)" in result.stdout
    assert os.path.getmtime(os.path.join(first, "progress.csv")) == first_mtime
    steps = cum_steps(second)
    assert steps == sorted(set(steps)) and steps[-1] == 10240  # Continued, not restarted.
    assert killed_at in steps and steps[0] == 1024
    with open(os.path.join(second, "system.json")) as f:
        assert [record["start"] for record in json.load(f)] == ["new", "resume"]


@pytest.mark.parametrize("change, message", [
    (["--slots", "0"], "--slots 0: give 1 to"),
    (["--dry-run", "-o", "tiny.json"], "-o tiny.json is a file"),
    (["--only", "ppo_Cartpole-v1"], "--only ppo_Cartpole-v1: no such entry in "),
])
def test_bad_options(in_tmp_cwd, capsys, change, message):
    suite = tiny_suite(in_tmp_cwd / "tiny.json")
    assert main(["benchmark", suite, "-o", "out"] + change) == 2
    assert message in capsys.readouterr().err


def test_a_bad_suite_is_refused_before_anything_runs(in_tmp_cwd, capsys):
    (in_tmp_cwd / "bad.json").write_text(json.dumps(dict(name="bad", runs=[dict(
        algo="ppo", env_id="CartPole-v1", n_steps=100, seeds=1,
        reference=dict(score=1, steps=1))])))
    assert main(["benchmark", "bad.json", "-o", "out"]) == 2
    assert "has no 'source'" in capsys.readouterr().err
    assert not os.path.exists("out")


def two_entry_suite(path):
    """The tiny suite and an A2C entry beside it (label ``a2c_CartPole-v1``)."""
    content = json.loads(open(tiny_suite(path)).read())
    a2c = json.loads(json.dumps(content["runs"][0]))
    del a2c["config"]["kwargs"]["algo"]  # PPO's epochs.
    content["runs"].append(dict(a2c, algo="a2c", seeds=1))
    path.write_text(json.dumps(content))
    return content


def test_an_entry_whose_runs_the_folder_holds_may_not_change(in_tmp_cwd, capsys):
    """The folder's copy of the suite its runs started from: an entry with a finished or
    resumable run there keeps what decides its runs (its notes, reference and seeds may
    change); the message names each change. Entries without runs may change or go."""
    then = two_entry_suite(in_tmp_cwd / "tiny.json")
    os.makedirs("out/ppo_CartPole-v1/run_0")
    os.makedirs("out/a2c_CartPole-v1/run_0")  # Started, no snapshot yet: starts again.
    (in_tmp_cwd / "out/ppo_CartPole-v1/run_0/suite_done.json").write_text("{}")
    (in_tmp_cwd / "out/suite.json").write_text(json.dumps(then))

    def dry_run(now):
        (in_tmp_cwd / "tiny.json").write_text(json.dumps(now))
        code = main(["benchmark", "tiny.json", "-o", "out", "--dry-run"])
        return code, capsys.readouterr()

    now = json.loads(json.dumps(then))
    now["runs"][1]["n_steps"] = 4096  # A2C's entry holds no run.
    now["runs"][0].update(seeds=3, notes="more seeds",
                          reference=dict(score=475, steps=100000, source="an older table"))
    code, out = dry_run(now)
    assert code == 0, out.err
    assert "ppo_CartPole-v1/run_0: done" in out.out and "ppo_CartPole-v1/run_2: new" in out.out
    now["runs"][0]["n_steps"] = 4096
    now["runs"][0]["config"]["kwargs"]["algo"]["epochs"] = 2
    code, out = dry_run(now)
    assert code == 2
    assert ("out holds runs of entries that tiny.json gives otherwise now (its suite.json -> "
            "now: ppo_CartPole-v1: config.kwargs.algo.epochs: 1 -> 2; ppo_CartPole-v1: "
            "n_steps: 2048 -> 4096); give a new -o, or remove") in out.err
    code, out = dry_run(dict(now, runs=now["runs"][1:]))
    assert code == 2 and "ppo_CartPole-v1: no such entry now" in out.err
    (in_tmp_cwd / "out/suite.json").write_text(json.dumps([then]))
    code, out = dry_run(then)
    assert code == 2 and "suite.json is no suite file this rlframe reads" in out.err
    (in_tmp_cwd / "out/suite.json").write_text(json.dumps(then))
    os.remove("out/ppo_CartPole-v1/run_0/suite_done.json")  # No run held: any change goes.
    assert dry_run(now)[0] == 0


def test_a_kept_run_with_other_settings_than_its_entry_now_is_refused(in_tmp_cwd, capsys,
                                                                      monkeypatch):
    """A finished seed recorded with settings the entry no longer gives (a preset changed
    since) is refused, naming the keys, before anything runs; a keyword an older
    params.json lacks counts as its class's default."""
    suite = tiny_suite(in_tmp_cwd / "tiny.json")
    content = json.loads(open(suite).read())
    content["runs"][0]["config"]["kwargs"]["algo"]["normalize_reward"] = False
    (in_tmp_cwd / "tiny.json").write_text(json.dumps(content))
    entry = load_suite(suite).entries[0]
    _, full = build_experiment(entry.train_config(0))
    params = json.loads(json.dumps(full))
    del params["kwargs"]["algo"]["normalize_reward"]  # PPO's default, which the entry states.
    assert PPO().normalize_reward is False
    # The sampler's default for eval_n_envs (0, the entry's) comes through its **kwargs.
    del params["kwargs"]["sampler"]["eval_n_envs"]
    run_dir = in_tmp_cwd / "out" / entry.label / "run_0"
    os.makedirs(run_dir)
    (run_dir / "params.json").write_text(json.dumps(params))
    (run_dir / "suite_done.json").write_text(json.dumps(dict(n_steps=entry.n_steps)))
    assert main(["benchmark", suite, "-o", "out", "--dry-run"]) == 0
    assert "ppo_CartPole-v1/run_0: done" in capsys.readouterr().out

    discrete = ALGOS["ppo"].settings["discrete"]
    monkeypatch.setitem(discrete, "algo", dict(discrete["algo"], entropy_loss_coeff=0.05,
                                               value_loss_coeff=2.))
    monkeypatch.setitem(discrete, "run", dict(discrete["run"], log_interval_steps=512))
    assert main(["benchmark", suite, "-o", "out", "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"ppo_CartPole-v1/run_0 was trained with other settings than {suite} gives its "
            "entry now (its params.json -> now: kwargs.algo.entropy_loss_coeff: 0.0 -> 0.05; "
            "kwargs.algo.value_loss_coeff: 0.5 -> 2.0). rlframe's presets may have changed "
            "since it started: give a new -o") in err
    # The suite's own config wins over the preset: log_interval_steps is the entry's.
    assert "log_interval_steps" not in err
    (run_dir / "suite_done.json").unlink()
    assert main(["benchmark", suite, "-o", "out", "--dry-run"]) == 0  # Not started: new.


def test_only_runs_the_named_entries(in_tmp_cwd, capsys):
    suite = in_tmp_cwd / "two.json"
    suite.write_text(json.dumps(dict(name="two", runs=[
        dict(algo="ppo", env_id="CartPole-v1", n_steps=2048, seeds=2),
        dict(algo="a2c", env_id="CartPole-v1", n_steps=2048, seeds=1, label="a2c_cartpole")])))
    assert main(["benchmark", str(suite), "-o", "out", "--dry-run", "--only", "a2c_cartpole"]) == 0
    out = capsys.readouterr().out
    assert "1 runs in out, 1 to run" in out and "a2c_cartpole/run_0: new" in out
    assert "ppo_CartPole-v1" not in out
    assert main(["benchmark", str(suite), "-o", "out", "--dry-run", "--only", "nope"]) == 2
    assert "its labels are ppo_CartPole-v1, a2c_cartpole" in capsys.readouterr().err


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
def test_only_the_entries_that_run_must_fit_the_slots(in_tmp_cwd, capsys, monkeypatch):
    from rlframe.utils.launching import grid
    monkeypatch.setattr(grid, "slot_cores", lambda: (2, True))
    suite = in_tmp_cwd / "two.json"
    suite.write_text(json.dumps(dict(name="two", runs=[
        dict(algo="ppo", env_id="CartPole-v1", n_steps=2048, seeds=1,
             config=dict(sampler="cpu", n_parallel=2, batch_B=4)),
        dict(algo="a2c", env_id="CartPole-v1", n_steps=2048, seeds=1,
             config=dict(n_parallel=64))])))
    # Two runs at once get one core each: refused before anything runs, naming the entry.
    assert main(["benchmark", str(suite), "-o", "out", "--slots", "2",
                 "--only", "ppo_CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert ("runs[0] (ppo on CartPole-v1): n_parallel=2 needs 2 cores, but with --slots 2 each "
            "run gets 1 of this process's 2; give --slots 1\n") in err + "\n"
    assert not os.path.exists("out")
    # An entry left out with --only is not checked against this machine's CPUs ...
    assert main(["benchmark", str(suite), "-o", "out", "--slots", "1", "--dry-run",
                 "--only", "ppo_CartPole-v1"]) == 0
    assert "ppo_CartPole-v1/run_0: new" in capsys.readouterr().out
    # ... but is when it runs.
    assert main(["benchmark", str(suite), "-o", "out", "--dry-run"]) == 2
    assert "runs[1] (a2c on CartPole-v1): n_parallel=64 (--n-parallel) exceeds the" in \
        capsys.readouterr().err
