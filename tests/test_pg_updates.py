"""PPO's and A2C's updates equal plainly written ones on the same batches.

PPO's reference (CleanRL's formulation) computes GAE with a loop, normalizes the
advantages over the batch or (``normalize_advantage="minibatch"``, as CleanRL and SB3 do)
over each minibatch, and for every minibatch takes the clipped surrogate with
``exp(log p_new - log p_old)``, half the squared value error, the entropy bonus, the
gradient-norm clip and an Adam step (with ``value_clip``, the larger of the clipped and
unclipped value errors); over three iterations it also anneals the learning
rate and the clip range together (``linear_lr_schedule``). rlframe's PPO must leave the
same weights. A2C's reference takes the discounted n-step returns (the same loop with
lambda 1) and one RMSprop step on the whole batch.
"""
import copy

import pytest
import torch

import rlframe.algos.pg.ppo as ppo_module
from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.seed import set_seed

SETTINGS = dict(discount=0.99, gae_lambda=0.95, learning_rate=1e-2, minibatches=4, epochs=4,
                ratio_clip=0.1, value_loss_coeff=0.5, entropy_loss_coeff=0.01,
                clip_grad_norm=0.5, normalize_advantage=True, optim_kwargs=dict(eps=1e-5))
N_ITR = 4
TARGET_KL = 0.0012


def reference_gae(reward, value, done, bootstrap_value, discount, lam):
    """Advantages and returns [T, B], one step at a time from the end."""
    T = reward.shape[0]
    advantage = torch.zeros_like(reward)
    next_value, next_advantage = bootstrap_value, torch.zeros_like(bootstrap_value)
    for t in reversed(range(T)):
        nonterminal = 1. - done[t]
        delta = reward[t] + discount * next_value * nonterminal - value[t]
        next_advantage = delta + discount * lam * nonterminal * next_advantage
        advantage[t] = next_advantage
        next_value = value[t]
    return advantage, advantage + value


def standardize(advantage):
    return (advantage - advantage.mean()) / (advantage.std(unbiased=False) + 1e-6)


def reference_update(model, optimizer, samples, idx_sets, clip, per_minibatch, value_clip):
    """One iteration of PPO as CleanRL writes it, on samples [T, B], the advantages
    standardized over the batch or over each minibatch, the value loss clipped with a
    ``value_clip``; returns each minibatch's share of ratios the clip bounded and its
    approximate KL (before its step), and the share of values the value clip bounded."""
    s = SETTINGS
    done = samples.env.done.float()
    advantage, return_ = reference_gae(samples.env.reward, samples.agent.agent_info.value, done,
                                       samples.agent.bootstrap_value, s["discount"],
                                       s["gae_lambda"])
    if not per_minibatch:
        advantage = standardize(advantage)
    obs = samples.env.observation.flatten(0, 1)
    action = samples.agent.action.flatten(0, 1).long()
    old_logp = torch.log(samples.agent.agent_info.dist_info.prob.flatten(0, 1)
                         .gather(-1, action[:, None]).squeeze(-1))
    advantage, return_ = advantage.flatten(), return_.flatten()
    old_value = samples.agent.agent_info.value.flatten()
    clipped, kls, values_clipped = [], [], []
    for idxs in idx_sets:
        pi, v = model(obs[idxs], None, None)
        logp = torch.log(pi.gather(-1, action[idxs, None]).squeeze(-1))
        ratio = torch.exp(logp - old_logp[idxs])
        clipped.append(((ratio - 1).abs() > clip).float().mean().item())
        kls.append(((ratio - 1) - torch.log(ratio)).mean().item())
        adv = standardize(advantage[idxs]) if per_minibatch else advantage[idxs]
        pg_loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
        v_loss = 0.5 * ((v - return_[idxs]) ** 2).mean()
        if value_clip is not None:
            v_old = old_value[idxs]
            values_clipped.append(((v - v_old).abs() > value_clip).float().mean().item())
            v_clipped = v_old + torch.clamp(v - v_old, -value_clip, value_clip)
            v_loss = 0.5 * torch.max((v - return_[idxs]) ** 2,
                                     (v_clipped - return_[idxs]) ** 2).mean()
        entropy = -(pi * torch.log(pi)).sum(-1).mean()
        loss = pg_loss + s["value_loss_coeff"] * v_loss - s["entropy_loss_coeff"] * entropy
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip_grad_norm"])
        optimizer.step()
    return clipped, kls, sum(values_clipped) / len(clipped)


def set_up(algo, seed, batch_T, batch_B):
    """CartPole sampling for a small categorical agent, ``algo`` initialized for
    ``N_ITR`` iterations; with a copy of the model and its initial weights."""
    set_seed(seed)
    # Short episodes at first (a random CartPole policy's last ~20 steps), so that the
    # batches hold dones mid-batch.
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=10)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[32, 32]))
    sampler.initialize(agent, seed=seed, bootstrap_value=True)
    algo.initialize(agent, n_itr=N_ITR, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset)
    initial = [p.detach().clone() for p in agent.model.parameters()]
    return sampler, agent, copy.deepcopy(agent.model), initial


def record_minibatches(monkeypatch):
    """A list that takes every index set PPO's minibatch split hands out, in order."""
    idx_sets = []
    split = ppo_module.minibatch_indexes

    def recording(n, minibatches, generator=None):
        idxs = split(n, minibatches, generator)
        idx_sets.extend(idxs)
        return idxs

    monkeypatch.setattr(ppo_module, "minibatch_indexes", recording)
    return idx_sets


def batches(sampler, agent, n):
    """``(itr, samples)`` of ``n`` iterations, each batch sampled by the agent as it is
    then (after the updates of the iterations before)."""
    for itr in range(n):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        yield itr, samples


@pytest.mark.parametrize("normalize, value_clip", [(True, None), ("minibatch", None),
                                                   ("minibatch", 2.0)])
def test_ppo_update_equals_a_plain_reference(monkeypatch, normalize, value_clip):
    algo = PPO(**dict(SETTINGS, normalize_advantage=normalize, value_clip=value_clip))
    sampler, agent, reference, initial = set_up(algo, 0, batch_T=32, batch_B=4)
    optimizer = torch.optim.Adam(reference.parameters(), lr=SETTINGS["learning_rate"], eps=1e-5)

    idx_sets = record_minibatches(monkeypatch)
    dones = 0
    for itr, samples in batches(sampler, agent, 3):
        dones += int(samples.env.done.sum())
        idx_sets.clear()
        info = algo.optimize_agent(itr, samples)
        assert len(idx_sets) == SETTINGS["epochs"] * SETTINGS["minibatches"]
        m = SETTINGS["minibatches"]
        for epoch in range(SETTINGS["epochs"]):  # Every sample once an epoch.
            used = torch.cat(idx_sets[epoch * m:(epoch + 1) * m]).sort().values
            assert torch.equal(used, torch.arange(samples.env.reward.numel()))
        # The linear schedule: iteration itr runs at (N_ITR - itr) / N_ITR of the learning
        # rate and of the clip range (rlpyt's clip range lagged an iteration behind).
        frac = (N_ITR - itr) / N_ITR
        for group in optimizer.param_groups:
            group["lr"] = SETTINGS["learning_rate"] * frac
        clipped, kls, values_clipped = reference_update(
            reference, optimizer, samples, idx_sets, SETTINGS["ratio_clip"] * frac,
            normalize == "minibatch", value_clip)
        assert sum(clipped) / len(clipped) > 0.01  # The clip is at work, so its range matters.
        # The logged ratio statistics, minibatch by minibatch (a ratio within float
        # rounding of a bound may fall either side: one step of a minibatch's 32).
        assert len(info.clipFraction) == len(info.approxKl) == len(idx_sets)
        torch.testing.assert_close(torch.tensor(info.clipFraction), torch.tensor(clipped),
                                   rtol=0, atol=1 / 32 + 1e-6)
        torch.testing.assert_close(torch.tensor(info.approxKl), torch.tensor(kls),
                                   rtol=1e-3, atol=1e-6)
        assert kls[0] < 1e-6 < max(kls)  # The first step is taken at the sampling policy.
        if value_clip is not None:
            assert values_clipped > 0.01  # So is the value clip.
        for mine, theirs in zip(agent.model.parameters(), reference.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert dones >= 2  # The batches held episode ends, which GAE must cut.
    moved = max((p - q).abs().max().item() for p, q in zip(agent.model.parameters(), initial))
    assert moved > 1e-2  # The updates did change the weights.
    sampler.shutdown()


def test_recurrent_minibatch_advantages_are_standardized_over_their_valid_steps(monkeypatch):
    """A recurrent agent's minibatches are [T, B_m] sequences with a mask after each
    episode's end; each minibatch's advantages are standardized over its valid steps, and
    its sampling-time values reach the loss for value_clip."""
    set_seed(2)
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            batch_T=32, batch_B=4, max_decorrelation_steps=10)
    agent = RecurrentCategoricalPgAgent()
    sampler.initialize(agent, seed=2, bootstrap_value=True)
    algo = PPO(minibatches=2, epochs=2, gae_lambda=0.95, normalize_advantage="minibatch",
               value_clip=0.2)
    algo.initialize(agent, n_itr=2, batch_spec=sampler.batch_spec,
                    mid_batch_reset=sampler.mid_batch_reset)
    idx_sets, seen = record_minibatches(monkeypatch), []
    loss = algo.loss

    def recording_loss(agent_inputs, action, return_, advantage, valid, *rest, old_value):
        seen.append((advantage, valid, old_value))
        return loss(agent_inputs, action, return_, advantage, valid, *rest, old_value=old_value)

    monkeypatch.setattr(algo, "loss", recording_loss)
    (_, samples), = batches(sampler, agent, 1)
    _, raw, valid = algo.process_returns(samples)  # Not standardized: that is per minibatch.
    algo.optimize_agent(0, samples)
    assert len(seen) == len(idx_sets) == 4
    assert (valid == 0).any()  # Some steps lie after an episode's end.
    for idxs, (advantage, mask, old_value) in zip(idx_sets, seen):
        assert torch.equal(mask, valid[:, idxs])
        assert torch.equal(old_value, samples.agent.agent_info.value[:, idxs])
        kept, steps = raw[:, idxs][mask.bool()], mask.sum()
        mean = kept.sum() / steps
        std = ((kept - mean) ** 2).sum().div(steps).sqrt()
        torch.testing.assert_close(advantage[mask.bool()], (kept - mean) / (std + 1e-6))
        assert abs(raw[:, idxs].mean() - mean) > 1e-3  # The masked steps would shift it.
    sampler.shutdown()


def test_target_kl_ends_the_updates_at_the_first_minibatch_past_it(monkeypatch):
    """With target_kl, an iteration's updates end at the first minibatch (in any epoch)
    whose approximate KL, before its step, exceeds 1.5 * target_kl; that one takes no
    step, and the statistics are of the minibatches stepped."""
    algo = PPO(**dict(SETTINGS, target_kl=TARGET_KL))
    sampler, agent, _, _ = set_up(algo, 0, batch_T=32, batch_B=4)
    kls, weights = [], []
    loss = algo.loss

    def recording_loss(*args, **kwargs):
        weights.append([p.detach().clone() for p in agent.model.parameters()])
        out = loss(*args, **kwargs)
        kls.append(out[-1].item())
        return out

    monkeypatch.setattr(algo, "loss", recording_loss)
    past_target = 0
    for itr, samples in batches(sampler, agent, 2):
        kls.clear()
        weights.clear()
        before = algo.update_counter
        info = algo.optimize_agent(itr, samples)
        stepped = algo.update_counter - before
        assert 0 < stepped < SETTINGS["epochs"] * SETTINGS["minibatches"]
        assert len(kls) == stepped + 1
        assert max(kls[:-1]) <= 1.5 * TARGET_KL < kls[-1]
        past_target += sum(k > TARGET_KL for k in kls[:-1])
        assert info.approxKl == pytest.approx(kls[:-1]) and len(info.loss) == stepped
        for now, then in zip(agent.model.parameters(), weights[-1]):
            assert torch.equal(now, then)  # The last minibatch took no step.
    assert past_target  # A step past target_kl itself went on: the bound is 1.5 times it.
    sampler.shutdown()


def test_a_loss_with_rlpyts_three_values_runs_without_the_ratio_statistics():
    """A subclass's loss of rlpyt's signature returns (loss, entropy, perplexity): PPO
    runs and logs no ratio statistics, and target_kl, which needs them, says so."""
    class RlpytLossPPO(PPO):
        def loss(self, agent_inputs, action, return_, advantage, valid, old_dist_info,
                 init_rnn_state=None):
            return super().loss(agent_inputs, action, return_, advantage, valid,
                                old_dist_info, init_rnn_state)[:3]

    algo = RlpytLossPPO(**SETTINGS)
    sampler, agent, _, _ = set_up(algo, 0, batch_T=32, batch_B=4)
    (itr, samples), = batches(sampler, agent, 1)
    info = algo.optimize_agent(itr, samples)
    assert len(info.loss) == 16 and info.clipFraction == info.approxKl == []
    algo.target_kl = 0.01
    with pytest.raises(TypeError, match="target_kl=0.01 reads the approximate KL that "
                       "RlpytLossPPO.loss returns as its fifth value, but it returned 3"):
        algo.optimize_agent(itr, samples)
    sampler.shutdown()


@pytest.mark.parametrize("AlgoCls, value, allowed", [
    (PPO, "batch", "False or True or 'minibatch'"), (PPO, 1, "False or True or 'minibatch'"),
    (A2C, "minibatch", "False or True")])
def test_normalize_advantage_takes_only_its_choices(AlgoCls, value, allowed):
    with pytest.raises(ValueError, match=f"normalize_advantage={value!r}: give {allowed}$"):
        AlgoCls(normalize_advantage=value)


def test_value_clip_must_be_positive():
    with pytest.raises(ValueError, match=r"value_clip must lie in \(0.0, inf\], got 0.0"):
        PPO(value_clip=0)


A2C_SETTINGS = dict(discount=0.99, learning_rate=7e-3, OptimCls=torch.optim.RMSprop,
                    optim_kwargs=dict(alpha=0.99, eps=1e-5), value_loss_coeff=0.5,
                    entropy_loss_coeff=0.01, clip_grad_norm=0.5)


def test_a2c_update_equals_a_plain_reference():
    algo = A2C(**A2C_SETTINGS)
    sampler, agent, reference, initial = set_up(algo, 1, batch_T=16, batch_B=8)
    optimizer = torch.optim.RMSprop(reference.parameters(), lr=A2C_SETTINGS["learning_rate"],
                                    alpha=0.99, eps=1e-5)
    dones = 0
    for itr, samples in batches(sampler, agent, N_ITR):
        dones += int(samples.env.done.sum())
        algo.optimize_agent(itr, samples)

        # With lambda 1, GAE's returns are the discounted returns to the batch's end,
        # bootstrapped there and cut at dones, and its advantages those less the values.
        advantage, return_ = reference_gae(samples.env.reward, samples.agent.agent_info.value,
                                           samples.env.done.float(),
                                           samples.agent.bootstrap_value,
                                           A2C_SETTINGS["discount"], 1.)
        pi, v = reference(samples.env.observation, None, None)
        action = samples.agent.action.long()
        logp = torch.log(pi.gather(-1, action[..., None]).squeeze(-1))
        entropy = -(pi * torch.log(pi)).sum(-1).mean()
        loss = (-(logp * advantage).mean() + 0.5 * 0.5 * ((v - return_) ** 2).mean()
                - 0.01 * entropy)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        optimizer.step()
        for mine, theirs in zip(agent.model.parameters(), reference.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    assert dones >= 2  # The batches held episode ends, which the returns must cut.
    moved = max((p - q).abs().max().item() for p, q in zip(agent.model.parameters(), initial))
    assert moved > 1e-2  # The updates did change the weights.
    sampler.shutdown()
