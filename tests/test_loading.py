"""Loading a trained agent from its run directory (rlframe.utils.loading, BaseAgent.act)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from conftest import REPO
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent, R2d1AlternatingAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.loading import (AgentLoadError, agent_spec, build_agent, find_snapshot,
                                   load_agent, load_run)
from rlframe.utils.logging.context import logger_context

CARTPOLE, PENDULUM = dict(id="CartPole-v1"), dict(id="Pendulum-v1")


def sampler_for(env_kwargs, batch_T=32, batch_B=4):
    return SerialSampler(EnvCls=gym_make, env_kwargs=env_kwargs, eval_env_kwargs=env_kwargs,
                         batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0)


def visited_observations(env_kwargs, n=20):
    """``n`` observations [n, *obs_shape] of an env acting at random (a space's own
    samples can be huge, CartPole's velocities, where policies give no clear action)."""
    env = gym_make(**env_kwargs)
    env.seed(0)
    observations = [env.reset()]
    while len(observations) < n:
        observation, _, done, _ = env.step(env.spaces.action.sample())
        observations.append(env.reset() if done else observation)
    env.close()
    return np.stack(observations)


RUNS = {  # name: (algo, agent, env_kwargs, n_steps)
    "ppo": lambda: (PPO(), CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[32])),
                    CARTPOLE, 2048),
    "dqn": lambda: (DQN(batch_size=32, min_steps_learn=256, replay_size=2048, replay_ratio=8,
                        eps_steps=1024),
                    DqnAgent(model_kwargs=dict(hidden_sizes=[32]), eps_final=0.05),
                    CARTPOLE, 2048),
    "sac": lambda: (SAC(batch_size=32, min_steps_learn=256, replay_size=2048, replay_ratio=16),
                    SacAgent(model_kwargs=dict(hidden_sizes=[32, 32]),
                             q_model_kwargs=dict(hidden_sizes=[32, 32])),
                    PENDULUM, 1024),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each tiny run: its directory, fixed observations [20, *obs_shape] (saved to a
    file) and the greedy actions of the agent trained in this process."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for name, build in RUNS.items():
        algo, agent, env_kwargs, n_steps = build()
        runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler_for(env_kwargs),
                             n_steps=n_steps, log_interval_steps=n_steps // 2, seed=1,
                             affinity=dict(master_torch_threads=1))
        with logger_context(str(root / name), 0, name, {}, snapshot_mode="last",
                            override_prefix=True) as run_dir:
            runner.train()
        obs = visited_observations(env_kwargs)
        obs_path = str(root / f"{name}_obs.npy")
        np.save(obs_path, obs)
        agent.eval_mode(runner.last_completed_itr)
        runs[name] = dict(run_dir=run_dir, obs=obs, obs_path=obs_path, agent=agent,
                          actions=agent.act(obs))
    return runs


@pytest.fixture(scope="module")
def loaded_elsewhere(trained, tmp_path_factory):
    """Greedy actions of each run's agent loaded by a fresh Python process."""
    out = tmp_path_factory.mktemp("loaded")
    script = out / "load.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        from rlframe.utils.loading import load_agent
        for run_dir, obs_path, out_path in zip(*[iter(sys.argv[1:])] * 3):
            agent = load_agent(run_dir)
            np.save(out_path, agent.act(np.load(obs_path)))
    """))
    args = []
    for name, run in trained.items():
        args += [run["run_dir"], run["obs_path"], str(out / f"{name}.npy")]
    env = dict(os.environ, PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, str(script), *args], env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return {name: np.load(out / f"{name}.npy") for name in trained}


@pytest.mark.parametrize("name", list(RUNS))
def test_fresh_process_acts_as_the_trained_agent(trained, loaded_elsewhere, name):
    expected, got = trained[name]["actions"], loaded_elsewhere[name]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if name == "sac":
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)
        assert len(np.unique(expected)) > 1  # A trained policy, not a constant one.


def test_load_run_records_the_run(trained):
    run = load_run(trained["dqn"]["run_dir"])
    assert run.path.endswith("params.pkl") and run.itr == 15 and run.cum_steps == 2048
    assert run.spec["agent_class"] == "rlframe.agents.dqn.dqn_agent.DqnAgent"
    assert run.spec["agent_kwargs"]["eps_final"] == 0.05
    assert run.agent.eps_eval == DqnAgent().eps_eval
    env = run.make_env(eval=True)
    assert env.spaces.action.n == 2
    env.close()
    snapshot = torch.load(run.path, weights_only=True)  # Still loads with weights_only.
    assert set(snapshot) >= {"itr", "agent_state_dict", "agent_spec"}


def test_one_observation_acts_as_a_batch_row(trained):
    for name in ("ppo", "sac"):
        agent, obs = trained[name]["agent"], trained[name]["obs"]
        single = [agent.act(o) for o in obs[:3]]
        assert single[0].shape == agent.act(obs[:3])[0].shape
        np.testing.assert_allclose(np.stack(single), agent.act(obs[:3]), rtol=1e-5, atol=1e-6)


def test_recurrent_agent_keeps_state_until_reset():
    env = gym_make(**CARTPOLE)
    agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[16], lstm_size=8, head_size=8))
    agent.initialize(env.spaces)
    agent.eval_mode(1)
    obs = visited_observations(CARTPOLE, n=4)
    first = [agent.act(o) for o in obs]
    assert agent.prev_rnn_state is not None
    agent.reset()
    assert agent.prev_rnn_state is None
    assert [agent.act(o) for o in obs] == first
    alternating = R2d1AlternatingAgent(model_kwargs=dict(hidden_sizes=[16], lstm_size=8,
                                                         head_size=8))
    alternating.initialize(env.spaces)
    alternating.load_state_dict(agent.state_dict())
    alternating.eval_mode(1)
    assert [alternating.act(o) for o in obs] == first  # One state, not one per env half.
    env.close()


# ------------------------------------------------------------------ specs and errors
class ScaledDqnAgent(DqnAgent):
    """A user subclass with a constructor argument of its own."""

    def __init__(self, scale, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale


def test_subclass_arguments_are_recorded_and_rebuilt():
    agent = ScaledDqnAgent(3.0, model_kwargs=dict(hidden_sizes=[8]), eps_eval=0.)
    spec = agent_spec(agent, sampler_for(CARTPOLE))
    assert spec["agent_kwargs"] == dict(scale=3.0, model_kwargs=dict(hidden_sizes=[8]),
                                        eps_eval=0.)
    rebuilt = build_agent(spec)
    assert type(rebuilt) is ScaledDqnAgent and rebuilt.scale == 3.0


def test_values_that_are_not_plain_fail_only_at_load_time(tmp_path):
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=np.array([8]),
                                       nonlinearity=torch.nn.Tanh, init=lambda m: m))
    spec = agent_spec(agent, sampler_for(CARTPOLE))
    torch.save(dict(agent_spec=spec), tmp_path / "spec.pkl")
    spec = torch.load(tmp_path / "spec.pkl", weights_only=True)["agent_spec"]
    with pytest.raises(AgentLoadError, match=r"agent_kwargs\['model_kwargs'\]\['init'\]"):
        build_agent(spec)
    del spec["agent_kwargs"]["model_kwargs"]["init"]
    rebuilt = build_agent(spec)
    assert rebuilt.model_kwargs["nonlinearity"] is torch.nn.Tanh
    np.testing.assert_array_equal(rebuilt.model_kwargs["hidden_sizes"], [8])


def test_unimportable_classes_are_named():
    spec = agent_spec(DqnAgent(), sampler_for(CARTPOLE))
    with pytest.raises(AgentLoadError, match="training script itself.*Move NotHere"):
        build_agent(dict(spec, agent_class="__main__.NotHere"))
    with pytest.raises(AgentLoadError, match="rlframe.agents.NoSuchAgent"):
        build_agent(dict(spec, agent_class="rlframe.agents.NoSuchAgent"))


def test_snapshot_errors(tmp_path):
    (tmp_path / "progress.csv").write_text("")
    with pytest.raises(FileNotFoundError, match=r"No snapshot.*progress\.csv"):
        load_agent(tmp_path)
    for itr in (2, 10):
        torch.save(dict(itr=itr, agent_state_dict={}), tmp_path / f"itr_{itr}.pkl")
    assert find_snapshot(tmp_path).endswith("itr_10.pkl")
    with pytest.raises(FileNotFoundError, match=r"No itr_5\.pkl.*\[2, 10\]"):
        find_snapshot(tmp_path, itr=5)
    with pytest.raises(AgentLoadError, match="before snapshots recorded.*agent_state_dict"):
        load_agent(tmp_path, itr=2)


def test_snapshot_without_spec_loads_into_a_given_agent(trained, tmp_path):
    snapshot = torch.load(find_snapshot(trained["ppo"]["run_dir"]), weights_only=True)
    del snapshot["agent_spec"]
    torch.save(snapshot, tmp_path / "params.pkl")
    with pytest.raises(AgentLoadError, match="before snapshots recorded"):
        load_agent(tmp_path)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[32]))
    with pytest.raises(AgentLoadError, match="initialize the agent"):
        load_agent(tmp_path, agent=agent)
    env = gym_make(**CARTPOLE)
    agent.initialize(env.spaces)
    env.close()
    agent = load_agent(tmp_path, agent=agent)
    np.testing.assert_array_equal(agent.act(trained["ppo"]["obs"]), trained["ppo"]["actions"])
