"""The catalogue of bad input: each case gives the public API or the ``rlframe`` command
line one bad thing and expects a clear, early error that names the parameter, the value
given and what is allowed.

Each ``Case(id, call, exc, fragments)`` holds a zero-argument ``call`` that builds the bad
thing (a constructor, a runner, a ``logger_context``, ``main([...])`` of ``rlframe.cli``), the
exception type it must raise (``CLI`` for a command line: exit status 2 and one line on
stderr; ``USAGE`` for an argparse usage error: status 2, the usage, then one error line) and
the fragments that message must contain (plain substrings, no regexes). Cases run in an
empty working directory and none trains: a runner is built but never trained (``rlframe
resume`` of a broken snapshot fails at startup, before any iteration). No case may leave a
run behind (a debug.log); cases marked ``no_data`` also check that no ``data/`` appeared.
Cases that need ale-py, ray or a machine without a GPU are skipped elsewhere.

To add a case: run the bad call once, copy the fragments of its real message that name the
parameter and the value (e.g. ``"minibatches=64"``) into a new ``Case`` in the table of its
area, and run ``python -m pytest tests/test_bad_inputs.py -q``.
"""
from __future__ import annotations

import os
import pickle
import sys
from unittest import mock
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import torch
from gymnasium import spaces as gym_spaces

from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.dqn.dqn_agent import DqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.agents.pg.mujoco import MujocoFfAgent
from rlframe.agents.qpg.sac_agent import SacAgent
from rlframe.agents.qpg.ddpg_agent import DdpgAgent
from rlframe.algos.dqn.cat_dqn import CategoricalDQN
from rlframe.algos.dqn.dqn import DQN
from rlframe.algos.pg.a2c import A2C
from rlframe.algos.pg.ppo import PPO
from rlframe.algos.qpg.ddpg import DDPG
from rlframe.algos.qpg.sac import SAC
from rlframe.algos.qpg.td3 import TD3
from rlframe.cli import main
from rlframe.distributions.epsilon_greedy import EpsilonGreedy
from rlframe.envs.gym import GymEnvWrapper, make as gym_make
from rlframe.runners.async_rl import AsyncRl, AsyncRlEval, throttle_schedule
from rlframe.runners.minibatch_rl import MinibatchRl, MinibatchRlEval
from rlframe.runners.sync_rl import SyncRl
from rlframe.samplers.async_.cpu_sampler import AsyncCpuSampler
from rlframe.samplers.async_.serial_sampler import AsyncSerialSampler
from rlframe.samplers.parallel.cpu.sampler import CpuSampler
from rlframe.samplers.parallel.gpu.alternating_sampler import AlternatingSampler
from rlframe.samplers.parallel.gpu.sampler import GpuSampler
from rlframe.samplers.serial.sampler import SerialSampler
from rlframe.utils.checkpoint import SnapshotError
from rlframe.utils.launching.affinity import (affinity_from_code, decode_affinity,
                                             encode_affinity, make_affinity)
from rlframe.utils.loading import load_agent
from rlframe.utils.logging import logger
from rlframe.utils.logging.context import logger_context
from test_env_model_contracts import (SCRIPTED_ID, UINT8_BOX, CatDqnLogitsModel, GaussianModel,
                                      OldApiEnv, PgModel, PiOnlyModel, ScriptedEnv,
                                      UserGaussianAgent)
from test_nothing_silent import ThreeActionModel, make_dict_obs_env
from test_safe_resume import Settings

CLI = "CLI"  # ``exc`` of a command line case: exit status 2, one line on stderr.
USAGE = "USAGE"  # ``exc`` of an argparse usage error: status 2, the usage, then one error line.
try:
    import ale_py  # noqa: F401
    NO_ALE = ()
except ImportError:
    NO_ALE = (pytest.mark.skip(reason="needs ale-py"),)
try:
    import ray  # noqa: F401
    NO_RAY = ()
except ImportError:
    NO_RAY = (pytest.mark.skip(reason="needs ray"),)
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
CARTPOLE = dict(id="CartPole-v1")
ASYNC_AFFINITY = dict(run_slot=0, n_cpu_core=2, n_gpu=0, async_sample=True)


class Case(NamedTuple):
    id: str
    call: Callable[[], Any]
    exc: type[BaseException] | str
    fragments: tuple[str, ...]
    no_data: bool = False  # Also check that no data/ directory appeared.
    marks: tuple = ()


# ------------------------------------------------------------------------- builders
def serial(batch_T: Any = 16, batch_B: Any = 2, **kwargs: Any) -> SerialSampler:
    args = dict(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=batch_T, batch_B=batch_B)
    args.update(kwargs)
    return SerialSampler(**args)


def ppo_runner(RunnerCls: type = MinibatchRl, algo: Any = None, agent: Any = None,
               sampler: Any = None, **kwargs: Any) -> MinibatchRl:
    args = dict(algo=algo or PPO(), agent=agent or CategoricalPgAgent(),
                sampler=sampler or serial(), n_steps=64)
    args.update(kwargs)
    return RunnerCls(**args)


def async_runner(RunnerCls: type = AsyncRl, **kwargs: Any) -> AsyncRl:
    args = dict(algo=DQN(), agent=DqnAgent(), n_steps=1e4,
                sampler=AsyncSerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4,
                                           batch_B=2),
                affinity=make_affinity(**ASYNC_AFFINITY))
    args.update(kwargs)
    return RunnerCls(**args)


def async_affinity_with_workers(workers_cpus: list) -> dict:
    affinity = make_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=2, async_sample=True)
    affinity["sampler"]["workers_cpus"] = workers_cpus
    return affinity


def two_optimizer_ranks(first: dict, second: dict, drop_cpus: bool = False) -> dict:
    affinity = make_affinity(**ASYNC_AFFINITY)
    rank = affinity["optimizer"][0]
    affinity["optimizer"] = [{**rank, **first}, {**rank, **second}]
    if drop_cpus:
        del affinity["optimizer"][1]["cpus"]
    return affinity


def fork_after_ray() -> None:
    """``AsyncRl(start_method='fork')`` with an AsyncRaySampler in a process that used Ray
    (as recorded by the Ray samplers): refused at startup, before any process starts."""
    import rlframe.samplers.ray.cluster as ray_cluster
    affinity = make_affinity(**ASYNC_AFFINITY)
    affinity["sampler"].pop("workers_cpus")
    with mock.patch.object(ray_cluster, "_RAY_USED_BY_PID", os.getpid()):
        async_runner(sampler=ray_sampler("AsyncRaySampler", batch_B=2, n_workers=1),
                     affinity=affinity, n_steps=64, start_method="fork").train()


def sync_runner(**kwargs: Any) -> SyncRl:
    args = dict(algo=PPO(), agent=CategoricalPgAgent(), sampler=serial(batch_B=4), n_steps=1e4,
                affinity=[dict(master_torch_threads=1, workers_cpus=[0]),
                          dict(master_torch_threads=1, workers_cpus=[0])])
    args.update(kwargs)
    return SyncRl(**args)


def with_context(**kwargs: Any) -> None:
    args = dict(log_dir="exp", run_ID=0, name="bad")
    args.update(kwargs)
    with logger_context(**args):
        pass


def scripted(bad: Any, good: Any = None, space: Any = UINT8_BOX, bad_from: int = 0) -> Any:
    return GymEnvWrapper(ScriptedEnv(space, bad if good is None else good, bad, bad_from))


def scripted_step(bad: Any, good: Any, space: Any = UINT8_BOX) -> Any:
    env = GymEnvWrapper(ScriptedEnv(space, good, bad, bad_from=4))
    env.reset()
    env.step(0)
    return env.step(0)


def write(path: str, data: bytes | str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


TRAIN_PARAMS = '{"algo": "ppo", "env_id": "CartPole-v1", "n_steps": 64, "batch_T": 8, ' \
               '"batch_B": 2}'  # A params.json as `rlframe train` writes it, in short.


def broken_snapshot(kind: str) -> str:
    """A run directory ``broken`` (with a params.json) whose params.pkl is broken in one of
    five ways."""
    path = os.path.join("broken", "params.pkl")
    write(os.path.join("broken", "params.json"), TRAIN_PARAMS)
    if kind == "garbage":
        write(path, bytes(range(256)) * 3)
    elif kind == "empty":
        write(path, b"")
    elif kind == "truncated":
        torch.save(dict(itr=7, agent_state_dict={"w": torch.zeros(64, 64)}), path)
        with open(path, "rb") as f:
            data = f.read()
        write(path, data[:len(data) // 2])
    elif kind == "other_pickle":
        write(path, pickle.dumps(Settings()))
    elif kind == "other_object":
        torch.save(dict(itr=7, agent_state_dict=Settings()), path)
    return "broken"


def resume_with_params_json(text: str) -> int:
    write(os.path.join("run", "params.json"), text)
    torch.save(dict(itr=0), os.path.join("run", "params.pkl"))
    return main(["resume", "run"])


def atari_env(**kwargs: Any) -> Any:
    from rlframe.envs.atari import AtariEnv
    return AtariEnv(**kwargs)


def ray_sampler(SamplerCls: str = "RaySampler", **kwargs: Any) -> Any:
    from rlframe.samplers import ray as ray_samplers  # Builds no Ray: the checks come first.
    args = dict(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=4)
    args.update(kwargs)
    return getattr(ray_samplers, SamplerCls)(**args)


def train(*argv: str) -> int:
    return main(["train", *argv])


def ppo_train(*argv: str) -> int:
    return train("ppo", "CartPole-v1", "--n-steps", "64", "--log-dir", "runs", *argv)


def without_module(name: str, fn: Callable[[], Any]) -> Any:
    """``fn()`` with the package ``name`` made unimportable, as if not installed.

    Only that entry of ``sys.modules`` is restored afterwards: modules that ``fn``
    imported for the first time (torch's lazily imported ``torch._dynamo``, say) stay,
    where restoring the whole dict would drop them and leave their importers holding
    a copy that a later import no longer finds.
    """
    missing = object()
    saved = sys.modules.get(name, missing)
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        return fn()
    finally:
        if saved is missing:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


# ------------------------------------------------------------------------- algorithms
ALGORITHMS = [
    Case("ppo_minibatches_0", lambda: PPO(minibatches=0), ValueError,
         ("minibatches must be a positive integer, got 0",)),
    Case("ppo_discount_1.5", lambda: PPO(discount=1.5), ValueError,
         ("discount must lie in [0.0, 1.0], got 1.5",)),
    Case("ppo_learning_rate_str", lambda: PPO(learning_rate="1e-3"), TypeError,
         ("learning_rate must be a number, got '1e-3'",)),
    Case("ppo_value_loss_coeff_none", lambda: PPO(value_loss_coeff=None), TypeError,
         ("value_loss_coeff must be a number, got None",)),
    Case("ppo_optim_kwargs_typo", lambda: PPO(optim_kwargs=dict(betas2=0.9)), TypeError,
         ("optim_kwargs holds 'betas2'", "OptimCls=torch.optim.Adam does not take",
          "Did you mean 'betas'?")),
    Case("a2c_optim_kwargs_lr", lambda: A2C(optim_kwargs=dict(lr=0.1)), TypeError,
         ("optim_kwargs holds 'lr'", "OptimCls=torch.optim.Adam", "set learning_rate instead")),
    Case("dqn_optim_cls_module", lambda: DQN(OptimCls=torch.nn.Linear), TypeError,
         ("OptimCls must be a torch.optim.Optimizer subclass",
          "got the class torch.nn.modules.linear.Linear")),
    Case("sac_optim_cls_str", lambda: SAC(OptimCls="torch.optim.Adam"), TypeError,
         ("OptimCls must be a torch.optim.Optimizer subclass", "got 'torch.optim.Adam' (str)")),
    Case("ddpg_optim_kwargs_typo", lambda: DDPG(optim_kwargs=dict(betas2=0.9)), TypeError,
         ("optim_kwargs holds 'betas2'", "Did you mean 'betas'?")),
    Case("dqn_replay_smaller_than_batch", lambda: DQN(replay_size=16, batch_size=32), ValueError,
         ("replay_size=16 is smaller than one batch (batch_size=32)",)),
    Case("dqn_n_step_return_0", lambda: DQN(n_step_return=0), ValueError,
         ("n_step_return must be a positive integer, got 0",)),
    Case("dqn_target_update_tau_0", lambda: DQN(target_update_tau=0), ValueError,
         ("target_update_tau must lie in (0.0, 1.0], got 0.0",)),
    Case("catdqn_V_min_above_V_max", lambda: CategoricalDQN(V_min=10, V_max=-10), ValueError,
         ("V_min must be below V_max, got V_min=10, V_max=-10",)),
    Case("sac_discount_2", lambda: SAC(discount=2), ValueError,
         ("discount must lie in [0.0, 1.0], got 2.0",)),
    Case("ddpg_batch_size_0", lambda: DDPG(batch_size=0), ValueError,
         ("batch_size must be a positive integer, got 0",)),
    Case("a2c_learning_rate_negative", lambda: A2C(learning_rate=-1.0), ValueError,
         ("learning_rate must lie in (0.0, inf], got -1.0",)),
    Case("ppo_epochs_0", lambda: PPO(epochs=0), ValueError,
         ("epochs must be a positive integer, got 0",)),
    Case("ppo_ratio_clip_negative", lambda: PPO(ratio_clip=-1), ValueError,
         ("ratio_clip must lie in (0.0, inf], got -1.0",)),
    Case("a2c_gae_lambda_2", lambda: A2C(gae_lambda=2), ValueError,
         ("gae_lambda must lie in [0.0, 1.0], got 2.0",)),
    Case("ppo_clip_grad_norm_str", lambda: PPO(clip_grad_norm="big"), TypeError,
         ("clip_grad_norm must be a number, got 'big' (str)",)),
    Case("ppo_optim_kwargs_list", lambda: PPO(optim_kwargs=[1]), TypeError,
         ("optim_kwargs must be a dict of keyword arguments for OptimCls=torch.optim.Adam",
          "got list: [1]")),
    Case("dqn_replay_ratio_negative", lambda: DQN(replay_ratio=-1), ValueError,
         ("replay_ratio must lie in (0.0, inf], got -1.0",)),
    Case("dqn_batch_size_str", lambda: DQN(batch_size="32"), TypeError,
         ("batch_size must be an integer, got '32' (str)",)),
    Case("dqn_min_steps_learn_negative", lambda: DQN(min_steps_learn=-1), ValueError,
         ("min_steps_learn must be an integer >= 0, got -1",)),
    Case("dqn_delta_clip_negative", lambda: DQN(delta_clip=-1), ValueError,
         ("delta_clip must be positive or None, got -1",)),
    Case("dqn_target_update_interval_0", lambda: DQN(target_update_interval=0), ValueError,
         ("target_update_interval must be a positive integer, got 0",)),
    Case("dqn_pri_beta_init_5", lambda: DQN(pri_beta_init=5, prioritized_replay=True),
         ValueError, ("pri_beta_init must lie in [0.0, 1.0], got 5.0",)),
    Case("sac_learning_rate_str", lambda: SAC(learning_rate="x"), TypeError,
         ("learning_rate must be a number, got 'x' (str)",)),
    Case("sac_target_update_tau_2", lambda: SAC(target_update_tau=2), ValueError,
         ("target_update_tau must lie in (0.0, 1.0], got 2.0",)),
    Case("throttle_replay_ratio_0", lambda: throttle_schedule(0, 32, 1, 40, 0), ValueError,
         ("replay_ratio must be positive", "got 0")),
]

# ------------------------------------------------------------------------- agents and models
AGENTS = [
    Case("model_kwargs_list", lambda: CategoricalPgAgent(model_kwargs=[64]), TypeError,
         ("CategoricalPgAgent: model_kwargs must be a dict", "got list: [64]")),
    Case("model_kwargs_typo",
         lambda: ppo_runner(agent=CategoricalPgAgent(model_kwargs=dict(hidden_size=[8]))),
         TypeError, ("model_kwargs holds 'hidden_size'",
                     "ModelCls=CategoricalPgMlpModel does not take",
                     "Did you mean 'hidden_sizes'?"), no_data=True),
    Case("initial_model_state_dict_not_fitting",
         lambda: ppo_runner(agent=CategoricalPgAgent(
             initial_model_state_dict={"nope": torch.zeros(1)})),
         ValueError, ("initial_model_state_dict does not fit", "CategoricalPgMlpModel",
                      "unexpected keys: nope"), no_data=True),
    Case("dqn_initial_model_state_dict_not_fitting",
         lambda: ppo_runner(algo=DQN(), agent=DqnAgent(
             initial_model_state_dict={"nope": torch.zeros(1)})),
         ValueError, ("initial_model_state_dict does not fit DqnAgent's model DqnMlpModel",
                      "unexpected keys: nope"), no_data=True),
    Case("ddpg_initial_q_model_state_dict_not_fitting",
         lambda: ppo_runner(algo=DDPG(), agent=DdpgAgent(
             initial_q_model_state_dict={"nope": torch.zeros(1)}),
             sampler=serial(4, 2, env_kwargs=dict(id="Pendulum-v1"))),
         ValueError, ("initial_q_model_state_dict does not fit DdpgAgent's models",
                      "QofMuMlpModel"), no_data=True),
    Case("discrete_agent_on_box_actions",
         lambda: ppo_runner(sampler=serial(env_kwargs=dict(id="Pendulum-v1"))),
         TypeError, ("CategoricalPgAgent needs a discrete action space",
                     "Box(-2.0, 2.0, (1,), float32)"), no_data=True),
    Case("continuous_agent_on_discrete_actions", lambda: ppo_runner(agent=MujocoFfAgent()),
         TypeError, ("MujocoFfAgent needs a 1-D continuous (Box) action space",
                     "Discrete(2)"), no_data=True),
    Case("dqn_agent_on_box_actions",
         lambda: DqnAgent().initialize(gym_make("Pendulum-v1").spaces),
         TypeError, ("DqnAgent needs a discrete action space", "Box(-2.0, 2.0, (1,), float32)")),
    Case("pg_model_returns_logits",
         lambda: ppo_runner(agent=CategoricalPgAgent(ModelCls=PgModel,
                                                     model_kwargs=dict(logits=True))),
         ValueError, ("the model PgModel returned pi that is not a probability",
                      "torch.softmax(logits, dim=-1)"), no_data=True),
    Case("pg_model_returns_only_pi",
         lambda: ppo_runner(agent=CategoricalPgAgent(ModelCls=PiOnlyModel)),
         ValueError, ("the model PiOnlyModel returned one Tensor",), no_data=True),
    Case("pg_value_with_trailing_dim",
         lambda: ppo_runner(agent=CategoricalPgAgent(ModelCls=PgModel,
                                                     model_kwargs=dict(value_dim=True))),
         ValueError, ("returned value of shape (1, 1)", "value.squeeze(-1)"), no_data=True),
    Case("gaussian_value_with_trailing_dim",
         lambda: UserGaussianAgent(ModelCls=GaussianModel).check_model(
             gym_make("Pendulum-v1").spaces),
         ValueError,
         ("UserGaussianAgent: the model GaussianModel returned value of shape (1, 1)",)),
    Case("catdqn_model_returns_logits",
         lambda: CatDqnAgent(n_atoms=5, ModelCls=CatDqnLogitsModel).check_model(
             gym_make("CartPole-v1").spaces),
         ValueError, ("CatDqnLogitsModel returned p that is not a probability vector",)),
    Case("catdqn_n_atoms_disagree",
         lambda: CatDqnAgent(n_atoms=11, model_kwargs=dict(n_atoms=51)), ValueError,
         ("model_kwargs n_atoms=51 contradicts the agent's n_atoms=11",)),
    Case("model_with_other_action_count",
         lambda: ppo_runner(agent=CategoricalPgAgent(ModelCls=ThreeActionModel)),
         ValueError, ("ThreeActionModel returned action probabilities of shape (1, 3)",
                      "needs 2"), no_data=True),
    Case("dict_observations_to_mlp",
         lambda: ppo_runner(sampler=SerialSampler(EnvCls=make_dict_obs_env, env_kwargs={},
                                                  batch_T=4, batch_B=2)),
         TypeError, ("Dict/Tuple with fields ['pos', 'vel']", "FlattenObservation"), no_data=True),
    Case("catdqn_n_atoms_1", lambda: CatDqnAgent(n_atoms=1), ValueError,
         ("n_atoms must be an integer >= 2, got 1",)),
    Case("dqn_agent_eps_init_2", lambda: DqnAgent(eps_init=2), ValueError,
         ("eps_init must lie in [0, 1], got 2",)),
    Case("sac_agent_on_discrete_actions",
         lambda: ppo_runner(algo=SAC(), agent=SacAgent()), TypeError,
         ("SacAgent needs a continuous 1-D Box action space", "Discrete(2)"), no_data=True),
    Case("epsilon_out_of_range", lambda: EpsilonGreedy(epsilon=1.5, dim=2), ValueError,
         ("epsilon must lie in [0, 1], got 1.5",)),
    Case("epsilon_greedy_without_dim", lambda: EpsilonGreedy(epsilon=0.1), ValueError,
         ("EpsilonGreedy needs dim (the number of actions)",)),
]

# ------------------------------------------------------------------------- samplers
SAMPLERS = [
    Case("batch_T_0", lambda: serial(batch_T=0), ValueError,
         ("batch_T must be a positive integer, got 0",)),
    Case("batch_B_negative", lambda: serial(batch_B=-3), ValueError,
         ("batch_B must be a positive integer, got -3",)),
    Case("batch_T_fraction", lambda: serial(batch_T=2.5), ValueError,
         ("batch_T must be a whole number, got 2.5",)),
    Case("batch_B_str", lambda: serial(batch_B="4"), TypeError,
         ("batch_B must be an integer, got '4' (str)",)),
    Case("batch_T_none", lambda: serial(batch_T=None), TypeError,
         ("batch_T must be an integer, got None",)),
    Case("unknown_env_id", lambda: serial(env_kwargs=dict(id="CartPol-v1")), ValueError,
         ("env id='CartPol-v1' (parameter `id`)", "Close registered ids: CartPole-v1")),
    Case("eval_without_env_kwargs", lambda: serial(eval_n_envs=2, eval_max_steps=100),
         ValueError, ("eval_env_kwargs must be given with eval_n_envs=2",)),
    Case("eval_without_max_steps", lambda: serial(eval_n_envs=2, eval_env_kwargs=CARTPOLE),
         ValueError, ("eval_max_steps must be given with eval_n_envs=2",)),
    Case("max_decorrelation_steps_negative", lambda: serial(max_decorrelation_steps=-1),
         ValueError, ("max_decorrelation_steps must be an integer >= 0, got -1",)),
    Case("eval_max_trajectories_0",
         lambda: serial(eval_n_envs=1, eval_env_kwargs=CARTPOLE, eval_max_steps=10,
                        eval_max_trajectories=0),
         ValueError, ("eval_max_trajectories must be a positive integer, got 0",)),
    Case("eval_n_envs_negative", lambda: serial(eval_n_envs=-1), ValueError,
         ("eval_n_envs must be an integer >= 0, got -1",)),
    Case("env_kwargs_list", lambda: serial(env_kwargs=["CartPole-v1"]), TypeError,
         ("env_kwargs must be a dict, got list",)),
    Case("env_cls_not_callable", lambda: serial(EnvCls="CartPole-v1"), TypeError,
         ("EnvCls must be callable (an env class or factory), got 'CartPole-v1'",)),
    Case("cpu_sampler_start_method_unknown",
         lambda: CpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=2,
                            start_method="bogus"),
         ValueError,
         ("start_method must be one of ['fork', 'spawn', 'forkserver'] or None, got 'bogus'",)),
    Case("ray_batch_B_not_split_by_workers", lambda: ray_sampler(n_workers=3), ValueError,
         ("batch_B=4 must be a multiple of n_workers=3",), marks=NO_RAY),
    Case("ray_placement_strategy_unknown", lambda: ray_sampler(placement_strategy="ANYWHERE"),
         ValueError, ("placement_strategy='ANYWHERE' must be one of ('PACK', 'SPREAD'",),
         marks=NO_RAY),
    Case("ray_num_cpus_0", lambda: ray_sampler(num_cpus=0), ValueError,
         ("num_cpus=0 and num_gpus=0 must be >= 0, and one of them > 0",), marks=NO_RAY),
    Case("ray_max_worker_restarts_fraction", lambda: ray_sampler(max_worker_restarts=1.5),
         ValueError, ("max_worker_restarts must be a whole number, got 1.5",), marks=NO_RAY),
    Case("async_ray_max_batches_in_flight_str",
         lambda: ray_sampler("AsyncRaySampler", n_workers=2, max_batches_in_flight="2"),
         TypeError, ("max_batches_in_flight must be an integer, got '2' (str)",), marks=NO_RAY),
    Case("cpu_batch_B_not_split_by_workers",
         lambda: ppo_runner(sampler=CpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4,
                                               batch_B=6),
                            affinity=dict(workers_cpus=[0, 1, 0, 1])),
         ValueError, ("CpuSampler: batch_B=6 must be a multiple of the number of workers, 4",
                      "Use batch_B=8"), no_data=True),
    Case("gpu_batch_B_not_split_by_workers",
         lambda: ppo_runner(sampler=GpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4,
                                               batch_B=3),
                            affinity=dict(workers_cpus=[0, 1])),
         ValueError, ("GpuSampler: batch_B=3 must be a multiple of the number of workers, 2",
                      "Use batch_B=4"), no_data=True),
    Case("alternating_batch_B_not_split_by_workers",
         lambda: ppo_runner(sampler=AlternatingSampler(EnvCls=gym_make, env_kwargs=CARTPOLE,
                                                       batch_T=4, batch_B=6),
                            affinity=dict(workers_cpus=[0, 0, 1, 1])),
         ValueError,
         ("AlternatingSampler: batch_B=6 must be a multiple of the number of workers, 4",
          "workers_cpus with 2 or 6 entries"), no_data=True),
    Case("async_cpu_batch_B_not_split_by_workers",
         lambda: async_runner(sampler=AsyncCpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE,
                                                      batch_T=4, batch_B=3),
                              affinity=async_affinity_with_workers([0, 1])),
         ValueError, ("AsyncCpuSampler: batch_B=3 must be a multiple of the number of workers, 2",
                      "affinity['sampler']['workers_cpus']", "Use batch_B=4"), no_data=True),
    Case("cpu_sampler_without_workers_cpus",
         lambda: ppo_runner(sampler=CpuSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4,
                                               batch_B=2)),
         ValueError, ("affinity['workers_cpus'] is required", "got {}"), no_data=True),
    Case("lambda_env_cls_under_spawn",
         lambda: CpuSampler(EnvCls=lambda **kwargs: gym_make(**kwargs), env_kwargs=CARTPOLE,
                            batch_T=4, batch_B=2, start_method="spawn"),
         TypeError, ("cannot be sent to worker processes started with 'spawn'",
                     "module level")),
    Case("ppo_minibatches_above_batch",
         lambda: ppo_runner(algo=PPO(minibatches=64)), ValueError,
         ("PPO minibatches=64 exceeds batch_T * batch_B = 16 * 2 = 32 samples",
          "minibatches <= 32"), no_data=True),
    Case("recurrent_ppo_minibatches_above_batch_B",
         lambda: ppo_runner(algo=PPO(minibatches=4), agent=RecurrentCategoricalPgAgent()),
         ValueError, ("PPO minibatches=4 exceeds batch_B=2", "minibatches <= 2"), no_data=True),
    Case("async_db_idx_2",
         lambda: AsyncSerialSampler(EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4,
                                    batch_B=2).check_db_idx(2),
         ValueError, ("db_idx must be 0 or 1", "got 2")),
]

# ------------------------------------------------------------------------- runners, affinity
RUNNERS = [
    Case("dqn_given_a_pg_agent", lambda: ppo_runner(algo=DQN(), agent=CategoricalPgAgent()),
         TypeError, ("DQN needs a Q-learning agent", "got CategoricalPgAgent"), no_data=True),
    Case("ppo_given_a_dqn_agent", lambda: ppo_runner(agent=DqnAgent()), TypeError,
         ("PPO needs a policy-gradient agent", "got DqnAgent"), no_data=True),
    Case("catdqn_given_a_dqn_agent",
         lambda: ppo_runner(algo=CategoricalDQN(), agent=DqnAgent()), TypeError,
         ("CategoricalDQN needs a distributional agent", "got DqnAgent"), no_data=True),
    Case("td3_given_a_ddpg_agent",
         lambda: ppo_runner(algo=TD3(), agent=DdpgAgent(), sampler=serial(
             batch_T=1, batch_B=1, env_kwargs=dict(id="Pendulum-v1"))), TypeError,
         ("TD3 needs a Td3Agent", "got DdpgAgent"), no_data=True),
    Case("sac_given_a_ddpg_agent",
         lambda: ppo_runner(algo=SAC(), agent=DdpgAgent(), sampler=serial(
             batch_T=1, batch_B=1, env_kwargs=dict(id="Pendulum-v1"))), TypeError,
         ("SAC needs a SacAgent", "got DdpgAgent"), no_data=True),
    Case("algo_none", lambda: MinibatchRl(algo=None, agent=CategoricalPgAgent(),
                                          sampler=serial(), n_steps=64), TypeError,
         ("MinibatchRl needs algo, got None",), no_data=True),
    Case("agent_none", lambda: MinibatchRl(algo=PPO(), agent=None, sampler=serial(),
                                           n_steps=64), TypeError,
         ("MinibatchRl needs agent, got None",), no_data=True),
    Case("env_kwargs_none", lambda: ppo_runner(sampler=serial(env_kwargs=None)), TypeError,
         ("SerialSampler: EnvCls=make could not be called with env_kwargs={}",
          "missing 1 required positional argument: 'id'"), no_data=True),
    Case("n_steps_0", lambda: ppo_runner(n_steps=0), ValueError,
         ("n_steps must be a positive integer, got 0",), no_data=True),
    Case("n_steps_negative", lambda: ppo_runner(n_steps=-5), ValueError,
         ("n_steps must be a positive integer, got -5",), no_data=True),
    Case("n_steps_fraction", lambda: ppo_runner(n_steps=1.5), ValueError,
         ("n_steps must be a whole number, got 1.5",), no_data=True),
    Case("n_steps_str", lambda: ppo_runner(n_steps="100"), TypeError,
         ("n_steps must be an integer, got '100' (str)",), no_data=True),
    Case("log_interval_steps_0", lambda: ppo_runner(log_interval_steps=0), ValueError,
         ("log_interval_steps must be a positive integer, got 0",), no_data=True),
    Case("log_interval_steps_str", lambda: ppo_runner(log_interval_steps="x"), TypeError,
         ("log_interval_steps must be an integer, got 'x' (str)",), no_data=True),
    Case("seed_str", lambda: ppo_runner(seed="x"), TypeError,
         ("seed must be an integer, got 'x' (str)",), no_data=True),
    Case("callbacks_not_a_list", lambda: ppo_runner(callbacks=3), TypeError,
         ("callbacks must be a list of callbacks", "got 3"), no_data=True),
    Case("affinity_master_torch_threads_0",
         lambda: ppo_runner(affinity=dict(master_torch_threads=0)), ValueError,
         ("affinity['master_torch_threads'] must be a positive integer, got 0",), no_data=True),
    Case("affinity_list", lambda: ppo_runner(affinity=[0, 1]), TypeError,
         ("affinity must be a dict", "got list: [0, 1]"), no_data=True),
    Case("affinity_unusable_cpu", lambda: ppo_runner(affinity=dict(master_cpus=[9999])),
         ValueError, ("affinity['master_cpus']=[9999]", "allowed CPU ids"), no_data=True),
    Case("affinity_cuda_idx_without_gpu", lambda: ppo_runner(affinity=dict(cuda_idx=0)),
         ValueError, ("affinity['cuda_idx']=0 asks for a GPU", "use cuda_idx=None"), no_data=True,
         marks=(NO_CUDA,)),
    Case("eval_runner_without_eval_envs", lambda: ppo_runner(MinibatchRlEval), ValueError,
         ("eval_n_envs=0",), no_data=True),
    Case("sync_affinity_not_a_list", lambda: sync_runner(affinity=dict(master_torch_threads=1)),
         TypeError, ("affinity must be a list of affinity dicts, one per rank",
                     "got {'master_torch_threads': 1}"), no_data=True),
    Case("sync_affinity_keys_differ",
         lambda: sync_runner(affinity=[dict(master_torch_threads=1, workers_cpus=[0]),
                                       dict(master_torch_threads=1)]),
         ValueError, ("affinity[1] has keys", "missing in affinity[1]: ['workers_cpus']"),
         no_data=True),
    Case("sync_batch_B_over_ranks",
         lambda: sync_runner(sampler=serial(batch_B=5), batch_scaling="strong"), ValueError,
         ("batch_B=5 over world_size=2 ranks: it must be a multiple of 2",), no_data=True),
    Case("sync_dqn_batch_size_over_ranks",
         lambda: sync_runner(algo=DQN(batch_size=33, replay_size=1000), agent=DqnAgent(),
                             batch_scaling="strong"),
         ValueError, ("DQN's batch_size=33 over world_size=2",), no_data=True),
    Case("sync_batch_scaling_unknown", lambda: sync_runner(batch_scaling="linear"), ValueError,
         ("batch_scaling must be one of ('weak', 'strong'), got 'linear'",), no_data=True),
    Case("sync_cuda_idx_on_some_ranks",
         lambda: sync_runner(affinity=[dict(cuda_idx=None), dict(cuda_idx=1)]), ValueError,
         ("either every rank has a cuda_idx or none has", "cuda_idx [None, 1]"), no_data=True),
    Case("sync_start_method_thread", lambda: sync_runner(start_method="thread"), ValueError,
         ("start_method must be one of ['fork', 'spawn', 'forkserver'] or None, got 'thread'",),
         no_data=True),
    Case("async_affinity_not_async", lambda: async_runner(affinity=dict(master_cpus=[0])),
         TypeError, ("AsyncRl: affinity must be an asynchronous affinity dict",
                     "got {'master_cpus': [0]}"), no_data=True),
    Case("async_optimizer_rank_without_cpus",
         lambda: async_runner(affinity=two_optimizer_ranks({}, {}, drop_cpus=True)),
         ValueError, ("affinity['optimizer'][1]['cpus'] is required",), no_data=True),
    Case("async_cuda_idx_on_some_ranks",
         lambda: async_runner(affinity=two_optimizer_ranks({}, dict(cuda_idx=0))), ValueError,
         ("every optimizer rank has a cuda_idx or none has", "cuda_idx [None, 0]"), no_data=True),
    Case("async_ranks_share_a_gpu",
         lambda: async_runner(affinity=two_optimizer_ranks(dict(cuda_idx=0), dict(cuda_idx=0))),
         ValueError, ("a GPU of its own", "cuda_idx [0, 0]"), no_data=True),
    Case("async_pg_timeout_0",
         lambda: async_runner(affinity=two_optimizer_ranks({}, {}), pg_timeout=0), ValueError,
         ("pg_timeout must be a positive number of seconds, got 0",), no_data=True),
    Case("async_runner_with_sync_sampler", lambda: async_runner(sampler=serial(4, 2)), TypeError,
         ("AsyncRl needs an asynchronous sampler",
          "SerialSampler has no async_initialize()"), no_data=True),
    Case("async_start_method_thread", lambda: async_runner(start_method="thread"), ValueError,
         ("start_method must be one of ['fork', 'spawn', 'forkserver'] or None, got 'thread'",),
         no_data=True),
    Case("async_eval_without_eval_envs", lambda: async_runner(AsyncRlEval), ValueError,
         ("eval_n_envs=0",), no_data=True),
    Case("async_sampler_in_minibatch_runner",
         lambda: ppo_runner(algo=DQN(), agent=DqnAgent(), sampler=AsyncSerialSampler(
             EnvCls=gym_make, env_kwargs=CARTPOLE, batch_T=4, batch_B=2)),
         TypeError, ("sampler=AsyncSerialSampler is asynchronous",
                     "use AsyncRl or AsyncRlEval"), no_data=True),
    Case("async_runner_with_ppo",
         lambda: async_runner(algo=PPO(), agent=CategoricalPgAgent()), TypeError,
         ("algo=PPO lacks", "run them with MinibatchRl or SyncRl"), no_data=True),
    Case("async_affinity_sampler_not_a_dict",
         lambda: async_runner(affinity=dict(optimizer=[dict(cpus=(0,))])), ValueError,
         ("affinity['sampler'] must be a dict", "got None"), no_data=True),
    Case("async_sampler_lead_steps_0", lambda: async_runner(sampler_lead_steps=0), ValueError,
         ("sampler_lead_steps must be a positive", "got 0"), no_data=True),
    Case("async_fork_after_ray", fork_after_ray, RuntimeError,
         ("AsyncRl: start_method='fork' cannot work here", "used Ray",
          "Pass start_method='forkserver' or 'spawn'"), no_data=True,
         marks=NO_RAY + (pytest.mark.filterwarnings("ignore:.*outside logger_context"),)),
    Case("make_affinity_async_on_one_core",
         lambda: make_affinity(run_slot=0, n_cpu_core=1, n_gpu=0, async_sample=True),
         ValueError, ("needs at least 2 cores", "got n_cpu_core (cpu)=1")),
    Case("encode_affinity_n_cpu_core_0", lambda: encode_affinity(n_cpu_core=0), ValueError,
         ("n_cpu_core must be a positive integer, got 0",)),
    Case("encode_affinity_n_cpu_core_str", lambda: encode_affinity(n_cpu_core="4"), TypeError,
         ("n_cpu_core must be an integer, got '4' (str)",)),
    Case("encode_affinity_contexts_without_gpu",
         lambda: encode_affinity(n_cpu_core=4, n_gpu=0, contexts_per_gpu=2), ValueError,
         ("contexts_per_gpu=2 needs n_gpu > 0, got n_gpu=0",)),
    Case("decode_affinity_unknown_abbreviation", lambda: decode_affinity("2cpu_0gpu_4xyz"),
         ValueError, ("abbreviation 'xyz' in token '4xyz' of '2cpu_0gpu_4xyz'",
                      "known abbreviations")),
    Case("affinity_from_code_run_slot_out_of_range",
         lambda: affinity_from_code("2slt_2cpu_0gpu_1cpr_0hto"), ValueError,
         ("run_slot=2 is out of range", "2 run slot(s), numbered 0..1")),
]

# ------------------------------------------------------------------------- envs
ENVS = [
    Case("gym_make_unknown_id", lambda: gym_make("CartPol-v1"), ValueError,
         ("env id='CartPol-v1' (parameter `id`)", "Close registered ids: CartPole-v1")),
    Case("atari_game_typo", lambda: atari_env(game="space_invader"), ValueError,
         ("AtariEnv: unknown game='space_invader'", "Close matches: space_invaders"),
         marks=NO_ALE),
    Case("atari_unknown_game", lambda: atari_env(game="no_such_game"), ValueError,
         ("AtariEnv: unknown game='no_such_game'", "game_names()"), marks=NO_ALE),
    Case("atari_frame_skip_0", lambda: atari_env(frame_skip=0), ValueError,
         ("AtariEnv: frame_skip must be an int >= 1, got frame_skip=0",), marks=NO_ALE),
    Case("atari_frame_skip_fraction", lambda: atari_env(frame_skip=2.5), ValueError,
         ("AtariEnv: frame_skip must be an int >= 1, got frame_skip=2.5",), marks=NO_ALE),
    Case("atari_num_img_obs_0", lambda: atari_env(num_img_obs=0), ValueError,
         ("AtariEnv: num_img_obs must be an int >= 1, got num_img_obs=0",), marks=NO_ALE),
    Case("atari_horizon_0", lambda: atari_env(horizon=0), ValueError,
         ("AtariEnv: horizon must be an int >= 1, got horizon=0",), marks=NO_ALE),
    Case("atari_max_start_noops_negative", lambda: atari_env(max_start_noops=-1), ValueError,
         ("AtariEnv: max_start_noops must be an int >= 0, got max_start_noops=-1",),
         marks=NO_ALE),
    Case("atari_repeat_action_probability_2",
         lambda: atari_env(repeat_action_probability=2.), ValueError,
         ("repeat_action_probability must lie in [0, 1], got repeat_action_probability=2.0",),
         marks=NO_ALE),
    Case("atari_backend_unknown", lambda: atari_env(backend="gym"), ValueError,
         ("AtariEnv: backend must be one of ('ale_py', 'atari_py'), got backend='gym'",),
         marks=NO_ALE),
    Case("atari_screen_not_210x160", lambda: atari_env(game="adventure"), ValueError,
         ("AtariEnv: game='adventure' has a 250x160 screen", "needs 210x160"), marks=NO_ALE),
    Case("lossy_float_observation_in_uint8_space",
         lambda: scripted(np.full((4, 4), 0.5, np.float32)), ValueError,
         ("env ScriptedEnv", "from reset()", "dtype float32 (values in [0.5, 0.5])",
          "Box(0, 255, (4, 4), uint8) has dtype uint8", "(e.g. 0.5 -> 0)")),
    Case("out_of_range_integer_observation", lambda: scripted(np.full((4, 4), 300, np.int64)),
         ValueError, ("dtype int64 (values in [300, 300])", "(e.g. 300 -> 44)")),
    Case("lossy_cast_in_gym_make",
         lambda: gym_make(SCRIPTED_ID, space=UINT8_BOX, good=np.full((4, 4), 0.5, np.float32),
                          bad=np.full((4, 4), 0.5, np.float32)),
         ValueError, (f"env id='{SCRIPTED_ID}'", "has dtype float32"),
         marks=(pytest.mark.filterwarnings("ignore::UserWarning"),)),
    Case("lossy_cast_at_a_step",
         lambda: scripted_step(np.array([0.1, 1.0, 1e39]), np.array([0.1, -1 / 3, 1e-40]),
                               gym_spaces.Box(-np.inf, np.inf, (3,), np.float32)),
         ValueError, ("from step()", "dtype float64", "1e+39 -> inf")),
    Case("lossy_dict_observation_names_the_key",
         lambda: scripted({"image": np.full((4, 4), 0.5, np.float32), "pos": np.zeros(2)},
                          space=gym_spaces.Dict({"image": UINT8_BOX,
                                                 "pos": gym_spaces.Box(-1, 1, (2,))})),
         ValueError, ("from reset()['image'] has dtype float32",)),
    Case("observation_shape_mismatch",
         lambda: scripted(np.zeros(3, np.float32),
                          space=gym_spaces.Box(-1, 1, (4,), np.float32)),
         ValueError, ("the observation from reset() has shape (3,)", "has shape (4,)")),
    Case("old_gym_reset", lambda: GymEnvWrapper(OldApiEnv()), TypeError,
         ("env OldApiEnv: reset() returned an ndarray of shape (4,)",
          "reset() returns (obs, info)")),
    Case("old_gym_step", lambda: GymEnvWrapper(OldApiEnv(new_reset=True)), TypeError,
         ("env OldApiEnv: step() returned a tuple of 4 values (obs, reward, done, info)",
          "five values (obs, reward, terminated, truncated, info)")),
    Case("runner_refuses_lossy_env",
         lambda: ppo_runner(sampler=SerialSampler(EnvCls=GymEnvWrapper, env_kwargs=dict(
             env=ScriptedEnv(gym_spaces.Box(0, 255, (4,), np.uint8),
                             np.full(4, 0.25, np.float32), np.full(4, 0.25, np.float32))),
             batch_T=4, batch_B=2)),
         ValueError, ("dtype float32 (values in [0.25, 0.25])",
                      "Box(0, 255, (4,), uint8)",
                      "0.25 -> 0"), no_data=True),
]

# ------------------------------------------------------------------------- logging, resume
LOGGING = [
    Case("log_dir_none", lambda: logger_context(None, 0, "x").__enter__(), TypeError,
         ("logger_context: log_dir must be a path (str), got NoneType: None",), no_data=True),
    Case("log_params_list", lambda: with_context(log_params=["lr", 0.1]), TypeError,
         ("log_params must be a dict", "got a list: ['lr', 0.1]"), no_data=True),
    Case("log_params_str", lambda: with_context(log_params="lr=0.1"), TypeError,
         ("log_params must be a dict", "got a str: 'lr=0.1'"), no_data=True),
    Case("if_exists_unknown", lambda: with_context(if_exists="overwrite"), ValueError,
         ("if_exists must be one of ['error', 'suffix'], got 'overwrite'",), no_data=True),
    Case("snapshot_mode_unknown", lambda: with_context(snapshot_mode="sometimes"), ValueError,
         ("snapshot_mode must be one of ['all', 'last', 'gap', 'last+gap', 'none'], "
          "got 'sometimes'",), no_data=True),
    Case("log_dir_leads_out", lambda: with_context(log_dir="../../../../escape"), ValueError,
         ("log_dir='../../../../escape' leads out",), no_data=True),
    Case("logger_snapshot_gap_0", lambda: logger.set_snapshot_gap(0), ValueError,
         ("snapshot gap must be a positive integer, got 0",)),
    Case("logger_snapshot_mode_unknown", lambda: logger.set_snapshot_mode("every"), ValueError,
         ("snapshot_mode must be one of", "'last+gap'", "got 'every'")),
    Case("load_agent_missing_path", lambda: load_agent("nowhere"), FileNotFoundError,
         ("No run directory or snapshot file at 'nowhere'",)),
    Case("load_agent_itr_of_a_snapshot_file",
         lambda: load_agent(write("x.pkl", "not a snapshot"), itr=3), ValueError,
         ("itr=3 picks a snapshot in a run directory, but 'x.pkl' is a snapshot file",)),
    *[Case(f"load_agent_{kind}_snapshot", lambda kind=kind: load_agent(broken_snapshot(kind)),
           SnapshotError, ("params.pkl is not a readable rlframe snapshot", detail))
      for kind, detail in [("garbage", "not a file written by torch.save"),
                           ("empty", "empty"), ("truncated", "cut short"),
                           ("other_pickle", "is a Python pickle, not a torch.save file"),
                           ("other_object", "holds objects other than the tensors")]],
]

# ------------------------------------------------------------------------- command line
COMMAND_LINE = [
    Case("train_unknown_algo", lambda: train("ppx", "CartPole-v1", "--log-dir", "runs"), CLI,
         ("Unknown algorithm 'ppx'. Did you mean 'ppo'?", "Algorithms: ppo, a2c"), no_data=True),
    Case("train_unknown_env", lambda: train("ppo", "CartPol-v1", "--log-dir", "runs"), CLI,
         ("Unknown env id 'CartPol-v1'", "Did you mean: CartPole-v1"), no_data=True),
    Case("train_dqn_on_box_actions", lambda: train("dqn", "Pendulum-v1", "--log-dir", "runs"),
         CLI, ("dqn handles discrete actions",
               "Box(-2.0, 2.0, (1,), float32)",
               "Algorithms for Pendulum-v1: ppo, a2c, ddpg, td3, sac."), no_data=True),
    Case("train_sac_on_discrete_actions",
         lambda: train("sac", "CartPole-v1", "--log-dir", "runs"), CLI,
         ("sac handles continuous actions",
          "Discrete(2)",
          "Algorithms for CartPole-v1: ppo, a2c, dqn"), no_data=True),
    Case("train_config_keyword_typo",
         lambda: ppo_train("--config", '{"algo": {"learning_rat": 1e-3}}'), CLI,
         ("config section 'algo': PPO takes no keyword 'learning_rat'",
          "Did you mean 'learning_rate'?"), no_data=True),
    Case("train_track_typo", lambda: ppo_train("--track", "mlfow"), USAGE,
         ("argument --track: invalid choice: 'mlfow'", "'mlflow', 'wandb'"), no_data=True),
    Case("train_track_not_installed",
         lambda: without_module("wandb", lambda: ppo_train("--track", "wandb")), CLI,
         ("--track: outputs=['wandb']: tracking with Weights & Biases needs its package: "
          "pip install rlframe[wandb]",), no_data=True),
    Case("tune_without_optuna",
         lambda: without_module("optuna", lambda: main(["tune", "ppo", "CartPole-v1"])), CLI,
         ("rlframe tune needs Optuna: pip install rlframe[tune]",), no_data=True),
    Case("tune_space_key_typo",
         lambda: main(["tune", "ppo", "CartPole-v1", "-o", "t", "--space",
                       write("space.json", '{"algo.learning_rat": {"low": 0.1, "high": 1}}')]),
         CLI, ("PPO takes no keyword 'learning_rat'", "Did you mean 'learning_rate'?"),
         no_data=True),
    Case("tune_space_bounds",
         lambda: main(["tune", "ppo", "CartPole-v1", "-o", "t", "--space",
                       write("space.json", '{"batch_T": {"low": 64, "high": 32}}')]),
         CLI, ("space.json: batch_T: low must be below high, got low=64, high=32",),
         no_data=True),
    Case("tune_storage_unreachable",
         lambda: main(["tune", "ppo", "CartPole-v1", "-o", "t", "--storage",
                       "sqlite:////no/such/dir/study.db"]),
         CLI, ("--storage 'sqlite:////no/such/dir/study.db' cannot be used",), no_data=True),
    Case("tune_track_not_installed",
         lambda: without_module("mlflow", lambda: main(["tune", "ppo", "CartPole-v1", "-o", "t",
                                                        "--track", "mlflow"])),
         CLI, ("pip install rlframe[mlflow]",), no_data=True),
    Case("train_config_section_typo", lambda: ppo_train("--config", '{"agnt": {}}'), CLI,
         ("Unknown config section 'agnt'. Did you mean 'agent'?",), no_data=True),
    Case("train_config_batch_B", lambda: ppo_train("--config", '{"sampler": {"batch_B": 2}}'),
         CLI, ("'batch_B' is set from batch_B (--batch-B), not in this section",), no_data=True),
    Case("train_config_bad_json", lambda: ppo_train("--config", "{bad json"), CLI,
         ("--config is not valid JSON",), no_data=True),
    Case("train_config_missing_file", lambda: ppo_train("--config", "nope.json"), CLI,
         ("--config 'nope.json' is neither a JSON object nor a file",), no_data=True),
    Case("train_sampler_typo", lambda: ppo_train("--sampler", "cpus"), CLI,
         ("Unknown sampler 'cpus'. Did you mean 'cpu'?", "Samplers: serial, cpu"), no_data=True),
    Case("train_learning_rate_str",
         lambda: ppo_train("--config", '{"algo": {"learning_rate": "fast"}}'), CLI,
         ("config section 'algo' (PPO): learning_rate must be a number, got 'fast' (str).",),
         no_data=True),
    Case("train_model_kwargs_typo",
         lambda: ppo_train("--config", '{"agent": {"model_kwargs": {"hidden_size": [32]}}}'),
         CLI, ("model_kwargs holds 'hidden_size'", "Did you mean 'hidden_sizes'?"), no_data=True),
    Case("train_optim_cls_not_an_optimizer",
         lambda: ppo_train("--config", '{"algo": {"OptimCls": "torch.nn.Linear"}}'), CLI,
         ("OptimCls must be a torch.optim.Optimizer subclass",
          "got the class torch.nn.modules.linear.Linear"), no_data=True),
    Case("train_eval_n_envs_str",
         lambda: ppo_train("--config", '{"sampler": {"eval_n_envs": "4"}}'), CLI,
         ("config section 'sampler' (SerialSampler): eval_n_envs must be an integer, got '4'",),
         no_data=True),
    Case("train_minibatches_above_batch",
         lambda: ppo_train("--config", '{"algo": {"minibatches": 1000}}', "--batch-T", "8",
                           "--batch-B", "2"), CLI,
         ("PPO minibatches=1000 exceeds batch_T * batch_B = 8 * 2 = 16 samples",), no_data=True),
    Case("train_cuda_idx_without_gpu", lambda: ppo_train("--cuda-idx", "0"), CLI,
         ("--cuda-idx 0 asks for a GPU", "leave out --cuda-idx"), no_data=True, marks=(NO_CUDA,)),
    Case("train_log_dir_is_a_file",
         lambda: write("a_file", "") and train("ppo", "CartPole-v1", "--log-dir", "a_file"),
         CLI, ("--log-dir 'a_file' is a file, not a directory",), no_data=True),
    Case("train_taken_run_id",
         lambda: write(os.path.join("runs", "run_0", "params.json"), "{}") and ppo_train(
             "--run-id", "0"), CLI, ("--run-id 0: runs/run_0 already holds a run",), no_data=True),
    Case("train_batch_T_0", lambda: ppo_train("--batch-T", "0"), CLI,
         ("batch_T must be a positive integer, got 0",), no_data=True),
    Case("train_n_parallel_0", lambda: ppo_train("--sampler", "cpu", "--n-parallel", "0"), CLI,
         ("n_parallel must be a positive integer, got 0",), no_data=True),
    Case("train_config_not_an_object", lambda: ppo_train("--config", "[1]"), CLI,
         ("--config '[1]' is neither a JSON object nor a file",), no_data=True),
    Case("train_config_section_not_a_dict", lambda: ppo_train("--config", '{"algo": 3}'), CLI,
         ("config section 'algo' must be a dict of keyword arguments, got int: 3",), no_data=True),
    Case("train_n_steps_0", lambda: ppo_train("--n-steps", "0"), USAGE,
         ("rlframe train: error: argument --n-steps: not a positive whole number: '0'",),
         no_data=True),
    Case("train_log_interval_steps_0", lambda: ppo_train("--log-interval-steps", "0"), USAGE,
         ("argument --log-interval-steps: not a positive whole number: '0'",), no_data=True),
    Case("train_positionals_as_options",
         lambda: main(["train", "--algo", "ppo", "--env", "CartPole-v1"]), USAGE,
         ("rlframe train: error: unrecognized arguments: --algo --env (ALGO is positional: "
          "give it without --algo; ENV_ID is positional: give it without --env)",),
         no_data=True),
    Case("autotune_positionals_as_options",
         lambda: main(["autotune", "--algo=ppo", "--env-id", "CartPole-v1"]), USAGE,
         ("rlframe autotune: error: the following arguments are required: ENV_ID (ALGO is "
          "positional: give it without --algo; ENV_ID is positional: give it without "
          "--env-id)",), no_data=True),
    Case("train_underscored_option", lambda: ppo_train("--n_steps", "64"), USAGE,
         ("rlframe train: error: unrecognized arguments: --n_steps 64 (did you mean "
          "--n-steps for --n_steps?)",), no_data=True),
    Case("train_misspelled_option", lambda: ppo_train("--log-intervall-steps=64"), USAGE,
         ("unrecognized arguments: --log-intervall-steps=64 (did you mean "
          "--log-interval-steps for --log-intervall-steps?)",), no_data=True),
    Case("train_stray_argument", lambda: ppo_train("extra"), USAGE,
         ("rlframe train: error: unrecognized arguments: extra",), no_data=True),
    Case("unknown_top_level_option", lambda: main(["--verbose"]), USAGE,
         ("rlframe: error: unrecognized arguments: --verbose",)),
    Case("unknown_command", lambda: main(["trian"]), USAGE,
         ("argument COMMAND: invalid choice: 'trian'", "'train'")),
    Case("evaluate_episodes_negative", lambda: main(["evaluate", "run", "--episodes", "-1"]),
         USAGE, ("argument --episodes: must be at least 1, got -1",)),
    Case("evaluate_missing_path", lambda: main(["evaluate", "missing"]), CLI,
         ("No run directory or snapshot file at 'missing'",)),
    Case("evaluate_directory_without_snapshot",
         lambda: os.makedirs("empty") or main(["evaluate", "empty"]), CLI,
         ("No snapshot (params.pkl or itr_<N>.pkl) in empty",)),
    Case("evaluate_file_that_is_no_snapshot",
         lambda: write("notes.txt", "not a run\n") and main(["evaluate", "notes.txt"]), CLI,
         ("notes.txt is not a readable rlframe snapshot",)),
    Case("evaluate_garbage_snapshot", lambda: main(["evaluate", broken_snapshot("garbage")]),
         CLI, ("params.pkl is not a readable rlframe snapshot",
               "not a file written by torch.save")),
    Case("resume_empty_snapshot", lambda: main(["resume", broken_snapshot("empty")]), CLI,
         ("params.pkl is not a readable rlframe snapshot", "empty")),
    Case("resume_without_a_snapshot",
         lambda: write(os.path.join("run", "params.json"), TRAIN_PARAMS) and main(
             ["resume", "run"]), CLI,
         ("run holds no snapshot (params.pkl or itr_<N>.pkl) to resume from",
          "Files: ['params.json']")),
    Case("resume_directory_without_params_json",
         lambda: write(os.path.join("run", "params.pkl"), b"") and main(["resume", "run"]), CLI,
         ("run holds no params.json: not a run directory", "['params.pkl']")),
    Case("plot_missing_directory", lambda: main(["plot", "nowhere"]), CLI,
         ("no such directory: nowhere",)),
    Case("resume_params_json_not_json", lambda: resume_with_params_json("{not json"), CLI,
         ("params.json is not readable JSON",)),
    Case("resume_params_json_array", lambda: resume_with_params_json("[1, 2]"), CLI,
         ("params.json holds a JSON array, not an object",)),
    Case("resume_params_json_n_steps_str",
         lambda: resume_with_params_json(
             '{"algo": "ppo", "env_id": "CartPole-v1", "n_steps": "lots"}'), CLI,
         ("params.json", "n_steps must be an integer, got 'lots'")),
    Case("plot_of_a_file",
         lambda: write("notes.txt", "not a run\n") and main(["plot", "notes.txt", "-o",
                                                            "out.png"]), CLI,
         ("notes.txt is a file, not a run directory",)),
]

AREAS = dict(algorithms=ALGORITHMS, agents_models=AGENTS, samplers=SAMPLERS,
             runners_affinity=RUNNERS, envs=ENVS, logging_resume_loading=LOGGING,
             command_line=COMMAND_LINE)
CASES = [case for cases in AREAS.values() for case in cases]


def test_case_ids_are_unique_and_the_catalogue_is_full():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 70


@pytest.mark.parametrize("case", [pytest.param(case, id=f"{area}-{case.id}", marks=case.marks)
                                  for area, cases in AREAS.items() for case in cases])
def test_bad_input_gets_a_clear_early_error(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLFRAME_DATA_DIR", raising=False)
    if case.exc in (CLI, USAGE):
        assert case.call() == 2
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err, err
        if case.exc == USAGE:
            assert err.startswith("usage: rlframe"), err
            err = err.splitlines()[-1]
        assert err.count("\n") == 0 and err.startswith("rlframe") and ": error: " in err, err
        message = err
    else:
        with pytest.raises(case.exc) as excinfo:
            case.call()
        message = str(excinfo.value)
    for fragment in case.fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    if case.no_data:
        assert not os.path.exists(tmp_path / "data")
    assert not [files for _, _, files in os.walk(tmp_path) if "debug.log" in files]  # No run.
