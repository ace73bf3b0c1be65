"""The pieces of the lean update paths: minibatch splitting, one statistics read per
iteration, the optimizer implementation choice, gradient resets."""
import numpy as np
import pytest
import torch

from rlframe.algos.base import RlAlgorithm, make_optimizer, read_stats
from rlframe.utils.tensor import minibatch_indexes


# ---------------------------------------------------------------- minibatch splitting
@pytest.mark.parametrize("n,minibatches", [(12, 4), (10, 3), (256, 2), (7, 7)])
def test_minibatch_indexes_partition_a_shuffled_range(n, minibatches):
    torch.manual_seed(0)
    chunks = minibatch_indexes(n, minibatches)
    size = n // minibatches
    assert len(chunks) == minibatches
    assert all(c.dtype == torch.int64 and c.shape == (size,) for c in chunks)
    joined = torch.cat(chunks)
    assert len(set(joined.tolist())) == size * minibatches  # No index twice.
    assert joined.min() >= 0 and joined.max() < n
    if n - size * minibatches == 0:
        assert sorted(joined.tolist()) == list(range(n))


def test_minibatch_indexes_shuffle_differently_each_call_and_follow_the_seed():
    torch.manual_seed(1)
    first, second = torch.cat(minibatch_indexes(64, 4)), torch.cat(minibatch_indexes(64, 4))
    assert not torch.equal(first, second)
    torch.manual_seed(1)
    assert torch.equal(torch.cat(minibatch_indexes(64, 4)), first)
    generator = torch.Generator().manual_seed(3)
    again = torch.Generator().manual_seed(3)
    assert torch.equal(torch.cat(minibatch_indexes(64, 4, generator)),
                       torch.cat(minibatch_indexes(64, 4, again)))


def test_one_minibatch_is_the_whole_batch_in_order():
    assert minibatch_indexes(256, 1) == [slice(0, 256)]


@pytest.mark.parametrize("minibatches", [0, 11])
def test_minibatch_indexes_reject_impossible_splits(minibatches):
    with pytest.raises(ValueError, match=f"minibatches must be in \\[1, n=10\\], got {minibatches}"):
        minibatch_indexes(10, minibatches)


# ------------------------------------------------------------------------- statistics
def test_read_stats_flattens_tensors_and_numbers_in_order():
    stats = dict(loss=[torch.tensor(1.5), torch.tensor(2.5)],
                 tdAbsErr=[torch.tensor([1., 2.]), torch.tensor([[3.], [4.]])],
                 mixed=[torch.tensor(5, dtype=torch.float64), 6., np.array([7., 8.])],
                 empty=[])
    out = read_stats(stats)
    assert out == dict(loss=[1.5, 2.5], tdAbsErr=[1., 2., 3., 4.], mixed=[5., 6., 7., 8.],
                       empty=[])
    assert all(type(v) is float for values in out.values() for v in values)


def test_read_stats_reads_the_device_once(monkeypatch):
    reads = []
    original = torch.Tensor.tolist

    def counting_tolist(self):
        reads.append(self.shape)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    read_stats(dict(a=[torch.ones(())] * 20, b=[torch.ones(3)] * 20))
    assert len(reads) == 1


# ------------------------------------------------------------------------- optimizers
def _params():
    return list(torch.nn.Linear(3, 2).parameters())


@pytest.mark.parametrize("OptimCls,choice", [(torch.optim.Adam, "fused"),
                                             (torch.optim.AdamW, "fused"),
                                             (torch.optim.SGD, "fused"),
                                             (torch.optim.RMSprop, "foreach"),
                                             (torch.optim.NAdam, "foreach")])
def test_make_optimizer_picks_the_fastest_implementation(OptimCls, choice):
    optimizer = make_optimizer(OptimCls, _params(), 1e-3)
    assert optimizer.defaults[choice] is True


def test_make_optimizer_keeps_an_explicit_choice():
    optimizer = make_optimizer(torch.optim.Adam, _params(), 1e-3, dict(foreach=False))
    assert optimizer.defaults["foreach"] is False and not optimizer.defaults["fused"]
    optimizer = make_optimizer(torch.optim.Adam, _params(), 1e-3, dict(fused=False, eps=0.1))
    assert not optimizer.defaults["fused"] and optimizer.defaults["eps"] == 0.1


def test_make_optimizer_falls_back_where_the_fused_kernel_is_refused():
    # torch refuses fused=True with differentiable=True: the multi-tensor version is next.
    optimizer = make_optimizer(torch.optim.Adam, _params(), 1e-3, dict(differentiable=True))
    assert not optimizer.defaults["fused"] and optimizer.defaults["foreach"] is True


def test_fused_adam_steps_like_the_default():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    twin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    twin.load_state_dict(model.state_dict())
    fused = make_optimizer(torch.optim.Adam, model.parameters(), 1e-2)
    plain = torch.optim.Adam(twin.parameters(), lr=1e-2, foreach=False)
    x = torch.randn(16, 4)
    for _ in range(5):
        for net, optimizer in ((model, fused), (twin, plain)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_gradient_step_starts_from_fresh_gradients():
    algo = RlAlgorithm()
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=1.)
    weight.grad = torch.full((2,), 100.)  # Left over from elsewhere: must not add up.
    norm, = algo.gradient_step((2 * weight).sum(), (optimizer, [weight]))
    assert torch.equal(weight.grad, torch.full((2,), 2.))
    assert torch.equal(weight.detach(), torch.full((2,), -1.))
    assert float(norm) == pytest.approx(8 ** 0.5)


# ------------------------------------------------- one statistics read per iteration
def _count_reads(monkeypatch):
    reads = {"item": 0, "tolist": 0}
    for method in reads:
        original = getattr(torch.Tensor, method)

        def counting(self, _original=original, _method=method):
            reads[_method] += 1
            return _original(self)

        monkeypatch.setattr(torch.Tensor, method, counting)
    return reads


@pytest.mark.parametrize("AlgoCls", ["PPO", "A2C", "DQN"])
def test_statistics_are_read_once_per_iteration(monkeypatch, AlgoCls):
    from rlframe.agents.dqn.dqn_agent import DqnAgent
    from rlframe.agents.pg.categorical import CategoricalPgAgent
    from rlframe.algos.dqn.dqn import DQN
    from rlframe.algos.pg.a2c import A2C
    from rlframe.algos.pg.ppo import PPO
    from rlframe.envs.gym import make as gym_make
    from rlframe.samplers.serial.sampler import SerialSampler

    dqn = AlgoCls == "DQN"
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=8,
                            batch_B=4, max_decorrelation_steps=0)
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[16])) if dqn else CategoricalPgAgent()
    examples = sampler.initialize(agent, seed=0, bootstrap_value=not dqn)
    algo = dict(PPO=lambda: PPO(minibatches=4, epochs=3), A2C=A2C,
                DQN=lambda: DQN(batch_size=8, min_steps_learn=0, replay_size=500,
                                replay_ratio=2))[AlgoCls]()
    algo.initialize(agent, n_itr=4, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset, examples=examples)
    algo.non_finite_limit = 0  # The guard reads each update's loss: here only statistics.
    for itr in range(2):
        samples, _ = sampler.obtain_samples(itr)
        reads = _count_reads(monkeypatch)
        opt_info = algo.optimize_agent(itr, samples)
        monkeypatch.undo()
        n_updates = {"PPO": 12, "A2C": 1, "DQN": 8}[AlgoCls]
        losses = opt_info.loss if isinstance(opt_info.loss, list) else [opt_info.loss]
        assert len(losses) == n_updates
        assert reads == {"item": 0, "tolist": 1}, reads
    sampler.shutdown()
