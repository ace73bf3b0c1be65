"""Learning-curve plots (rlframe.utils.plotting) and the ``rlframe`` command line."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from rlframe.cli import COMMANDS, main
from rlframe.utils.plotting import (PlotError, find_run_dirs, format_count, group_runs,
                                    learning_curves, load_progress, plot_runs, resolve_key,
                                    unlogged_runs)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = ["Diagnostics/Iteration", "Diagnostics/CumSteps", "ReturnAverage", "ReturnStd"]
FAST, SLOW = 0.001, 0.0003  # The two settings' learning rates.


def write_run(run_dir, params, steps, returns):
    """A run directory as logger_context writes it: params.json and progress.csv."""
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "params.json"), "w") as f:
        json.dump(params, f)
    with open(os.path.join(run_dir, "progress.csv"), "w") as f:
        f.write(",".join(HEADER) + "\n")
        for itr, (step, ret) in enumerate(zip(steps, returns)):
            f.write(f"{itr},{step},{ret},1.0\n")


def sweep_params(lr, seed, run_ID):
    return dict(env_id="CartPole-v1", algo=dict(learning_rate=lr, discount=0.99),
                runner=dict(seed=seed), name="ppo", run_ID=run_ID)


@pytest.fixture
def sweep(in_tmp_cwd):
    """``sweep/run_0..3``: 2 settings (learning rates) x 2 seeds, with NaN rows before
    learning, runs of different lengths (FAST) and different log points (SLOW)."""
    root = in_tmp_cwd / "sweep"
    write_run(root / "run_0", sweep_params(FAST, 0, 0), [0, 100, 200, 300], ["nan", 10, 20, 30])
    write_run(root / "run_1", sweep_params(FAST, 1, 1), [0, 100, 200, 300, 400],
              ["nan", 20, 40, 50, 60])
    write_run(root / "run_2", sweep_params(SLOW, 0, 2), [0, 100, 200], [0, 10, 20])
    write_run(root / "run_3", sweep_params(SLOW, 1, 3), [0, 50, 150, 250], [4, 8, 12, 16])
    return root


def test_load_progress_reads_every_column_as_floats(sweep):
    columns = load_progress(str(sweep / "run_0"))
    assert list(columns) == HEADER
    np.testing.assert_array_equal(columns["Diagnostics/CumSteps"], [0, 100, 200, 300])
    assert math.isnan(columns["ReturnAverage"][0]) and columns["ReturnAverage"][3] == 30


def test_an_experiment_folder_expands_to_its_runs_in_order(sweep):
    names = [os.path.basename(d) for d in find_run_dirs([str(sweep)])]
    assert names == ["run_0", "run_1", "run_2", "run_3"]
    # A run given twice (itself and through its folder) is plotted once.
    assert len(find_run_dirs([str(sweep / "run_1"), str(sweep)])) == 4


def test_runs_that_differ_only_in_seed_and_run_id_form_one_setting(sweep):
    groups = group_runs(find_run_dirs([str(sweep)]))
    assert {label: [os.path.basename(d) for d in runs] for label, runs in groups.items()} == {
        f"sweep (algo.learning_rate={FAST})": ["run_0", "run_1"],
        f"sweep (algo.learning_rate={SLOW})": ["run_2", "run_3"],
    }


def test_one_setting_is_labelled_by_its_experiment_folder(sweep):
    assert list(group_runs([str(sweep / "run_0"), str(sweep / "run_1")])) == ["sweep"]


def test_experiment_folders_of_different_names_are_different_settings(in_tmp_cwd):
    write_run(in_tmp_cwd / "baseline" / "run_0", sweep_params(FAST, 0, 0), [0, 1], [1, 2])
    write_run(in_tmp_cwd / "tweaked" / "run_0", sweep_params(FAST, 0, 0), [0, 1], [1, 2])
    assert list(group_runs(find_run_dirs([str(in_tmp_cwd)]))) == ["baseline", "tweaked"]


def test_mean_and_min_max_skip_nan_rows_and_end_with_the_shortest_run(sweep):
    fast = learning_curves([str(sweep / "run_0"), str(sweep / "run_1")])[0]
    np.testing.assert_array_equal(fast.x, [100, 200, 300])  # No NaN row, no step 400.
    np.testing.assert_allclose(fast.mean, [15, 30, 40])
    np.testing.assert_allclose(fast.low, [10, 20, 30])
    np.testing.assert_allclose(fast.high, [20, 40, 50])


def test_the_band_is_min_to_max_and_starts_where_every_run_has_a_number(in_tmp_cwd):
    steps = [0, 100, 200, 300]
    write_run(in_tmp_cwd / "exp" / "run_0", {"seed": 0}, steps, [0, 0, 0, 0])
    write_run(in_tmp_cwd / "exp" / "run_1", {"seed": 1}, steps, ["nan", 0, 0, 0])
    write_run(in_tmp_cwd / "exp" / "run_2", {"seed": 2}, steps, [30, 30, 30, 30])
    curve, = learning_curves(["exp"])
    np.testing.assert_array_equal(curve.x, [100, 200, 300])
    np.testing.assert_allclose(curve.mean, [10, 10, 10])
    np.testing.assert_allclose(curve.low, [0, 0, 0])  # Not mean - std (-4.1).
    np.testing.assert_allclose(curve.high, [30, 30, 30])


def test_runs_logged_at_different_steps_are_interpolated_onto_their_union(sweep):
    slow = learning_curves([str(sweep / "run_2"), str(sweep / "run_3")])[0]
    np.testing.assert_array_equal(slow.x, [0, 50, 100, 150, 200])
    run_2 = np.array([0, 5, 10, 15, 20])  # Interpolated at 50 and 150.
    run_3 = np.array([4, 8, 10, 12, 14])  # Interpolated at 100 and 200.
    np.testing.assert_allclose(slow.mean, (run_2 + run_3) / 2)
    np.testing.assert_allclose(slow.low, np.minimum(run_2, run_3))
    np.testing.assert_allclose(slow.high, np.maximum(run_2, run_3))


def test_other_columns_by_full_name_or_last_part(sweep):
    curve = learning_curves([str(sweep / "run_2")], key="ReturnStd", x_key="Iteration")[0]
    np.testing.assert_array_equal(curve.x, [0, 1, 2])
    np.testing.assert_array_equal(curve.mean, [1, 1, 1])
    assert resolve_key(HEADER, "Diagnostics/CumSteps") == "Diagnostics/CumSteps"
    with pytest.raises(PlotError, match="ambiguous.*'A/x', 'B/x'"):
        resolve_key(["A/x", "B/x"], "x")


def test_an_unknown_key_suggests_the_close_name_and_lists_the_columns(sweep):
    with pytest.raises(PlotError, match=r"unknown key 'ReturnAvg' in .*run_0.progress\.csv\. "
                                        r"Did you mean 'ReturnAverage'.*Available columns: "
                                        r"Diagnostics/Iteration, Diagnostics/CumSteps"):
        learning_curves([str(sweep)], key="ReturnAvg")


def test_a_run_that_has_logged_nothing_yet_is_left_out(sweep, capsys):
    """A run still starting (no progress.csv, or no numeric row) is left out of the curves
    and named by ``rlframe plot``; with no run left, the error names each run and why."""
    os.remove(sweep / "run_3" / "progress.csv")
    curves = learning_curves([str(sweep)])
    assert [[os.path.basename(r) for r in c.run_dirs] for c in curves] == [
        ["run_0", "run_1"], ["run_2"]]
    assert unlogged_runs([str(sweep)]) == [(str(sweep / "run_3"), "no progress.csv yet")]
    assert main(["plot", str(sweep), "-o", "curves.png"]) == 0
    assert f"Left out, nothing logged yet: {sweep / 'run_3'} (no progress.csv yet)." in (
        capsys.readouterr().out)
    with pytest.raises(PlotError, match=r"no run has logged a value yet: .*run_3 \(no "
                                        r"progress.csv yet\)"):
        learning_curves([str(sweep / "run_3")])
    os.mkdir(sweep.parent / "empty")
    with pytest.raises(FileNotFoundError, match="empty holds no progress.csv and no run_"):
        find_run_dirs(["empty"])


def test_a_run_without_numeric_rows_is_left_out(in_tmp_cwd):
    write_run(in_tmp_cwd / "exp" / "run_0", {}, [0, 100], ["nan", "nan"])
    with pytest.raises(PlotError, match="exp/run_0 \\(no ReturnAverage logged yet\\)"):
        learning_curves([str(in_tmp_cwd / "exp")])


@pytest.mark.parametrize("value, text", [(0, "0"), (950, "950"), (2.5, "2.5"), (20_000, "20k"),
                                         (20_480, "20.5k"), (1_500_000, "1.5M"), (2e9, "2B")])
def test_step_ticks_are_short(value, text):
    assert format_count(value) == text


def assert_png(path):
    image = pytest.importorskip("matplotlib.image").imread(path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    height, width = image.shape[:2]
    assert 800 <= width <= 3000 and 400 <= height <= 2000, image.shape
    assert image[..., :3].std() > 0.05  # Not a blank canvas.


def test_plot_runs_writes_a_png(sweep):
    pytest.importorskip("matplotlib")
    path = plot_runs([str(sweep)], "curves.png")
    assert path == str(sweep.parent / "curves.png")
    assert_png(path)


def test_plot_runs_without_matplotlib_names_the_extra(sweep, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install rlframe\[plots\]"):
        plot_runs([str(sweep)], "curves.png")


def test_cli_plot_writes_learning_curves_png_in_the_working_directory(sweep, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(sweep)]) == 0
    assert capsys.readouterr().out.strip() == str(sweep.parent / "learning_curves.png")
    assert_png("learning_curves.png")


@pytest.mark.parametrize("args, message", [
    (["--key", "ReturnAvg"], "Did you mean 'ReturnAverage'"),
    (["--x-key", "Steps"], "unknown key 'Steps'"),
    (["-o", "curves.txt"], "the extension must be one of"),
    (["-o", "missing/curves.png"], "does not exist"),
])
def test_cli_user_errors_print_one_line_and_return_2(sweep, capsys, args, message):
    if args[0] == "-o":  # Formats are checked by matplotlib's canvas.
        pytest.importorskip("matplotlib")
    assert main(["plot", str(sweep), *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("rlframe plot: error: ") and message in err
    assert err.count("\n") == 1


def test_cli_without_a_command_prints_help_and_returns_2(capsys):
    assert main([]) == 2
    assert "plot" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_every_command_has_help_with_examples(command, capsys):
    assert main([*command, "--help"]) == 0
    assert "examples:" in capsys.readouterr().out


def test_python_dash_m_rlframe_plot(sweep):
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    ok = subprocess.run([sys.executable, "-m", "rlframe", "plot", "sweep", "-o", "out.png"],
                        env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == str(sweep.parent / "out.png")
    assert_png("out.png")
    bad = subprocess.run([sys.executable, "-m", "rlframe", "plot", "no_such_dir"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr == "rlframe plot: error: no such directory: no_such_dir\n"
