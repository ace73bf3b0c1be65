"""compile=True: the losses run through torch.compile and give the eager numbers."""
import copy

import pytest
import torch

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.serial.sampler import SerialSampler


@pytest.fixture(scope="module")
def compile_works():
    """Skip where torch.compile cannot build code (e.g. no C++ compiler for the CPU)."""
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    except Exception as error:  # Whatever the backend raises, this machine cannot compile.
        pytest.skip(f"torch.compile cannot run here: {type(error).__name__}: {error}")


def sampler_and_agent(AgentCls, batch_T, batch_B, **agent_kwargs):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0)
    agent = AgentCls(**agent_kwargs)
    return sampler, agent


@pytest.mark.slow
@pytest.mark.parametrize("normalize, value_clip", [(True, None), ("minibatch", 0.2)])
def test_ppo_compiled_update_matches_eager(compile_works, normalize, value_clip):
    torch.manual_seed(0)
    sampler, agent = sampler_and_agent(CategoricalPgAgent, 16, 4)
    sampler.initialize(agent, seed=0, bootstrap_value=True)
    eager = PPO(minibatches=2, epochs=1, normalize_advantage=normalize, value_clip=value_clip)
    eager.initialize(agent, n_itr=4, batch_spec=sampler.batch_spec,
                     mid_batch_reset=sampler.mid_batch_reset)
    samples, _ = sampler.obtain_samples(0)
    sampler.shutdown()
    compiled = copy.deepcopy(eager)  # Same agent weights, optimizer state and schedule.
    compiled.compile = True
    infos = []
    for algo in (eager, compiled):
        torch.manual_seed(1)  # The same minibatch split.
        infos.append(algo.optimize_agent(0, samples))
    for field in ("loss", "gradNorm", "entropy", "perplexity", "clipFraction", "approxKl"):
        torch.testing.assert_close(getattr(infos[1], field), getattr(infos[0], field),
                                   rtol=1e-5, atol=1e-6)
    for a, b in zip(eager.agent.parameters(), compiled.agent.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_dqn_compiled_update_matches_eager(compile_works):
    torch.manual_seed(0)
    sampler, agent = sampler_and_agent(DqnAgent, 8, 4, model_kwargs=dict(hidden_sizes=[32]))
    examples = sampler.initialize(agent, seed=0)
    eager = DQN(batch_size=32, min_steps_learn=0, replay_size=1000, replay_ratio=1,
                n_step_return=3, double_dqn=True)
    eager.initialize(agent, n_itr=4, batch_spec=sampler.batch_spec,
                     mid_batch_reset=sampler.mid_batch_reset, examples=examples)
    for itr in range(3):
        eager.optimize_agent(itr, sampler.obtain_samples(itr)[0])
    sampler.shutdown()
    compiled = copy.deepcopy(eager)
    compiled.compile = True
    batch = eager.replay_buffer.sample_batch(32)
    (stats_e, _), (stats_c, _) = eager.update(batch), compiled.update(batch)
    for field in ("loss", "gradNorm", "tdAbsErr"):
        torch.testing.assert_close(stats_c[field], stats_e[field], rtol=1e-5, atol=1e-6)
    for a, b in zip(eager.agent.parameters(), compiled.agent.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_compile_argument_is_a_bool():
    assert PPO(compile=True).compile is True and DQN().compile is False
    with pytest.raises(TypeError, match="compile must be True or False, got 'yes'"):
        PPO(compile="yes")
    with pytest.raises(TypeError, match="compile must be True or False, got 1"):
        SAC(compile=1)


def test_eager_algorithms_call_their_own_methods():
    algo = DQN()
    assert algo.compiled("loss") == algo.loss  # No wrapper, nothing compiled.
    assert "_compiled_functions" not in vars(algo)


def test_a_compiler_failure_names_the_argument(monkeypatch):
    def failing_backend(graph_module, example_inputs):
        raise OSError("no C++ compiler found")

    real_compile = torch.compile

    def compile_with_failing_backend(function, **_options):
        return real_compile(function, backend=failing_backend)

    class Doubling(PPO):
        def double(self, x):  # A method to compile: its first call fails.
            return x * 2

    monkeypatch.setattr(torch, "compile", compile_with_failing_backend)
    algo = Doubling(compile=True)
    with pytest.raises(RuntimeError, match=r"Doubling\(compile=True\): torch.compile could "
                                           r"not compile double\(\) here \(OSError: no "
                                           r"C\+\+ compiler found\).*compile=False"):
        algo.compiled("double")(torch.ones(2))


def test_a_copy_of_a_compiled_algorithm_updates_itself(compile_works):
    class Scaling(PPO):
        def scaled(self, x):
            return x * self.scale

    algo = Scaling(compile=True)
    algo.scale = torch.tensor(2.)
    assert torch.equal(algo.compiled("scaled")(torch.ones(2)), torch.full((2,), 2.))
    twin = copy.deepcopy(algo)
    twin.scale = torch.tensor(3.)
    assert torch.equal(twin.compiled("scaled")(torch.ones(2)), torch.full((2,), 3.))
    assert torch.equal(algo.compiled("scaled")(torch.ones(2)), torch.full((2,), 2.))
