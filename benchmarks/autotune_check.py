"""`rlframe autotune`'s choice against an exhaustive grid over the same candidates.

First the autotune search runs as `rlframe autotune ALGO ENV_ID` does (successive
halving) and its wall time is printed. Then every candidate is measured for the
final round's time (the exhaustive grid), and the figure printed is the chosen
set-up's grid speed as a fraction of the grid's best (the target: >= 0.90).

    python benchmarks/autotune_check.py [--algo ppo] [--env_id pong] [--seconds 1 5]
        [--grid_seconds 6] [--quick]
"""
import argparse
import time

from rlframe.presets.autotune import autotune, candidates, measure_in_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--env_id", default="pong")
    parser.add_argument("--seconds", type=float, nargs="+", default=[1., 5.])
    parser.add_argument("--grid_seconds", type=float, default=6.)
    parser.add_argument("--batch_T", type=int, help="the preset's when not given")
    parser.add_argument("--quick", action="store_true",
                        help="serial and cpu samplers, plain backend, 1 thread (a smoke run)")
    args = parser.parse_args()
    config = {} if args.batch_T is None else dict(batch_T=args.batch_T)
    choices = dict(samplers=["serial", "cpu"], backends=["plain"], torch_threads=[1]) \
        if args.quick else {}

    start = time.perf_counter()
    result = autotune(args.algo, args.env_id, config, seconds=args.seconds, **choices,
                      progress=print)
    search_wall = time.perf_counter() - start
    print(f"\nautotune {args.algo} {args.env_id}: {search_wall:.0f} s, chosen: "
          f"{result.best.label}")
    print(result.table())

    base = {**config, "algo": args.algo, "env_id": args.env_id}
    cands, _ = candidates(base, **choices)
    grid = {}
    print(f"\nExhaustive grid: {len(cands)} set-ups, {args.grid_seconds:g} s each")
    for c in cands:  # One process per candidate: each its own start-up and warm-up.
        try:
            grid[c] = measure_in_process(c.config(base), args.grid_seconds,
                                         [c.torch_threads])[0]
        except RuntimeError as error:
            print(f"  {c.label}: failed: {error}")
            continue
        print(f"  {c.label}: {grid[c]:,.0f} env steps/s")
    best = max(grid, key=grid.get)
    chosen = grid.get(result.best, 0.)
    print(f"\ngrid best: {best.label}, {grid[best]:,.0f} env steps/s")
    print(f"autotune's choice in the grid: {chosen:,.0f} env steps/s = "
          f"{chosen / grid[best]:.2f} of the grid's best")


if __name__ == "__main__":
    main()
