"""``rlframe tune``: hyperparameter search on Optuna, over the launcher's run slots, with
trials that survive being killed.

A tuning directory ``OUT`` holds ``tune.json`` (the command's settings), the study's
storage (``study.db``, SQLite, unless ``storage`` names another Optuna storage) and one
folder per trial this command ran, ``trial_<number>/run_<seed>``: ordinary run
directories whose ``params.json`` holds the trial's config. ``slots`` worker processes,
each pinned to its share of the cores, take trials until ``trials`` of them were started
from ``OUT``. A trial runs its seeds one after the other; every evaluation row is
reported to Optuna at ``seed_index * n_steps + env steps`` (all but the untrained agent's
row at step 0), and the pruner may stop the
trial there (its run ends with a snapshot, and the trial is marked pruned). Its value is
the IQM (or mean) of the seeds' final evaluation returns.

Run the same command again after a kill: finished trials are kept, and a trial that was
running resumes each of its runs from its snapshot with the values Optuna drew for it. Two
commands on one storage and study name (two machines, each with its own ``OUT``) share the
study: Optuna numbers the trials, so none runs twice, and the study holds the trials of
both.

Workers and trials: :mod:`rlframe.tune.trials`.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

from rlframe.tune.settings import (OBJECTIVES, PRUNERS, SAMPLERS, TUNE_FILE, TuneError,
                                   TuneSettings)
from rlframe.tune.space import apply, default_space, parse_space, space_to_json

def make_pruner(name: str) -> optuna.pruners.BasePruner:
    """The Optuna pruner called ``name`` (one of :data:`PRUNERS`)."""
    import optuna
    if name == "median":  # Not before 2 trials have finished, nor in a run's first rows.
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def make_sampler(name: str) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` (one of :data:`SAMPLERS`)."""
    import optuna
    if name == "random":
        return optuna.samplers.RandomSampler()
    return optuna.samplers.TPESampler(n_startup_trials=5)


def load_study(settings: TuneSettings, create: bool = False) -> optuna.Study:
    """The study of ``settings`` (made with ``create``); checks that a study already
    there was made for the same algorithm, env, objective and space.

    Raises:
        TuneError: the storage cannot be reached, or its study is another one.
    """
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=open_storage(settings.storage),
                                    study_name=settings.study_name,
                                    direction="maximize", load_if_exists=True,
                                    sampler=make_sampler(settings.sampler),
                                    pruner=make_pruner(settings.pruner))
    except ValueError as error:
        if "direction" in str(error).lower():
            raise TuneError(f"--study-name {settings.study_name!r}: the study in "
                            f"{settings.storage} exists with another direction ({error}); "
                            "rlframe tune maximizes the return: give a new --study-name."
                            ) from None
        raise TuneError(f"--storage {settings.storage!r}: {error}") from None
    except Exception as error:  # e.g. sqlalchemy's OperationalError: cannot connect.
        raise TuneError(f"--storage {settings.storage!r} cannot be used: "
                        f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
                        ) from None
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise TuneError(f"--study-name {settings.study_name!r}: the study in "
                        f"{settings.storage} exists with another direction "
                        f"({study.direction.name.lower()}); rlframe tune maximizes the return: "
                        "give a new --study-name.")
    wanted = dict(algo=settings.algo, env_id=settings.env_id, n_steps=settings.n_steps,
                  seeds=len(settings.seeds), objective=settings.objective,
                  space=settings.space)
    held = study.user_attrs
    if not held.get("rlframe"):
        if not create and study.trials:
            raise TuneError(f"--study-name {settings.study_name!r}: the study in "
                            f"{settings.storage} was not made by rlframe tune.")
        for key, value in wanted.items():  # The marker last: a command on another
            study.set_user_attr(key, value)  # machine checks the set-up once it is there.
        study.set_user_attr("rlframe", True)
        return study
    differ = [f"{key}: the study's {held.get(key)!r}, here {value!r}"
              for key, value in wanted.items() if held.get(key) != value]
    if differ:
        raise TuneError(f"--study-name {settings.study_name!r} in {settings.storage} is a "
                        f"study of another set-up ({'; '.join(differ)}); give another "
                        "--study-name, or the same settings.")
    return study


def open_storage(url: str) -> str | optuna.storages.BaseStorage:
    """An Optuna storage: ``journal:PATH`` is a journal file (for a shared disk where a
    database server is not at hand), anything else an RDB URL (``sqlite:///...``,
    ``postgresql://...``)."""
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        path = url[len("journal:"):]
        if not path:
            raise TuneError("--storage journal:PATH needs the journal file's path.")
        return JournalStorage(JournalFileBackend(os.path.abspath(path)))
    return url


# --- The command ---------------------------------------------------------------------------

def prepare(algo: str, env_id: str, out_dir: str, trials: int = 20, n_steps: int | None = None,
            seeds: int = 1, objective: str = "iqm", space: dict[str, Any] | str | None = None,
            storage: str | None = None, study_name: str | None = None, pruner: str = "median",
            sampler: str = "tpe", slots: int = 1, config: dict[str, Any] | None = None,
            track: list[str] | None = None) -> TuneSettings:
    """Check a tuning set-up, make its study and write ``OUT/tune.json``.

    Raises:
        TuneError: naming the setting: bad counts or names, a search space with an
            unknown key or bad bounds (or whose values do not build an experiment), an
            unreachable storage, a study of another set-up.
    """
    from rlframe.presets import build_experiment
    from rlframe.presets.envs import resolve_env
    from rlframe.tune.space import SpaceError, load_space
    for name, value in (("trials", trials), ("seeds", seeds), ("slots", slots)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TuneError(f"{name} must be a positive whole number, got {value!r}.")
    for name, value, allowed in (("objective", objective, OBJECTIVES),
                                 ("pruner", pruner, PRUNERS), ("sampler", sampler, SAMPLERS)):
        if value not in allowed:
            raise TuneError(f"{name} must be one of {', '.join(allowed)}, got {value!r}.")
    config = dict(config or {})
    try:
        if n_steps is not None and "log_interval_steps" not in config:
            config["log_interval_steps"] = max(1, n_steps // 10)  # Rows for the pruner.
        base, full = build_experiment(dict(config, algo=algo, env_id=env_id,
                                           **({} if n_steps is None else {"n_steps": n_steps})))
        del base
        profile = resolve_env(env_id).profile
        if space is None:
            dists = default_space(algo, profile)
        elif isinstance(space, str):
            dists = load_space(space)
        else:
            dists = parse_space(space)
        trial_config = apply(dict(config, algo=algo, env_id=env_id, n_steps=full["n_steps"]),
                             {key: dist.middle() for key, dist in dists.items()})
        build_experiment(trial_config)  # Unknown keywords, close names suggested.
    except SpaceError as error:
        raise TuneError(str(error)) from None
    except (ValueError, TypeError) as error:
        raise TuneError(" ".join(str(error).split())) from None
    os.makedirs(out_dir, exist_ok=True)
    out_dir = os.path.abspath(out_dir)
    if storage is not None and storage.startswith("journal:") and len(storage) > 8:
        storage = "journal:" + os.path.abspath(storage[len("journal:"):])  # For the workers.
    settings = TuneSettings(
        algo=algo, env_id=env_id, n_steps=int(full["n_steps"]), trials=trials,
        seeds=list(range(seeds)), objective=objective, space=space_to_json(dists),
        config=config, storage=storage or f"sqlite:///{os.path.join(out_dir, 'study.db')}",
        study_name=study_name or f"{algo}_{env_id.replace('/', '-')}", pruner=pruner,
        sampler=sampler, slots=slots, track=track)
    load_study(settings, create=True)
    from rlframe.utils.files import write_json_atomic
    write_json_atomic(os.path.join(out_dir, TUNE_FILE), dataclasses.asdict(settings))
    return settings


def run_workers(settings: TuneSettings, out_dir: str) -> int:
    """Run ``settings.slots`` workers, each pinned to its share of the cores; returns the
    number of workers that failed."""
    from rlframe.utils.launching.grid import Run, run_queue, slot_cores, slots_affinity_code
    cores, pin = slot_cores()
    if settings.slots > cores:
        raise TuneError(f"slots={settings.slots}: give 1 to {cores} (each worker gets "
                        "cores // slots of this machine's cores).")
    code = slots_affinity_code(settings.slots, cores, pin)
    workers = os.path.join(os.path.abspath(out_dir), "workers")
    os.makedirs(workers, exist_ok=True)
    runs = [Run(workers, dict(worker=i), i, ()) for i in range(settings.slots)]
    results = run_queue([sys.executable, "-m", "rlframe.tune.trials"], code, workers, runs,
                        n_run_slots=settings.slots)
    return sum(not r.ok for r in results)


def tune(algo: str, env_id: str, out_dir: str, **kwargs: object) -> optuna.Study:
    """Tune ``algo`` on ``env_id``: :func:`prepare`, run the workers, write the summary.

    Args:
        algo, env_id: as for ``rlframe train``.
        out_dir: the tuning directory (run again to continue it after a kill).
        **kwargs: :func:`prepare`'s settings (``trials``, ``n_steps``, ``seeds``,
            ``objective``, ``space``, ``storage``, ``study_name``, ``pruner``,
            ``sampler``, ``slots``, ``config``, ``track``).

    Returns:
        The Optuna study.
    """
    settings = prepare(algo, env_id, out_dir, **kwargs)
    started = time.monotonic()
    failed = run_workers(settings, out_dir)
    if failed:
        print(f"{failed} worker(s) failed; see {out_dir}/workers/run_*/launch.log.",
              flush=True)
    from rlframe.tune.summary import summarize
    study = load_study(settings)
    summarize(study, settings, out_dir, time.monotonic() - started)
    return study

