"""Variants and the experiment launcher: grids of runs over affinity slots."""
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import psutil
import pytest

from conftest import REPO, read_csv, run_dirs, start_script
from rlframe.utils.launching import exp_launcher, run_process
from rlframe.utils.launching.affinity import (
    affinity_from_code, encode_affinity, prepend_run_slot,
)
from rlframe.utils.launching.exp_launcher import run_experiments, run_experiments_fn
from rlframe.utils.launching.variant import (
    VARIANT, VariantLevel, load_variant, make_variants, save_variant, update_config,
)
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context

CODE = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1)  # Two run slots.


def example_6_levels():
    values = [(7e-4, 16), (1e-3, 32)]
    level1 = VariantLevel([("algo", "learning_rate"), ("sampler", "batch_B")], values,
                          ["example6_{}lr_{}B".format(*v) for v in values])
    level2 = VariantLevel([("env", "game")], [("pong",), ("seaquest",)], ["pong", "seaquest"])
    return level1, level2


# --- Variants ----------------------------------------------------------------------------------

def test_make_variants_crosses_levels_as_rlpyt_example_6():
    variants, log_dirs = make_variants(*example_6_levels())
    assert log_dirs == [os.path.join("example6_0.0007lr_16B", "pong"),
                        os.path.join("example6_0.0007lr_16B", "seaquest"),
                        os.path.join("example6_0.001lr_32B", "pong"),
                        os.path.join("example6_0.001lr_32B", "seaquest")]
    assert variants[0] == {"algo": {"learning_rate": 0.0007}, "sampler": {"batch_B": 16},
                           "env": {"game": "pong"}}
    assert variants[3] == {"algo": {"learning_rate": 0.001}, "sampler": {"batch_B": 32},
                           "env": {"game": "seaquest"}}
    variants[0]["algo"]["learning_rate"] = 1.  # Combinations share no dicts.
    assert variants[1]["algo"]["learning_rate"] == 0.0007
    assert make_variants() == ([{}], [""])


def test_make_variants_nests_deeper_paths_and_single_keys():
    level = VariantLevel([("agent", "model_kwargs", "hidden_sizes"), "seed"],
                         [([32], 1), ([64, 64], 2)], ["small", "big"])
    variants, log_dirs = make_variants(level)
    assert variants[1] == {"agent": {"model_kwargs": {"hidden_sizes": [64, 64]}}, "seed": 2}
    assert log_dirs == ["small", "big"]


def test_make_variants_errors_name_the_problem():
    level1, _ = example_6_levels()
    with pytest.raises(ValueError, match=r"Names must be unique.*'a'"):
        make_variants(VariantLevel([("env", "game")], [("pong",), ("breakout",)], ["a", "a"]))
    with pytest.raises(ValueError, match=r"Names must be unique.*example6_0.0007lr_16B.*same"):
        make_variants(level1, VariantLevel([("env", "game")], [("pong",), ("x",)],
                                           ["same", "same"]))
    with pytest.raises(ValueError, match=r"values\[0\]=0.1 must be a tuple.*algo.learning_rate"):
        make_variants(VariantLevel([("algo", "learning_rate")], [0.1, 0.2], ["a", "b"]))
    with pytest.raises(ValueError, match="2 value tuples but 1 dir_names"):
        make_variants(VariantLevel([("x",)], [(1,), (2,)], ["a"]))
    with pytest.raises(TypeError, match=r"'algo.lr'.*'algo' already holds the value 3"):
        make_variants(VariantLevel([("algo",), ("algo", "lr")], [(3, 0.1)], ["a"]))


def test_update_config_applies_nested_changes_without_touching_inputs():
    default = {"algo": {"learning_rate": 1e-3, "epochs": 4}, "env": {"id": "CartPole-v1"},
               "seed": 0}
    variant = {"algo": {"learning_rate": 3e-4}, "seed": 5}
    config = update_config(default, variant)
    assert config == {"algo": {"learning_rate": 3e-4, "epochs": 4},
                      "env": {"id": "CartPole-v1"}, "seed": 5}
    assert default["algo"]["learning_rate"] == 1e-3 and default["seed"] == 0
    assert variant == {"algo": {"learning_rate": 3e-4}, "seed": 5}
    assert update_config(default, {}) == default


def test_update_config_errors_name_the_key_path():
    default = {"algo": {"learning_rate": 1e-3}, "seed": 0}
    with pytest.raises(KeyError, match=r"'algo.learning_rat' is not in.*learning_rate"):
        update_config(default, {"algo": {"learning_rat": 1.}})
    with pytest.raises(KeyError, match="'env'"):
        update_config(default, {"env": {"id": "x"}})
    with pytest.raises(TypeError, match=r"'algo' holds float 0.1 but.*a dict"):
        update_config(default, {"algo": 0.1})
    with pytest.raises(TypeError, match=r"'seed' holds a dict but.*int 0"):
        update_config(default, {"seed": {"value": 1}})


def test_save_and_load_variant_round_trip(tmp_path):
    variant = {"algo": {"learning_rate": 3e-4, "betas": (0.9, 0.99)}, "env": {"game": "pong"},
               "flag": None}
    path = save_variant(variant, str(tmp_path / "new" / "dir"))
    assert path == str(tmp_path / "new" / "dir" / VARIANT)
    loaded = load_variant(str(tmp_path / "new" / "dir"))
    assert loaded == {"algo": {"learning_rate": 3e-4, "betas": [0.9, 0.99]},
                      "env": {"game": "pong"}, "flag": None}
    with open(path) as f:
        assert json.load(f) == loaded
    with pytest.raises(FileNotFoundError, match=VARIANT):
        load_variant(str(tmp_path))
    with pytest.raises(TypeError, match=r"'algo.optim' holds the value <class 'object'>"):
        save_variant({"algo": {"optim": object}}, str(tmp_path / "bad"))
    with pytest.raises(TypeError, match=r"'algo.1' holds the key 1"):
        save_variant({"algo": {1: 2}}, str(tmp_path / "bad"))
    assert not os.path.exists(tmp_path / "bad" / VARIANT)


# --- Launching ---------------------------------------------------------------------------------

def tiny_run(slot_affinity_code, log_dir, run_ID, variant, *args):
    """A run as small as it gets: says what it received, logs two progress rows."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print("RUN", slot_affinity_code, run_ID, repr(args), "CPUS", cpus, flush=True)
    config = dict(variant=variant, args=[repr(a) for a in args])
    with logger_context(log_dir, int(run_ID), "tiny", config):
        for itr in range(2):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("LearningRate", variant["algo"]["learning_rate"])
            logger.dump_tabular()


# tiny_run as a script: python tiny.py <slot_affinity_code> <log_dir> <run_ID> *args.
SCRIPT = "\n".join([
    "import os, sys",
    "from rlframe.utils.logging import logger",
    "from rlframe.utils.logging.context import logger_context",
    "from rlframe.utils.launching.variant import load_variant",
    "",
    inspect.getsource(tiny_run),
    "code, log_dir, run_ID = sys.argv[1:4]",
    "tiny_run(code, log_dir, run_ID, load_variant(log_dir), *sys.argv[4:])",
])


@pytest.fixture
def launch_env(in_tmp_cwd, monkeypatch):
    """Empty working dir (logs in its ./data); runs import this checkout of rlframe."""
    paths = [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setattr(exp_launcher, "STOP_GRACE_S", 3.)
    return in_tmp_cwd


def lr_variants():
    return make_variants(VariantLevel([("algo", "learning_rate")], [(1e-3,), (3e-4,)],
                                      ["lr_0.001", "lr_0.0003"]))


def exp_dirs(root):
    return [path for path, _, files in os.walk(root / "data") if "experiments_tree.txt" in files]


def check_grid(root, results, expected_args):
    """4 runs (2 variants x 2 run_IDs) done, logged, and each pinned to its slot's CPUs.

    Args:
        expected_args: result -> the repr of the extra arguments its run received.
    """
    (exp_dir,) = exp_dirs(root)
    assert [(os.path.basename(r.log_dir), r.run_ID) for r in results] == [
        ("lr_0.001", 0), ("lr_0.0003", 0), ("lr_0.001", 1), ("lr_0.0003", 1)]
    assert all(r.ok for r in results), [r.launch_log for r in results if not r.ok]
    assert {r.run_slot for r in results} == {0, 1}
    assert len(run_dirs(root)) == 4
    for result in results:
        run_dir = os.path.join(result.log_dir, f"run_{result.run_ID}")
        assert result.launch_log == os.path.join(run_dir, "launch.log")
        lr = load_variant(result.log_dir)["algo"]["learning_rate"]
        assert lr == (1e-3 if result.log_dir.endswith("lr_0.001") else 3e-4)
        header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
        assert len(rows) == 2 and float(rows[0][header.index("LearningRate")]) == lr
        with open(result.launch_log) as f:
            (line,) = [line for line in f if line.startswith("RUN ")]
        slot_code = prepend_run_slot(result.run_slot, CODE)
        assert line.startswith(f"RUN {slot_code} {result.run_ID} {expected_args(result)} CPUS ")
        cpus = line.split("CPUS ")[1].strip()
        if cpus != "None":
            assert cpus == repr(sorted(affinity_from_code(slot_code)["all_cpus"]))
    with open(os.path.join(exp_dir, "num_launched.txt")) as f:
        assert "4 out of 4" in f.read()
    with open(os.path.join(exp_dir, "experiments_tree.txt")) as f:
        tree = f.read()
    assert f"process ID: {os.getpid()}" in tree and "lr_0.0003" in tree


@pytest.mark.slow
def test_run_experiments_runs_the_grid_over_two_slots(launch_env):
    script = launch_env / "tiny.py"
    script.write_text(SCRIPT)
    variants, log_dirs = lr_variants()
    results = run_experiments(str(script), CODE, "grid", 2, variants, log_dirs,
                              common_args=["a"], runs_args=[[1], [2]])
    check_grid(launch_env, results,
               lambda r: "('a', '1')" if r.log_dir.endswith("lr_0.001") else "('a', '2')")


@pytest.mark.slow
def test_run_experiments_fn_runs_a_function_the_same_way(launch_env):
    variants, log_dirs = lr_variants()
    results = run_experiments_fn(tiny_run, CODE, "grid_fn", 2, variants, log_dirs,
                                 common_args=[{"n": 1}])
    check_grid(launch_env, results, lambda r: "({'n': 1},)")  # Python values, not strings.
    assert os.path.exists(os.path.join(results[0].log_dir, exp_launcher.FN_FILE))


ONE_FILE_EXPERIMENT = """
import os
from rlframe.utils.launching.exp_launcher import run_experiments_fn
from rlframe.utils.launching.variant import VariantLevel, make_variants

SCALE = 10  # A module global of __main__: saved with the function, by value.


def train(slot_affinity_code, log_dir, run_ID, variant):
    os.makedirs(os.path.join(log_dir, f"run_{run_ID}"), exist_ok=True)
    with open(os.path.join(log_dir, f"run_{run_ID}", "done.txt"), "w") as f:
        f.write(f"{slot_affinity_code} {run_ID} {SCALE * variant['x']}")


if __name__ == "__main__":
    variants, log_dirs = make_variants(VariantLevel([("x",)], [(1,), (2,)], ["one", "two"]))
    results = run_experiments_fn(train, "2cpu_0gpu_1cpr_0saf", "one_file", 1, variants,
                                 log_dirs)
    print("RETURN CODES", [r.returncode for r in results])
"""


def test_run_experiments_fn_with_a_function_of_the_launching_script(launch_env):
    (launch_env / "experiment.py").write_text(ONE_FILE_EXPERIMENT)
    proc = subprocess.run([sys.executable, "experiment.py"], cwd=launch_env, text=True,
                          capture_output=True, timeout=120)
    assert "RETURN CODES [0, 0]" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    (exp_dir,) = exp_dirs(launch_env)
    for name, slot, value in (("one", 0, 10), ("two", 1, 20)):
        with open(os.path.join(exp_dir, name, "run_0", "done.txt")) as f:
            assert f.read() == f"{slot}slt_2cpu_0gpu_1cpr_0saf 0 {value}"
        with open(os.path.join(exp_dir, name, "run_0", "launch.log")) as f:
            assert "taskset" not in f.read()  # _0saf: no pinning.


def test_pinning_without_taskset(launch_env, monkeypatch):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity here")
    monkeypatch.setattr(exp_launcher.shutil, "which", lambda name: None)
    script = launch_env / "cpus.py"
    script.write_text("import os, sys\nprint('CPUS', sorted(os.sched_getaffinity(0)))\n")
    results = run_experiments(str(script), CODE, "pin", 1, *lr_variants())
    for r in results:
        with open(r.launch_log) as f:
            text = f.read()
        assert "taskset -c" not in text
        expected = sorted(affinity_from_code(prepend_run_slot(r.run_slot, CODE))["all_cpus"])
        assert f"CPUS {expected}" in text


def test_no_cpu_affinity_warns_once_and_does_not_pin(monkeypatch):
    monkeypatch.setattr(exp_launcher.shutil, "which", lambda name: None)
    monkeypatch.delattr(exp_launcher.os, "sched_setaffinity", raising=False)
    monkeypatch.setattr(run_process, "_warned_no_pinning", False)
    with pytest.warns(UserWarning, match="not supported"):
        assert exp_launcher._pinning([0]) == ([], None)
    assert exp_launcher._pinning(None) == ([], None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert exp_launcher._pinning([1]) == ([], None)


def test_a_failed_run_is_reported_and_the_others_complete(launch_env, capsys):
    script = launch_env / "flaky.py"
    script.write_text(textwrap.dedent("""
        import sys
        code, log_dir, run_ID = sys.argv[1:4]
        print("line before the error", flush=True)
        if log_dir.endswith("lr_0.0003") and run_ID == "1":
            raise RuntimeError("this run breaks")
        print("fine")
    """))
    results = run_experiments(str(script), CODE, "flaky", 2, *lr_variants())
    failed = [r for r in results if not r.ok]
    assert len(results) == 4 and len(failed) == 1
    (bad,) = failed
    assert bad.run_ID == 1 and bad.log_dir.endswith("lr_0.0003") and bad.returncode == 1
    out = capsys.readouterr().out
    assert out.count(f"log: {bad.launch_log}") == 2  # When it failed, and in the summary.
    assert "3 succeeded, 1 failed" in out
    report = out[out.index("Failed runs:"):]
    assert "RuntimeError: this run breaks" in report and "line before the error" in report


def test_bad_input_fails_before_anything_starts(launch_env):
    variants, log_dirs = lr_variants()
    script = launch_env / "ok.py"
    script.write_text("")
    cases = [
        (FileNotFoundError, "no_such.py", dict(), "no_such.py"),
        (ValueError, str(script), dict(runs_per_setting=0), "runs_per_setting"),
        (ValueError, str(script), dict(log_dirs=log_dirs[:1]), "2 variants and 1 log_dirs"),
        (ValueError, str(script), dict(runs_args=[[1]]), "runs_args"),
        (ValueError, str(script), dict(log_dirs=["a", "a"]), "unique"),
        (ValueError, str(script), dict(log_dirs=["../a", "b"]), "relative"),
        (TypeError, str(script), dict(variants=[{"x": object()}, {}]), r"variants\[0\].*'x'"),
    ]
    for error, path, change, message in cases:
        kwargs = dict(variants=variants, log_dirs=log_dirs, runs_per_setting=1)
        kwargs.update(change)
        with pytest.raises(error, match=message):
            run_experiments(path, CODE, "bad", **kwargs)
    with pytest.raises(TypeError, match="callable"):
        run_experiments_fn("not a function", CODE, "bad", 1, variants, log_dirs)
    if exp_launcher.usable_cpus() is not None:
        big = encode_affinity(n_cpu_core=4096, n_gpu=0, cpu_per_run=4096, hyperthread_offset=0,
                              n_socket=1)
        with pytest.raises(ValueError, match="run slot 0 is pinned to CPUs"):
            run_experiments(str(script), big, "bad", 1, variants, log_dirs)
    assert not os.path.exists(launch_env / "data")


def test_same_title_in_the_same_second_gets_its_own_dir(launch_env):
    first = exp_launcher._new_exp_dir("same")
    second = exp_launcher._new_exp_dir("same")
    assert first != second and os.path.isdir(first) and os.path.isdir(second)


# The launcher for the signal test: runs that each start a child of their own and sleep.
SLEEPY_LAUNCHER = """
import sys
from rlframe.utils.launching import exp_launcher
from rlframe.utils.launching.variant import VariantLevel, make_variants
exp_launcher.STOP_GRACE_S = 3.
variants, log_dirs = make_variants(VariantLevel([("x",)], [(1,), (2,)], ["one", "two"]))
exp_launcher.run_experiments("sleepy.py", sys.argv[1], "sleepy", 2, variants, log_dirs)
"""
SLEEPY_RUN = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("STARTED", flush=True)
time.sleep(120)
"""


def _dead(proc):
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextlib.contextmanager
def sleepy_launcher(root):
    """Start the sleepy launcher; yields it and its 4 descendants (2 runs, 2 children) once
    all have started, and kills whatever is left on exit."""
    (root / "launcher.py").write_text(SLEEPY_LAUNCHER)
    (root / "sleepy.py").write_text(SLEEPY_RUN)
    launcher = start_script([sys.executable, "launcher.py", CODE], cwd=root)
    descendants = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            descendants = psutil.Process(launcher.pid).children(recursive=True)
            logs = [os.path.join(d, "launch.log") for d in run_dirs(root)]
            started = sum("STARTED" in open(p).read() for p in logs if os.path.exists(p))
            if started == 2 and len(descendants) >= 4:
                break
            assert launcher.poll() is None, launcher.stdout.read()
            time.sleep(0.1)
        else:
            raise AssertionError("the runs did not start")
        yield launcher, descendants
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for proc in descendants:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def wait_dead(procs, timeout=5.):
    """The processes among ``procs`` still alive after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while not all(_dead(p) for p in procs) and time.time() < deadline:
        time.sleep(0.05)
    return [p for p in procs if not _dead(p)]


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_launcher_stops_every_run(launch_env, sig):
    with sleepy_launcher(launch_env) as (launcher, descendants):
        stopped = time.time()
        launcher.send_signal(sig)
        out, _ = launcher.communicate(timeout=20)
        assert time.time() - stopped < 10, out
        assert launcher.returncode == (-signal.SIGINT if sig == signal.SIGINT else 143), out
        assert "Stopping 2 run(s)" in out
        assert not wait_dead(descendants)  # The runs and their own children.


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_runs_end_when_the_launcher_is_killed(launch_env):
    with sleepy_launcher(launch_env) as (launcher, descendants):
        runs = [p for p in descendants if p.ppid() == launcher.pid]
        assert len(runs) == 2
        launcher.kill()
        launcher.wait()
        assert not wait_dead(runs)  # SIGTERM on the launcher's death (children of runs are
        # the runs' to stop; rlframe's runners do).


def test_launch_experiment_returns_the_process(launch_env):
    script = launch_env / "hello.py"
    script.write_text("import sys\nprint('hello', sys.argv[1:])\n")
    log_dir = str(launch_env / "exp" / "v")
    proc = exp_launcher.launch_experiment(str(script), 1, CODE, log_dir, {"a": 1}, 3, ["x", 2])
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=30) == 0
    assert load_variant(log_dir) == {"a": 1}
    with open(os.path.join(log_dir, "run_3", "launch.log")) as f:
        assert f"hello ['{prepend_run_slot(1, CODE)}', '{log_dir}', '3', 'x', '2']" in f.read()
