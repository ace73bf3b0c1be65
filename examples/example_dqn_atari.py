"""
DQN on an Atari game with evaluation, as in rlpyt's example_1: one process
samples and trains (on a GPU with ``--cuda_idx``), which is the easiest
arrangement to debug.

    python examples/example_dqn_atari.py --game pong --cuda_idx 0

The replay buffer stores each frame once and rebuilds the 4-frame stacks when
sampling (rlframe picks a frame buffer for uint8 image observations), so a
1M-transition replay takes about 8.3 GB rather than 33 GB. Evaluation runs
``--eval_n_envs`` envs greedily (epsilon ``eps_eval``) at every log point;
``snapshot_mode="last"`` keeps the latest parameters in the run directory.
"""
from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
from rlframe.algos.dqn.dqn import DQN
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo
from rlframe.runners.minibatch_rl import MinibatchRlEval
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.logging.context import logger_context


def build_and_train(game="pong", run_ID=0, cuda_idx=None, n_steps=10e6,
                    log_interval_steps=1e5, min_steps_learn=5e4, replay_size=1e6,
                    eps_steps=1e6, eval_n_envs=10, eval_max_steps=10e3, seed=None):
    sampler = SerialSampler(
        EnvCls=AtariEnv,
        TrajInfoCls=AtariTrajInfo,  # Adds GameScore, the unclipped score.
        env_kwargs=dict(game=game),
        eval_env_kwargs=dict(game=game),
        batch_T=4,  # Four time steps per sampler iteration,
        batch_B=1,  # in one env.
        max_decorrelation_steps=0,
        eval_n_envs=eval_n_envs,
        eval_max_steps=int(eval_max_steps),
        eval_max_trajectories=5,
    )
    algo = DQN(
        min_steps_learn=int(min_steps_learn),
        replay_size=int(replay_size),
        eps_steps=int(eps_steps),
        double_dqn=True,
    )
    agent = AtariDqnAgent()
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=n_steps,
        log_interval_steps=log_interval_steps,
        affinity=dict(cuda_idx=cuda_idx),
        seed=seed,
    )
    config = dict(game=game)
    name = "dqn_" + game
    log_dir = "example_dqn_atari"
    with logger_context(log_dir, run_ID, name, config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--game", help="Atari game", default="pong")
    parser.add_argument("--run_ID", help="run identifier (logging)", type=int, default=0)
    parser.add_argument("--cuda_idx", help="gpu to use ", type=int, default=None)
    parser.add_argument("--n_steps", help="total env steps", type=float, default=10e6)
    parser.add_argument("--log_interval_steps", help="env steps between logs (and evaluations)",
                        type=float, default=1e5)
    parser.add_argument("--min_steps_learn", help="env steps before training starts",
                        type=float, default=5e4)
    parser.add_argument("--replay_size", help="replay capacity in transitions", type=float,
                        default=1e6)
    parser.add_argument("--eps_steps", help="env steps over which epsilon decays", type=float,
                        default=1e6)
    parser.add_argument("--eval_n_envs", type=int, default=10)
    parser.add_argument("--eval_max_steps", help="env steps per evaluation, over all envs",
                        type=float, default=10e3)
    parser.add_argument("--seed", help="random seed (default: made at random)", type=int,
                        default=None)
    args = parser.parse_args()
    build_and_train(
        game=args.game,
        run_ID=args.run_ID,
        cuda_idx=args.cuda_idx,
        n_steps=args.n_steps,
        log_interval_steps=args.log_interval_steps,
        min_steps_learn=args.min_steps_learn,
        replay_size=args.replay_size,
        eps_steps=args.eps_steps,
        eval_n_envs=args.eval_n_envs,
        eval_max_steps=args.eval_max_steps,
        seed=args.seed,
    )
