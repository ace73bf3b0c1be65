"""Worker process of the parallel samplers.

Each worker steps its slice of the batch's envs and writes into the shared
sample buffer. It waits for the master's go signal every iteration, reports
completion, and exits on ``quit``, on an error (after sending its traceback to
the master) or when the master process is gone.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

import torch

from rlframe.envs.vector import make_vec_env
from rlframe.utils.launching.pinning import set_cpu_affinity
from rlframe.utils.logging import logger
from rlframe.utils.processes import master_alive, report_error, start_child
from rlframe.utils.seed import set_seed

if TYPE_CHECKING:
    from multiprocessing.synchronize import Semaphore

POLL_S = 0.2  # How often a blocked process checks that its peers are alive.


def initialize_worker(rank: int, seed: int | None = None, cpu: int | Iterable[int] | None = None,
                      torch_threads: int | None = None) -> None:
    """Prepare a worker process: signals, CPU affinity, torch threads, seed.

    Ctrl-C goes to the whole process group; workers ignore it and let the
    master shut them down. On Linux a worker also dies with its master.
    """
    start_child(exit_when_orphaned=True)
    log_msg = f"Sampler rank {rank} initialized"
    if cpu is not None:
        pinned = set_cpu_affinity(cpu)
        if pinned is not None:
            log_msg += f", CPU affinity {pinned}"
    # One torch thread per worker by default: workers already run in parallel.
    torch.set_num_threads(1 if torch_threads is None else int(torch_threads))
    log_msg += f", Torch threads {torch.get_num_threads()}"
    if seed is not None:
        set_seed(seed)
        log_msg += f", Seed {seed}"
    logger.log(log_msg + ".")


def wait_for(semaphore: Semaphore, master_pid: int | None) -> None:
    """Acquire ``semaphore``, giving up (exit) if the master process is gone (or a
    zombie: it has ended)."""
    while not semaphore.acquire(timeout=POLL_S):
        if not master_alive(master_pid):
            os._exit(1)


def sampling_process(common_kwargs: dict, worker_kwargs: dict) -> None:
    """Entry point of a sampler worker (importable, so any start method works).

    Args:
        common_kwargs: shared by all workers: EnvCls, env_kwargs, agent, batch_T,
            CollectorCls, TrajInfoCls, traj_info_kwargs, ctrl, traj_infos_queue,
            max_decorrelation_steps, eval_* settings, master_pid, ...
        worker_kwargs: this worker's rank, seed, env_ranks, cpus, samples_np slice, ...
    """
    c, w = common_kwargs, worker_kwargs
    ctrl = c["ctrl"]
    venvs = []
    try:
        initialize_worker(w["rank"], w["seed"], w["cpus"], c["torch_threads"])
        envs = make_vec_env(c["env_backend"], c["EnvCls"], c["env_kwargs"], w["n_envs"])
        venvs.append(envs)
        envs.seed(w["env_seed"])
        collector = c["CollectorCls"](
            rank=w["rank"], envs=envs, samples_np=w["samples_np"], batch_T=c["batch_T"],
            TrajInfoCls=c["TrajInfoCls"], agent=c.get("agent"), sync=w.get("sync"),
            step_buffer_np=w.get("step_buffer_np"), global_B=c["global_B"],
            env_ranks=w["env_ranks"], traj_info_kwargs=c["traj_info_kwargs"])
        eval_collector = None
        if c["eval_n_envs"] > 0:
            eval_envs = make_vec_env(c["env_backend"], c["EnvCls"], c["eval_env_kwargs"],
                                     c["eval_n_envs"])
            venvs.append(eval_envs)
            eval_envs.seed(w["eval_env_seed"])
            eval_collector = c["eval_CollectorCls"](
                rank=w["rank"], envs=eval_envs, TrajInfoCls=c["TrajInfoCls"],
                traj_infos_queue=c["eval_traj_infos_queue"], max_T=c["eval_max_T"],
                agent=c.get("agent"), sync=w.get("sync"),
                step_buffer_np=w.get("eval_step_buffer_np"),
                traj_info_kwargs=c["traj_info_kwargs"], env_quota=w.get("eval_env_quota"))
        agent_inputs, traj_infos = collector.start_envs(c["max_decorrelation_steps"])
        collector.start_agent()
        ctrl.step_out.release()  # Ready.

        while True:
            collector.reset_if_needed(agent_inputs)
            wait_for(ctrl.step_in[w["rank"]], c["master_pid"])
            if ctrl.quit.value:
                break
            if ctrl.do_eval.value:
                eval_collector.collect_evaluation(ctrl.itr.value)
            else:
                agent_inputs, traj_infos, completed = collector.collect_batch(
                    agent_inputs, traj_infos, ctrl.itr.value)
                for info in completed:
                    c["traj_infos_queue"].put(info)
                ctrl.n_completed[w["rank"]] = len(completed)
            ctrl.step_out.release()
    except BaseException:  # noqa: BLE001 (report everything, then exit)
        report_error(c["error_queue"], str(w["rank"]))
        ctrl.step_out.release()  # Wake the master, which then finds the error.
    finally:
        for venv in venvs:
            try:
                venv.close()
            except Exception:  # noqa: BLE001 (closing is best effort)
                pass
