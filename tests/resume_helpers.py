"""Small runs for the resume tests, also run as a script in a child process:

    python resume_helpers.py ALGO RUN_ID [--die-at ITR] [--die-writing-replay-at ITR]
                             [--resume] [--no-replay-checkpoint]

which trains in ``./resume_runs/run_<RUN_ID>`` and, with ``--die-at``, kills itself
with SIGKILL after that iteration (no shutdown, no final snapshot), as a crash would;
with ``--die-writing-replay-at``, while the snapshot of that iteration writes its replay.
"""
import argparse
import csv
import os
import signal

import torch

from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.async_rl import AsyncRl
from rlframe.runners.callbacks import Callback
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import make_affinity
from rlframe.utils.logging.context import logger_context

LOG_DIR = "resume_runs"


class DieAt(Callback):
    """SIGKILL this process at the end of iteration ``itr``."""

    def __init__(self, itr):
        self.itr = itr

    def on_iteration_end(self, runner, itr, samples, opt_info):
        if itr == self.itr:
            os.kill(os.getpid(), signal.SIGKILL)


def die_writing_replay_at(itr):
    """SIGKILL this process once the snapshot of iteration ``itr`` has written its
    replay buffer's temporary file, before anything is renamed into place."""
    from rlframe.runners import resume
    from rlframe.utils.checkpoint import REPLAY_FILE
    stage = resume.stage_state_file

    def stage_then_die(run_dir, name, at, state):
        tmp_path = stage(run_dir, name, at, state)
        if name == REPLAY_FILE and at == itr:
            os.kill(os.getpid(), signal.SIGKILL)
        return tmp_path
    resume.stage_state_file = stage_then_die


class RecordEpsilon(Callback):
    """The exploration epsilon of every iteration, in order."""

    def __init__(self):
        self.epsilons = {}

    def on_iteration_end(self, runner, itr, samples, opt_info):
        self.epsilons[itr] = float(runner.agent.distribution.epsilon)


def ppo_runner(callbacks=None):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"), batch_T=32,
                            batch_B=4, max_decorrelation_steps=0)
    return MinibatchRl(algo=PPO(minibatches=2, epochs=2), agent=CategoricalPgAgent(),
                       sampler=sampler, n_steps=128 * 16, log_interval_steps=128 * 4, seed=3,
                       callbacks=callbacks)


def atari_ppo_runner(callbacks=None):
    from rlframe.agents.pg.atari import AtariFfAgent
    from rlframe.envs.atari import AtariEnv
    from rlframe.envs.atari.atari_env import AtariTrajInfo
    env_kwargs = dict(game="breakout", fire_on_reset=True, repeat_action_probability=0.25,
                      horizon=60)
    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=env_kwargs, batch_T=16, batch_B=2,
                            TrajInfoCls=AtariTrajInfo, max_decorrelation_steps=0)
    return MinibatchRl(algo=PPO(minibatches=2, epochs=1), agent=AtariFfAgent(),
                       sampler=sampler, n_steps=32 * 12, log_interval_steps=32 * 3, seed=4,
                       callbacks=callbacks)


def dqn_runner(callbacks=None, checkpoint_replay=True):
    sampler = SerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                            eval_env_kwargs=dict(id="CartPole-v1"), batch_T=8, batch_B=2,
                            max_decorrelation_steps=0, eval_n_envs=2, eval_max_steps=400)
    algo = DQN(min_steps_learn=400, eps_steps=16 * 150, batch_size=32, replay_size=5000,
               prioritized_replay=True, checkpoint_replay=checkpoint_replay)
    return MinibatchRlEval(algo=algo, agent=DqnAgent(), sampler=sampler, n_steps=16 * 200,
                           log_interval_steps=16 * 40, seed=5, callbacks=callbacks)


def async_dqn_runner(callbacks=None, checkpoint_replay=True):
    sampler = AsyncSerialSampler(EnvCls=gym_make, env_kwargs=dict(id="CartPole-v1"),
                                 batch_T=8, batch_B=2, max_decorrelation_steps=0)
    algo = DQN(min_steps_learn=400, eps_steps=16 * 150, batch_size=32, replay_size=5000,
               checkpoint_replay=checkpoint_replay)
    return AsyncRl(algo=algo, agent=DqnAgent(), sampler=sampler, n_steps=16 * 400,
                   log_interval_steps=16 * 40, seed=5, callbacks=callbacks,
                   sampler_lead_steps=256,  # CartPole would outrun the optimizer by far.
                   affinity=make_affinity(run_slot=0, n_cpu_core=2, n_gpu=0,
                                          async_sample=True))


RUNNERS = dict(ppo=ppo_runner, atari_ppo=atari_ppo_runner, dqn=dqn_runner,
               async_dqn=async_dqn_runner)


def train(algo, run_ID, resume=False, callbacks=None, **kwargs):
    """Train in ``resume_runs/run_<run_ID>``; returns the runner."""
    runner = RUNNERS[algo](callbacks=callbacks, **kwargs)
    with logger_context(LOG_DIR, run_ID, algo, dict(algo=algo), snapshot_mode="last",
                        override_prefix=True, resume=resume):
        runner.train()
    return runner


def flat_state(agent):
    """The agent's tensors by dotted name."""
    out = {}

    def walk(tree, prefix):
        for key, value in tree.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[prefix + key] = value.detach().clone()
    walk(agent.state_dict(), "")
    return out


def progress(run_ID):
    """The rows of ``resume_runs/run_<run_ID>/progress.csv``."""
    with open(os.path.join(LOG_DIR, f"run_{run_ID}", "progress.csv"), newline="") as f:
        return list(csv.DictReader(f))


def column(rows, name):
    """The ``Diagnostics/<name>`` column of ``rows``, as floats."""
    return [float(row[f"Diagnostics/{name}"]) for row in rows]


def debug_log(run_ID):
    """The text of ``resume_runs/run_<run_ID>/debug.log``."""
    with open(os.path.join(LOG_DIR, f"run_{run_ID}", "debug.log")) as f:
        return f.read()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", choices=sorted(RUNNERS))
    parser.add_argument("run_ID", type=int)
    parser.add_argument("--die-at", type=int)
    parser.add_argument("--die-writing-replay-at", type=int)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--no-replay-checkpoint", action="store_true")
    args = parser.parse_args()
    kwargs = dict(checkpoint_replay=False) if args.no_replay_checkpoint else {}
    callbacks = [DieAt(args.die_at)] if args.die_at is not None else None
    if args.die_writing_replay_at is not None:
        die_writing_replay_at(args.die_writing_replay_at)
    runner = train(args.algo, args.run_ID, resume=args.resume, callbacks=callbacks, **kwargs)
    torch.save(flat_state(runner.agent), f"agent_{args.run_ID}.pt")
