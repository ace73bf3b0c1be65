"""Env and model contract violations fail at construction or the first steps, clearly."""
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces as gym_spaces

from rlframe.agents.dqn.catdqn_agent import CatDqnAgent
from rlframe.agents.pg.categorical import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlframe.agents.pg.gaussian import GaussianPgAgent
from rlframe.algos.pg.ppo import PPO
from rlframe.envs.gym import GymEnvWrapper, make
from rlframe.envs.vector import EnvList, make_vec_env
from rlframe.runners.minibatch_rl import MinibatchRl
from rlframe.samplers.serial.sampler import SerialSampler

SCRIPTED_ID = "RlframeContractsScripted-v0"


class ScriptedEnv(gym.Env):
    """Returns ``good`` observations, except ``bad`` from the ``bad_from``-th one on
    (counting the observations of resets and steps since construction from 0)."""

    action_space = gym_spaces.Discrete(2)

    def __init__(self, space, good, bad, bad_from=0):
        self.observation_space = space
        self.good, self.bad, self.bad_from = good, bad, bad_from
        self.count = 0

    def _obs(self):
        self.count += 1
        return self.bad if self.count > self.bad_from else self.good

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 1.0, False, False, {}


gym.register(SCRIPTED_ID, entry_point=ScriptedEnv)


def scripted_env(**kwargs):
    """A fresh ``GymEnvWrapper(ScriptedEnv(**kwargs))`` (an ``EnvCls``)."""
    return GymEnvWrapper(ScriptedEnv(**kwargs))

UINT8_BOX = gym_spaces.Box(0, 255, (4, 4), np.uint8)
FLOAT_OBS = np.full((4, 4), 0.5, np.float32)
BYTE_OBS = np.full((4, 4), 7, np.uint8)


# ---- Lossy observation casts ------------------------------------------------------------

def test_float_observations_in_a_uint8_space_fail_at_construction_naming_env_and_space():
    with pytest.raises(ValueError) as e:
        GymEnvWrapper(ScriptedEnv(UINT8_BOX, FLOAT_OBS, FLOAT_OBS))
    msg = str(e.value)
    assert "env ScriptedEnv" in msg and "from reset()" in msg
    assert "dtype float32 (values in [0.5, 0.5])" in msg
    assert "Box(0, 255, (4, 4), uint8) has dtype uint8 and shape (4, 4)" in msg
    assert "(e.g. 0.5 -> 0)" in msg


def test_lossy_cast_names_the_registered_env_id():
    with pytest.warns(UserWarning):  # gymnasium's passive checker warns too, then goes on.
        with pytest.raises(ValueError, match=rf"env id='{SCRIPTED_ID}': the observation from "
                                             r"reset\(\) has dtype float32"):
            make(SCRIPTED_ID, space=UINT8_BOX, good=FLOAT_OBS, bad=FLOAT_OBS)


def test_out_of_range_integers_fail_instead_of_wrapping_around():
    wide = np.full((4, 4), 300, np.int64)
    with pytest.raises(ValueError, match=r"has dtype int64 \(values in \[300, 300\]\).*"
                                         r"the cast to uint8 changes its values "
                                         r"\(e\.g\. 300 -> 44\)"):
        GymEnvWrapper(ScriptedEnv(UINT8_BOX, wide, wide))


def test_bad_step_observation_after_construction_fails_at_that_step_in_every_path():
    # Construction's reset and step are good; the first reset after it is too; then bad.
    def env():
        return GymEnvWrapper(ScriptedEnv(UINT8_BOX, BYTE_OBS, FLOAT_OBS, bad_from=3))
    single = env()
    single.reset()
    with pytest.raises(ValueError, match=r"from step\(\) has dtype float32.*uint8"):
        single.step(0)
    # EnvList writes the rows of GymEnvWrappers straight into its buffers (step_rows).
    envs = EnvList([GymEnvWrapper(ScriptedEnv(UINT8_BOX, BYTE_OBS, FLOAT_OBS, bad_from=4))
                    for _ in range(2)])
    envs.reset()
    envs.step(np.zeros(2, np.int64))  # Allocates the buffers: the next step takes step_rows.
    with pytest.raises(ValueError, match=r"from step\(\) has dtype float32.*uint8"):
        envs.step(np.zeros(2, np.int64))


def test_bad_reset_observation_after_construction_fails_at_that_reset():
    env = GymEnvWrapper(ScriptedEnv(UINT8_BOX, BYTE_OBS, FLOAT_OBS, bad_from=2))
    with pytest.raises(ValueError, match=r"from reset\(\) has dtype float32"):
        env.reset()


@pytest.mark.parametrize("space,good,bad,message", [
    (gym_spaces.Box(-np.inf, np.inf, (3,), np.float32), np.array([0.1, -1 / 3, 1e-40]),
     np.array([0.1, 1.0, 1e39]), r"dtype float64 .*float32.*1e\+39 -> inf"),
    (UINT8_BOX, np.full((4, 4), 3.0), np.full((4, 4), 300), r"dtype int64 .*uint8.*300 -> 44"),
    (gym_spaces.MultiBinary(2), np.array([True, False]), np.array([1, 2.5]),
     r"dtype float64 .*int8.*2\.5 -> 2"),
    (gym_spaces.Box(0, 1, (2,), bool), np.array([0, 1]), np.array([0.0, 0.5]),
     r"dtype float64 .*bool.*0\.5 -> True"),
    (gym_spaces.Discrete(5), 4, 4.5, r"dtype float64 .*int64.*4\.5 -> 4"),
])
def test_exact_casts_pass_and_lossy_ones_fail(space, good, bad, message):
    # Construction's reset and step, one reset and one step see ``good``; the next step ``bad``.
    env = GymEnvWrapper(ScriptedEnv(space, good, bad, bad_from=4))
    env.reset()
    env.step(0)
    with pytest.raises(ValueError, match=message):
        env.step(0)


def test_dict_observation_names_the_key():
    space = gym_spaces.Dict({"image": UINT8_BOX, "pos": gym_spaces.Box(-1, 1, (2,))})
    obs = {"image": FLOAT_OBS, "pos": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"from reset\(\)\['image'\] has dtype float32"):
        GymEnvWrapper(ScriptedEnv(space, obs, obs))


def test_gymnasium_vector_backend_fails_at_construction():
    for backend in ("gymnasium", "plain"):
        with pytest.warns(UserWarning):
            with pytest.raises(ValueError, match=rf"env id='{SCRIPTED_ID}'.*float32.*uint8"):
                make_vec_env(backend, make, dict(id=SCRIPTED_ID, space=UINT8_BOX,
                                                 good=FLOAT_OBS, bad=FLOAT_OBS), 2)


def test_runner_refuses_a_lossy_env_before_training():
    sampler = SerialSampler(EnvCls=GymEnvWrapper, env_kwargs=dict(
        env=ScriptedEnv(gym_spaces.Box(0, 255, (4,), np.uint8), np.full(4, 0.25, np.float32),
                        np.full(4, 0.25, np.float32))), batch_T=4, batch_B=2)
    with pytest.raises(ValueError, match=r"float32.*Box\(0, 255, \(4,\), uint8\)"):
        MinibatchRl(algo=PPO(), agent=CategoricalPgAgent(), sampler=sampler, n_steps=16,
                    log_interval_steps=8)


# ---- Observation shapes -----------------------------------------------------------------

def test_observation_shape_mismatch_names_both_shapes():
    space = gym_spaces.Box(-1, 1, (4,), np.float32)
    with pytest.raises(ValueError, match=r"env ScriptedEnv: the observation from reset\(\) has "
                                         r"shape \(3,\), but the observation space "
                                         r"Box\(-1\.0, 1\.0, \(4,\), float32\) has shape \(4,\)"):
        GymEnvWrapper(ScriptedEnv(space, np.zeros(3, np.float32), np.zeros(3, np.float32)))
    env = GymEnvWrapper(ScriptedEnv(space, np.zeros(4, np.float32), np.zeros((1, 4), np.float32),
                                    bad_from=3))
    env.reset()
    with pytest.raises(ValueError, match=r"from step\(\) has shape \(1, 4\).*has shape \(4,\)"):
        env.step(0)


# ---- The old gym API --------------------------------------------------------------------

class OldApiEnv(gym.Env):
    observation_space = gym_spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym_spaces.Discrete(2)

    def __init__(self, new_reset=False):
        self.new_reset = new_reset

    def reset(self, **kwargs):
        obs = np.zeros(4, np.float32)
        return (obs, {}) if self.new_reset else obs

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, False, {}


def test_old_gym_reset_is_refused_naming_gymnasiums_api():
    with pytest.raises(TypeError) as e:
        GymEnvWrapper(OldApiEnv())
    msg = str(e.value)
    assert msg.startswith("env OldApiEnv: reset() returned an ndarray of shape (4,) (the old "
                          "gym API returns only the observation).")
    assert "reset() returns (obs, info)" in msg
    assert "step() returns five values (obs, reward, terminated, truncated, info)" in msg


def test_old_gym_step_is_refused_naming_gymnasiums_api():
    env = OldApiEnv(new_reset=True)
    with pytest.raises(TypeError, match=r"env OldApiEnv: step\(\) returned a tuple of 4 values "
                                        r"\(obs, reward, done, info\): the old gym API\. .*"
                                        r"five values \(obs, reward, terminated, "
                                        r"truncated, info\)"):
        GymEnvWrapper(env)


def test_old_gym_step_inside_gymnasium_make_wrappers_is_refused_naming_gymnasiums_api():
    gym.register("RlframeContractsOldStep-v0", entry_point=OldApiEnv, max_episode_steps=10,
                 kwargs=dict(new_reset=True))
    with pytest.warns(DeprecationWarning):  # gymnasium's passive checker warns too.
        with pytest.raises(TypeError, match=r"env id='RlframeContractsOldStep-v0': step\(\) "
                                            r"failed inside a gymnasium wrapper unpacking .*"
                                            r"old gym API\?.* step\(\) returns five values"):
            make("RlframeContractsOldStep-v0")


# ---- Model outputs at startup -----------------------------------------------------------

class PgModel(torch.nn.Module):
    """A user's CartPole model; ``logits`` skips the softmax, ``value_dim`` keeps [B, 1]."""

    def __init__(self, observation_shape, action_size, logits=False, value_dim=False,
                 recurrent=False):
        super().__init__()
        self.pi = torch.nn.Linear(observation_shape[0], action_size)
        self.v = torch.nn.Linear(observation_shape[0], 1)
        with torch.no_grad():
            self.pi.bias.copy_(torch.linspace(-1, 1, action_size))
        self.logits, self.value_dim, self.recurrent = logits, value_dim, recurrent

    def forward(self, observation, prev_action, prev_reward, rnn_state=None):
        x = observation.float()
        pi = self.pi(x) if self.logits else torch.softmax(self.pi(x), dim=-1)
        value = self.v(x) if self.value_dim else self.v(x).squeeze(-1)
        return (pi, value, torch.zeros(1, 1, 1)) if self.recurrent else (pi, value)


def ppo_runner(agent, env_id="CartPole-v1"):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id=env_id), batch_T=4, batch_B=2)
    return MinibatchRl(algo=PPO(), agent=agent, sampler=sampler, n_steps=16,
                       log_interval_steps=8)


def test_categorical_logits_instead_of_probabilities_are_refused_at_startup():
    with pytest.raises(ValueError) as e:
        ppo_runner(CategoricalPgAgent(ModelCls=PgModel, model_kwargs=dict(logits=True)))
    msg = str(e.value)
    assert "CategoricalPgAgent: the model PgModel returned pi that is not a probability " in msg
    assert "min entry -1" in msg and "sums over the last dim [0.0]" in msg
    assert "torch.softmax(logits, dim=-1)" in msg
    ppo_runner(CategoricalPgAgent(ModelCls=PgModel))  # With the softmax it passes.


class PiOnlyModel(PgModel):
    def forward(self, observation, prev_action, prev_reward):
        return super().forward(observation, prev_action, prev_reward)[0]


def test_a_model_returning_only_pi_is_refused_at_startup():
    with pytest.raises(ValueError, match=r"CategoricalPgAgent: the model PiOnlyModel returned one "
                                         r"Tensor, but its forward must return \(pi \[\*lead, A\] "
                                         r"probabilities, value \[\*lead\]\)"):
        ppo_runner(CategoricalPgAgent(ModelCls=PiOnlyModel))


def test_value_with_a_trailing_dim_is_refused_at_startup():
    expected = (r"returned value of shape \(1, 1\) for one observation, but value must have "
                r"shape \(1,\) there .*value\.squeeze\(-1\)")
    with pytest.raises(ValueError, match="CategoricalPgAgent: the model PgModel " + expected):
        ppo_runner(CategoricalPgAgent(ModelCls=PgModel, model_kwargs=dict(value_dim=True)))
    agent = RecurrentCategoricalPgAgent(ModelCls=PgModel,
                                        model_kwargs=dict(value_dim=True, recurrent=True))
    with pytest.raises(ValueError, match=expected):
        agent.check_model(make("CartPole-v1").spaces)


class GaussianModel(torch.nn.Module):
    def __init__(self, observation_shape, action_size, value_dim=True):
        super().__init__()
        self.mu = torch.nn.Linear(observation_shape[0], action_size)
        self.v = torch.nn.Linear(observation_shape[0], 1)
        self.value_dim = value_dim

    def forward(self, observation, prev_action, prev_reward):
        x = observation.float()
        value = self.v(x) if self.value_dim else self.v(x).squeeze(-1)
        return self.mu(x), torch.zeros_like(self.mu(x)), value


class UserGaussianAgent(GaussianPgAgent):
    def make_env_to_model_kwargs(self, env_spaces):
        return dict(observation_shape=env_spaces.observation.shape,
                    action_size=env_spaces.action.shape[0])


def test_gaussian_value_with_a_trailing_dim_is_refused():
    spaces = make("Pendulum-v1").spaces
    with pytest.raises(ValueError, match=r"UserGaussianAgent: the model GaussianModel returned "
                                         r"value of shape \(1, 1\)"):
        UserGaussianAgent(ModelCls=GaussianModel).check_model(spaces)
    UserGaussianAgent(ModelCls=GaussianModel, model_kwargs=dict(value_dim=False)
                      ).check_model(spaces)


class CatDqnLogitsModel(torch.nn.Module):
    def __init__(self, observation_shape, action_size, n_atoms):
        super().__init__()
        self.shape = (action_size, n_atoms)
        self.head = torch.nn.Linear(observation_shape[0], action_size * n_atoms)
        with torch.no_grad():
            self.head.bias.fill_(-0.5)

    def forward(self, observation, prev_action, prev_reward):
        return self.head(observation.float()).view(-1, *self.shape)


def test_categorical_dqn_logits_are_refused():
    with pytest.raises(ValueError, match=r"CatDqnAgent: the model CatDqnLogitsModel returned p "
                                         r"that is not a probability vector .*torch\.softmax"):
        CatDqnAgent(n_atoms=5, ModelCls=CatDqnLogitsModel).check_model(
            make("CartPole-v1").spaces)



@pytest.mark.filterwarnings("ignore::UserWarning:gymnasium.vector.async_vector_env")
@pytest.mark.parametrize("env_backend", ["gymnasium", "gymnasium_async"])
def test_gymnasium_vector_backends_check_the_first_steps_before_their_cast(env_backend):
    # Each member's construction sees good observations; the vector env's own steps cast
    # observations to the space's dtype (int64 300 would wrap to uint8 44 there).
    envs = make_vec_env(env_backend, scripted_env, dict(
        space=UINT8_BOX, good=BYTE_OBS, bad=np.full((4, 4), 300), bad_from=4), 2)
    try:
        envs.reset()
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match=r"env ScriptedEnv: the observation from step\(\) "
                                             r"has dtype int64.*300 -> 44"):
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()
    assert multiprocessing.active_children() == []
