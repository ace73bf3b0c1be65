import numpy as np
import pytest
import torch

from rlframe.models.conv2d import Conv2dHeadModel, Conv2dModel
from rlframe.models.mlp import MlpModel
from rlframe.models.pg.atari_ff_model import AtariFfModel
from rlframe.models.pg.atari_lstm_model import AtariLstmModel
from rlframe.models.pg.atari_lstm_model import RnnState as AtariRnnState
from rlframe.models.pg.mlp_models import CategoricalPgLstmModel, CategoricalPgMlpModel
from rlframe.models.pg.mujoco_ff_model import MujocoFfModel
from rlframe.models.pg.mujoco_lstm_model import MujocoLstmModel
from rlframe.models.pg.mujoco_lstm_model import RnnState as MujocoRnnState
from rlframe.models.running_mean_std import RunningMeanStdModel
from rlframe.models.utils import (conv2d_output_shape, scale_grad, set_training,
                                  strip_ddp_state_dict,
                                  update_state_dict)

LEADS = [(), (5,), (3, 4)]
IMG = (4, 44, 44)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _batch_size(lead):
    return lead[-1] if lead else 1


# --- building blocks -------------------------------------------------------------------

def test_mlp_output_size():
    assert MlpModel(5, [8, 6], 3).output_size == 3
    assert MlpModel(5, 7).output_size == 7
    assert MlpModel(5, None).output_size == 5
    assert MlpModel(5, None, 2)(torch.zeros(9, 5)).shape == (9, 2)
    mlp = MlpModel(5, [8, 6], nonlinearity=torch.nn.Tanh)
    assert mlp(torch.zeros(2, 3, 5)).shape == (2, 3, 6)
    assert sum(isinstance(m, torch.nn.Tanh) for m in mlp.modules()) == 2


@pytest.mark.parametrize("use_maxpool", [False, True])
def test_conv_out_size_matches_forward(use_maxpool):
    conv = Conv2dModel(4, [16, 32], [8, 4], [4, 2], [0, 1], use_maxpool=use_maxpool)
    out = conv(torch.zeros(2, *IMG))
    assert out[0].numel() == conv.conv_out_size(IMG[1], IMG[2])
    head = Conv2dHeadModel(IMG, [16, 32], [8, 4], [4, 2], hidden_sizes=[64], output_size=6,
                           paddings=[0, 1],
                           use_maxpool=use_maxpool)
    assert head(torch.zeros(2, *IMG)).shape == (2, 6) and head.output_size == 6
    assert head.conv_out_size == conv.conv_out_size(IMG[1], IMG[2])
    bare = Conv2dHeadModel(IMG, [8], [4], [2], hidden_sizes=None)
    assert bare(torch.zeros(3, *IMG)).shape == (3, bare.output_size)


def test_conv2d_output_shape():
    assert conv2d_output_shape(84, 84, 8, 4, 0) == (20, 20)
    assert conv2d_output_shape(20, 21, 4, 2, 1) == (10, 10)


def test_scale_grad():
    x = torch.ones(3, requires_grad=True)
    y = scale_grad(x, 0.25)
    assert torch.equal(y, x.detach())
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), 0.25))


def test_update_state_dict_copy_soft_and_ddp():
    src, dst = MlpModel(3, [4], 2), MlpModel(3, [4], 2)
    old = {k: v.clone() for k, v in dst.state_dict().items()}
    ddp_state = {"module." + k: v for k, v in src.state_dict().items()}
    assert set(strip_ddp_state_dict(ddp_state)) == set(src.state_dict())
    update_state_dict(dst, ddp_state, tau=0.1)
    for k, v in dst.state_dict().items():
        assert torch.allclose(v, 0.1 * src.state_dict()[k] + 0.9 * old[k])
    update_state_dict(dst, src.state_dict())
    for k, v in dst.state_dict().items():
        assert torch.equal(v, src.state_dict()[k])


def test_running_mean_std_matches_numpy():
    rms = RunningMeanStdModel((3,))
    assert torch.equal(rms.mean, torch.zeros(3)) and torch.equal(rms.var, torch.ones(3))
    rng = np.random.default_rng(0)
    batches = [rng.normal(2.0, 3.0, size=(5, 4, 3)), rng.normal(-1.0, 0.5, size=(7, 3)),
               rng.normal(0.0, 1.0, size=(3,)), rng.normal(10.0, 2.0, size=(2, 6, 3))]
    seen = []
    for batch in batches:
        rms.update(torch.as_tensor(batch, dtype=torch.float32))
        seen.append(batch.reshape(-1, 3))
        data = np.concatenate(seen)
        np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-4, atol=1e-4)
        assert rms.count.item() == len(data)
    assert set(rms.state_dict()) == {"mean", "var", "count"}


# --- policy-gradient models --------------------------------------------------------------

@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("normalize", [False, True])
def test_mujoco_ff_shapes(lead, normalize):
    model = MujocoFfModel((11,), 3, normalize_observation=normalize)
    obs = torch.randn(*lead, 11)
    model.update_obs_rms(obs)
    mu, log_std, v = model(obs, torch.zeros(*lead, 3), torch.zeros(lead))
    assert mu.shape == lead + (3,) and log_std.shape == lead + (3,) and v.shape == lead
    assert mu.abs().max() <= 1  # tanh output
    assert torch.equal(log_std, torch.zeros_like(log_std))


def test_mujoco_ff_orthogonal_init():
    torch.manual_seed(0)
    model = MujocoFfModel((11,), 3, hidden_sizes=[64, 32], mu_nonlinearity=None,
                          orthogonal_init=True)
    for mlp, out_gain in ((model.mu, 0.01), (model.v, 1.0)):
        linears = [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
        assert len(linears) == 3
        for layer, gain in zip(linears, (2 ** 0.5, 2 ** 0.5, out_gain)):
            w = layer.weight / gain  # Orthonormal rows or columns, whichever are fewer.
            small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            assert torch.allclose(small, torch.eye(small.shape[0]), atol=1e-5)
            assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    mu, _, _ = model(torch.randn(5, 11), None, None)
    assert mu.abs().max() < 0.1  # A near-zero mean at the start (output gain 0.01).
    default = MujocoFfModel((11,), 3)
    assert default.v.model[0].bias.abs().max() > 0  # PyTorch's default init otherwise.


def _assert_orthogonal(weight, gain):
    """``weight`` / ``gain`` as a matrix [out, in * kh * kw] has orthonormal rows or
    columns, whichever are fewer."""
    w = weight.reshape(weight.shape[0], -1) / gain
    small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    assert torch.allclose(small, torch.eye(small.shape[0]), atol=1e-4)


@pytest.mark.parametrize("ModelCls", [AtariFfModel, AtariLstmModel])
def test_atari_pg_orthogonal_init(ModelCls):
    """CleanRL's ppo_atari.py start: Nature CNN convs and fc orthogonal with gain sqrt(2),
    the policy 0.01, the value 1, biases 0; the conv weights keep their channels-last
    layout."""
    torch.manual_seed(0)
    nature = dict(channels=[32, 64, 64], kernel_sizes=[8, 4, 3], strides=[4, 2, 1],
                  paddings=[0, 0, 0])
    model = ModelCls((4, 84, 84), 4, orthogonal_init=True, **nature)
    convs = [m for m in model.conv.modules() if isinstance(m, torch.nn.Conv2d)]
    fcs = [m for m in model.conv.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) == 3 and len(fcs) == 1
    for layer in convs + fcs:
        _assert_orthogonal(layer.weight, 2 ** 0.5)
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    _assert_orthogonal(model.pi.weight, 0.01)
    _assert_orthogonal(model.value.weight, 1.)
    assert not model.pi.bias.any() and not model.value.bias.any()
    if ModelCls is AtariLstmModel:
        for name, param in model.lstm.named_parameters():
            if name.startswith("weight"):
                _assert_orthogonal(param, 1.)
            else:
                assert not param.any()
    image = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    if ModelCls is AtariLstmModel:
        pi = model(image, torch.zeros(2, 4), torch.zeros(2), None)[0]
    else:
        pi = model(image, None, None)[0]
    assert torch.allclose(pi, torch.full_like(pi, 0.25), atol=0.02)  # Near uniform.
    default = ModelCls((4, 84, 84), 4, **nature)
    assert default.pi.bias.abs().max() > 0  # PyTorch's default init otherwise.


@pytest.mark.parametrize("lead", LEADS)
def test_mujoco_lstm_shapes(lead):
    model = MujocoLstmModel((11,), 3, hidden_sizes=[32], lstm_size=16,
                            normalize_observation=True)
    B = _batch_size(lead)
    obs = torch.randn(*lead, 11)
    mu, log_std, v, state = model(obs, torch.randn(*lead, 3), torch.randn(lead), None)
    assert mu.shape == lead + (3,) and log_std.shape == lead + (3,) and v.shape == lead
    assert isinstance(state, MujocoRnnState)
    assert state.h.shape == (1, B, 16) and state.c.shape == (1, B, 16)
    out = model(obs, torch.randn(*lead, 3), torch.randn(lead), state)
    assert out[3].h.shape == (1, B, 16)


@pytest.mark.parametrize("lead", LEADS)
def test_atari_ff_shapes(lead):
    model = AtariFfModel(IMG, 6, fc_sizes=64)
    image = torch.randint(0, 256, lead + IMG, dtype=torch.uint8)
    pi, v = model(image, torch.zeros(lead), torch.zeros(lead))
    assert pi.shape == lead + (6,) and v.shape == lead
    assert torch.allclose(pi.sum(-1), torch.ones(lead))


@pytest.mark.parametrize("lead", LEADS)
def test_atari_lstm_shapes(lead):
    model = AtariLstmModel(IMG, 6, fc_sizes=64, lstm_size=32)
    B = _batch_size(lead)
    image = torch.randint(0, 256, lead + IMG, dtype=torch.uint8)
    prev_action = torch.nn.functional.one_hot(torch.randint(0, 6, lead), 6).float()
    pi, v, state = model(image, prev_action, torch.zeros(lead), None)
    assert pi.shape == lead + (6,) and v.shape == lead
    assert isinstance(state, AtariRnnState) and state.h.shape == (1, B, 32)
    assert state.c.shape == (1, B, 32)


@pytest.mark.parametrize("lead", LEADS)
def test_categorical_mlp_shapes_and_init(lead):
    model = CategoricalPgMlpModel((4,), 2)
    pi, v = model(torch.randn(*lead, 4), torch.zeros(lead), torch.zeros(lead))
    assert pi.shape == lead + (2,) and v.shape == lead
    assert torch.allclose(pi, torch.full_like(pi, 0.5), atol=0.05)  # near-uniform at init


@pytest.mark.parametrize("lead", LEADS)
def test_categorical_lstm_shapes(lead):
    model = CategoricalPgLstmModel((4,), 2, lstm_size=8)
    B = _batch_size(lead)
    pi, v, state = model(torch.randn(*lead, 4), torch.zeros(*lead, 2), torch.zeros(lead), None)
    assert pi.shape == lead + (2,) and v.shape == lead
    assert state.h.shape == (1, B, 8) and state.c.shape == (1, B, 8)


def test_lstm_state_carries_across_calls():
    model = CategoricalPgLstmModel((4,), 3, lstm_size=8)
    T, B = 6, 2
    obs, act, rew = torch.randn(T, B, 4), torch.zeros(T, B, 3), torch.randn(T, B)
    pi_all, v_all, state_all = model(obs, act, rew, None)
    pi_a, v_a, state_a = model(obs[:4], act[:4], rew[:4], None)
    pi_b, v_b, state_b = model(obs[4:], act[4:], rew[4:], state_a)
    assert torch.allclose(torch.cat([pi_a, pi_b]), pi_all, atol=1e-6)
    assert torch.allclose(torch.cat([v_a, v_b]), v_all, atol=1e-6)
    assert torch.allclose(state_b.h, state_all.h, atol=1e-6)


def test_conv_weights_are_channels_last_with_the_numbers_of_the_default_layout():
    """Only the memory order changes: the same weights in either layout give the same
    outputs and gradients, and state dicts load across layouts."""
    from rlframe.models.conv2d import Conv2dHeadModel
    torch.manual_seed(0)
    kwargs = dict(image_shape=(4, 84, 84), channels=[32, 64, 64], kernel_sizes=[8, 4, 3],
                  strides=[4, 2, 1], hidden_sizes=[512], output_size=6)
    fast = Conv2dHeadModel(**kwargs)
    plain = Conv2dHeadModel(**kwargs, channels_last=False)
    convs = [m for m in fast.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last)
                         and not c.weight.is_contiguous() for c in convs)
    assert all(m.weight.is_contiguous() for m in plain.modules()
               if isinstance(m, torch.nn.Conv2d))
    plain.load_state_dict(fast.state_dict())
    fast.load_state_dict(plain.state_dict())  # Either way round.
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    x = torch.rand(16, 4, 84, 84)
    outputs = [model(x) for model in (fast, plain)]
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    for out in outputs:
        out.pow(2).sum().backward()
    for a, b in zip(fast.parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert fast(x[:1]).shape == (1, 6)  # Any batch, any input layout.
    assert fast(x.contiguous(memory_format=torch.channels_last)).shape == (16, 6)


def test_conv_autocast_changes_the_arithmetic_only():
    """bfloat16 convolutions: float32 weights, gradients and outputs, the same state
    dict, and outputs and gradients close to float32's."""
    kwargs = dict(image_shape=(4, 84, 84), channels=[32, 64, 64], kernel_sizes=[8, 4, 3],
                  strides=[4, 2, 1], hidden_sizes=[512], output_size=6)
    plain = Conv2dHeadModel(**kwargs)
    low = Conv2dHeadModel(**kwargs, autocast="bfloat16")
    low.load_state_dict(plain.state_dict())
    assert low.state_dict().keys() == plain.state_dict().keys()
    x = torch.rand(8, 4, 84, 84)
    out, ref = low(x), plain(x)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert not torch.equal(out, ref)  # The convolutions did run in bfloat16.
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.02 * ref.abs().max().item())
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    for a, b in zip(low.parameters(), plain.parameters()):
        assert a.dtype == a.grad.dtype == torch.float32
        cosine = torch.nn.functional.cosine_similarity(a.grad.flatten(), b.grad.flatten(), 0)
        assert cosine > 0.99
    conv = Conv2dModel(4, [8], [3], [1], autocast="bfloat16").double()
    assert conv(torch.rand(2, 4, 10, 10, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize("name", ["AtariDqnModel", "AtariCatDqnModel", "AtariR2d1Model",
                                  "AtariFfModel", "AtariLstmModel"])
def test_atari_models_take_conv_autocast(name):
    import importlib
    module = {"AtariDqnModel": "dqn.atari_dqn_model", "AtariCatDqnModel": "dqn.atari_catdqn_model",
              "AtariR2d1Model": "dqn.atari_r2d1_model", "AtariFfModel": "pg.atari_ff_model",
              "AtariLstmModel": "pg.atari_lstm_model"}[name]
    Model = getattr(importlib.import_module(f"rlframe.models.{module}"), name)
    plain, low = Model(IMG, 3), Model(IMG, 3, conv_autocast="bfloat16")
    low.load_state_dict(plain.state_dict())
    image = torch.randint(0, 256, (5, 2) + IMG, dtype=torch.uint8)
    action = torch.zeros(5, 2, 3)
    reward = torch.zeros(5, 2)
    recurrent = name in ("AtariR2d1Model", "AtariLstmModel")
    outs = [model(image, action, reward, *([None] if recurrent else []))
            for model in (plain, low)]
    ref, out = (o[0] if isinstance(o, tuple) else o for o in outs)  # Q, p or pi.
    if isinstance(ref, tuple):  # (pi, v) of the recurrent policy model.
        ref, out = ref[0], out[0]
    assert out.dtype == torch.float32 and out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=0.05, atol=0.05)
    with pytest.raises(ValueError, match=r"conv_autocast.*'bfloat16', 'float16'.*'bf16'"):
        Model(IMG, 3, conv_autocast="bf16")


def test_scale_image_gives_a_new_tensor_in_zero_one():
    from rlframe.models.utils import scale_image
    pixels = torch.arange(256, dtype=torch.uint8).reshape(4, 8, 8)
    scaled = scale_image(pixels, torch.float32)
    assert scaled.dtype == torch.float32
    assert torch.equal(scaled, pixels.float() * (1. / 255))
    assert scaled[0, 0, 0] == 0 and scaled[-1, -1, -1] == 1
    floats = pixels.float()
    same = scale_image(floats, torch.float32)
    assert torch.equal(floats, pixels.float()) and same.data_ptr() != floats.data_ptr()
    doubles = pixels.double().requires_grad_()
    scale_image(doubles, torch.float32).sum().backward()  # Gradients pass the conversion.
    torch.testing.assert_close(doubles.grad, torch.full_like(doubles, 1. / 255))


class FrozenNorm(torch.nn.Module):
    """Keeps its batch norm in eval mode whatever the mode asked for."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(3)

    def train(self, mode=True):
        super().train(mode)
        self.norm.eval()
        return self


def test_set_training_sets_every_flag_as_train_does_and_runs_overrides():
    model = torch.nn.Sequential(MlpModel(3, [4, 4], 2), torch.nn.Dropout(0.5))
    for mode in (False, True, False):
        set_training(mode, model)
        assert [m.training for m in model.modules()] == [mode] * len(list(model.modules()))
    x = torch.ones(4, 3)
    assert torch.equal(model(x), model(x))  # Dropout off in eval mode.
    frozen = torch.nn.Sequential(torch.nn.Linear(3, 3), FrozenNorm())
    set_training(True, frozen, model)
    assert frozen.training and frozen[0].training and frozen[1].training
    assert not frozen[1].norm.training  # The override ran.
    assert all(m.training for m in model.modules())
