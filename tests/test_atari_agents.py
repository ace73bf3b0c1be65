"""Atari DQN-family models and agents: shapes, scaling, recurrence, short training runs."""
import math

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from rlframe.agents.dqn.atari.atari_catdqn_agent import AtariCatDqnAgent  # noqa: E402
from rlframe.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent  # noqa: E402
from rlframe.agents.dqn.atari.atari_r2d1_agent import (AtariR2d1AlternatingAgent,  # noqa: E402
                                                       AtariR2d1Agent)
from rlframe.agents.dqn.atari.mixin import AtariMixin  # noqa: E402
from rlframe.agents.pg.atari import AtariMixin as PgAtariMixin  # noqa: E402
from rlframe.algos.dqn.cat_dqn import CategoricalDQN  # noqa: E402
from rlframe.algos.dqn.dqn import DQN  # noqa: E402
from rlframe.algos.dqn.r2d1 import R2D1  # noqa: E402
from rlframe.envs.atari.atari_env import AtariEnv, AtariTrajInfo  # noqa: E402
from rlframe.envs.gym import make as gym_make  # noqa: E402
from rlframe.models.dqn.atari_catdqn_model import AtariCatDqnModel  # noqa: E402
from rlframe.models.dqn.atari_dqn_model import AtariDqnModel  # noqa: E402
from rlframe.models.dqn.atari_r2d1_model import AtariR2d1Model, RnnState  # noqa: E402
from rlframe.replays.frame import FrameStore  # noqa: E402
from rlframe.runners.callbacks import Callback  # noqa: E402
from rlframe.runners.minibatch_rl import MinibatchRl  # noqa: E402
from rlframe.samplers.serial.sampler import SerialSampler  # noqa: E402
from rlframe.utils.logging.context import logger_context  # noqa: E402

IMAGE_SHAPE = (4, 104, 80)
A = 6
# Narrow layers: the tests check wiring, not capacity.
SMALL_CONV = dict(channels=[4, 8, 8])
SMALL = dict(dqn=dict(SMALL_CONV, fc_sizes=16), catdqn=dict(SMALL_CONV, fc_sizes=16),
             r2d1=dict(SMALL_CONV, fc_size=16, lstm_size=8, head_size=16))
LEADS = [(), (3,), (2, 3)]


def _images(*lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, *IMAGE_SHAPE), dtype=torch.uint8, generator=g)


def _prev(*lead):
    return torch.zeros(*lead, A), torch.zeros(lead)


# --- models --------------------------------------------------------------------------------

@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
def test_dqn_and_catdqn_models_keep_leading_dims(lead, dueling):
    torch.manual_seed(0)
    x = _images(*lead)
    q = AtariDqnModel(IMAGE_SHAPE, A, dueling=dueling, **SMALL["dqn"])(x, *_prev(*lead))
    assert q.shape == (*lead, A)
    model = AtariCatDqnModel(IMAGE_SHAPE, A, n_atoms=11, dueling=dueling, **SMALL["catdqn"])
    p = model(x, *_prev(*lead))
    assert p.shape == (*lead, A, 11)
    assert torch.all(p >= 0)
    torch.testing.assert_close(p.sum(-1), torch.ones(*lead, A))


def test_default_models_are_nature_dqn_sized():
    model = AtariDqnModel(IMAGE_SHAPE, A)
    convs = [m for m in model.conv.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 64]
    assert [c.kernel_size[0] for c in convs] == [8, 4, 3]
    assert [c.stride[0] for c in convs] == [4, 2, 1]
    assert [c.padding[0] for c in convs] == [0, 1, 1]
    assert model(_images(2), *_prev(2)).shape == (2, A)
    assert AtariCatDqnModel(IMAGE_SHAPE, A)(_images(2), *_prev(2)).shape == (2, A, 51)
    q, state = AtariR2d1Model(IMAGE_SHAPE, A)(_images(1, 2), *_prev(1, 2), None)
    assert q.shape == (1, 2, A) and state.h.shape == (1, 2, 512)


@pytest.mark.parametrize("dueling", [False, True])
def test_uint8_and_float_pixels_give_the_same_outputs(dueling):
    torch.manual_seed(0)
    x = _images(2, 3)
    xf = x.float()
    models = [AtariDqnModel(IMAGE_SHAPE, A, dueling=dueling, **SMALL["dqn"]),
              AtariCatDqnModel(IMAGE_SHAPE, A, n_atoms=5, dueling=dueling, **SMALL["catdqn"])]
    for model in models:
        torch.testing.assert_close(model(x, *_prev(2, 3)), model(xf, *_prev(2, 3)))
    r2d1 = AtariR2d1Model(IMAGE_SHAPE, A, dueling=dueling, **SMALL["r2d1"])
    (q_u, s_u), (q_f, s_f) = r2d1(x, *_prev(2, 3), None), r2d1(xf, *_prev(2, 3), None)
    torch.testing.assert_close(q_u, q_f)
    torch.testing.assert_close(s_u.h, s_f.h)
    # Pixels are scaled by 1/255 inside: an all-255 image is an all-ones input.
    conv_in = []
    hook = models[0].conv.register_forward_hook(lambda m, inp, out: conv_in.append(inp[0]))
    models[0](torch.full(IMAGE_SHAPE, 255, dtype=torch.uint8), None, None)
    hook.remove()
    torch.testing.assert_close(conv_in[0], torch.ones(1, *IMAGE_SHAPE))


@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dueling", [False, True])
def test_r2d1_model_shapes(lead, dueling):
    model = AtariR2d1Model(IMAGE_SHAPE, A, dueling=dueling, **SMALL["r2d1"])
    q, state = model(_images(*lead), *_prev(*lead), None)
    B = lead[-1] if lead else 1
    assert q.shape == (*lead, A)
    assert isinstance(state, RnnState)
    assert state.h.shape == state.c.shape == (1, B, 8)


def test_r2d1_model_sequence_equals_steps_with_carried_state():
    torch.manual_seed(0)
    model = AtariR2d1Model(IMAGE_SHAPE, A, **SMALL["r2d1"])
    T, B = 5, 2
    x = _images(T, B)
    prev_action = torch.nn.functional.one_hot(torch.randint(A, (T, B)), A).float()
    prev_reward = torch.randn(T, B)
    init = RnnState(h=torch.randn(1, B, 8), c=torch.randn(1, B, 8))
    q_all, state_all = model(x, prev_action, prev_reward, init)
    state, qs = init, []
    for t in range(T):  # [B] inputs: no time dim.
        q, state = model(x[t], prev_action[t], prev_reward[t], state)
        qs.append(q)
    torch.testing.assert_close(torch.stack(qs), q_all)
    torch.testing.assert_close(state.h, state_all.h)
    torch.testing.assert_close(state.c, state_all.c)
    # Zeros are the default state.
    zeros = RnnState(h=torch.zeros(1, B, 8), c=torch.zeros(1, B, 8))
    torch.testing.assert_close(model(x, prev_action, prev_reward, None)[0],
                               model(x, prev_action, prev_reward, zeros)[0])


def test_models_reject_non_image_shapes():
    for Model in (AtariDqnModel, AtariCatDqnModel, AtariR2d1Model):
        with pytest.raises(ValueError, match=rf"{Model.__name__}.*\(C, H, W\), got \(4,\)"):
            Model((4,), A)


# --- agents --------------------------------------------------------------------------------

def test_dqn_and_pg_atari_agents_share_one_mixin():
    assert AtariMixin is PgAtariMixin
    spaces = AtariEnv("pong").spaces
    assert AtariDqnAgent().make_env_to_model_kwargs(spaces) == dict(image_shape=IMAGE_SHAPE,
                                                                    output_size=A)


@pytest.mark.parametrize("AgentCls,kind", [(AtariDqnAgent, "dqn"), (AtariCatDqnAgent, "catdqn"),
                                           (AtariR2d1Agent, "r2d1"),
                                           (AtariR2d1AlternatingAgent, "r2d1")])
def test_agents_initialize_from_pong_and_step(AgentCls, kind):
    env = AtariEnv("pong")
    spaces = env.spaces
    agent = AgentCls(model_kwargs=SMALL[kind])
    agent.check_env_spaces(spaces)
    agent.check_model(spaces)
    B = 2
    agent.initialize(spaces, global_B=B)
    assert isinstance(agent.model, agent.ModelCls)
    assert agent.model.conv.conv[0].in_channels == 4
    agent.reset()
    agent.sample_mode(0)  # Epsilon 1: random actions.
    obs = torch.as_tensor(np.stack([env.reset()] * B))
    prev_action, prev_reward = torch.zeros(B, dtype=torch.long), torch.zeros(B)
    for _ in range(3):
        step = agent.step(obs, prev_action, prev_reward)
        assert step.action.shape == (B,) and step.action.dtype == torch.int64
        assert torch.all((step.action >= 0) & (step.action < A))
        prev_action = step.action
    info = step.agent_info
    if kind == "catdqn":
        assert info.p.shape == (B, A, agent.n_atoms)
    else:
        assert info.q.shape == (B, A)
    if kind == "r2d1":
        assert info.prev_rnn_state.h.shape == (B, 1, 8)  # Batch-first.
    agent.eval_mode(1)
    assert agent.step(obs, prev_action, prev_reward).action.shape == (B,)


def test_atari_agents_give_clear_errors_for_wrong_envs():
    cartpole = gym_make(id="CartPole-v1").spaces
    with pytest.raises(ValueError, match=r"AtariDqnModel takes image observations"):
        AtariDqnAgent().check_model(cartpole)
    pendulum = gym_make(id="Pendulum-v1").spaces
    with pytest.raises(TypeError, match="AtariR2d1Agent needs a discrete action space"):
        AtariR2d1Agent().check_env_spaces(pendulum)


# --- training runs -------------------------------------------------------------------------

class _KeepOptInfos(Callback):
    def __init__(self):
        self.opt_infos = []
        self.replay = None

    def on_iteration_end(self, runner, itr, samples, opt_info):
        self.opt_infos.append(opt_info)
        self.replay = runner.algo.replay_buffer


def _train(algo, agent, n_steps, batch_T, batch_B):
    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=dict(game="pong"), batch_T=batch_T,
                            batch_B=batch_B, TrajInfoCls=AtariTrajInfo,
                            max_decorrelation_steps=0)
    keep = _KeepOptInfos()
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps,
                         log_interval_steps=n_steps, affinity=dict(cuda_idx=None),
                         seed=0, callbacks=[keep])
    with logger_context("atari", 0, "atari", {}, snapshot_mode="none"):
        runner.train()
    return keep


RUNS = {
    "dqn": lambda: (DQN(batch_size=16, min_steps_learn=64, replay_size=256, replay_ratio=2,
                        eps_steps=128, target_update_interval=4, n_step_return=2,
                        double_dqn=True, prioritized_replay=True),
                    AtariDqnAgent(model_kwargs=dict(SMALL["dqn"], dueling=True))),
    "catdqn": lambda: (CategoricalDQN(batch_size=16, min_steps_learn=64, replay_size=256,
                                      replay_ratio=2, eps_steps=128, target_update_interval=4),
                       AtariCatDqnAgent(n_atoms=11, model_kwargs=SMALL["catdqn"])),
    "r2d1": lambda: (R2D1(batch_T=4, batch_B=2, warmup_T=2, store_rnn_state_interval=4,
                          n_step_return=2, min_steps_learn=64, replay_size=256, replay_ratio=1,
                          target_update_interval=4, eps_steps=128),
                     AtariR2d1Agent(model_kwargs=SMALL["r2d1"])),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(RUNS))
def test_short_training_run_with_frame_replay(in_tmp_cwd, kind):
    algo, agent = RUNS[kind]()
    batch_T, batch_B = 8, 2
    keep = _train(algo, agent, n_steps=320, batch_T=batch_T, batch_B=batch_B)
    assert len(keep.opt_infos) == 320 // (batch_T * batch_B)
    losses = [loss for info in keep.opt_infos for loss in info.loss]
    assert len(losses) >= 3 and algo.update_counter == len(losses)
    assert all(math.isfinite(loss) for loss in losses)
    replay = keep.replay
    # One frame stored per step, not the [4, 104, 80] stack.
    assert isinstance(replay.observations, FrameStore)
    assert replay.observations.n_frames == 4
    assert replay.observations.new_frames.shape == (replay.T, batch_B, 104, 80)
    assert "observation" not in replay.samples._fields
    batch = replay.sample_batch(2)
    observation = batch.all_observation if kind == "r2d1" else batch.agent_inputs.observation
    assert observation.shape[-3:] == IMAGE_SHAPE and observation.dtype == torch.uint8


@pytest.mark.slow
def test_rlpyt_smoke_check(in_tmp_cwd):
    """rlpyt's tests/test_rlpyt.py: a run with no full iteration exits cleanly."""
    sampler = SerialSampler(EnvCls=AtariEnv, env_kwargs=dict(game="pong"), batch_T=4,
                            batch_B=1, max_decorrelation_steps=0, TrajInfoCls=AtariTrajInfo)
    runner = MinibatchRl(algo=DQN(min_steps_learn=1e3, replay_size=1e3), agent=AtariDqnAgent(),
                         sampler=sampler, n_steps=1, log_interval_steps=1e3,
                         affinity=dict(cuda_idx=None))
    with logger_context("test", 0, "test", {}, snapshot_mode="last"):
        with pytest.warns(UserWarning, match="0 iterations"):
            runner.train()
    assert runner.algo.replay_buffer.observations is not None  # Frames, also here.
