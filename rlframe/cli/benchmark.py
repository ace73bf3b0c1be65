"""``rlframe benchmark SUITE -o OUT``: run a benchmark suite over the machine's run slots,
resumable.

Every run of the suite (:mod:`rlframe.presets.suite`) lives in
``OUT/<label>/run_<seed>``. A run that finished holds ``suite_done.json`` and is not
run again; one that was stopped after its first snapshot is resumed from it (as
``rlframe resume`` does); one stopped before any snapshot starts again. So after a
kill, the same command completes the suite. ``OUT/suite.json`` keeps a copy of the suite
as its runs started: an entry with finished or resumable runs in ``OUT`` may gain seeds
and new notes or references, but not other settings, while the other entries may change,
come and go. A kept run whose params.json records other settings than its entry gives now
(rlframe's presets changed, say) is refused, so that an entry's seeds share their
settings. The runs go through the experiment
launcher (:func:`rlframe.utils.launching.grid.run_queue`): each in a process of its
own, pinned to its run slot's cores, its output in ``launch.log`` in its run
directory; Ctrl-C or SIGTERM stops them all.

``python -m rlframe.cli.benchmark SLOT_CODE LOG_DIR RUN_ID`` is one run (what the
launcher starts): it trains or resumes the run and marks it done.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlframe.cli import CommandError

if TYPE_CHECKING:
    from rlframe.presets.suite import SuiteEntry
    from rlframe.runners.minibatch_rl import MinibatchRl

DONE_FILE = "suite_done.json"
SUITE_COPY = "suite.json"
_NOT_SET = object()  # A key on one side of a comparison only.

EXAMPLES = """\
SUITE is a suite file (see benchmarks/suite/): entries of algo, env_id, n_steps,
seeds, config and reference. Each run goes to OUT/<label>/run_<seed>. Run the same
command again after a stop or a kill: finished runs are kept, stopped ones resume
from their snapshots. --slots K runs K at once, each pinned to its share of the
cores. Then `rlframe report OUT --suite SUITE` compares the results with the
references.

examples:
  rlframe benchmark benchmarks/suite/mujoco_1m.json -o results/mujoco --slots 2
  rlframe benchmark benchmarks/suite/mujoco_1m.json -o results/mujoco --dry-run
  rlframe benchmark benchmarks/suite/mujoco_1m.json -o results/mujoco --only sac_Hopper-v5
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``benchmark`` command to the ``rlframe`` parser's subparsers."""
    parser = subparsers.add_parser(
        "benchmark", help="run a benchmark suite over the run slots, resumable",
        description="Run every run of a benchmark suite, a run slot each; finished runs "
                    "are kept and stopped ones resumed when the command runs again.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", metavar="SUITE", help="suite file (JSON)")
    parser.add_argument("-o", "--out", required=True, metavar="OUT",
                        help="directory of the suite's runs (made if missing)")
    parser.add_argument("--slots", type=int, default=1, metavar="K",
                        help="runs at once, each pinned to cores // K cores (default: 1)")
    parser.add_argument("--only", nargs="+", metavar="LABEL",
                        help="run only these entries (their labels: <algo>_<env_id> unless "
                             "the entry names one)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what each run would do, run nothing")
    parser.set_defaults(run=run)
    return parser


def run_state(run_dir: str) -> str:
    """``"done"``, ``"resume"`` (a snapshot to continue from) or ``"new"``."""
    from rlframe.utils.checkpoint import find_snapshot
    if os.path.isfile(os.path.join(run_dir, DONE_FILE)):
        return "done"
    if os.path.isdir(run_dir) and find_snapshot(run_dir) is not None:
        return "resume"
    return "new"


def logged_steps(run_dir: str) -> float | None:
    """The last ``CumSteps`` in ``run_dir``'s progress.csv (None without one)."""
    import numpy as np

    from rlframe.utils.plotting import PlotError, load_progress, resolve_key
    try:
        columns = load_progress(run_dir)
        steps = columns[resolve_key(columns, "CumSteps")]
    except (OSError, PlotError):
        return None
    steps = steps[np.isfinite(steps)]
    return float(steps.max()) if len(steps) else None


def runs_of(suite: Any) -> Any:
    """What of a suite file's JSON decides its runs: its entries without their notes and
    references. The rest (name, description, notes, references) may be corrected or added
    to while the suite's runs are kept."""
    if not isinstance(suite, dict) or not isinstance(suite.get("runs"), list):
        return suite
    return [{k: v for k, v in entry.items() if k not in ("notes", "reference")}
            if isinstance(entry, dict) else entry for entry in suite["runs"]]


def held_entry_changes(kept: object, now: dict[str, Any], out: str) -> list[str]:
    """How the suite ``now`` changes the entries whose runs ``out`` holds.

    ``kept`` is the copy of the suite that ``out``'s runs were started from. An entry
    with a finished or resumable run in ``out`` must keep what decides its runs (all
    but its notes, reference and seeds: each run is one seed, so seeds may be added);
    entries without runs may change, come or go. A copy this rlframe cannot read as a
    suite must equal ``now`` in what its runs do.

    Returns:
        One ``"<label>: <key>: <then> -> <now>"`` line per change; empty if none.
    """
    from rlframe.presets.suite import SuiteError, load_suite
    try:
        kept_entries = load_suite(kept, check_experiments=False).entries
    except SuiteError:
        same = runs_of(kept) == runs_of(now)
        return [] if same else [f"{SUITE_COPY} is no suite file this rlframe reads"]
    now_raw = {entry.label: raw for entry, raw in
               zip(load_suite(now, check_experiments=False).entries, now["runs"])}
    changes = []
    for entry, raw in zip(kept_entries, kept["runs"]):
        runs = glob.glob(os.path.join(glob.escape(os.path.join(out, entry.label)), "run_*"))
        if not any(run_state(run_dir) != "new" for run_dir in runs):
            continue
        if entry.label not in now_raw:
            changes.append(f"{entry.label}: no such entry now")
            continue
        then, after = ({k: v for k, v in entry_raw.items()
                        if k not in ("notes", "reference", "seeds", "label")}
                       for entry_raw in (raw, now_raw[entry.label]))
        changes += [f"{entry.label}: {change}" for change in value_changes(then, after)]
    return changes


def value_changes(then: object, now: object, path: str = "") -> list[str]:
    """``"<dotted key>: <then> -> <now>"`` for each leaf of two JSON values that differs."""
    if isinstance(then, dict) and isinstance(now, dict):
        return [change for key in sorted(set(then) | set(now))
                for change in value_changes(then.get(key, _NOT_SET), now.get(key, _NOT_SET),
                                            f"{path}.{key}" if path else key)]
    if then is not _NOT_SET and now is not _NOT_SET and then == now:
        return []
    then_text, now_text = ("(not set)" if v is _NOT_SET else repr(v) for v in (then, now))
    return [f"{path}: {then_text} -> {now_text}"]


def settings_changes(params: dict[str, Any], runner: MinibatchRl,
                     full: dict[str, Any]) -> list[str]:
    """Where a run's recorded settings differ from those its suite entry gives now.

    Compares the run keys (``n_steps``, ``batch_T``, ...) and every keyword of the
    ``kwargs`` sections. A keyword on one side only counts as its class's default on the
    other (an older run's params.json may lack one a preset has since stated).

    Args:
        params: the run's params.json.
        runner, full: ``build_experiment``'s result for the entry now.

    Returns:
        ``"KEY: THEN -> NOW"`` for each difference (empty when none).
    """
    from rlframe.presets.build import RUN_KEYS, SECTIONS, keyword_defaults
    changes = [f"{key}: {params.get(key)!r} -> {full[key]!r}" for key in RUN_KEYS
               if params.get(key) != full[key]]
    classes = dict(algo=type(runner.algo), agent=type(runner.agent),
                   sampler=type(runner.sampler), runner=type(runner),
                   env=getattr(runner.sampler, "EnvCls", None))
    now = json.loads(json.dumps(full["kwargs"], default=str))  # As params.json holds it.
    then = params.get("kwargs") if isinstance(params.get("kwargs"), dict) else {}
    for section in SECTIONS:
        old, new = then.get(section) or {}, now.get(section) or {}
        defaults = json.loads(json.dumps(keyword_defaults(classes[section]), default=str))
        keys = set(old) | set(new)
        changes += value_changes({key: old.get(key, defaults.get(key, _NOT_SET)) for key in keys},
                                 {key: new.get(key, defaults.get(key, _NOT_SET)) for key in keys},
                                 f"kwargs.{section}")
    return changes


def run(args: argparse.Namespace) -> int:
    """Check the suite, print the plan, run what is not done; status 1 if a run failed."""
    from rlframe.presets.suite import SuiteError, check_experiment, entry_where, load_suite
    from rlframe.utils.launching.grid import Run, run_queue, slot_cores, slots_affinity_code
    from rlframe.utils.launching.pinning import usable_cpus
    from rlframe.utils.plotting import format_count

    cores, pin = slot_cores()
    if not 1 <= args.slots <= cores:
        raise CommandError(f"--slots {args.slots}: give 1 to {cores} (this process may use "
                           f"{cores} cores; each run gets cores // slots of them)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CommandError(f"-o {args.out} is a file; name a directory for the suite's runs")
    try:
        suite = load_suite(args.suite, check_experiments=False)
    except SuiteError as error:
        raise CommandError(f"{args.suite}: {error}") from None
    with open(args.suite) as f:
        suite_text = json.load(f)
    copy = os.path.join(args.out, SUITE_COPY)
    if os.path.isfile(copy):
        with open(copy) as f:
            changes = held_entry_changes(json.load(f), suite_text, args.out)
        if changes:
            raise CommandError(
                f"{args.out} holds runs of entries that {args.suite} gives otherwise now (its "
                f"{SUITE_COPY} -> now: {'; '.join(changes)}); give a new -o, or remove those "
                "entries' folders to run them again")
    entries = suite.entries
    if args.only:
        labels = [entry.label for entry in entries]
        unknown = [label for label in args.only if label not in labels]
        if unknown:
            raise CommandError(f"--only {' '.join(unknown)}: no such entry in {args.suite}; "
                               f"its labels are {', '.join(labels)}")
        entries = [entry for entry in entries if entry.label in args.only]
    built: dict[str, tuple[MinibatchRl, dict[str, Any]]] = {}
    for entry in entries:  # Only the entries that will run must fit this machine.
        index = suite.entries.index(entry)
        where = f"{args.suite}: {entry_where(index, entry.algo, entry.env_id)}"
        n_parallel = entry.config.get("n_parallel")
        if isinstance(n_parallel, int) and cores // args.slots < n_parallel <= cores:
            fits = cores // n_parallel
            raise CommandError(
                f"{where}: n_parallel={n_parallel} needs {n_parallel} cores, but with --slots "
                f"{args.slots} each run gets {cores // args.slots} of this process's {cores}; "
                f"give --slots {fits}{' or fewer' if fits > 1 else ''}")
        try:
            built[entry.label] = check_experiment(entry, where)
        except SuiteError as error:
            raise CommandError(str(error)) from None
    check_kept_runs(args, entries, built)
    runs, plan = [], []
    for entry in entries:
        for seed in entry.seeds:
            state = run_state(entry.run_dir(args.out, seed))
            where = logged_steps(entry.run_dir(args.out, seed)) if state == "resume" else None
            plan.append(f"  {entry.label}/run_{seed}: {state}" + (
                "" if where is None else
                f" (logged {format_count(where)} of {format_count(entry.n_steps)} steps)"))
            if state != "done":
                config = {k: v for k, v in entry.train_config(seed).items() if k != "seed"}
                runs.append(Run(os.path.join(os.path.abspath(args.out), entry.label),
                                dict(config=config, label=entry.label), seed, ()))
    print(f"Suite {suite.name!r}: {len(plan)} runs in {args.out}, {len(runs)} to run "
          f"({args.slots} at once):\n" + "\n".join(plan), flush=True)
    if args.dry_run or not runs:
        return 0
    os.makedirs(args.out, exist_ok=True)
    with open(copy, "w") as f:
        json.dump(suite_text, f, indent=1)
    if not pin:
        print(f"Runs are not pinned: this process may use CPUs {usable_cpus()}, not "
              f"0..{cores - 1}.", flush=True)
    code = slots_affinity_code(args.slots, cores, pin)
    results = run_queue([sys.executable, "-m", "rlframe.cli.benchmark"], code, args.out, runs,
                        n_run_slots=args.slots)
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} of {len(results)} runs finished; "
          f"`rlframe report {args.out} --suite {args.suite}` summarizes them.", flush=True)
    return 1 if failed else 0


def check_kept_runs(args: argparse.Namespace, entries: Sequence[SuiteEntry],
                    built: dict[str, tuple[MinibatchRl, dict[str, Any]]]) -> None:
    """Refuse to go on where a finished or resumable run was trained with other settings
    than its entry gives now (rlframe's presets may have changed since it started): the
    entry's seeds would not share their settings."""
    for entry in entries:
        runner, full = built[entry.label]
        for seed in entry.seeds:
            run_dir = entry.run_dir(args.out, seed)
            path = os.path.join(run_dir, "params.json")
            if run_state(run_dir) == "new" or not os.path.isfile(path):
                continue
            with open(path) as f:
                changes = settings_changes(json.load(f), runner, full)
            if changes:
                raise CommandError(
                    f"{entry.label}/run_{seed} was trained with other settings than "
                    f"{args.suite} gives its entry now (its params.json -> now: "
                    f"{'; '.join(changes)}). rlframe's presets may have changed since it "
                    "started: give a new -o to run the entry as it is now, or remove "
                    f"{run_dir} to train that run again")


def record_system(run_dir: str, state: str) -> None:
    """Add this start's machine and commit to ``run_dir/system.json`` (a list: one
    record per start, so a run resumed elsewhere names both machines), with the CPUs of
    this process that other processes kept busy at the start (``busy_cpus``, CPU ->
    percent; printed as a warning too), since a shared core slows the run."""
    from rlframe.utils.system import SYSTEM_FILE, system_record, warn_if_cpus_busy
    path = os.path.join(run_dir, SYSTEM_FILE)
    records = []
    if state == "resume" and os.path.isfile(path):
        with open(path) as f:
            records = json.load(f)
    load = warn_if_cpus_busy("this run")
    others = [dict(pid=p.pid, command=p.command, percent=p.percent) for p in load.others]
    records.append(dict(system_record(), started=time.strftime("%Y-%m-%d %H:%M:%S"),
                        start=state, busy_cpus={str(c): v for c, v in load.busy().items()},
                        other_processes=others))
    os.makedirs(run_dir, exist_ok=True)
    with open(path, "w") as f:
        json.dump(records, f, indent=1)


def child_main(argv: list[str]) -> None:
    """One run: ``SLOT_CODE LOG_DIR RUN_ID`` (RUN_ID is the seed); train it, or resume it
    from its snapshot, then mark it done."""
    from rlframe.cli import resume
    from rlframe.presets import build_experiment
    from rlframe.utils.launching.variant import load_variant
    from rlframe.utils.logging.context import logger_context

    _, log_dir, run_ID = argv[:3]
    seed = int(run_ID)
    variant = load_variant(log_dir)
    config, label = dict(variant["config"], seed=seed), variant["label"]
    run_dir = os.path.join(log_dir, f"run_{seed}")
    state = run_state(run_dir)
    print(f"{label}/run_{seed}: {state}", flush=True)
    if state == "done":
        return
    if state == "resume":
        record_system(run_dir, state)
        resume.run(argparse.Namespace(run_dir=run_dir))
    else:
        if os.path.isdir(run_dir):  # Stopped before its first snapshot: start again.
            for name in os.listdir(run_dir):
                if name != "launch.log":  # This run's own output, being written.
                    path = os.path.join(run_dir, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        record_system(run_dir, state)
        runner, full = build_experiment(config)
        full.update(log_dir=log_dir, name=label, snapshot_mode="last")
        with logger_context(log_dir, seed, label, full, snapshot_mode="last",
                            override_prefix=True, if_exists="error"):
            runner.train()
    with open(os.path.join(run_dir, DONE_FILE), "w") as f:
        json.dump(dict(n_steps=config["n_steps"], finished=time.strftime("%Y-%m-%d %H:%M:%S")),
                  f)


if __name__ == "__main__":
    child_main(sys.argv[1:])
