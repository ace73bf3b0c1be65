"""
Launch a grid of runs over this machine's cores, as rlpyt's example_6: two PPO
settings on CartPole-v1, two runs each, every run its own process of
examples/example_launch_child.py pinned to one core. With more runs than cores
the rest wait for a free core.

    python examples/example_launch.py --n_steps 20e3

The experiment lands in data/local/<YYYYMMDD>/<HHMMSS>/example_launch/: one
directory per setting (its variant_config.json, and run_0/, run_1/ with
progress.csv, params.json, debug.log and the run's console output, launch.log),
plus experiments_tree.txt and num_launched.txt. The script exits with status 1
if any run failed.
"""
import os
import sys

from rlframe.utils.launching.affinity import encode_affinity
from rlframe.utils.launching.exp_launcher import run_experiments
from rlframe.utils.launching.variant import VariantLevel, make_variants

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_launch_child.py")


def main(n_steps=100e3, log_interval_steps=5120):
    # Two cores, one run on each at a time (run slots 0 and 1).
    affinity_code = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1)

    # Within a level, each tuple of values is one setting; keys are paths into the
    # child's config. Several levels would be crossed into every combination.
    learning_rate = [1e-3, 3e-4]
    batch_B = [8, 4]
    values = list(zip(learning_rate, batch_B))
    dir_names = ["{}lr_{}B".format(*v) for v in values]
    keys = [("algo", "learning_rate"), ("sampler", "batch_B")]
    variants, log_dirs = make_variants(VariantLevel(keys, values, dir_names))

    results = run_experiments(
        script=CHILD,
        affinity_code=affinity_code,
        experiment_title="example_launch",
        runs_per_setting=2,
        variants=variants,
        log_dirs=log_dirs,
        common_args=(n_steps, log_interval_steps),  # Every run gets these after its run_ID.
    )
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--n_steps", help="env steps per run", type=float, default=100e3)
    parser.add_argument("--log_interval_steps", help="env steps between logs", type=float,
                        default=5120)
    args = parser.parse_args()
    sys.exit(main(n_steps=args.n_steps, log_interval_steps=args.log_interval_steps))
