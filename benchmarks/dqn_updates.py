"""DQN gradient updates per second on the CartPole configuration, against plain torch.

The configuration is examples/example_dqn_gym.py's: a DqnAgent with the stock
DqnMlpModel ([128, 128] hidden units, 2 actions, observation float32[4]),
double DQN, 3-step returns, Huber loss (delta_clip=1), batch 64, Adam, gradient
clipping, a time-limit-aware replay of 50k transitions from 8 envs, and a
hard target update every 96 updates. The framework is timed through
``DQN.optimize_agent`` (replay sampling, loss, step, priorities, statistics),
with uniform and with prioritized replay, and once more with uniform replay and
the non-finite guard off (``non_finite_limit = 0``, same algorithm and replay) to
show what the guard costs.

Baseline: a minimal double-DQN update written here in plain torch on a copy of
the same network, with the same optimizer settings, Huber loss and target
update; its batches (observation, action, n-step return, done, observation n
steps later) are drawn with ``torch.randint`` from preallocated tensors. No
gradient clipping, no time-limit mask, no statistics. Rounds alternate between
the variants so machine load affects them alike; medians are reported.

    python benchmarks/dqn_updates.py [--rounds 5] [--updates 384] [--threads 1]
"""
import argparse
import collections
import copy

import numpy as np
import torch
import torch.nn.functional as F
from _timing import median_rates, warn_if_cpus_busy, without_guard

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.base import EnvSpaces
from rlframe.samplers.collections import BatchSpec
from rlframe.spaces.float_box import FloatBox
from rlframe.spaces.int_box import IntBox
from rlframe.utils.collections import namedarraytuple

OBS_DIM, N_ACTIONS, BATCH, REPLAY, B = 4, 2, 64, 50_000, 8
DISCOUNT, N_STEP, LR, TARGET_INTERVAL = 0.99, 3, 2.3e-3, 96
EnvInfo = collections.namedtuple("EnvInfo", ["timeout"])
Samples = namedarraytuple("Samples", ["env", "agent"])
EnvSamples = namedarraytuple("EnvSamples", ["observation", "reward", "done", "env_info"])
AgentSamples = namedarraytuple("AgentSamples", ["action"])


def make_framework(updates: int, prioritized: bool, compile: bool = False) -> tuple:
    """An initialized DqnAgent and DQN (replay full) making ``updates`` updates per call."""
    env_spaces = EnvSpaces(observation=FloatBox(-10, 10, shape=(OBS_DIM,)),
                           action=IntBox(0, N_ACTIONS))
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[128, 128]))
    agent.initialize(env_spaces)
    # replay_ratio chosen so that one sampler batch of T x B steps gives `updates` updates.
    T = REPLAY // B
    algo = DQN(discount=DISCOUNT, batch_size=BATCH, min_steps_learn=0, replay_size=REPLAY,
               replay_ratio=updates * BATCH / (T * B), target_update_interval=TARGET_INTERVAL,
               n_step_return=N_STEP, learning_rate=LR, delta_clip=1., double_dqn=True,
               prioritized_replay=prioritized, compile=compile)
    examples = dict(observation=np.zeros(OBS_DIM, np.float32), action=np.int64(0),
                    reward=np.float32(0), done=np.bool_(False),
                    env_info=EnvInfo(timeout=np.bool_(False)))
    algo.initialize(agent, n_itr=1, batch_spec=BatchSpec(T, B), mid_batch_reset=True,
                    examples=examples)
    rng = np.random.default_rng(0)
    done = rng.random((T, B)) < 0.01
    samples = Samples(
        env=EnvSamples(observation=rng.standard_normal((T, B, OBS_DIM)).astype(np.float32),
                       reward=np.ones((T, B), np.float32), done=done,
                       env_info=EnvInfo(timeout=done & (rng.random((T, B)) < 0.1))),
        agent=AgentSamples(action=rng.integers(0, N_ACTIONS, (T, B))))
    algo.optimize_agent(0, samples)  # Fills the replay (and makes the first updates).
    return agent, algo


class PlainDqn:
    """A minimal double-DQN update on a copy of the agent's network."""

    def __init__(self, agent: DqnAgent):
        self.q = copy.deepcopy(agent.model)
        self.q_targ = copy.deepcopy(self.q)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=LR, eps=0.01 / BATCH)
        rng = np.random.default_rng(0)
        self.obs = torch.as_tensor(rng.standard_normal((REPLAY, OBS_DIM)), dtype=torch.float32)
        self.next_obs = torch.roll(self.obs, -N_STEP, 0)
        self.act = torch.as_tensor(rng.integers(0, N_ACTIONS, REPLAY))
        self.ret = torch.as_tensor(rng.standard_normal(REPLAY), dtype=torch.float32)
        self.done = torch.as_tensor(rng.random(REPLAY) < 0.03, dtype=torch.float32)
        self.n_updates = 0

    def sample(self) -> tuple:
        idx = torch.randint(REPLAY, (BATCH,))
        return self.obs[idx], self.act[idx], self.ret[idx], self.next_obs[idx], self.done[idx]

    def update(self, batch: tuple) -> None:
        obs, act, ret, next_obs, done = batch
        q = self.q(obs, None, None).gather(1, act.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_a = self.q(next_obs, None, None).argmax(dim=1, keepdim=True)
            target_q = self.q_targ(next_obs, None, None).gather(1, next_a).squeeze(1)
            y = ret + (1 - done) * DISCOUNT ** N_STEP * target_q
        loss = F.huber_loss(q, y, delta=1.)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.n_updates += 1
        if self.n_updates % TARGET_INTERVAL == 0:
            self.q_targ.load_state_dict(self.q.state_dict())


def main(rounds: int, updates: int, threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    agent, uniform = make_framework(updates, prioritized=False)
    _, prioritized = make_framework(updates, prioritized=True)
    plain = PlainDqn(agent)

    def plain_updates():
        for _ in range(updates):
            plain.update(plain.sample())

    cases = dict(uniform=lambda: uniform.optimize_agent(1),
                 unguarded=lambda: without_guard(uniform),
                 prioritized=lambda: prioritized.optimize_agent(1),
                 plain=plain_updates)
    assert uniform.updates_per_optimize == prioritized.updates_per_optimize == updates
    rates = median_rates(cases, rounds, updates)
    print(f"DQN updates/s, CartPole configuration: batch {BATCH}, MLP [128, 128], double, "
          f"{N_STEP}-step, replay {REPLAY:,}, {threads} torch thread(s), median of {rounds} "
          f"rounds of {updates} updates (replay sampling included)")
    for clock, med in rates.items():
        print(f"  {clock:4s} plain torch {med['plain']:8.0f}   framework uniform "
              f"{med['uniform']:8.0f} (ratio {med['uniform'] / med['plain']:.3f})   "
              f"prioritized {med['prioritized']:8.0f} "
              f"(ratio {med['prioritized'] / med['plain']:.3f})")
        print(f"       non-finite guard: uniform without it {med['unguarded']:8.0f}, with it "
              f"{med['uniform']:8.0f} (cost {1 - med['uniform'] / med['unguarded']:+.1%})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=384, help="updates per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    main(args.rounds, args.updates, args.threads)
