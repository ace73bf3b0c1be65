"""``rlframe train``: the preset stacks, runs through the parser, and user errors."""
import argparse
import json
import os

import pytest

from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.dqn.r2d1_agent import R2d1Agent, R2d1AlternatingAgent
from rlframe.agents.pg.atari import AtariFfAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.td3_agent import Td3Agent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.dqn.r2d1 import R2D1
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3
from rlframe.cli import CommandError, train
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.envs.gym import make as gym_make
from rlframe.presets import ALGOS, build_experiment
from rlframe.runners.callbacks import StopAtReturn
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.serial.sampler import SerialSampler
from conftest import read_csv

STACKS = {  # algo: (env id, algorithm class, agent class)
    "ppo": ("CartPole-v1", PPO, CategoricalPgAgent),
    "a2c": ("CartPole-v1", A2C, CategoricalPgAgent),
    "dqn": ("CartPole-v1", DQN, DqnAgent),
    "catdqn": ("CartPole-v1", CategoricalDQN, CatDqnAgent),
    "r2d1": ("CartPole-v1", R2D1, R2d1Agent),
    "ddpg": ("Pendulum-v1", DDPG, DdpgAgent),
    "td3": ("Pendulum-v1", TD3, Td3Agent),
    "sac": ("Pendulum-v1", SAC, SacAgent),
}


def parse(*argv):
    """``rlframe train *argv`` parsed by a fresh parser with the train subcommand."""
    parser = argparse.ArgumentParser(prog="rlframe")
    train.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["train", *argv])


def test_every_algorithm_has_a_stack():
    assert set(STACKS) == set(ALGOS)


@pytest.mark.parametrize("algo", sorted(STACKS))
def test_build_stack(algo):
    env_id, AlgoCls, AgentCls = STACKS[algo]
    runner, config = build_experiment(dict(algo=algo, env_id=env_id))
    assert type(runner) is MinibatchRlEval
    assert type(runner.algo) is AlgoCls and type(runner.agent) is AgentCls
    assert type(runner.sampler) is SerialSampler
    assert runner.sampler.env_kwargs == dict(id=env_id)
    assert runner.sampler.eval_n_envs > 0
    assert runner.n_steps == config["n_steps"] and runner.seed == config["seed"]
    assert config["batch_T"] == runner.sampler.batch_spec.T
    assert json.loads(json.dumps(config)) == config  # JSON-able as it is


def test_defaults_follow_the_examples():
    runner, _ = build_experiment(dict(algo="dqn", env_id="CartPole-v1"))
    assert (runner.algo.batch_size, runner.algo.replay_ratio, runner.algo.double_dqn) == (64, 24,
                                                                                        True)
    assert runner.sampler.batch_spec.T == 32 and runner.sampler.batch_spec.B == 8
    runner, _ = build_experiment(dict(algo="td3", env_id="Pendulum-v1"))
    assert runner.algo.min_steps_learn == 1000 and runner.sampler.batch_spec.B == 1


def test_overrides_and_class_paths():
    config = dict(algo="a2c", env_id="CartPole-v1", batch_B=4, n_steps=1e4, seed=5,
                  kwargs=dict(algo=dict(learning_rate=3e-4, OptimCls="torch.optim.RMSprop"),
                              agent=dict(model_kwargs=dict(hidden_sizes=[16]))))
    runner, full = build_experiment(config)
    assert runner.algo.learning_rate == 3e-4 and runner.algo.OptimCls.__name__ == "RMSprop"
    assert runner.algo.entropy_loss_coeff == 0.01  # the preset's, kept
    assert runner.agent.model_kwargs == dict(hidden_sizes=[16])
    assert (runner.sampler.batch_spec.B, runner.n_steps, runner.seed) == (4, 10000, 5)
    assert full["kwargs"]["algo"]["OptimCls"] == "torch.optim.RMSprop"


def test_model_nonlinearities_take_class_paths_in_nested_kwargs():
    model_kwargs = dict(hidden_sizes=[8], hidden_nonlinearity="torch.nn.ReLU",
                        mu_nonlinearity=None)
    runner, full = build_experiment(dict(algo="ppo", env_id="Pendulum-v1",
                                         kwargs=dict(agent=dict(model_kwargs=model_kwargs))))
    env = gym_make(id="Pendulum-v1")
    runner.agent.initialize(env.spaces)
    env.close()
    layers = [type(m).__name__ for m in runner.agent.model.mu.modules()]
    assert "ReLU" in layers and "Tanh" not in layers
    assert full["kwargs"]["agent"]["model_kwargs"]["hidden_nonlinearity"] == "torch.nn.ReLU"
    bad = dict(model_kwargs=dict(hidden_nonlinearity="torch.nn.Relu"))
    with pytest.raises(ValueError, match=r"config section 'agent.model_kwargs': "
                                         r"hidden_nonlinearity='torch.nn.Relu' is not an "
                                         r"importable class path \(e.g. 'torch.nn.ReLU'\)"):
        build_experiment(dict(algo="ppo", env_id="Pendulum-v1", kwargs=dict(agent=bad)))


def test_parallel_samplers_get_workers_and_alternating_agents():
    runner, config = build_experiment(dict(algo="ppo", env_id="CartPole-v1", sampler="cpu",
                                           n_parallel=1))
    assert type(runner.sampler) is CpuSampler and config["n_parallel"] == 1
    assert len(runner.affinity["workers_cpus"]) == 1 and runner.affinity["cuda_idx"] is None
    runner, config = build_experiment(dict(algo="r2d1", env_id="CartPole-v1",
                                           sampler="alternating", n_parallel=1, cuda_idx=None))
    assert type(runner.sampler) is AlternatingSampler
    assert type(runner.agent) is R2d1AlternatingAgent
    assert len(runner.affinity["workers_cpus"]) == 2  # two groups on one core


@pytest.mark.parametrize("env_id", ["pong", "ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_atari_ids_name_the_game(env_id):
    runner, config = build_experiment(dict(algo="dqn", env_id=env_id))
    assert runner.sampler.EnvCls is AtariEnv and runner.sampler.TrajInfoCls is AtariTrajInfo
    assert runner.sampler.env_kwargs == dict(game="pong")
    assert type(runner.agent) is AtariDqnAgent and runner.algo.replay_size == int(1e6)
    assert config["batch_T"] == 4


def test_atari_ppo_preset_has_cleanrl_advantages_and_adam_eps():
    """The Atari PPO preset states CleanRL's ppo_atari.py settings: advantages normalized
    (without, the entropy bonus outweighs the clipped rewards' small advantages) and Adam's
    eps 1e-5."""
    runner, config = build_experiment(dict(algo="ppo", env_id="breakout"))
    assert type(runner.algo) is PPO and type(runner.agent) is AtariFfAgent
    assert runner.algo.normalize_advantage is True
    assert runner.algo.optim_kwargs == dict(eps=1e-5)
    assert (runner.algo.learning_rate, runner.algo.ratio_clip, runner.algo.entropy_loss_coeff,
            runner.algo.minibatches, runner.algo.epochs) == (2.5e-4, 0.1, 0.01, 4, 4)
    assert config["kwargs"]["algo"]["normalize_advantage"] is True
    # A2C keeps its usual unnormalized advantages.
    runner, _ = build_experiment(dict(algo="a2c", env_id="breakout"))
    assert runner.algo.normalize_advantage is False


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_atari_evaluation_lets_every_eval_env_finish_a_game(algo):
    """eval_max_steps counts the steps of all eval envs: each gets a whole game (up to
    AtariEnv's horizon), or evaluations of longer games end with no episode (NaN)."""
    runner, _ = build_experiment(dict(algo=algo, env_id="pong"))
    sampler = runner.sampler
    horizon = AtariEnv(game="pong").horizon
    assert sampler.eval_max_steps // sampler.eval_n_envs >= horizon
    assert sampler.eval_max_trajectories <= sampler.eval_n_envs


def test_train_ppo_through_the_parser(tmp_path, capsys):
    args = parse("ppo", "CartPole-v1", "--n-steps", "4096", "--log-interval-steps", "2048",
                 "--log-dir", str(tmp_path / "runs"), "--run-id", "3", "--seed", "11")
    assert train.run(args) == 0
    run_dir = tmp_path / "runs" / "run_3"
    assert str(run_dir) in capsys.readouterr().out
    header, rows = read_csv(run_dir / "progress.csv")
    assert len(rows) == 3  # before training and at 2 log points
    assert int(float(rows[-1][header.index("Diagnostics/CumSteps")])) == 4096
    with open(run_dir / "params.json") as f:
        params = json.load(f)
    assert (params["algo"], params["env_id"], params["seed"], params["run_ID"]) == (
        "ppo", "CartPole-v1", 11, 3)
    assert params["kwargs"]["algo"]["epochs"] == 8 and params["kwargs"]["sampler"]
    runner, config = build_experiment(params)  # what resume does
    assert config == params
    assert type(runner.algo) is PPO and runner.algo.epochs == 8 and runner.seed == 11
    assert os.path.exists(run_dir / "params.pkl")  # snapshot_mode "last"


def test_no_evaluation_envs_build_a_runner_without_evaluation(tmp_path, capsys):
    """eval_n_envs 0 in the sampler section: a MinibatchRl, which builds and steps no
    evaluation envs and logs the training episodes; the default evaluates."""
    runner, _ = build_experiment(dict(algo="ppo", env_id="CartPole-v1"))
    assert type(runner) is MinibatchRlEval and runner.sampler.eval_n_envs == 4
    args = parse("ppo", "CartPole-v1", "--n-steps", "2048", "--log-interval-steps", "1024",
                 "--log-dir", str(tmp_path / "runs"), "--run-id", "0", "--seed", "2",
                 "--config", json.dumps(dict(sampler=dict(eval_n_envs=0))))
    assert train.run(args) == 0
    run_dir = tmp_path / "runs" / "run_0"
    header, rows = read_csv(run_dir / "progress.csv")
    assert len(rows) == 2  # At the 2 log points; no row before training (no evaluation).
    assert "StepsInEval" not in header and "ReturnAverage" in header
    with open(run_dir / "params.json") as f:
        params = json.load(f)
    runner, config = build_experiment(params)  # What resume rebuilds: the same runner.
    assert type(runner) is MinibatchRl and runner.sampler.eval_n_envs == 0
    assert config == params


@pytest.mark.slow
def test_stop_at_return_ends_the_run_at_the_first_evaluation_that_reaches_it(tmp_path,
                                                                             capsys):
    runner, config = build_experiment(dict(algo="ppo", env_id="CartPole-v1"))
    assert runner.callbacks == [] and "stop_at_return" not in config  # Unset: not recorded.
    args = parse("ppo", "CartPole-v1", "--n-steps", "40960", "--log-interval-steps", "1024",
                 "--batch-B", "2", "--batch-T", "256", "--stop-at-return", "40",
                 "--log-dir", str(tmp_path / "runs"), "--seed", "3")
    assert train.run(args) == 0
    run_dir = tmp_path / "runs" / "run_0"
    header, rows = read_csv(run_dir / "progress.csv")
    returns = [float(row[header.index("ReturnAverage")]) for row in rows]
    steps = [int(float(row[header.index("Diagnostics/CumSteps")])) for row in rows]
    assert returns[-1] >= 40 and all(r < 40 for r in returns[1:-1])  # Row 0: untrained.
    assert steps[-1] < 40960 and os.path.exists(run_dir / "params.pkl")
    params = json.loads((run_dir / "params.json").read_text())
    assert params["stop_at_return"] == 40.0
    runner, config = build_experiment(params)  # What resume rebuilds: the same stop.
    stop, = runner.callbacks
    assert isinstance(stop, StopAtReturn) and stop.threshold == 40.0 and config == params


@pytest.mark.parametrize("value", ["high", True, float("nan")])
def test_a_bad_stop_at_return_is_refused(value):
    with pytest.raises(ValueError, match="config 'stop_at_return' must be a number"):
        build_experiment(dict(algo="ppo", env_id="CartPole-v1", stop_at_return=value))


def test_train_dqn_with_config_file(tmp_path):
    config_path = tmp_path / "dqn.json"
    config_path.write_text(json.dumps(dict(algo=dict(min_steps_learn=200, replay_size=2000),
                                           sampler=dict(eval_max_steps=400))))
    args = parse("dqn", "CartPole-v1", "--n-steps", "768", "--batch-T", "16",
                 "--log-interval-steps", "384", "--log-dir", str(tmp_path / "runs"),
                 "--config", str(config_path))
    assert train.run(args) == 0
    run_dir = tmp_path / "runs" / "run_0"
    header, rows = read_csv(run_dir / "progress.csv")
    assert len(rows) == 3 and int(float(rows[-1][header.index("Diagnostics/CumUpdates")])) > 0
    params = json.loads((run_dir / "params.json").read_text())
    assert params["kwargs"]["algo"]["min_steps_learn"] == 200 and params["batch_T"] == 16
    runner, _ = build_experiment(params)
    assert runner.algo.min_steps_learn == 200 and runner.algo.replay_ratio == 24


@pytest.mark.parametrize("argv, message", [
    (["ppx", "CartPole-v1"], "Did you mean 'ppo'?"),
    (["ppo", "CartPol-v1"], "Did you mean: CartPole-v1"),
    (["dqn", "Pendulum-v1"], "Algorithms for Pendulum-v1: ppo, a2c, ddpg, td3, sac."),
    (["sac", "CartPole-v1"], "sac handles continuous actions"),
    (["td3", "pong"], "Algorithms for pong: ppo, a2c, dqn, catdqn, r2d1."),
    (["dqn", "CartPole-v1", "--config", '{"algo": {"learning_rat": 1e-3}}'],
     "DQN takes no keyword 'learning_rat'. Did you mean 'learning_rate'? Accepted keywords:"),
    (["dqn", "CartPole-v1", "--config", '{"sampler": {"batch_B": 2}}'], "--batch-B"),
    (["dqn", "CartPole-v1", "--config", '{"agnt": {}}'], "Did you mean 'agent'?"),
    (["dqn", "CartPole-v1", "--sampler", "cpus"], "Did you mean 'cpu'?"),
    (["ppo", "CartPole-v1", "--sampler", "alternating", "--n-parallel", "1", "--batch-B", "3"],
     "--batch-B"),
    (["ppo", "CartPole-v1", "--config", "{bad json"], "not valid JSON"),
])
def test_user_errors(tmp_path, argv, message):
    args = parse(*argv, "--log-dir", str(tmp_path))
    with pytest.raises(CommandError) as error:
        train.run(args)
    assert message in str(error.value)
    assert not os.listdir(tmp_path)  # no run directory for a user error


def test_taken_run_id(tmp_path):
    (tmp_path / "run_0").mkdir()
    (tmp_path / "run_0" / "params.json").write_text("{}")
    with pytest.raises(CommandError, match="--run-id 0: .* already holds a run"):
        train.run(parse("ppo", "CartPole-v1", "--log-dir", str(tmp_path), "--run-id", "0"))


def test_missing_config_file(tmp_path):
    with pytest.raises(CommandError, match="neither a JSON object nor a file"):
        train.run(parse("ppo", "CartPole-v1", "--config", str(tmp_path / "nope.json")))


def test_help_shows_examples(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    out = capsys.readouterr().out
    assert "examples:" in out and "rlframe train ppo CartPole-v1" in out and "catdqn" in out


def test_step_counts_take_scientific_notation():
    assert parse("ppo", "CartPole-v1", "--n-steps", "1e5").n_steps == 100000
    with pytest.raises(SystemExit):
        parse("ppo", "CartPole-v1", "--n-steps", "1.5")


def test_gpu_affinity_keeps_the_workers_cores():
    from rlframe.presets.build import _affinity  # The --cuda-idx path (no GPU here).
    affinity = _affinity(dict(n_parallel=2, cuda_idx=1, sampler="gpu"))
    assert affinity["cuda_idx"] == 1 and len(affinity["workers_cpus"]) == 2
    assert _affinity(dict(n_parallel=None, cuda_idx=0, sampler="serial")) == dict(cuda_idx=0)


def test_option_hints_leave_the_parsers_own_options_and_abbreviations_alone():
    from rlframe.cli import build_parser, option_hints
    parser = build_parser()
    args, _ = parser.parse_known_args(["train", "ppo", "CartPole-v1"])
    train_parser = args.command_parser
    assert option_hints(["ppo", "CartPole-v1", "--n-steps", "5", "--n-step=5", "--seed", "1",
                         "--", "--log_dir", "x", "--env", "--zzz"], train_parser) == [
        "did you mean --log-dir for --log_dir?", "ENV_ID is positional: give it without --env"]
