"""Run directories, resume and snapshot loading fail safely and say why: a progress.csv
cut mid-row, a renamed run directory, configs JSON cannot hold exactly, unreadable or
unfitting snapshots, a full disk, and a broken params.json."""
import contextlib
import csv
import errno
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest
import torch

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.cli import main
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils import checkpoint
from rlframe.utils.checkpoint import SnapshotError, state_dict_differences
from rlframe.utils.loading import load_agent
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context

BATCH = 32 * 2  # Env steps per iteration of the tiny runs.
CONFIG = dict(algo="ppo", env="CartPole-v1")


def tiny_runner(hidden=64, n_itr=8):
    """PPO on CartPole, a row and a snapshot every 2 iterations (1, 3, 5, 7, ...)."""
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=32,
                            batch_B=2, max_decorrelation_steps=0)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[hidden]))
    return MinibatchRl(algo=PPO(epochs=1, minibatches=1), agent=agent, sampler=sampler,
                       n_steps=BATCH * n_itr, log_interval_steps=BATCH * 2, seed=2,
                       affinity=dict(master_torch_threads=1))


def resume(run_dir, config=None, **runner_kwargs):
    """Resume the run in ``run_dir`` (a ``run_0``) with a tiny runner."""
    with logger_context(os.path.dirname(run_dir), 0, "tiny", dict(config or CONFIG),
                        snapshot_mode="last", override_prefix=True, resume=True):
        tiny_runner(**runner_kwargs).train()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run (hidden size 64) with its snapshot of iteration 7."""
    root = tmp_path_factory.mktemp("trained")
    with logger_context(str(root), 0, "tiny", dict(CONFIG), snapshot_mode="last",
                        override_prefix=True) as run_dir:
        tiny_runner().train()
    return run_dir


@pytest.fixture
def run_copy(trained, tmp_path):
    """A copy of the trained run to change, as ``<tmp>/runs/run_0``."""
    return shutil.copytree(trained, tmp_path / "runs" / "run_0")


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def iterations(path):
    header, *rows = read_rows(path)
    column = header.index("Diagnostics/Iteration")
    return [float(row[column]) for row in rows]


def one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ progress.csv cut mid-row
def test_resume_cuts_a_half_written_progress_row_and_its_nul_bytes(run_copy):
    """The run stopped while writing the row of its snapshot's iteration: the half row and
    the NUL bytes after it go, with a warning, and the resumed rows start on a line of
    their own."""
    progress = run_copy / "progress.csv"
    data = progress.read_bytes()
    last_row_start = data.rstrip(b"\r\n").rfind(b"\n") + 1
    half_row = data[last_row_start:last_row_start + (len(data) - last_row_start) // 2]
    progress.write_bytes(data[:last_row_start] + half_row + b"\x00" * 40)
    with pytest.warns(UserWarning, match=r"progress\.csv.*incomplete row.*dropping 1 "
                                         r"incomplete row\(s\), \d+ bytes, NUL bytes"):
        resume(str(run_copy), n_itr=12)
    text = progress.read_text(encoding="utf-8")
    assert "\x00" not in text
    header, *rows = read_rows(progress)
    assert all(len(row) == len(header) for row in rows)
    itrs = iterations(progress)
    assert itrs == sorted(set(itrs)) and itrs[-1] == 11
    assert itrs[:3] == [1, 3, 5] and 9 in itrs  # Row 7 was never whole; 9 and 11 are new.
    assert "WARNING: " in (run_copy / "debug.log").read_text()


def test_a_progress_csv_with_only_a_half_header_starts_again(run_copy):
    progress = run_copy / "progress.csv"
    progress.write_bytes(progress.read_bytes()[:30])
    with pytest.warns(UserWarning, match="the header and 0 incomplete row"):
        resume(str(run_copy), n_itr=10)
    header, *rows = read_rows(progress)
    # The rows before the snapshot are lost; its own row (iteration 7) is written again.
    assert "Diagnostics/Iteration" in header and iterations(progress) == [7, 9]


# ------------------------------------------------------------------ rlframe train / resume
@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A run of `python -m rlframe train` (PPO CartPole, 512 steps, snapshot at 511)."""
    root = tmp_path_factory.mktemp("cli")
    result = subprocess.run(
        [sys.executable, "-m", "rlframe", "train", "ppo", "CartPole-v1", "--n-steps", "512",
         "--batch-T", "32", "--batch-B", "4", "--log-interval-steps", "256", "--log-dir",
         "runs", "--run-id", "0", "--seed", "0", "--config",
         json.dumps(dict(agent=dict(model_kwargs=dict(hidden_sizes=[16])),
                         algo=dict(epochs=1),
                         sampler=dict(eval_n_envs=1, eval_max_steps=50,
                                      eval_max_trajectories=1)))],
        cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "runs" / "run_0"


@pytest.fixture
def cli_copy(cli_run, tmp_path):
    return shutil.copytree(cli_run, tmp_path / "runs" / "run_0")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rlframe_resume_of_a_renamed_run_directory_trains_on_in_it(cli_copy):
    best = cli_copy.parent / "best"
    cli_copy.rename(best)
    params = json.loads((best / "params.json").read_text())
    params["n_steps"] = 1024  # Train on past the run's end: four more iterations.
    (best / "params.json").write_text(json.dumps(params))
    result = subprocess.run([sys.executable, "-m", "rlframe", "resume", str(best)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(best.parent) == ["best"]  # No new run beside it.
    assert iterations(best / "progress.csv") == [-1, 1, 3, 5, 7]  # 128 steps an iteration
    assert "Resumed from params.pkl: iteration 3" in (best / "debug.log").read_text()
    assert torch.load(best / "params.pkl", weights_only=True)["itr"] == 7


# ------------------------------------------------------------------ configs as JSON holds them
class Settings:
    """An object shown in params.json by its default repr (with an address)."""


@pytest.mark.parametrize("value", [{1: "a", 2: "b"}, float("nan"), [Settings()]],
                         ids=["int_keys", "nan", "default_repr"])
def test_resume_accepts_the_same_config_that_json_could_not_hold_exactly(value, tmp_path):
    first = dict(algo="ppo", value=value)
    with logger_context(str(tmp_path), 0, "run", first, snapshot_mode="last",
                        override_prefix=True):
        logger.save_itr_params(0, dict(itr=0))
    again = dict(algo="ppo", value={1: "a", 2: "b"} if isinstance(value, dict)
                 else float("nan") if isinstance(value, float) else [Settings()])
    with logger_context(str(tmp_path), 0, "run", again, snapshot_mode="last",
                        override_prefix=True, resume=True) as run_dir:
        assert logger.get_resume_snapshot() == os.path.join(run_dir, "params.pkl")
    assert value is first["value"]  # The first object lives on: its address differs.
    with pytest.raises(ValueError, match="different setting"):
        with logger_context(str(tmp_path), 0, "run", dict(algo="ppo", value=[Settings(), 1]),
                            snapshot_mode="last", override_prefix=True, resume=True):
            pass


@pytest.mark.parametrize("log_params", [["lr", 0.1], ("lr", 0.1), "lr=0.1"])
def test_log_params_that_is_not_a_dict_is_refused_before_any_directory(log_params, tmp_path):
    type_name = type(log_params).__name__
    with pytest.raises(TypeError, match=rf"log_params must be a dict.*got a {type_name}"):
        with logger_context(str(tmp_path / "runs"), 0, "run", log_params,
                            override_prefix=True):
            pass
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ unreadable snapshots
def _garbage(path):
    path.write_bytes(bytes(range(256)) * 3)


def _empty(path):
    path.write_bytes(b"")


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _other_pickle(path):
    with open(path, "wb") as f:
        pickle.dump(Settings(), f)


def _other_object(path):
    torch.save(dict(itr=7, agent_state_dict=Settings()), path)


BREAKAGES = dict(garbage=(_garbage, "not a file written by torch.save"),
                 empty=(_empty, "empty"), truncated=(_truncated, "cut short"),
                 other_pickle=(_other_pickle, "is a Python pickle, not a torch.save file"),
                 other_object=(_other_object, "holds objects other than the tensors"))


def assert_rlframe_words(message, path, detail):
    assert f"{path} is not a readable rlframe snapshot" in message, message
    assert detail in message and "weights_only" not in message, message


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_unreadable_snapshot_is_named_in_resume_and_load_agent(breakage, run_copy):
    break_file, detail = BREAKAGES[breakage]
    snapshot = run_copy / "params.pkl"
    break_file(snapshot)
    with pytest.raises(SnapshotError) as info:
        resume(str(run_copy), n_itr=10)
    assert_rlframe_words(str(info.value), snapshot, detail)
    with pytest.raises(SnapshotError) as info:
        load_agent(run_copy)
    assert_rlframe_words(str(info.value), snapshot, detail)


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_unreadable_snapshot_is_one_line_in_rlframe_evaluate_and_resume(breakage, cli_copy,
                                                                       capsys):
    break_file, detail = BREAKAGES[breakage]
    snapshot = cli_copy / "params.pkl"
    break_file(snapshot)
    for command in ("evaluate", "resume"):
        assert main([command, str(cli_copy)]) == 2
        assert_rlframe_words(one_line_error(capsys), snapshot, detail)


def test_resume_of_a_snapshot_that_is_not_a_dict(run_copy):
    torch.save([1, 2, 3], run_copy / "params.pkl")
    with pytest.raises(SnapshotError, match="it holds a list, not the dict of a snapshot"):
        resume(str(run_copy))


# ------------------------------------------------------------------ snapshots that do not fit
FIT = "this snapshot's model does not fit this agent"


def test_load_agent_lists_the_parameters_of_other_shapes(trained):
    with pytest.raises(SnapshotError, match=FIT) as info:
        load_agent(trained, agent=CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[32])))
    message = str(info.value)
    assert "[64, 4] in the snapshot, [32, 4] in the agent" in message
    assert "[64] in the snapshot, [32] in the agent" in message


def test_load_agent_of_another_algorithm_lists_missing_and_unexpected_keys(trained):
    with pytest.raises(SnapshotError, match=FIT) as info:
        load_agent(trained, agent=DqnAgent())
    assert "missing from the snapshot" in str(info.value)
    assert "unexpected in the snapshot" in str(info.value)


def test_resume_into_an_agent_of_other_sizes_is_refused(run_copy):
    with pytest.raises(SnapshotError, match=FIT + r".*\[64, 4\] in the snapshot, \[32, 4\]"):
        resume(str(run_copy), hidden=32, n_itr=10)
    assert torch.load(run_copy / "params.pkl", weights_only=True)["itr"] == 7  # Untouched.


def test_rlframe_evaluate_of_a_snapshot_whose_spec_does_not_fit_its_weights(cli_copy, capsys):
    path = cli_copy / "params.pkl"
    snapshot = torch.load(path, weights_only=True)
    snapshot["agent_spec"]["agent_kwargs"]["model_kwargs"]["hidden_sizes"] = [32]
    torch.save(snapshot, path)
    assert main(["evaluate", str(cli_copy)]) == 2
    err = one_line_error(capsys)
    assert FIT in err and "[16, 4] in the snapshot, [32, 4] in the agent" in err


def test_a_long_list_of_differences_ends_with_how_many_more():
    agent = {f"layer{i}.weight": (4, 4) for i in range(15)}
    saved = {f"layer{i}.weight": (8, 4) for i in range(15)}
    text = state_dict_differences(agent, saved)
    assert text.count("in the snapshot") == 10 and text.endswith("and 5 more")


# ------------------------------------------------------------------ a full disk
def test_disk_full_names_the_snapshot_and_keeps_the_old_one(tmp_path, monkeypatch):
    run_logger = logger.Logger()
    run_logger.set_snapshot_dir(str(tmp_path))
    run_logger.set_snapshot_mode("last")
    run_logger.save_itr_params(0, dict(itr=0))

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left on device") as info:
        run_logger.save_itr_params(1, dict(itr=1))
    assert info.value.errno == errno.ENOSPC
    assert str(tmp_path / "params.pkl") in str(info.value)
    with pytest.raises(OSError) as info:
        checkpoint.write_state_file(str(tmp_path), checkpoint.SAMPLER_STATE_FILE, 1, [1])
    assert info.value.errno == errno.ENOSPC
    assert str(tmp_path / checkpoint.SAMPLER_STATE_FILE) in str(info.value)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["params.pkl"]
    assert torch.load(tmp_path / "params.pkl", weights_only=True) == dict(itr=0)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_disk_full_while_writing_a_progress_row_names_the_file(capsys):
    run_logger = logger.Logger()
    run_logger.add_tabular_output("/dev/full")  # Every write fails with ENOSPC.
    run_logger.record_tabular("Iteration", 0)
    try:
        with pytest.raises(OSError, match="could not write /dev/full: No space left") as info:
            run_logger.dump_tabular()
        assert info.value.errno == errno.ENOSPC
    finally:
        with contextlib.suppress(OSError):  # Closing flushes what the disk refused.
            run_logger.close()


# ------------------------------------------------------------------ a broken params.json
@pytest.mark.parametrize("text, fragment", [
    ("{not json", "params.json is not readable JSON"),
    ("[1, 2]", "params.json holds a JSON array, not an object"),
    ('{"algo": "ppo", "env_id": "CartPole-v1", "n_steps": "lots"}',
     "n_steps must be an integer, got 'lots'"),
], ids=["not_json", "array", "n_steps_lots"])
def test_rlframe_resume_with_a_broken_params_json(text, fragment, cli_copy, capsys):
    (cli_copy / "params.json").write_text(text)
    assert main(["resume", str(cli_copy)]) == 2
    err = one_line_error(capsys)
    assert "params.json" in err and fragment in err


def test_rlframe_evaluate_and_plot_of_a_file_that_is_no_run(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a run\n")
    assert main(["evaluate", str(notes)]) == 2
    assert "is not a readable rlframe snapshot" in one_line_error(capsys)
    assert main(["plot", str(notes), "-o", str(tmp_path / "out.png")]) == 2
    assert "is a file, not a run directory" in one_line_error(capsys)
    assert main(["evaluate", str(tmp_path / "nowhere")]) == 2
    assert "No run directory or snapshot file" in one_line_error(capsys)
