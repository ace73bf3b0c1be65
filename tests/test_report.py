"""``rlframe report`` and rlframe.utils.report.runs: scores of runs by setting."""
import csv
import dataclasses
import json
import os

import numpy as np
import pytest

pytest.importorskip("scipy")

from rlframe.cli import main  # noqa: E402
from rlframe.utils.plotting import PlotError  # noqa: E402
from rlframe.utils.report.runs import markdown_table, setting_reports  # noqa: E402
from test_plotting import write_run  # noqa: E402

# 2 settings x 5 seeds; each run's final return (at step 300) and its best.
FINALS = {0.001: [10., 20., 30., 40., 500.], 0.0003: [1., 2., 3., 4., 5.]}


def params(lr, seed, run_ID):
    return dict(env_id="HalfCheetah-v5", algo=dict(learning_rate=lr), seed=seed,
                run_ID=run_ID)


@pytest.fixture
def runs(in_tmp_cwd):
    """``runs/run_0..9``: each run rises to twice its final return at step 200, then
    falls to its final return at step 300; one run of each setting logs on to step 400."""
    root = in_tmp_cwd / "runs"
    run_ID = 0
    for lr, finals in FINALS.items():
        for seed, final in enumerate(finals):
            steps, returns = [0, 100, 200, 300], [0., final, 2 * final, final]
            if seed == 0:  # Longer: its later rows are past the setting's shared end.
                steps, returns = steps + [400], returns + [1e6]
            write_run(root / f"run_{run_ID}", params(lr, seed, run_ID), steps, returns)
            run_ID += 1
    return root


def test_final_and_best_iqm_are_those_of_a_hand_computation(runs):
    reports = setting_reports([runs], n_resamples=4000)
    assert [r.label for r in reports] == ["runs (algo.learning_rate=0.001)",
                                          "runs (algo.learning_rate=0.0003)"]
    for report, finals in zip(reports, FINALS.values()):
        assert report.task == "HalfCheetah-v5" and len(report.run_dirs) == 5
        assert report.steps == 300  # Where every run has logged; the 400 rows are left out.
        assert report.finals == tuple(finals)
        middle = sorted(finals)[1:4]  # Of 5 runs, floor(5 / 4) = 1 cut at each end.
        assert report.final["iqm"].point == pytest.approx(np.mean(middle))
        assert report.best["iqm"].point == pytest.approx(2 * np.mean(middle))
        assert report.final["mean"].point == pytest.approx(np.mean(finals))
        assert report.final["median"].point == pytest.approx(np.median(finals))
        # Bootstrap by hand: 5 runs resampled with replacement, IQM of each resample.
        rng = np.random.default_rng(3)
        values = [np.mean(np.sort(rng.choice(finals, 5))[1:4]) for _ in range(20000)]
        # The resampled IQMs take few values: each bound must be a value the hand-made
        # distribution has within a percentile point of 2.5% and 97.5%.
        estimate = report.final["iqm"]
        low_range = np.percentile(values, [1.5, 3.5])
        high_range = np.percentile(values, [96.5, 98.5])
        assert low_range[0] - 1e-9 <= estimate.low <= low_range[1] + 1e-9
        assert high_range[0] - 1e-9 <= estimate.high <= high_range[1] + 1e-9
        assert estimate.low < estimate.point < estimate.high


def test_a_final_window_averages_each_runs_last_values(runs, capsys):
    # Each run logs 0, final, 2 * final, final at steps 0..300: a window of 150 steps up
    # to 300 holds the rows at 200 and 300 (1.5 * final), one of 250 the rows at 100-300.
    for window, factor in ((150, 1.5), (250, 4 / 3)):
        reports = setting_reports([runs], final_window=window)
        for report, finals in zip(reports, FINALS.values()):
            assert report.steps == 300 and report.final_window == window
            assert report.finals == pytest.approx(tuple(factor * f for f in finals))
            middle = sorted(finals)[1:4]
            assert report.final["iqm"].point == pytest.approx(factor * np.mean(middle))
            assert report.best["iqm"].point == pytest.approx(2 * np.mean(middle))
    assert "the mean of ReturnAverage over the last 150 steps up to" in markdown_table(
        setting_reports([runs], final_window=150))
    for run_ID, steps in enumerate(([0, 100, 200], [0, 150, 250])):  # End: step 200.
        write_run(runs.parent / "apart" / f"run_{run_ID}", params(0.1, run_ID, run_ID), steps,
                  [1., 2., 3.])
    with pytest.raises(PlotError, match=r"run_1 logged no value in the final window "
                                        r"\(170, 200\] of CumSteps"):
        setting_reports([runs.parent / "apart"], final_window=30)
    with pytest.raises(ValueError, match="final_window=-1: give a number of steps >= 0"):
        setting_reports([runs], final_window=-1)
    assert main(["report", str(runs), "--final-window", "150", "-o", "out"]) == 0
    assert "150" in open(os.path.join("out", "report.csv")).read().splitlines()[1]


def test_command_prints_the_table_and_writes_the_files(runs, capsys):
    # Two starts of run_1 (as `rlframe benchmark` records a run resumed elsewhere).
    with open(runs / "run_1" / "system.json", "w") as f:
        json.dump([dict(cpu="CPU A", usable_cpus=[0, 1], commit="abc"),
                   dict(cpu="CPU B", usable_cpus=[0], logical_cpus=8, commit="abc",
                        busy_cpus={"0": 97.4})], f)
    assert main(["report", str(runs), "-o", "out"]) == 0
    out = capsys.readouterr().out
    assert "| runs (algo.learning_rate=0.001) | HalfCheetah-v5 | 5 | 300 | 30 [" in out
    assert "| runs (algo.learning_rate=0.0003) | HalfCheetah-v5 | 5 | 300 | 3 [" in out
    with open(os.path.join("out", "report.md")) as f:
        assert f.read() in out
    assert os.path.getsize(os.path.join("out", "curves.png")) > 1000
    with open(os.path.join("out", "report.csv")) as f:
        settings = list(csv.DictReader(f))
    assert [(r["setting"], r["runs"], r["steps"]) for r in settings] == [
        ("runs (algo.learning_rate=0.001)", "5", "300"),
        ("runs (algo.learning_rate=0.0003)", "5", "300")]
    assert float(settings[0]["final_iqm"]) == pytest.approx(30.)
    assert float(settings[0]["best_median"]) == pytest.approx(60.)
    assert float(settings[1]["final_iqm_low"]) < 3. < float(settings[1]["final_iqm_high"])
    assert settings[0]["reference"] == "" and settings[0]["final_iqm_fraction"] == ""
    with open(os.path.join("out", "runs.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10
    assert [(float(r["final"]), float(r["best"])) for r in rows[:5]] == [
        (v, 2 * v) for v in FINALS[0.001]]
    assert [r["steps"] for r in rows[:2]] == ["400", "300"]  # Each run's own last step.
    assert [r["seed"] for r in rows[:5]] == ["0", "1", "2", "3", "4"]
    assert (rows[1]["cpu"], rows[1]["cores"], rows[1]["commit"]) == ("CPU A; CPU B", "2; 1",
                                                                     "abc")
    assert rows[1]["shared_cpus"] == "0:97%"  # The second start found CPU 0 busy.
    assert rows[0]["cpu"] == rows[0]["wall_s"] == rows[0]["shared_cpus"] == ""  # No system.json.


def test_a_single_run_has_no_interval(in_tmp_cwd):
    write_run(in_tmp_cwd / "one" / "run_0", params(0.1, 0, 0), [0, 10], [1., 2.])
    report, = setting_reports([in_tmp_cwd / "one"])
    assert report.final["iqm"].point == 2. and np.isnan(report.final["iqm"].low)
    assert "A setting without an interval has a single run." in markdown_table([report])


@pytest.mark.parametrize("argv, message", [
    (["--confidence", "95"], "--confidence 95.0: give a level in"),
    (["--resamples", "0"], "--resamples 0: give a positive number"),
    (["--final-window", "-5"], "--final-window -5: give a number of steps >= 0"),
    (["--key", "Retrun"], "Retrun"),
])
def test_bad_input(runs, capsys, argv, message):
    assert main(["report", str(runs)] + argv) == 2
    assert message in capsys.readouterr().err


def test_missing_directory(in_tmp_cwd, capsys):
    assert main(["report", "nowhere"]) == 2
    assert "no such directory: nowhere" in capsys.readouterr().err


def test_runs_that_logged_nothing_yet_are_left_out_and_named(runs, capsys):
    """A suite reported on while it runs: a run without progress.csv, one whose file is
    empty and one with a header but no row yet are left out of the table, not an error."""
    from rlframe.utils.plotting import unlogged_runs
    header = "Diagnostics/CumSteps,ReturnAverage\n"
    waiting = {"run_10": None, "run_11": "", "run_12": header}
    for name, text in waiting.items():
        (runs / name).mkdir()
        (runs / name / "params.json").write_text(json.dumps(params(0.001, 9, 9)))
        if text is not None:
            (runs / name / "progress.csv").write_text(text)
    assert [(os.path.basename(r), why) for r, why in unlogged_runs([runs])] == [
        ("run_10", "no progress.csv yet"), ("run_11", "progress.csv is empty"),
        ("run_12", "no ReturnAverage logged yet")]
    reports = setting_reports([runs])
    assert [len(r.run_dirs) for r in reports] == [5, 5]
    assert reports[0].finals == tuple(FINALS[0.001])
    assert main(["report", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "| runs (algo.learning_rate=0.001) | HalfCheetah-v5 | 5 | 300 |" in out
    assert (f"Left out, nothing logged yet: {runs / 'run_10'} (no progress.csv yet); "
            f"{runs / 'run_11'} (progress.csv is empty);") in out
    # Nothing logged anywhere: an error naming the runs; an unknown key stays an error.
    with pytest.raises(PlotError, match="no run has logged a value yet: .*run_10 "):
        setting_reports([runs / name for name in waiting])
    with pytest.raises(PlotError, match="unknown key 'Retrun'"):
        unlogged_runs([runs / "run_12"], key="Retrun")


def test_two_tasks_pool_only_as_fractions_of_their_references(in_tmp_cwd):
    """Without references, scores of two tasks stay apart (and the table says why); with
    them, each run's final score over its reference is pooled over the tasks."""
    from rlframe.utils.report.runs import Reference, normalized_scores
    for label, env_id, finals in (("ppo_a", "A-v0", [100., 200., 300.]),
                                  ("ppo_b", "B-v0", [10., 20., 30.])):
        for seed, final in enumerate(finals):
            write_run(in_tmp_cwd / "out" / label / f"run_{seed}",
                      dict(env_id=env_id, seed=seed, run_ID=seed), [0, 100], [0., final])
    reports = setting_reports([in_tmp_cwd / "out"])
    assert [r.experiment for r in reports] == ["ppo_a", "ppo_b"]
    assert "Scores of different tasks are not pooled" in markdown_table(reports)
    references = {"ppo_a": Reference(200., 100, "paper A"), "ppo_b": Reference(40., 100, "B")}
    assert [r.label for r in reports] == ["ppo_a", "ppo_b"]  # One setting per folder.
    assert normalized_scores(reports, references) == {
        "ppo_a": [0.5, 1., 1.5], "ppo_b": [0.25, 0.5, 0.75]}
    table = markdown_table(reports, references=references)
    assert "| 200 at 100 (paper A) | 1.00 |" in table and "| 40 at 100 (B) | 0.50 |" in table
    # Pooled: 0.25 0.5 0.5 0.75 1 1.5; IQM cuts one at each end: mean(0.5, 0.5, 0.75, 1).
    assert "pooled over 2 tasks (each setting's runs resampled on their own): iqm 0.6875 [" in table
    # Two settings of one task, each scored by its reference, pool as settings.
    same_task = [dataclasses.replace(reports[1], task="A-v0")] + reports[:1]
    assert "pooled over 2 settings of 1 task (each setting's" in markdown_table(
        same_task, references=references)
    # A reference for one task alone: nothing to pool, and the table names the other setting.
    table = markdown_table(reports, references={"ppo_a": references["ppo_a"]})
    assert ("Scores of different tasks are not pooled: they are comparable only as fractions "
            "of reference scores, which ppo_b has none (no entry of the suite).") in table


@pytest.fixture
def baseline(runs):
    """``base/run_0..2``: a baseline of the same task whose runs end at step 200."""
    root = runs.parent / "base"
    for seed, final in enumerate([5., 6., 7.]):
        write_run(root / f"run_{seed}", dict(env_id="HalfCheetah-v5", seed=seed, run_ID=seed),
                  [0, 100, 200], [0., final, final])
    return root


def test_compare_reads_both_settings_at_the_steps_both_reached(runs, baseline):
    from rlframe.utils.report.runs import compare_settings
    reports = setting_reports([runs, baseline], n_resamples=500)
    high, low = (r.label for r in reports[:2])
    assert reports[2].label == "base" and reports[2].steps == 200
    above, within = compare_settings(reports, [(high, "base"), (low, "base")], n_resamples=2000)
    # Read at step 200, where every run of `runs` stands at twice its final return.
    assert above.steps == within.steps == 200
    assert above.finals == tuple(2 * f for f in FINALS[0.001])
    assert above.baseline_finals == (5., 6., 7.)
    # IQMs: mean(40, 60, 80) = 60 and mean(4, 6, 8) = 6 (of 5 runs, one cut at each end);
    # the baseline's 3 runs are all kept: 6.
    assert above.final.point == pytest.approx(60.) and within.final.point == pytest.approx(6.)
    assert above.comparison.difference.point == pytest.approx(54.)
    assert within.comparison.difference.point == pytest.approx(0.)
    # Every run of the first ends above every baseline run; the second's 2, 4, 6, 8, 10
    # against 5, 6, 7: 0 + 0 + 1.5 + 3 + 3 of 15 pairs.
    assert above.comparison.probability.point == 1.
    assert within.comparison.probability.point == pytest.approx(0.5)
    assert (above.baseline_final.low, above.baseline_final.high) == (5., 7.)
    assert (above.verdict, within.verdict) == ("above", "within")


def test_compare_command(runs, baseline, capsys, tmp_path):
    label = "runs (algo.learning_rate=0.0003)"
    out = tmp_path / "report"
    assert main(["report", str(runs), str(baseline), "--compare", label, "base",
                 "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"| {label} | base | HalfCheetah-v5 | 200 | 6 [" in printed
    assert printed.rstrip().splitlines()[-1].startswith("Wrote ")
    assert (out / "report.md").read_text() in printed
    with open(out / "comparisons.csv") as f:
        row, = csv.DictReader(f)
    assert (row["setting"], row["baseline"], row["steps"], row["verdict"]) == (
        label, "base", "200", "within")
    assert float(row["probability_of_improvement"]) == 0.5


@pytest.mark.parametrize("pair, message", [
    (["nope", "base"], "no setting is named 'nope' among the runs; their settings: 'runs "
                       "(algo.learning_rate=0.001, env_id=HalfCheetah-v5)', "),
    (["base", "base"], "setting 'base' is compared with itself"),
    (["base", "other"], "setting 'base' (HalfCheetah-v5) and its baseline 'other' "
                        "(Hopper-v5) are of different tasks"),
])
def test_compare_bad_input(runs, baseline, capsys, pair, message):
    write_run(runs.parent / "other" / "run_0", dict(env_id="Hopper-v5", seed=0, run_ID=0),
              [0, 100], [0., 1.])
    assert main(["report", str(runs), str(baseline), str(runs.parent / "other"),
                 "--compare", *pair]) == 2
    assert message in capsys.readouterr().err


def atari_suite(path, keys):
    """A suite of two Atari entries whose references name the columns ``keys``."""
    runs = [dict(algo="ppo", env_id=game, n_steps=300, seeds=3,
                 reference=dict(score=score, steps=10 ** 7, source="a benchmark table",
                                **({} if key is None else dict(key=key))))
            for game, score, key in (("breakout", 400, keys[0]), ("pong", 20, keys[1]))]
    path.write_text(json.dumps(dict(name="atari", runs=runs)))
    return str(path)


@pytest.fixture
def atari_runs(in_tmp_cwd):
    """``out/ppo_breakout`` and ``out/ppo_pong``, 3 runs each, logging the clipped return
    (ReturnAverage) and the game score (GameScoreAverage, 10 times it)."""
    for label, game in (("ppo_breakout", "breakout"), ("ppo_pong", "pong")):
        for seed, final in enumerate([1., 2., 4.]):
            run_dir = in_tmp_cwd / "out" / label / f"run_{seed}"
            os.makedirs(run_dir)
            (run_dir / "params.json").write_text(json.dumps(dict(env_id=game, seed=seed,
                                                                 run_ID=seed)))
            (run_dir / "progress.csv").write_text(
                "Diagnostics/CumSteps,ReturnAverage,GameScoreAverage\n"
                f"0,0,0\n300,{final},{10 * final}\n")
    return in_tmp_cwd / "out"


def test_a_reference_is_compared_with_the_column_it_names(atari_runs, in_tmp_cwd, capsys):
    """Atari references are game scores: the runs are scored by GameScoreAverage, not by
    the clipped return, unless --key says otherwise, and then the references are left out
    and named; references of different columns need --key."""
    suite = atari_suite(in_tmp_cwd / "atari.json", ["GameScoreAverage", "GameScoreAverage"])
    assert main(["report", str(atari_runs), "--suite", suite, "-o", "rep"]) == 0
    out = capsys.readouterr().out
    # Final IQM of 10, 20, 40 (3 runs: none cut) over the reference.
    assert "| ppo_breakout | breakout | 3 | 300 | 23.33 [" in out
    assert "| 400 at 10M (a benchmark table) | 0.06 |" in out
    assert "| 20 at 10M (a benchmark table) | 1.17 |" in out
    assert "Scores: GameScoreAverage at the last step" in out
    with open(os.path.join("rep", "report.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [(r["reference"], r["reference_key"]) for r in rows] == [
        ("400", "GameScoreAverage"), ("20", "GameScoreAverage")]

    assert main(["report", str(atari_runs), "--suite", suite, "--key", "ReturnAverage"]) == 0
    out = capsys.readouterr().out
    assert "| ppo_breakout | breakout | 3 | 300 | 2.333 [" in out and "at 10M" not in out
    assert ("References left out, being scores of another column than ReturnAverage: "
            "ppo_breakout (GameScoreAverage), ppo_pong (GameScoreAverage).") in out

    mixed = atari_suite(in_tmp_cwd / "mixed.json", ["GameScoreAverage", None])
    assert main(["report", str(atari_runs), "--suite", mixed]) == 2
    assert ("its references are scores of different columns (GameScoreAverage: "
            "ppo_breakout; ReturnAverage: ppo_pong); give --key") in capsys.readouterr().err
    # Only the settings reported count: Breakout's runs alone read its column.
    assert main(["report", str(atari_runs / "ppo_breakout"), "--suite", mixed]) == 0
    assert "| 400 at 10M (a benchmark table) | 0.06 |" in capsys.readouterr().out


def test_runs_of_no_entry_are_scored_by_the_column_of_the_suite(atari_runs, in_tmp_cwd,
                                                                  capsys):
    """Runs of settings that are not the suite's entries (another framework's, say, in
    folders named otherwise) are scored by the column all the suite's references name,
    with no reference beside them; where the suite's references name several, by
    ReturnAverage."""
    os.rename(atari_runs / "ppo_breakout", atari_runs / "ppo_breakout_other")
    suite = atari_suite(in_tmp_cwd / "atari.json", ["GameScoreAverage", "GameScoreAverage"])
    assert main(["report", str(atari_runs / "ppo_breakout_other"), "--suite", suite]) == 0
    out = capsys.readouterr().out
    assert "| ppo_breakout_other | breakout | 3 | 300 | 23.33 [" in out
    assert "Scores: GameScoreAverage at the last step" in out and "at 10M" not in out
    mixed = atari_suite(in_tmp_cwd / "mixed.json", ["GameScoreAverage", None])
    assert main(["report", str(atari_runs / "ppo_breakout_other"), "--suite", mixed]) == 0
    assert "Scores: ReturnAverage at the last step" in capsys.readouterr().out
