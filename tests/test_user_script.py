"""A script written as for rlpyt: own model, agent subclass, runner subclass."""
import csv
import json
import os

import pytest
import torch

from conftest import run_dirs
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context
from rlframe.utils.tensor import infer_leading_dims, restore_leading_dims


class MyModel(torch.nn.Module):
    """A user's policy/value network: forward(observation, prev_action, prev_reward)."""

    def __init__(self, input_size, n_actions, hidden=32):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(input_size + n_actions + 1, hidden),
                                        torch.nn.Tanh())
        self.pi = torch.nn.Linear(hidden, n_actions)
        self.v = torch.nn.Linear(hidden, 1)
        self.seen_prev_action_width = None

    def forward(self, observation, prev_action, prev_reward):
        lead_dim, T, B, _ = infer_leading_dims(observation, 1)
        self.seen_prev_action_width = prev_action.shape[-1]
        x = torch.cat([observation.view(T * B, -1), prev_action.view(T * B, -1),
                       prev_reward.view(T * B, 1)], dim=-1)
        h = self.body(x)
        pi = torch.softmax(self.pi(h), dim=-1)
        v = self.v(h).squeeze(-1)
        return restore_leading_dims((pi, v), lead_dim, T, B)


class MyAgent(CategoricalPgAgent):
    def make_env_to_model_kwargs(self, env_spaces):
        return dict(input_size=env_spaces.observation.shape[0], n_actions=env_spaces.action.n)


class MyRunner(MinibatchRlEval):
    """A runner subclass that also counts its log points."""

    n_logs = 0

    def log_diagnostics(self, *args, **kwargs):
        self.n_logs += 1
        super().log_diagnostics(*args, **kwargs)


@pytest.mark.slow
def test_rlpyt_style_user_script(in_tmp_cwd):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            eval_env_kwargs=dict(id="CartPole-v1"), batch_T=16, batch_B=4,
                            max_decorrelation_steps=10, eval_n_envs=2, eval_max_steps=200)
    algo = PPO(minibatches=2, epochs=2)
    agent = MyAgent(ModelCls=MyModel, model_kwargs=dict(hidden=16))
    runner = MyRunner(algo=algo, agent=agent, sampler=sampler, n_steps=640,
                      log_interval_steps=320, affinity=dict(cuda_idx=None), seed=5)
    config = dict(env_id="CartPole-v1", algo=dict(minibatches=2, epochs=2), note="user run")
    with logger_context("my_experiment", 7, "my_ppo", config, snapshot_mode="last"):
        runner.train()

    (run_dir,) = run_dirs(in_tmp_cwd)
    parts = os.path.relpath(run_dir, in_tmp_cwd).split(os.sep)
    assert parts[:2] == ["data", "local"] and parts[-2:] == ["my_experiment", "run_7"]
    assert len(parts[2]) == 8 and len(parts[3]) == 6  # <YYYYMMDD>/<HHMMSS>
    assert set(os.listdir(run_dir)) >= {"params.json", "progress.csv", "debug.log",
                                        "params.pkl"}
    with open(os.path.join(run_dir, "params.json")) as f:
        params = json.load(f)
    assert params["env_id"] == "CartPole-v1" and params["algo"] == dict(minibatches=2, epochs=2)
    assert params["run_ID"] == 7 and params["name"] == "my_ppo"
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert runner.n_logs == 3 and len(rows) == 3  # pre-training eval + 2 log intervals
    for key in ("Diagnostics/Iteration", "Diagnostics/CumSteps", "Diagnostics/StepsInEval",
                "Diagnostics/CumUpdates", "ReturnAverage", "LengthMax", "lossAverage",
                "gradNormStd", "entropyMedian", "clipFractionAverage", "approxKlMax"):
        assert key in rows[0], key
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [0, 320, 640]
    assert 0 <= float(rows[-1]["clipFractionAverage"]) <= 1
    assert 0 < float(rows[-1]["approxKlMax"]) < 1
    assert [int(r["Diagnostics/Iteration"]) for r in rows] == [-1, 4, 9]
    assert int(rows[-1]["Diagnostics/CumUpdates"]) == 10 * 2 * 2
    assert agent.model.seen_prev_action_width == 2  # prev_action arrives one-hot
    snapshot = torch.load(os.path.join(run_dir, "params.pkl"), weights_only=True)
    assert snapshot["itr"] == 9 and snapshot["cum_steps"] == 10 * 64  # As in progress.csv.
    model = MyModel(4, 2, hidden=16)
    model.load_state_dict(snapshot["agent_state_dict"])
    with open(os.path.join(run_dir, "debug.log")) as f:
        log = f.read()
    assert "Running 10 iterations of minibatch RL." in log and "Training complete." in log
