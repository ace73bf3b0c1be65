"""Nothing fails silently: run-directory collisions, final snapshots, warnings, early errors."""
import glob
import multiprocessing as mp
import os
import signal
import textwrap
import time

import gymnasium
import numpy as np
import pytest
import torch

from conftest import read_csv, run_dirs, running_script
from samplers_helpers import CrashingEnv
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.base import NonFiniteError
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import GymEnvWrapper
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.parallel.base import WorkerError
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context
from rlframe.utils.logging.run_logger import Logger

CARTPOLE = dict(id="CartPole-v1")


def ppo_runner(RunnerCls=MinibatchRl, n_steps=256, log_interval_steps=64, **sampler_kwargs):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=16, batch_B=2,
                            max_decorrelation_steps=0, **sampler_kwargs)
    return RunnerCls(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=n_steps,
                     log_interval_steps=log_interval_steps, seed=0,
                     affinity=dict(master_torch_threads=1))


# ------------------------------------------------------------------ run directories
def _enter_context(run_dir_parent, if_exists, barrier, results):
    try:
        barrier.wait(30)
        with logger_context(run_dir_parent, 0, "same", dict(pid=os.getpid()),
                            override_prefix=True, if_exists=if_exists) as run_dir:
            logger.log(f"written by {os.getpid()}")
            time.sleep(0.2)  # Both processes are inside their contexts at once.
        results.put(("ok", run_dir))
    except FileExistsError as error:
        results.put(("error", str(error)))


@pytest.mark.slow
@pytest.mark.parametrize("if_exists", ["error", "suffix"])
def test_concurrent_runs_never_share_a_directory(tmp_path, if_exists):
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_enter_context,
                         args=(str(tmp_path / "exp"), if_exists, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    if if_exists == "error":
        (kind_a, message), (kind_b, run_dir) = outcomes
        assert (kind_a, kind_b) == ("error", "ok")
        assert "already holds a run" in message and "if_exists='suffix'" in message
        dirs = [run_dir]
    else:
        assert [kind for kind, _ in outcomes] == ["ok", "ok"]
        dirs = sorted(run_dir for _, run_dir in outcomes)
        assert [os.path.basename(d) for d in dirs] == ["run_0", "run_0-1"]
    for run_dir in dirs:  # Each directory intact: its own params.json and one writer.
        with open(os.path.join(run_dir, "debug.log")) as f:
            writers = {line.split("written by ")[1].strip() for line in f if "written by" in line}
        assert len(writers) == 1
        with open(os.path.join(run_dir, "params.json")) as f:
            assert f"\"pid\": {writers.pop()}" in f.read()


def test_existing_run_directory_is_an_error_before_anything_is_written(tmp_path):
    with logger_context(str(tmp_path / "exp"), 3, "first", override_prefix=True) as run_dir:
        logger.log("first run")
    before = {name: os.path.getmtime(os.path.join(run_dir, name))
              for name in os.listdir(run_dir)}
    with pytest.raises(FileExistsError, match="already holds a run"):
        with logger_context(str(tmp_path / "exp"), 3, "second", override_prefix=True):
            pass
    assert {name: os.path.getmtime(os.path.join(run_dir, name))
            for name in os.listdir(run_dir)} == before
    with pytest.raises(ValueError, match="if_exists"):
        with logger_context(str(tmp_path / "exp"), 4, "x", if_exists="overwrite"):
            pass


def test_log_dir_cannot_lead_out_of_the_data_directory(in_tmp_cwd):
    with pytest.raises(ValueError, match=r"log_dir='\.\./\.\./\.\./\.\./escape' leads out"):
        with logger_context("../../../../escape", 0, "x"):
            pass
    assert not os.path.exists(in_tmp_cwd / "data")
    with logger_context("../inside", 0, "x") as run_dir:  # Still under data/local/<date>.
        pass
    assert run_dir.startswith(str(in_tmp_cwd / "data" / "local"))


# ------------------------------------------------------------- warnings and early errors
def test_train_outside_logger_context_warns(in_tmp_cwd):
    runner = ppo_runner(n_steps=64)
    with pytest.warns(UserWarning, match="outside logger_context: nothing"):
        runner.train()
    assert not os.path.exists(in_tmp_cwd / "data")


def test_rounded_n_steps_warns_with_both_numbers(in_tmp_cwd):
    runner = ppo_runner(n_steps=100, log_interval_steps=64)  # 32 steps per iteration.
    with pytest.warns(UserWarning, match=r"n_steps=100 .* training for 128 env steps"):
        with logger_context("round", 0, "round"):
            runner.train()


def test_run_shorter_than_min_steps_learn_warns(in_tmp_cwd):
    from rlframe.agents.dqn.dqn_agent import DqnAgent
    from rlframe.algos.dqn.dqn import DQN
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=16, batch_B=2,
                            max_decorrelation_steps=0)
    runner = MinibatchRl(algo=DQN(min_steps_learn=256, replay_size=512), agent=DqnAgent(),
                         sampler=sampler, n_steps=256, log_interval_steps=128, seed=0)
    with pytest.warns(UserWarning, match=r"256 env steps \(8 iterations\), but DQN starts "
                                         r"learning only after min_steps_learn=256"):
        with logger_context("short", 0, "short"):
            runner.train()
    # One more iteration and it trains: no warning.
    runner = MinibatchRl(algo=DQN(min_steps_learn=255, replay_size=512), agent=DqnAgent(),
                         sampler=SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE,
                                               batch_T=16, batch_B=2,
                                               max_decorrelation_steps=0),
                         n_steps=256, log_interval_steps=128, seed=0)
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*will not be trained")
        with logger_context("short", 1, "short"):
            runner.train()


def test_eval_runner_without_eval_envs_fails_before_a_run_directory(in_tmp_cwd):
    with pytest.raises(ValueError, match="eval_n_envs=0"):
        ppo_runner(MinibatchRlEval)
    assert not os.path.exists(in_tmp_cwd / "data")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_cuda_idx_without_a_gpu_fails_before_a_run_directory(in_tmp_cwd):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=16, batch_B=2)
    with pytest.raises(ValueError, match=r"cuda_idx'\]=0 asks for a GPU.*cuda_idx=None"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=64,
                    affinity=dict(cuda_idx=0))
    assert not os.path.exists(in_tmp_cwd / "data")


# ---------------------------------------------------------------- rows and snapshots
def test_iterations_unique_and_snapshot_cum_steps_match_progress(in_tmp_cwd):
    runner = ppo_runner(MinibatchRlEval, n_steps=96, log_interval_steps=32, eval_n_envs=1,
                        eval_max_steps=50, eval_env_kwargs=CARTPOLE)
    with logger_context("rows", 0, "rows", snapshot_mode="all") as run_dir:
        runner.train()
    header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
    column = {name: [row[header.index(name)] for row in rows] for name in header}
    assert column["Diagnostics/Iteration"] == ["-1", "0", "1", "2"]
    assert column["Diagnostics/CumSteps"] == ["0", "32", "64", "96"]
    assert column["Diagnostics/NonFiniteUpdates"] == ["0"] * 4
    for itr, cum_steps in ((0, 32), (2, 96)):
        snapshot = torch.load(os.path.join(run_dir, f"itr_{itr}.pkl"), weights_only=True)
        assert (snapshot["itr"], snapshot["cum_steps"]) == (itr, cum_steps)
    assert not glob.glob(os.path.join(run_dir, "itr_-1.pkl"))


INTERRUPTED_SCRIPT = textwrap.dedent("""
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.gym import make as gym_make
    from rlframe.runners.callbacks import Callback
    from rlframe.runners.minibatch_rl import MinibatchRl
    from rlframe.samplers.serial.sampler import SerialSampler
    from rlframe.utils.logging.context import logger_context

    class Report(Callback):
        def on_iteration_end(self, runner, itr, samples, opt_info):
            print(f"ITR {itr}", flush=True)

    if __name__ == "__main__":
        sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                                batch_T=64, batch_B=2)
        runner = MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler,
                             n_steps=1e8, log_interval_steps=1e7, seed=0,
                             affinity=dict(master_torch_threads=1), callbacks=[Report()])
        with logger_context("interrupted", 0, "interrupted", snapshot_mode="last"):
            runner.train()
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_writes_a_final_snapshot_of_its_last_iteration(tmp_path, sig):
    script = tmp_path / "train.py"
    script.write_text(INTERRUPTED_SCRIPT)
    printed = []
    with running_script(script, cwd=tmp_path) as proc:
        for line in proc.stdout:
            if line.startswith("ITR "):
                printed.append(int(line.split()[1]))
                if printed[-1] >= 3:
                    break
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and len(printed) == 4, out[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    cause = ("interrupted (Ctrl-C)" if sig == signal.SIGINT
             else "stopped by a signal (exit code 143)")
    assert f"Training {cause}: final snapshot of iteration" in log, log[-2000:]
    logged_itr = int(log.split("final snapshot of iteration ")[1].split()[0])
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    # The last iteration that completed: the one printed last, or the next one if
    # the signal came after its update but before its report.
    assert snapshot["itr"] == logged_itr and logged_itr in (printed[-1], printed[-1] + 1)
    assert snapshot["cum_steps"] == (logged_itr + 1) * 128


# ------------------------------------------------------------------- non-finite values
class Corrupt(gymnasium.Wrapper):
    """CartPole whose observations turn NaN (or whose rewards turn infinite) after a while."""

    def __init__(self, env, fault, after):
        super().__init__(env)
        self.fault, self.after, self.steps = fault, after, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps > self.after:
            if self.fault == "nan_observation":
                obs = np.full_like(obs, np.nan)
            else:
                reward = float("inf")
        return obs, reward, terminated, truncated, info


def make_faulty_env(fault, after):
    return GymEnvWrapper(Corrupt(gymnasium.make("CartPole-v1"), fault, after))


@pytest.mark.parametrize("SamplerCls", [SerialSampler, CpuSampler])
@pytest.mark.parametrize("fault,source", [("nan_observation", "non-finite observations"),
                                          ("inf_reward", "non-finite rewards")])
def test_non_finite_values_warn_then_stop_keeping_a_finite_snapshot(in_tmp_cwd, SamplerCls,
                                                                    fault, source):
    algo = PPO(epochs=2, minibatches=2)  # 4 updates per iteration.
    algo.non_finite_limit = 10
    kwargs = dict(affinity=dict(workers_cpus=[0, 1])) if SamplerCls is CpuSampler else {}
    sampler = SamplerCls(EnvCls=make_faulty_env, env_kwargs=dict(fault=fault, after=100),
                         batch_T=32, batch_B=2, max_decorrelation_steps=0)
    runner = MinibatchRl(algo=algo, agent=CategoricalPgAgent(), sampler=sampler, n_steps=64e3,
                         log_interval_steps=64, seed=0, **kwargs)
    with pytest.warns(RuntimeWarning, match="non-finite loss at update"):
        with pytest.raises(NonFiniteError, match=f"10 updates in a row.*{source}"):
            with logger_context("faulty", 0, "faulty", snapshot_mode="last") as run_dir:
                runner.train()
    header, rows = read_csv(os.path.join(run_dir, "progress.csv"))
    counts = [int(row[header.index("Diagnostics/NonFiniteUpdates")]) for row in rows]
    assert counts[0] == 0 and counts[-1] > 0  # Finite at first, then counted.
    loss = [float(row[header.index("lossAverage")]) for row in rows]
    # Skipped updates leave no NaN statistics: rows without skips have finite losses.
    assert all(np.isfinite(value) for value, count, before in zip(loss, counts, [0] + counts)
               if count == before)
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    weights = snapshot["agent_state_dict"]
    assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point())
    assert snapshot["itr"] == len(rows) - 1 or snapshot["itr"] == len(rows)
    with open(os.path.join(run_dir, "debug.log")) as f:
        assert "stopped by NonFiniteError" in f.read()


# ------------------------------------------------------------------ late errors made early
class DictObsEnv(gymnasium.Env):
    """Two-action env with a Dict observation."""

    observation_space = gymnasium.spaces.Dict(
        pos=gymnasium.spaces.Box(-1, 1, (2,), np.float32),
        vel=gymnasium.spaces.Box(-1, 1, (2,), np.float32))
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0., False, False, {}


def make_dict_obs_env():
    return GymEnvWrapper(DictObsEnv())


class ThreeActionModel(torch.nn.Module):
    """A policy model written for three actions."""

    def __init__(self, observation_shape, action_size):
        super().__init__()
        self.pi = torch.nn.Linear(int(np.prod(observation_shape)), 3)
        self.v = torch.nn.Linear(int(np.prod(observation_shape)), 1)

    def forward(self, observation, prev_action, prev_reward):
        return torch.softmax(self.pi(observation), -1), self.v(observation).squeeze(-1)


def test_late_errors_now_fire_before_a_run_directory(in_tmp_cwd):
    with pytest.raises(TypeError, match="learning_rate must be a number, got '1e-3'"):
        PPO(learning_rate="1e-3")
    with pytest.raises(TypeError, match="value_loss_coeff must be a number"):
        PPO(value_loss_coeff=None)
    dict_sampler = SerialSampler(EnvCls=make_dict_obs_env, env_kwargs={}, batch_T=4, batch_B=2)
    with pytest.raises(TypeError, match=r"Dict/Tuple with fields \['pos', 'vel'\].*"
                                        r"FlattenObservation.*ModelCls="):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=dict_sampler, n_steps=64)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=2)
    with pytest.raises(ValueError, match=r"ThreeActionModel returned action probabilities of "
                                         r"shape \(1, 3\).*needs 2"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(ModelCls=ThreeActionModel),
                    sampler=sampler, n_steps=64)
    with pytest.raises(TypeError, match=r"EnvCls=<function .*<lambda>.* cannot be sent to "
                                        r"worker processes started with 'spawn'.*module level"):
        CpuSampler(EnvCls=lambda **kwargs: gym_make(**kwargs), env_kwargs=CARTPOLE,
                   batch_T=4, batch_B=2, start_method="spawn")
    CpuSampler(EnvCls=lambda **kwargs: gym_make(**kwargs), env_kwargs=CARTPOLE,
               batch_T=4, batch_B=2, start_method="fork")  # Fork hands it over as it is.
    assert not os.path.exists(in_tmp_cwd / "data")


def test_worker_error_writes_a_final_snapshot(in_tmp_cwd):
    # Global env 2 (the second worker's first) raises at its 100th step: iteration 6.
    sampler = CpuSampler(EnvCls=CrashingEnv, env_kwargs=dict(crash_at=100, crash_rank=1),
                         batch_T=16, batch_B=4, max_decorrelation_steps=0)
    runner = MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=1e5,
                         log_interval_steps=1e5, seed=0, affinity=dict(workers_cpus=[0, 1]))
    with pytest.raises(WorkerError, match="env exploded"):
        with logger_context("crash", 0, "crash", snapshot_mode="last") as run_dir:
            runner.train()
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    assert "Training stopped by WorkerError" in log
    assert f"final snapshot of iteration {runner.last_completed_itr} written" in log
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    assert snapshot["itr"] == runner.last_completed_itr == 5


class FailingPPO(PPO):
    def optimize_agent(self, itr, samples):
        if itr == 5:
            raise ValueError("boom at iteration 5")
        return super().optimize_agent(itr, samples)


def test_a_sigterm_while_the_final_snapshot_is_written_waits_for_it(in_tmp_cwd, monkeypatch):
    """A run ending by an error writes its final snapshot; a SIGTERM that arrives during
    the write (torchrun stopping a rank whose peer died) does not cut it short."""
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=16, batch_B=2,
                            max_decorrelation_steps=0)
    runner = MinibatchRl(algo=FailingPPO(), agent=CategoricalPgAgent(), sampler=sampler,
                         n_steps=1e4, log_interval_steps=1e4, seed=0)
    real_save = Logger.save_itr_params
    handler_before = signal.getsignal(signal.SIGTERM)

    def save_after_a_sigterm(self, itr, params, final=False):
        if final:  # The final snapshot: the signal lands in the middle of writing it.
            os.kill(os.getpid(), signal.SIGTERM)
        return real_save(self, itr, params, final=final)
    monkeypatch.setattr(Logger, "save_itr_params", save_after_a_sigterm)
    with pytest.raises(ValueError, match="boom at iteration 5"):
        with logger_context("sigterm", 0, "sigterm", snapshot_mode="last") as run_dir:
            runner.train()
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    assert f"Signal {int(signal.SIGTERM)} arrived while the final snapshot was written" in log
    assert "final snapshot of iteration 4 written" in log
    assert torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)["itr"] == 4
    assert signal.getsignal(signal.SIGTERM) == handler_before  # Handlers are back.
