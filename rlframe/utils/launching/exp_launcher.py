"""Launch a grid of runs, each in its own process, over the run slots of an affinity code.

:func:`run_experiments` starts one process per (variant, run_ID) of a training
script, ``python <script> <slot_affinity_code> <log_dir> <run_ID> *args``,
as many at once as the affinity code has run slots (queueing the rest), each
pinned to its slot's CPUs. :func:`run_experiments_fn` does the same for a
Python function instead of a script. The experiment directory
``<root>/local/<YYYYMMDD>/<HHMMSS>/<experiment_title>`` receives
``experiments_tree.txt`` (what was asked for), ``num_launched.txt`` (progress)
and one directory per variant holding ``variant_config.json``; each run's
output (stdout and stderr) goes to ``<variant dir>/run_<ID>/launch.log``.

A run that fails does not stop the others: it is reported when it ends (its
log path and last lines) and again in the summary when all runs are done, and
the returned :class:`RunResult` list holds every return code. Ctrl-C or
SIGTERM to the launcher stops every run, their own child processes included;
on Linux a run also gets SIGTERM when the launcher dies any other way.

Runs are pinned with ``taskset`` where it exists (as in rlpyt), else with
``os.sched_setaffinity`` in the child before it starts; where the OS has no
CPU affinity (macOS, Windows) they run unpinned after one warning.
"""
from __future__ import annotations

import os
import shutil  # noqa: F401 - kept importable here (pinning looks up taskset with it).
import site
import sys
from typing import Any, Callable, Sequence

from rlframe.utils.launching.fn_child import FN_FILE
# The launcher's parts; every name stays importable from here (hence the noqa: F401).
from rlframe.utils.launching.grid import (  # noqa: F401
    POLL_INTERVAL_S, _check_inputs, _run_grid, _stop_runs,
)
from rlframe.utils.launching.pinning import usable_cpus  # noqa: F401
from rlframe.utils.launching.run_files import (  # noqa: F401
    LAUNCH_LOG, TAIL_LINES, RunResult, _describe_failure, _new_exp_dir, _report, _tail,
    launch_log_path, log_exps_tree, log_num_launched,
)
from rlframe.utils.launching.run_process import (  # noqa: F401
    _group_kwargs, _pinning, _pre_exec, _signal_group, _slot_cpus, _slot_cuda_idx, _start,
    _warn_no_pinning, _warned_no_pinning, launch_experiment,
)

__all__ = ["RunResult", "run_experiments", "run_experiments_fn", "launch_experiment",
           "log_exps_tree", "log_num_launched", "launch_log_path", "LAUNCH_LOG", "FN_FILE"]

FN_CHILD_MODULE = "rlframe.utils.launching.fn_child"
STOP_GRACE_S = 5.  # After SIGTERM, before SIGKILL, when the launcher is stopped.


def run_experiments(script: str, affinity_code: str, experiment_title: str,
                    runs_per_setting: int, variants: Sequence[dict], log_dirs: Sequence[str],
                    common_args: Sequence[Any] | None = None,
                    runs_args: Sequence[Sequence[Any]] | None = None,
                    set_egl_device: bool = False) -> list[RunResult]:
    """Run a training script once per (variant, run_ID), each in its own pinned process.

    Runs start in the order ``for run_ID in range(runs_per_setting): for variant in
    variants``, each in the first free run slot of ``affinity_code``; the others
    wait for a slot. Run ``k`` of variant ``i`` is
    ``python <script> <slot_affinity_code> <exp_dir>/<log_dirs[i]> <k> *common_args
    *runs_args[i]``; the script reads its variant with ``load_variant(log_dir)``
    and logs with ``logger_context(log_dir, run_ID, ...)``, which puts its files
    in ``<exp_dir>/<log_dirs[i]>/run_<k>/``. Each run's stdout and stderr go to
    ``launch.log`` there.

    Everything is checked before the first run starts. A failed run (non-zero
    exit status) does not stop the others; it is printed when it ends, with
    its log path and last lines, and again once all runs are done. Ctrl-C
    (KeyboardInterrupt) or SIGTERM stops every run (SIGTERM, then SIGKILL
    after ``STOP_GRACE_S`` seconds, children included) and is raised again
    (SIGTERM as ``SystemExit(143)``). Runs start in process groups of their
    own, so a terminal's Ctrl-C reaches only the launcher, which stops them.

    Args:
        script: path of the training script.
        affinity_code: the machine's affinity code (without run slot), from
            ``encode_affinity``; its run slots say how many runs go at once.
        experiment_title: name of the experiment directory,
            ``<root>/local/<YYYYMMDD>/<HHMMSS>/<experiment_title>``.
        runs_per_setting: runs of each variant (run_IDs ``0..runs_per_setting-1``).
        variants: one config-change dict per setting (from ``make_variants``).
        log_dirs: one relative directory per variant (from ``make_variants``).
        common_args: extra command-line arguments for every run.
        runs_args: extra command-line arguments per variant, after ``common_args``.
        set_egl_device: set ``EGL_DEVICE_ID`` to each slot's ``cuda_idx``.

    Returns:
        One :class:`RunResult` per run, in launch order; ``[r for r in results
        if not r.ok]`` are the failed runs.

    Raises:
        FileNotFoundError: ``script`` does not exist.
        ValueError, TypeError: bad arguments (e.g. ``runs_per_setting < 1``, a
            different number of ``variants``, ``log_dirs`` or ``runs_args``, an
            affinity code whose CPUs this process may not use).
    """
    if not os.path.isfile(script):
        raise FileNotFoundError(f"script {script!r} does not exist (relative to the working "
                                f"directory {os.getcwd()}).")
    n_run_slots, runs_per_setting, common, per_run = _check_inputs(
        affinity_code, experiment_title, runs_per_setting, variants, log_dirs, common_args,
        runs_args)
    exp_dir = _new_exp_dir(experiment_title)
    return _run_grid([sys.executable, os.path.abspath(script)], affinity_code, exp_dir,
                     runs_per_setting, list(variants), list(log_dirs), common, per_run,
                     n_run_slots, set_egl_device, stop_grace_s=STOP_GRACE_S)


def _child_env() -> dict:
    """Environment of a function run: this one, with the directory holding ``rlframe``
    first on PYTHONPATH unless it is a site-packages directory (where Python finds it)."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    site_dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    if package_root not in site_dirs:
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if package_root not in paths:
            env["PYTHONPATH"] = os.pathsep.join([package_root] + paths)
    return env


def run_experiments_fn(fn: Callable[..., Any], affinity_code: str, experiment_title: str,
                       runs_per_setting: int, variants: Sequence[dict],
                       log_dirs: Sequence[str], common_args: Sequence[Any] | None = None,
                       runs_args: Sequence[Sequence[Any]] | None = None,
                       set_egl_device: bool = False) -> list[RunResult]:
    """:func:`run_experiments` for a function: one isolated process per (variant, run_ID).

    For an experiment kept in one file: each run is a fresh Python process
    (``python -m rlframe.utils.launching.fn_child``, pinned to its slot like a
    script run) that calls::

        fn(slot_affinity_code: str, log_dir: str, run_ID: int, variant: dict,
           *common_args, *runs_args[i])

    with the variant already loaded and ``run_ID`` an int; the arguments keep
    their Python types. ``fn`` (a module-level function, a closure or a lambda)
    and its arguments are saved with cloudpickle to ``experiment_fn.pkl`` in each
    variant directory; a function defined in the launching script
    (``__main__``) is saved by value, one from an importable module by
    reference, which the child imports with the launcher's ``sys.path``. Guard
    the launching script's own work with ``if __name__ == "__main__":``.

    Everything else (slots, directories, launch logs, failure reports, Ctrl-C
    and SIGTERM, the returned list) is as in :func:`run_experiments`.

    Raises:
        TypeError: ``fn`` is not callable or cannot be pickled; bad variants.
        ValueError: as :func:`run_experiments`.
    """
    import cloudpickle

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}: {fn!r}.")
    n_run_slots, runs_per_setting, common, per_run = _check_inputs(
        affinity_code, experiment_title, runs_per_setting, variants, log_dirs, common_args,
        runs_args)
    launcher_path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    payloads = []
    for run_args in per_run:
        try:
            payloads.append(cloudpickle.dumps(dict(fn=fn, args=common + run_args)))
        except Exception as err:  # noqa: BLE001 - anything unpicklable: say which part.
            raise TypeError(f"run_experiments_fn: cannot pickle fn={fn!r} with its arguments "
                            f"({type(err).__name__}: {err}).") from err
    exp_dir = _new_exp_dir(experiment_title)
    for log_dir, payload in zip(log_dirs, payloads):
        variant_dir = os.path.join(exp_dir, log_dir)
        os.makedirs(variant_dir, exist_ok=True)
        with open(os.path.join(variant_dir, FN_FILE), "wb") as f:
            # The child puts the launcher's sys.path in place before loading fn.
            f.write(cloudpickle.dumps(dict(sys_path=launcher_path, payload=payload)))
    return _run_grid([sys.executable, "-m", FN_CHILD_MODULE], affinity_code, exp_dir,
                     runs_per_setting, list(variants), list(log_dirs), (), [()] * len(per_run),
                     n_run_slots, set_egl_device, env=_child_env(), stop_grace_s=STOP_GRACE_S)
