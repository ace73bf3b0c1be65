"""PPO update time per iteration on the CartPole zoo configuration, against plain torch.

The configuration is Stable-Baselines3's tuned CartPole-v1 PPO (rl-baselines3-zoo):
8 envs x 32 steps, 20 epochs of one minibatch of 256, gamma 0.98, GAE lambda 0.8,
learning rate 1e-3 and clip range 0.2 both annealed linearly to 0, gradient-norm
clip 0.5, no entropy bonus, Adam with eps 1e-5, advantages normalized, and
separate 64x64 tanh policy and value MLPs (CategoricalPgAgent's stock model).
SB3's ``vf_coef=0.5`` on the mean squared error is rlframe's ``value_loss_coeff=1``
on half the squared error.

Framework: ``PPO.optimize_agent`` on one [32, 8] batch: returns and advantages
(GAE that bootstraps through time limits), advantage normalization, 20 gradient
steps with clipping and the non-finite guard, the statistics PPO logs, and the
learning-rate and clip schedules. The batch is synthetic (random observations,
actions drawn from the agent's own policy, some episode ends and time limits),
so no environment runs.

Baseline: a minimal PPO update of the same math written here in plain torch on
a copy of the same two networks (torch's default Adam, ``clip_grad_norm_``,
the same GAE recursion), with no statistics and no guard. Rounds alternate
between the two so machine load affects both alike; medians are reported.

    python benchmarks/pg_updates.py [--rounds 7] [--iterations 10] [--threads 1]
"""
import argparse
import collections
import copy

import torch
from _timing import median_rates, warn_if_cpus_busy

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.base import EnvSpaces
from rlframe.samplers.collections import BatchSpec
from rlframe.spaces.float_box import FloatBox
from rlframe.spaces.int_box import IntBox
from rlframe.utils.collections import namedarraytuple

T, B, OBS_DIM, N_ACTIONS = 32, 8, 4, 2
EPOCHS, DISCOUNT, GAE_LAMBDA, LR, CLIP, MAX_GRAD_NORM, ENT_COEF = 20, 0.98, 0.8, 1e-3, 0.2, 0.5, 0.
N_ITR = 100_000  # Long schedule: the annealed lr and clip barely move while timing.
EnvInfo = namedarraytuple("EnvInfo", ["timeout"])
Samples = namedarraytuple("Samples", ["agent", "env"])
AgentSamples = namedarraytuple("AgentSamples",
                               ["action", "prev_action", "agent_info", "bootstrap_value"])
EnvSamples = namedarraytuple("EnvSamples",
                             ["observation", "reward", "prev_reward", "done", "env_info"])
Batch = collections.namedtuple("Batch", ["observation", "action", "reward", "done", "timeout",
                                         "old_prob", "value", "bootstrap_value"])


def make_framework(compile: bool = False) -> tuple:
    """An initialized CategoricalPgAgent and PPO with the zoo hyperparameters."""
    env_spaces = EnvSpaces(observation=FloatBox(-10, 10, shape=(OBS_DIM,)),
                           action=IntBox(0, N_ACTIONS))
    agent = CategoricalPgAgent()
    agent.initialize(env_spaces)
    algo = PPO(discount=DISCOUNT, learning_rate=LR, value_loss_coeff=1., entropy_loss_coeff=0.,
               optim_kwargs=dict(eps=1e-5), clip_grad_norm=MAX_GRAD_NORM,
               gae_lambda=GAE_LAMBDA, minibatches=1, epochs=EPOCHS, ratio_clip=CLIP,
               linear_lr_schedule=True, normalize_advantage=True, compile=compile)
    algo.initialize(agent, n_itr=N_ITR, batch_spec=BatchSpec(T, B), mid_batch_reset=True)
    return agent, algo


def make_samples(agent: CategoricalPgAgent) -> Samples:
    """A [T, B] batch as the sampler gives it, with the agent's own policy outputs."""
    generator = torch.Generator().manual_seed(0)
    observation = torch.randn(T, B, OBS_DIM, generator=generator)
    prev_action = torch.randint(N_ACTIONS, (T, B), generator=generator)
    prev_reward = torch.ones(T, B)
    step = agent.step(observation, prev_action, prev_reward)
    done = torch.rand(T, B, generator=generator) < 0.05
    timeout = done & (torch.rand(T, B, generator=generator) < 0.2)
    bootstrap_value = agent.value(observation[-1], step.action[-1], prev_reward[-1])
    return Samples(
        agent=AgentSamples(action=step.action, prev_action=prev_action,
                           agent_info=step.agent_info, bootstrap_value=bootstrap_value),
        env=EnvSamples(observation=observation, reward=torch.ones(T, B),
                       prev_reward=prev_reward, done=done, env_info=EnvInfo(timeout=timeout)))


class PlainPpo:
    """A minimal PPO update of the same math on copies of the agent's two MLPs."""

    def __init__(self, agent: CategoricalPgAgent):
        self.pi = copy.deepcopy(agent.model.pi)
        self.v = copy.deepcopy(agent.model.v)
        self.params = [*self.pi.parameters(), *self.v.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=LR, eps=1e-5)

    @staticmethod
    def gae(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE [T, B] that bootstraps a time-limit cut from the value of its last step."""
        not_done = 1 - batch.done.float()
        truncated = batch.timeout.float() * batch.done.float()
        advantage = torch.zeros(T, B)
        running, next_value = torch.zeros(B), batch.bootstrap_value
        for t in reversed(range(T)):
            bootstrap = not_done[t] * next_value + truncated[t] * batch.value[t]
            delta = batch.reward[t] + DISCOUNT * bootstrap - batch.value[t]
            running = delta + DISCOUNT * GAE_LAMBDA * not_done[t] * running
            advantage[t] = running
            next_value = batch.value[t]
        return advantage, advantage + batch.value

    def update(self, batch: Batch, frac: float) -> None:
        """One iteration: ``EPOCHS`` steps on the whole batch at schedule fraction ``frac``."""
        advantage, return_ = self.gae(batch)
        advantage = (advantage - advantage.mean()) / (advantage.std(unbiased=False) + 1e-6)
        obs, action = batch.observation.reshape(T * B, -1), batch.action.reshape(-1)
        old_p = batch.old_prob.reshape(T * B, -1).gather(1, action[:, None]).squeeze(1)
        advantage, return_ = advantage.reshape(-1), return_.reshape(-1)
        for group in self.opt.param_groups:
            group["lr"] = LR * frac
        for _ in range(EPOCHS):
            idx = torch.randperm(T * B)
            prob = torch.softmax(self.pi(obs[idx]), dim=-1)
            value = self.v(obs[idx]).squeeze(-1)
            ratio = prob.gather(1, action[idx, None]).squeeze(1) / (old_p[idx] + 1e-8)
            surrogate = torch.min(ratio * advantage[idx],
                                  ratio.clamp(1 - CLIP * frac, 1 + CLIP * frac) * advantage[idx])
            entropy = -(prob * torch.log(prob + 1e-8)).sum(-1).mean()
            loss = -surrogate.mean() + (0.5 * (value - return_[idx]) ** 2).mean() - ENT_COEF * entropy
            self.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
            self.opt.step()


def main(rounds: int, iterations: int, threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    agent, algo = make_framework()
    plain = PlainPpo(agent)
    samples = make_samples(agent)
    batch = Batch(samples.env.observation, samples.agent.action, samples.env.reward,
                  samples.env.done, samples.env.env_info.timeout,
                  samples.agent.agent_info.dist_info.prob, samples.agent.agent_info.value,
                  samples.agent.bootstrap_value)

    def framework_iterations():
        for _ in range(iterations):
            algo.optimize_agent(1, samples)

    def plain_iterations():
        for _ in range(iterations):
            plain.update(batch, (N_ITR - 1) / N_ITR)

    rates = median_rates(dict(framework=framework_iterations, plain=plain_iterations),
                         rounds, iterations)
    print(f"PPO update per iteration, CartPole zoo configuration: batch [{T}, {B}], "
          f"{EPOCHS} epochs of one minibatch of {T * B}, MLPs [64, 64] tanh, {threads} torch "
          f"thread(s), median of {rounds} rounds of {iterations} iterations")
    for clock, med in rates.items():
        print(f"  {clock:4s} plain torch {1e3 / med['plain']:7.2f} ms/itr   framework "
              f"{1e3 / med['framework']:7.2f} ms/itr   (ratio {med['framework'] / med['plain']:.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=10, help="iterations per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    warn_if_cpus_busy()  # Figures measured on busy CPUs understate the machine.
    main(args.rounds, args.iterations, args.threads)
