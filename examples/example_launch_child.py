"""
The training script that examples/example_launch.py starts once per run, written
as rlpyt's example_6a: each run is its own process, pinned to its run slot's CPUs,
and called as

    python examples/example_launch_child.py <slot_affinity_code> <log_dir> <run_ID> \
        [<n_steps> <log_interval_steps>]

It builds its config from the default below and the variant the launcher saved in
``log_dir`` (``variant_config.json``), and logs to ``<log_dir>/run_<run_ID>/``.
To rerun one run by hand, pass the arguments printed in the launcher's call string.
"""
import sys

from rlframe.agents.pg.categorical import CategoricalPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import make as gym_make
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.launching.affinity import affinity_from_code
from rlframe.utils.launching.variant import load_variant, update_config
from rlframe.utils.logging.context import logger_context

# Every setting a variant may change; the launcher's VariantLevel keys are paths into it.
config = dict(
    env=dict(id="CartPole-v1"),
    sampler=dict(batch_T=64, batch_B=8, max_decorrelation_steps=0),
    algo=dict(discount=0.98, learning_rate=1e-3, gae_lambda=0.95, ratio_clip=0.2, epochs=4,
              value_loss_coeff=0.5, entropy_loss_coeff=0., clip_grad_norm=10.,
              normalize_advantage=True),
    optim=dict(),
    agent=dict(),
    model=dict(hidden_sizes=[64, 64]),
    runner=dict(n_steps=100e3, log_interval_steps=5120),
)


def build_and_train(slot_affinity_code, log_dir, run_ID, n_steps=None, log_interval_steps=None):
    affinity = affinity_from_code(slot_affinity_code)
    run_config = update_config(config, load_variant(log_dir))
    if n_steps is not None:  # The launcher's common_args: a shorter run for everyone.
        run_config = update_config(run_config, dict(runner=dict(
            n_steps=float(n_steps), log_interval_steps=float(log_interval_steps))))

    sampler = SerialSampler(
        EnvCls=gym_make,
        env_kwargs=run_config["env"],
        **run_config["sampler"],
    )
    algo = PPO(optim_kwargs=run_config["optim"], **run_config["algo"])
    agent = CategoricalPgAgent(model_kwargs=run_config["model"], **run_config["agent"])
    runner = MinibatchRl(
        algo=algo,
        agent=agent,
        sampler=sampler,
        affinity=affinity,
        **run_config["runner"],
    )
    name = "ppo_" + run_config["env"]["id"]
    # log_dir already lies in the experiment directory, so the run logs to log_dir/run_<ID>.
    with logger_context(log_dir, int(run_ID), name, run_config, snapshot_mode="last"):
        runner.train()


if __name__ == "__main__":
    build_and_train(*sys.argv[1:])
