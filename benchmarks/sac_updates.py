"""SAC gradient updates per second: the framework's path against plain torch, in one run.

Framework: ``SAC.optimize_agent`` with a :class:`SacAgent` (policy and twin
critics of [256, 256] hidden units), updates of 256 transitions drawn from a
``TlUniformReplayBuffer`` of 100k transitions. Each update includes drawing
the batch from the replay, the critic, policy and temperature steps, gradient
norms (``clip_grad_norm_``, as logged), the soft target update and the
statistics SAC records per update.

Baseline: a minimal SAC update written here in plain torch on copies of the
same networks, with the same optimizers (Adam, one per network), the same
losses and a soft target update; its batches are drawn with ``torch.randint``
from preallocated tensors (observation, action, reward, next observation,
done) of the same size. No gradient norms, no statistics.
Its policy step backpropagates into the critics' weights too, as most SAC code
does; the framework's records only the gradient with respect to the action.

A third framework case runs the same algorithm with the non-finite guard off
(``non_finite_limit = 0``) to show what the guard costs. These include sampling; a second pair of rates
excludes it (the framework's ``SAC.update`` and the baseline update on batches
drawn beforehand).
Rounds alternate between the two so that machine load affects both alike; the
median rate of the rounds is reported. Observation and action sizes are
HalfCheetah's (17, 6).

    python benchmarks/sac_updates.py [--rounds 5] [--updates 200] [--threads 1]
"""
import argparse
import collections
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from _timing import median_rates, warn_if_cpus_busy, without_guard

from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.algos.off_policy import SamplesToBufferTl
from rlframe.algos.qpg.sac import SAC
from rlframe.envs.base import EnvSpaces
from rlframe.samplers.collections import BatchSpec
from rlframe.spaces.float_box import FloatBox

OBS_DIM, ACT_DIM, BATCH, REPLAY = 17, 6, 256, 100_000
EnvInfo = collections.namedtuple("EnvInfo", ["timeout"])
DISCOUNT, TAU, LR = 0.99, 0.005, 3e-4


def make_framework(updates: int) -> tuple:
    """An initialized SacAgent and SAC whose optimize_agent makes ``updates`` updates."""
    env_spaces = EnvSpaces(observation=FloatBox(-10, 10, shape=(OBS_DIM,)),
                           action=FloatBox(-1, 1, shape=(ACT_DIM,)))
    agent = SacAgent()
    agent.initialize(env_spaces)
    # A sampler batch of `updates` steps at replay_ratio = batch size: one update per step.
    algo = SAC(batch_size=BATCH, replay_ratio=BATCH, min_steps_learn=0, replay_size=REPLAY,
               discount=DISCOUNT, target_update_tau=TAU, learning_rate=LR)
    examples = dict(observation=np.zeros(OBS_DIM, np.float32),
                    action=np.zeros(ACT_DIM, np.float32), reward=np.float32(0),
                    done=np.bool_(False),
                    env_info=EnvInfo(timeout=np.bool_(False)))
    algo.initialize(agent, n_itr=1, batch_spec=BatchSpec(updates, 1), mid_batch_reset=True,
                    examples=examples)
    rng = np.random.default_rng(0)
    algo.replay_buffer.append_samples(SamplesToBufferTl(
        observation=rng.standard_normal((REPLAY, 1, OBS_DIM)).astype(np.float32),
        action=rng.uniform(-1, 1, (REPLAY, 1, ACT_DIM)).astype(np.float32),
        reward=rng.standard_normal((REPLAY, 1)).astype(np.float32),
        done=rng.random((REPLAY, 1)) < 0.001, timeout=np.zeros((REPLAY, 1), bool)))
    return agent, algo


class PlainSac:
    """A minimal SAC update on copies of the agent's networks."""

    def __init__(self, agent: SacAgent):
        self.pi = copy.deepcopy(agent.model)
        self.q1, self.q2 = copy.deepcopy(agent.q1_model), copy.deepcopy(agent.q2_model)
        self.q1_targ, self.q2_targ = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.pi_opt = torch.optim.Adam(self.pi.parameters(), lr=LR)
        self.q1_opt = torch.optim.Adam(self.q1.parameters(), lr=LR)
        self.q2_opt = torch.optim.Adam(self.q2.parameters(), lr=LR)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=LR)
        self.target_entropy = -float(ACT_DIM)
        rng = np.random.default_rng(0)
        self.obs = torch.as_tensor(rng.standard_normal((REPLAY, OBS_DIM)), dtype=torch.float32)
        self.next_obs = torch.roll(self.obs, -1, 0)
        self.act = torch.as_tensor(rng.uniform(-1, 1, (REPLAY, ACT_DIM)), dtype=torch.float32)
        self.rew = torch.as_tensor(rng.standard_normal(REPLAY), dtype=torch.float32)
        self.done = torch.as_tensor(rng.random(REPLAY) < 0.001, dtype=torch.float32)

    def sample(self) -> tuple:
        idx = torch.randint(REPLAY, (BATCH,))
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.done[idx]

    def action_log_prob(self, obs: torch.Tensor) -> tuple:
        mean, log_std = self.pi(obs, None, None)
        log_std = torch.clamp(log_std, -20, 2)
        u = mean + torch.exp(log_std) * torch.randn_like(mean)
        log_prob = (-0.5 * ((u - mean) / torch.exp(log_std)) ** 2 - log_std
                    - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob -= (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def update(self, batch: tuple) -> None:
        obs, act, rew, next_obs, done = batch
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_act, next_log_prob = self.action_log_prob(next_obs)
            target_q = torch.min(self.q1_targ(next_obs, None, None, next_act),
                                 self.q2_targ(next_obs, None, None, next_act))
            y = rew + DISCOUNT * (1 - done) * (target_q - alpha * next_log_prob)
        q_loss = (0.5 * (y - self.q1(obs, None, None, act)) ** 2).mean() + \
            (0.5 * (y - self.q2(obs, None, None, act)) ** 2).mean()
        self.q1_opt.zero_grad()
        self.q2_opt.zero_grad()
        q_loss.backward()
        self.q1_opt.step()
        self.q2_opt.step()
        new_act, log_prob = self.action_log_prob(obs)
        q_new = torch.min(self.q1(obs, None, None, new_act), self.q2(obs, None, None, new_act))
        pi_loss = (alpha * log_prob - q_new).mean()
        self.pi_opt.zero_grad()
        pi_loss.backward()
        self.pi_opt.step()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        with torch.no_grad():
            for net, targ in ((self.q1, self.q1_targ), (self.q2, self.q2_targ)):
                for p, tp in zip(net.parameters(), targ.parameters()):
                    tp.lerp_(p, TAU)


def main(rounds: int, updates: int, threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    agent, algo = make_framework(updates)
    plain = PlainSac(agent)
    batches = [algo.replay_buffer.sample_batch(BATCH) for _ in range(updates)]
    plain_batches = [plain.sample() for _ in range(updates)]

    def framework_with_sampling():
        algo.optimize_agent(1)

    def plain_with_sampling():
        for _ in range(updates):
            plain.update(plain.sample())

    def framework_update_only():
        for batch in batches:
            algo.update(batch)

    def plain_update_only():
        for batch in plain_batches:
            plain.update(batch)

    cases = dict(framework=framework_with_sampling, plain=plain_with_sampling,
                 framework_update=framework_update_only, plain_update=plain_update_only,
                 unguarded=lambda: without_guard(algo))
    rates = median_rates(cases, rounds, updates)
    print(f"SAC updates/s at batch {BATCH}, obs {OBS_DIM}, act {ACT_DIM}, hidden [256, 256], "
          f"{threads} torch thread(s), median of {rounds} rounds of {updates} updates")
    print("(per second of wall time, and of CPU time: the latter is steadier on a busy machine)")
    for clock, med in rates.items():
        for label, fw, pl in (("including replay sampling", "framework", "plain"),
                              ("excluding replay sampling", "framework_update", "plain_update")):
            print(f"  {clock:4s} {label}: framework {med[fw]:8.1f}   plain torch "
                  f"{med[pl]:8.1f}   ratio {med[fw] / med[pl]:.3f}")
        print(f"  {clock:4s} non-finite guard: framework without it {med['unguarded']:8.1f}, "
              f"with it {med['framework']:8.1f} "
              f"(cost {1 - med['framework'] / med['unguarded']:+.1%})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=200, help="updates per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    main(args.rounds, args.updates, args.threads)
