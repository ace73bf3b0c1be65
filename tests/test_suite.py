"""Benchmark suites as data (rlframe.presets.suite): checked before anything runs."""
import json
import os

import pytest

from rlframe.presets.suite import Reference, SuiteError, load_suite

SUITES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "suite")
ENTRY = dict(algo="ppo", env_id="CartPole-v1", n_steps=2048, seeds=2,
             config=dict(batch_B=4, kwargs=dict(algo=dict(epochs=2))),
             reference=dict(score=500, steps=100000, source="the env's maximum return"))


def suite(**entry_changes):
    entry = {**ENTRY, **entry_changes}
    return dict(name="tiny", runs=[{k: v for k, v in entry.items() if v is not None}])


def test_a_suite_file_loads_with_its_runs(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(dict(suite(), description="two seeds")))
    loaded = load_suite(str(path))
    entry, = loaded.entries
    assert (loaded.name, loaded.description) == ("tiny", "two seeds")
    assert (entry.algo, entry.env_id, entry.n_steps, entry.seeds) == ("ppo", "CartPole-v1",
                                                                       2048, (0, 1))
    assert entry.reference == Reference(500., 100000, "the env's maximum return")
    assert entry.label == "ppo_CartPole-v1"
    assert entry.train_config(1) == dict(batch_B=4, kwargs=dict(algo=dict(epochs=2)),
                                         algo="ppo", env_id="CartPole-v1", n_steps=2048, seed=1)
    assert entry.run_dir("out", 1).endswith("out/ppo_CartPole-v1/run_1")
    assert load_suite(suite(seeds=[3, 7], reference=None, n_steps=1e4)).entries[0].seeds == (3, 7)
    assert entry.notes == "" and load_suite(suite(notes="RL Zoo")).entries[0].notes == "RL Zoo"
    assert entry.reference.key == "ReturnAverage"  # Unless the reference names its column.
    game = load_suite(suite(reference=dict(score=415, steps=10 ** 7, source="CleanRL",
                                           key="GameScoreAverage"))).entries[0].reference
    assert game == Reference(415., 10 ** 7, "CleanRL", "GameScoreAverage")


def test_off_policy_runs_keep_their_replay_with_each_snapshot():
    """A resumed SAC or DQN run must learn as one never stopped: its replay comes back."""
    sac, = load_suite(suite(algo="sac", env_id="Pendulum-v1", config=None)).entries
    assert sac.train_config(0)["kwargs"] == dict(algo=dict(checkpoint_replay=True))
    dqn, = load_suite(suite(algo="dqn", config=dict(kwargs=dict(
        algo=dict(checkpoint_replay=False, batch_size=32))))).entries
    assert dqn.train_config(0)["kwargs"]["algo"] == dict(checkpoint_replay=False,
                                                         batch_size=32)
    from rlframe.presets import build_experiment
    runner, _ = build_experiment(sac.train_config(0))
    assert runner.algo.checkpoint_replay is True


@pytest.mark.parametrize("data, message", [
    (dict(suite(), nme="x"), r"the suite: unknown key 'nme'. Did you mean 'name'\?"),
    (dict(name="x", runs=[]), "the suite needs 'runs', a non-empty list"),
    (suite(algo="ppp"), r"runs\[0\] \(ppp on CartPole-v1\): Unknown algorithm 'ppp'. "
                        r"Did you mean 'ppo'\?"),
    (suite(env_id="CartPol-v1"), r"runs\[0\] \(ppo on CartPol-v1\): .*CartPol-v1"),
    (suite(seed=3), r"runs\[0\]: unknown key 'seed'. Did you mean 'seeds'\?"),
    (suite(config=dict(batch_b=4)), r"unknown config key 'batch_b'. Did you mean .*'batch_B'"),
    (suite(config=dict(seed=4)), "config sets 'seed', which the suite sets itself"),
    (suite(config=dict(kwargs=dict(algo=dict(epoch=2)))), "PPO takes no keyword 'epoch'"),
    (suite(reference=dict(score=2906, steps=1000000)),
     r"the reference score 2906 has no 'source': say where it was published"),
    (suite(reference=dict(score="high", steps=1, source="x")), "reference score must be a "
                                                               "finite number, got 'high'"),
    (suite(reference=dict(score=1, steps=1, source="x", key="")),
     r"runs\[0\] \(ppo on CartPole-v1\): reference key must name the progress.csv column the "
     r"score compares with \(e.g. 'GameScoreAverage'\), got ''"),
    (suite(reference=dict(score=1, steps=1, source="x", column="GameScore")),
     r"reference: unknown key 'column'"),
    (suite(notes=["a"]), r"notes must be a string, got \['a'\]"),
    (suite(n_steps=0), "n_steps must be a positive whole number, got 0"),
    (suite(seeds=[1, 1]), "seeds must be a count or a list of distinct non-negative ints"),
    (dict(name="x", runs=[ENTRY, ENTRY]), "two entries have the label 'ppo_CartPole-v1'"),
])
def test_bad_suites_name_the_entry_and_the_key(data, message):
    with pytest.raises(SuiteError, match=message):
        load_suite(data)


def test_a_missing_or_broken_file(tmp_path):
    with pytest.raises(SuiteError, match="no suite file at"):
        load_suite(str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SuiteError, match="bad.json is not valid JSON"):
        load_suite(str(tmp_path / "bad.json"))


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(SUITES) if f.endswith(".json")))
def test_the_shipped_suites_load(name):
    """Every suite in benchmarks/suite/ is valid, each entry's experiment built once."""
    pytest.importorskip("mujoco")
    suite = load_suite(os.path.join(SUITES, name))
    assert suite.entries and all(entry.reference is not None for entry in suite.entries)
