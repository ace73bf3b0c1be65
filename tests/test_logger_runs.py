"""A logger per run: runs in one process never see each other's logging state."""
import os

import pytest

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from conftest import read_csv
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context


def read_lines(path):
    with open(path) as f:
        return f.read().splitlines()


def observable_state(log):
    """What a run could leave behind on ``log``, read through its public API."""
    return dict(snapshot_dir=log.get_snapshot_dir(), snapshot_mode=log.get_snapshot_mode(),
                snapshot_gap=log.get_snapshot_gap(), tabular_only=log.get_log_tabular_only(),
                writer=log.get_tf_summary_writer(), summary_dir=log.get_tf_summary_dir())


# ----------------------------------------------------------------------------- Logger objects

def test_loggers_are_independent(tmp_path):
    first, second = logger.Logger(), logger.Logger()
    first.add_tabular_output(str(tmp_path / "first.csv"))
    second.add_tabular_output(str(tmp_path / "second.csv"))
    first.push_tabular_prefix("First/")
    first.record_tabular("a", 1)
    second.record_tabular("b", 2)
    first.set_snapshot_mode("last")
    assert second.get_snapshot_mode() == "all"
    assert second.dump_tabular() == {"b": 2}
    assert first.dump_tabular() == {"First/a": 1}
    first.close()
    second.close()
    assert read_csv(tmp_path / "first.csv") == (["First/a"], [["1"]])
    assert read_csv(tmp_path / "second.csv") == (["b"], [["2"]])


def test_close_detaches_outputs_and_closes_writer(tmp_path, capsys):
    class Writer:
        closed = False

        def add_scalar(self, *args):
            pass

        def flush(self):
            pass

        def close(self):
            self.closed = True

    log, writer = logger.Logger(), Writer()
    log.add_text_output(str(tmp_path / "debug.log"))
    log.add_tabular_output(str(tmp_path / "progress.csv"))
    log.set_tf_summary_writer(writer)
    log.close()
    assert writer.closed and log.get_tf_summary_writer() is None
    log.log("still usable", with_timestamp=False)  # stdout only, no closed-file error
    log.record_tabular("a", 1)
    log.dump_tabular()
    assert "still usable" in capsys.readouterr().out
    assert read_lines(tmp_path / "debug.log") == []
    assert not (tmp_path / "progress.csv").read_text()


def test_use_logger_makes_current_and_restores(capsys):
    outer = logger.current_logger()
    run_logger = logger.Logger()
    with pytest.raises(RuntimeError):
        with logger.use_logger(run_logger) as used:
            assert used is run_logger and logger.current_logger() is run_logger
            logger.push_prefix("run ")
            logger.log("inside", with_timestamp=False)
            raise RuntimeError("boom")
    assert logger.current_logger() is outer
    run_logger.log("direct", with_timestamp=False)  # the prefix went to the run's logger
    assert capsys.readouterr().out.splitlines() == ["run inside", "run direct"]
    with pytest.raises(TypeError, match="Logger"):
        with logger.use_logger("not a logger"):
            pass
    assert logger.current_logger() is outer


def test_use_logger_drops_inner_blocks_left_open():
    outer = logger.current_logger()
    first, second = logger.Logger(), logger.Logger()
    with logger.use_logger(first):
        left_open = logger.use_logger(second)
        left_open.__enter__()  # never exited, e.g. an abandoned generator
        assert logger.current_logger() is second
    assert logger.current_logger() is outer


def test_module_prefix_pops_on_the_logger_it_pushed_to(capsys):
    run_logger = logger.Logger()
    with logger.prefix("outer "):
        with logger.use_logger(run_logger):
            pass
        logger.log("x", with_timestamp=False)
    with logger.use_logger(run_logger):
        with logger.tabular_prefix("Run/"):
            logger.record_tabular("a", 1)
    logger.log("y", with_timestamp=False)
    assert capsys.readouterr().out.splitlines() == ["outer x", "y"]
    assert run_logger.dump_tabular() == {"Run/a": 1}


# ----------------------------------------------------------------------------- runs

@pytest.mark.parametrize("first_raises", [False, True])
def test_two_runs_write_separate_clean_outputs(in_tmp_cwd, capsys, first_raises):
    default_before = observable_state(logger.current_logger())

    def first_run():
        with logger_context("exp_a", 0, "alpha", snapshot_mode="gap") as run_dir:
            logger.set_snapshot_gap(2)
            logger.push_prefix("A-outer ")
            logger.push_tabular_prefix("A/")
            logger.record_tabular("x", 1)
            assert logger.dump_tabular(with_prefix=False) == {"A/x": 1}
            for itr in range(4):
                logger.save_itr_params(itr, dict(itr=itr))
            logger.log("a line", with_timestamp=False)
            # Left behind: a pending row, pushed prefixes and changed switches.
            logger.record_tabular("Leak", 99)
            logger.push_prefix("A-stale ")
            logger.push_tabular_prefix("Stale/")
            logger.set_iteration(7)
            logger.disable_tabular()
            logger.set_disable_prefix(True)
            logger.set_log_tabular_only(True)
            logger.disable()
            if first_raises:
                raise RuntimeError("run A failed")
        return run_dir

    if first_raises:
        with pytest.raises(RuntimeError, match="run A failed"):
            first_run()
        (run_a,) = [str(p) for p in in_tmp_cwd.glob("data/local/*/*/exp_a/run_0")]
    else:
        run_a = first_run()
    capsys.readouterr()

    with logger_context("exp_b", 1, "beta", snapshot_mode="last") as run_b:
        assert logger.get_snapshot_dir() == run_b
        assert logger.get_snapshot_gap() == 1
        with logger.tabular_prefix("B/"):
            logger.record_tabular("y", 2)
        assert logger.dump_tabular(with_prefix=False) == {"B/y": 2}
        logger.log("b line", with_timestamp=False)
        for itr in range(4):
            logger.save_itr_params(itr, dict(itr=itr))
    run_b_stdout = capsys.readouterr().out

    assert run_a != run_b
    assert read_csv(os.path.join(run_a, "progress.csv")) == (["A/x"], [["1"]])
    assert read_csv(os.path.join(run_b, "progress.csv")) == (["B/y"], [["2"]])
    assert "alpha_0 A-outer a line" in read_lines(os.path.join(run_a, "debug.log"))
    b_lines = read_lines(os.path.join(run_b, "debug.log"))
    assert "beta_1 b line" in b_lines
    assert not any("A-" in line or "alpha" in line for line in b_lines)
    assert "beta_1 b line" in run_b_stdout.splitlines()
    assert "Leak" not in run_b_stdout and "Stale" not in run_b_stdout
    assert sorted(os.listdir(run_a)) == ["debug.log", "itr_0.pkl", "itr_1.pkl", "itr_3.pkl",
                                         "params.json", "progress.csv"]
    assert sorted(os.listdir(run_b)) == ["debug.log", "params.json", "params.pkl",
                                         "progress.csv"]
    assert observable_state(logger.current_logger()) == default_before


def test_nested_contexts_restore_the_outer_logger(in_tmp_cwd):
    default = logger.current_logger()
    with logger_context("outer", 0, "outer") as outer_dir:
        outer = logger.current_logger()
        assert outer is not default
        logger.push_tabular_prefix("Outer/")
        logger.record_tabular("o", 1)
        with pytest.raises(RuntimeError):
            with logger_context("inner", 1, "inner", snapshot_mode="all") as inner_dir:
                assert logger.current_logger() not in (outer, default)
                logger.record_tabular("i", 2)
                assert logger.dump_tabular(with_prefix=False) == {"i": 2}
                logger.record_tabular("inner_leak", 3)
                raise RuntimeError("inner failed")
        assert logger.current_logger() is outer
        assert logger.get_snapshot_dir() == outer_dir
        assert logger.get_snapshot_mode() == "none"
        logger.record_tabular("o2", 4)
        assert logger.dump_tabular(with_prefix=False) == {"Outer/o": 1, "Outer/o2": 4}
        logger.log("outer again", with_timestamp=False)
    assert logger.current_logger() is default
    assert read_csv(os.path.join(outer_dir, "progress.csv")) == (["Outer/o", "Outer/o2"],
                                                                 [["1", "4"]])
    assert read_csv(os.path.join(inner_dir, "progress.csv")) == (["i"], [["2"]])
    assert "outer_0 outer again" in read_lines(os.path.join(outer_dir, "debug.log"))
    assert "outer again" not in "\n".join(read_lines(os.path.join(inner_dir, "debug.log")))


def test_default_logger_untouched_by_a_run(in_tmp_cwd, capsys):
    default = logger.current_logger()
    before = observable_state(default)
    logger.record_tabular("Outside", 1)  # pending on the default logger across the run
    with pytest.raises(RuntimeError):
        with logger_context("exp", 0, "run", snapshot_mode="last") as run_dir:
            assert logger.dump_tabular(with_prefix=False) == {}  # not the default's row
            logger.push_prefix("stale ")
            logger.record_tabular("Leak", 1)
            logger.set_snapshot_gap(5)
            raise RuntimeError("boom")
    capsys.readouterr()
    assert logger.current_logger() is default
    assert observable_state(default) == before
    assert logger.dump_tabular(with_timestamp=False, with_prefix=False) == {"Outside": 1}
    logger.log("after", with_timestamp=False)
    assert capsys.readouterr().out.splitlines()[-1] == "after"
    assert not os.path.getsize(os.path.join(run_dir, "progress.csv"))


# ----------------------------------------------------------------------------- real runner

def tiny_ppo_runner(seed):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=16,
                            batch_B=2, max_decorrelation_steps=0)
    return MinibatchRl(algo=PPO(minibatches=2, epochs=1), agent=CategoricalPgAgent(),
                       sampler=sampler, n_steps=256, log_interval_steps=64, seed=seed,
                       affinity=dict(master_torch_threads=1))


def test_runner_runs_after_a_failed_run_write_only_their_own_columns(in_tmp_cwd):
    with pytest.raises(RuntimeError, match="user code failed"):
        with logger_context("first", 0, "ppo", dict(seed=0), snapshot_mode="last") as run_a:
            tiny_ppo_runner(seed=0).train()
            logger.record_tabular("Leak", 1)
            logger.push_prefix("stale ")
            logger.push_tabular_prefix("Stale/")
            raise RuntimeError("user code failed")
    with logger_context("second", 1, "ppo", dict(seed=0), snapshot_mode="last") as run_b:
        tiny_ppo_runner(seed=0).train()

    header_a, rows_a = read_csv(os.path.join(run_a, "progress.csv"))
    header_b, rows_b = read_csv(os.path.join(run_b, "progress.csv"))
    assert "Diagnostics/Iteration" in header_b and "ReturnAverage" in header_b
    assert "Leak" not in header_b and not any(k.startswith("Stale/") for k in header_b)
    assert set(header_b) == set(header_a)
    assert len(rows_a) == len(rows_b) == 4  # 256 steps / 64 per log interval
    assert [row[header_b.index("Diagnostics/Iteration")] for row in rows_b] == \
        ["1", "3", "5", "7"]
    debug_b = read_lines(os.path.join(run_b, "debug.log"))
    assert any(line.endswith("| ppo_1 Training complete.") for line in debug_b)
    assert not any("stale" in line or "ppo_0" in line for line in debug_b)
    assert sorted(os.listdir(run_b)) == ["debug.log", "params.json", "params.pkl",
                                         "progress.csv", "sampler_state.pkl"]
