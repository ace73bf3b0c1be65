"""rlframe autotune: the candidates, the successive-halving choice, the measurement and
the config it writes for ``rlframe train --config``."""
import json
import os
import random
import subprocess
import sys

import pytest

from rlframe.presets.autotune import (Candidate, Measurement, candidates, measure_in_process,
                                      select)
from rlframe.presets.build import build_experiment


def synthetic_grid(rng, n):
    """n candidates with true speeds: a few set-ups close to the best, most far below."""
    cands = [Candidate("serial" if i % 4 == 0 else "cpu", None if i % 4 == 0 else 2,
                       "plain", 8 + i, 1 + i % 2) for i in range(n)]
    best = rng.uniform(1000, 5000)
    speeds = {c: best * (rng.uniform(0.85, 1.0) if rng.random() < 0.2 else rng.uniform(0.2, 0.9))
              for c in cands}
    return cands, speeds


@pytest.mark.parametrize("noise", [0.0, 0.03, 0.05])
def test_the_choice_is_within_ten_percent_of_the_exhaustive_grids_best(noise):
    """Measurements off by up to +-noise: the chosen set-up's true speed is within 10% of
    the best set-up an exhaustive grid (every candidate measured long) finds, in each of
    200 random grids, with fewer measurements than two per candidate."""
    rng = random.Random(0)
    for _ in range(200):
        cands, speeds = synthetic_grid(rng, rng.choice([8, 16, 28, 48]))
        calls = []

        def measure_one(c, seconds):
            calls.append(seconds)
            # Longer measurements are less noisy.
            return speeds[c] * (1 + rng.uniform(-noise, noise) * (2.5 / seconds) ** 0.5)

        chosen = select(cands, lambda group, s: [measure_one(c, s) for c in group],
                        seconds=(2.5, 6))[0].candidate
        assert len(calls) < 2 * len(cands)
        exhaustive_best = max(cands, key=lambda c: measure_one(c, 6))
        assert speeds[chosen] >= 0.9 * speeds[exhaustive_best]


def test_failed_set_ups_are_reported_and_ranked_last():
    cands = [Candidate("serial", None, "plain", 8, t) for t in (1, 2, 3)]

    cands[1] = Candidate("cpu", 2, "plain", 8, 2)
    groups = []

    def measure(group, seconds):
        groups.append([c.torch_threads for c in group])
        if group[0].sampler == "cpu":
            raise ValueError("cannot\n  run here")
        return [100. * c.torch_threads for c in group]

    ranked = select(cands, measure, seconds=(1, 2))
    assert groups == [[1, 3], [2], [3, 1]]  # One call per set-up; round 2: best first.
    assert [m.candidate.torch_threads for m in ranked] == [3, 1, 2]
    assert ranked[-1].error == "cannot run here" and ranked[-1].score == 0
    assert ranked[0].steps_per_second == [300., 300.]

    def failing(group, seconds):
        raise RuntimeError("no envs")

    with pytest.raises(RuntimeError, match=r"every set-up failed \(3\), with this error: no envs$"):
        select(cands, failing, seconds=(1,))


def test_candidates_follow_the_algorithm_and_the_cores():
    ppo, notes = candidates(dict(algo="ppo", env_id="CartPole-v1"), backends=["plain"],
                            n_cpu=2)
    assert sorted(c.label for c in ppo) == sorted(
        f"{s}, plain, B=8, {t} thread{'s' if t > 1 else ''}"
        for s in ("serial", "cpu x2", "gpu x2", "alternating x2") for t in (1, 2))
    one_core, _ = candidates(dict(algo="ppo", env_id="CartPole-v1"), backends=["plain"],
                             torch_threads=[1], n_cpu=1)
    assert sorted(c.label for c in one_core) == sorted(
        f"{s}, plain, B=8, 1 thread" for s in ("serial", "cpu x1", "gpu x1", "alternating x1"))
    # Off-policy: batch_B and twice it (the replay ratio keeps the updates per step).
    dqn, _ = candidates(dict(algo="dqn", env_id="CartPole-v1"), samplers=["serial"],
                        backends=["plain"], torch_threads=[1], n_cpu=2)
    assert sorted(c.batch_B for c in dqn) == [8, 16]
    # B=3 splits over no pair of workers; the alternating sampler needs 2 groups each.
    odd, notes = candidates(dict(algo="ppo", env_id="CartPole-v1", batch_B=3),
                            samplers=["cpu", "alternating"], backends=["plain"], n_cpu=2)
    assert odd == [] and any("alternating sampler with B=3" in n for n in notes)
    with pytest.raises(ValueError, match=r"unknown sampler 'gpus'.*serial, cpu, gpu"):
        candidates(dict(algo="ppo", env_id="CartPole-v1"), samplers=["gpus"])
    with pytest.raises(ValueError, match=r"unknown env backend 'ray'"):
        candidates(dict(algo="ppo", env_id="CartPole-v1"), backends=["ray"])


def test_a_candidates_config_builds_that_set_up():
    base = dict(algo="ppo", env_id="CartPole-v1",
                kwargs=dict(algo=dict(learning_rate=3e-4), sampler=dict(env_backend="envpool")))
    config = Candidate("cpu", 2, "plain", 16, 2).config(base)
    runner, full = build_experiment(config)
    assert (full["sampler"], full["n_parallel"], full["batch_B"], full["torch_threads"]) == \
        ("cpu", 2, 16, 2)
    assert "env_backend" not in full["kwargs"]["sampler"]
    assert full["kwargs"]["algo"]["learning_rate"] == 3e-4
    assert runner.affinity["master_torch_threads"] == 2
    assert base["kwargs"]["sampler"] == dict(env_backend="envpool")  # Not modified.
    gym = Candidate("serial", None, "gymnasium", 8, 1).config(base)
    assert build_experiment(gym)[0].sampler.env_backend == "gymnasium"


@pytest.mark.slow
def test_measuring_trains_in_a_child_and_reports_its_error():
    speeds = measure_in_process(dict(algo="ppo", env_id="CartPole-v1", batch_T=32), 0.2,
                                [1, 2])
    assert len(speeds) == 2 and min(speeds) > 100
    bad = dict(algo="ppo", env_id="CartPole-v1", kwargs=dict(algo=dict(learning_rte=1e-3)))
    with pytest.raises(RuntimeError, match=r"ValueError: .*'learning_rte'"):
        measure_in_process(bad, 0.2)


def test_the_table_marks_the_choice_and_the_failures():
    from rlframe.presets.autotune import AutotuneResult
    a, b = Candidate("serial", None, "plain", 8, 1), Candidate("cpu", 2, "envpool", 8, 1)
    result = AutotuneResult([Measurement(a, [900., 1000.]), Measurement(b, [], "no EnvPool")],
                            a, {})
    assert result.table().splitlines()[2:] == [
        "| serial, plain, B=8, 1 thread (chosen) | 900 | 1,000 |",
        "| cpu x2, envpool, B=8, 1 thread | failed: no EnvPool |  |"]


@pytest.mark.slow
def test_rlframe_autotune_writes_a_config_rlframe_train_takes(tmp_path):
    out = tmp_path / "fast.json"
    cmd = [sys.executable, "-m", "rlframe", "autotune", "ppo", "CartPole-v1", "--samplers",
           "serial", "cpu", "--backends", "plain", "--torch-threads", "1", "--batch-T", "32",
           "--seconds", "0.3", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| set-up | round 1 steps/s |" in done.stdout
    assert "(chosen)" in done.stdout and "rlframe train ppo CartPole-v1 --config" in done.stdout
    chosen = json.loads(out.read_text())
    assert chosen["sampler"] in ("serial", "cpu") and chosen["batch_T"] == 32
    assert "seed" not in chosen
    train = [sys.executable, "-m", "rlframe", "train", "ppo", "CartPole-v1", "--config",
             str(out), "--n-steps", "512", "--log-interval-steps", "256", "--log-dir",
             str(tmp_path / "run"), "--run-id", "0"]
    done = subprocess.run(train, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    params = json.loads((tmp_path / "run" / "run_0" / "params.json").read_text())
    assert (params["sampler"], params["n_parallel"], params["torch_threads"]) == \
        (chosen["sampler"], chosen["n_parallel"], 1)
    assert params["batch_T"] == 32 and params["n_steps"] == 512


def test_rlframe_autotune_warns_first_when_its_cpus_are_busy(monkeypatch, capsys):
    import rlframe.presets.autotune
    import rlframe.utils.system
    from rlframe.cli import main
    busy = rlframe.utils.system.CpuLoad(
        {0: 98.0, 1: 4.0}, [rlframe.utils.system.OtherProcess(41, "python other.py", 97., [0])])
    monkeypatch.setattr(rlframe.utils.system, "measure_cpu_load", lambda *args: busy)

    def measured(*args, **kwargs):
        print("measuring", file=sys.stderr)
        raise RuntimeError("no set-up could run")

    monkeypatch.setattr(rlframe.presets.autotune, "autotune", measured)
    assert main(["autotune", "ppo", "CartPole-v1", "-o", os.devnull]) == 2
    err = capsys.readouterr().err
    assert err.index("WARNING: CPU(s) 0 (98%) of the 2 that rlframe autotune uses were "
                     "already busy, with pid 41 'python other.py'") < err.index("measuring")


def test_rlframe_autotune_refuses_bad_choices(capsys):
    from rlframe.cli import main
    assert main(["autotune", "ppo", "CartPole-v1", "--samplers", "serial", "ray"]) == 2
    assert "--samplers: unknown sampler 'ray'; samplers: serial, cpu, gpu, alternating." in \
        capsys.readouterr().err
    assert main(["autotune", "ppo", "CartPole-v1", "--backends", "env_pool"]) == 2
    assert "unknown env backend 'env_pool'" in capsys.readouterr().err
    assert main(["autotune", "ppo", "CartPole-v1", "--seconds", "0"]) == 2
    assert "--seconds takes positive values, got [0.0]." in capsys.readouterr().err


def test_train_takes_a_full_config_with_its_options_on_top(tmp_path):
    from rlframe.cli.train import add_parser, config_from_args
    import argparse
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    path = tmp_path / "c.json"
    path.write_text(json.dumps(dict(algo="ppo", env_id="CartPole-v1", sampler="cpu",
                                    n_parallel=2, batch_B=16, torch_threads=2, seed=5,
                                    kwargs=dict(algo=dict(epochs=2)))))
    args = parser.parse_args(["train", "ppo", "CartPole-v1", "--config", str(path),
                              "--batch-B", "8", "--n-parallel", "1"])
    config = config_from_args(args)
    assert config["sampler"] == "cpu" and config["torch_threads"] == 2
    assert (config["batch_B"], config["n_parallel"]) == (8, 1)  # The options win.
    assert "seed" not in config and config["kwargs"] == dict(algo=dict(epochs=2))
    args = parser.parse_args(["train", "dqn", "CartPole-v1", "--config", str(path)])
    with pytest.raises(ValueError, match=r"config for algo='ppo', but the command line asks "
                                         r"for 'dqn'"):
        config_from_args(args)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl_c", "killed"])
def test_stopping_autotune_leaves_no_process(tmp_path, request, how):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) stops the measuring
    process and its sampler workers; a killed autotune's measuring process stops itself
    and its workers, and removes the killed process's multiprocessing folder (where the
    forkserver's socket is), which that process could not."""
    import os
    import pathlib
    import shutil
    import signal
    import tempfile
    import time

    import psutil
    from conftest import start_script
    cmd = [sys.executable, "-m", "rlframe", "autotune", "ppo", "CartPole-v1", "--samplers",
           "cpu", "--backends", "plain", "--torch-threads", "1", "--seconds", "60"]
    # A temporary directory of its own, with a short path: the forkserver's socket is
    # in it, and with a socket's path over 107 bytes (tmp_path's may come near) autotune
    # would spawn its child instead of the forkserver this test stops.
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rlframe-autotune-test-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    proc = start_script(cmd, cwd=tmp_path, env=dict(os.environ, TMPDIR=str(tmp)))
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    workers = []
    while time.monotonic() < deadline and len(workers) < 2:  # The sampler's workers.
        time.sleep(0.2)
        seen = parent.children(recursive=True)
        workers = [p for p in seen if p.ppid() not in (proc.pid, 1) and
                   p.ppid() in {q.pid for q in seen} and p.children() == [] and
                   psutil.Process(p.ppid()).ppid() != proc.pid]
    seen = parent.children(recursive=True)
    assert len(workers) >= 2, seen  # Forkserver -> measuring child -> 2 workers.
    if how == "ctrl_c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.kill()
    proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(seen, timeout=30)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("pymp-")]
