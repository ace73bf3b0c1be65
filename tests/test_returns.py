"""Discounted returns, GAE, n-step returns and valid masks (rlframe.algos.returns)."""
import numpy as np
import pytest
import torch

from rlframe.algos import returns
from rlframe.algos.returns import (discount_return, discount_return_n_step, discount_return_tl,
                                   generalized_advantage_estimation,
                                   generalized_advantage_estimation_tl, valid_from_done)

GAMMA, LAM = 0.9, 0.5
# Column 0: episode ends at t=1, the env resets, steps 2-3 are a new episode.
# Column 1: episode ends at the last step t=3.
REWARD = torch.tensor([[1., 2.], [1., 0.], [1., 1.], [1., 3.]])
DONE = torch.tensor([[False, False], [True, False], [False, False], [False, True]])
VALUE = torch.tensor([[0.5, 1.], [1., 2.], [2., 0.], [4., 1.]])
BOOTSTRAP = torch.tensor([10., 5.])

# Hand-computed: return[t] = r[t] + gamma * (1 - done[t]) * return[t + 1], return[T] = bootstrap.
RETURN = torch.tensor([[1.9, 4.997], [1., 3.33], [10., 3.7], [10., 3.]])
# delta[t] = r[t] + gamma * (1 - done[t]) * V[t+1] - V[t];
# col 0: 1.4, 0, 2.6, 6;  col 1: 2.8, -2, 1.9, 2
# adv[t] = delta[t] + gamma * lambda * (1 - done[t]) * adv[t + 1]
ADVANTAGE = torch.tensor([[1.4, 2.8 + 0.45 * -0.74], [0., -0.74], [5.3, 2.8], [6., 2.]])


def test_discount_return_hand_values():
    ret = discount_return(REWARD, DONE, BOOTSTRAP, GAMMA)
    assert torch.allclose(ret, RETURN, atol=1e-5)
    # [1, B] bootstrap value, float done, destination buffer
    dest = torch.zeros(4, 2)
    out = discount_return(REWARD, DONE.float(), BOOTSTRAP.unsqueeze(0), GAMMA, return_dest=dest)
    assert out is dest and torch.allclose(dest, RETURN, atol=1e-5)


def test_discount_return_numpy():
    ret = discount_return(REWARD.numpy(), DONE.numpy(), BOOTSTRAP.numpy(), GAMMA)
    assert isinstance(ret, np.ndarray)
    np.testing.assert_allclose(ret, RETURN.numpy(), atol=1e-5)


def test_gae_hand_values():
    adv, ret = generalized_advantage_estimation(REWARD, VALUE, DONE, BOOTSTRAP, GAMMA, LAM)
    assert torch.allclose(adv, ADVANTAGE, atol=1e-5)
    assert torch.allclose(ret, ADVANTAGE + VALUE, atol=1e-5)
    adv_dest, ret_dest = torch.zeros(4, 2), torch.zeros(4, 2)
    out = generalized_advantage_estimation(REWARD, VALUE, DONE, BOOTSTRAP.unsqueeze(0), GAMMA,
                                           LAM, advantage_dest=adv_dest, return_dest=ret_dest)
    assert out[0] is adv_dest and out[1] is ret_dest
    assert torch.allclose(adv_dest, ADVANTAGE, atol=1e-5)
    adv_np, _ = generalized_advantage_estimation(REWARD.numpy(), VALUE.numpy(), DONE.numpy(),
                                                 BOOTSTRAP.numpy(), GAMMA, LAM)
    np.testing.assert_allclose(adv_np, ADVANTAGE.numpy(), atol=1e-5)


def test_gae_lambda_one_is_return_minus_value():
    torch.manual_seed(0)
    reward, value = torch.randn(7, 3), torch.randn(7, 3)
    done = torch.rand(7, 3) < 0.3
    bootstrap = torch.randn(3)
    adv, ret = generalized_advantage_estimation(reward, value, done, bootstrap, 0.99, 1.0)
    expected = discount_return(reward, done, bootstrap, 0.99)
    assert torch.allclose(ret, expected, atol=1e-5)
    assert torch.allclose(adv, expected - value, atol=1e-5)


def test_gae_lambda_zero_is_one_step_td():
    adv, _ = generalized_advantage_estimation(REWARD, VALUE, DONE, BOOTSTRAP, GAMMA, 0.0)
    deltas = torch.tensor([[1.4, 2.8], [0., -2.], [2.6, 1.9], [6., 2.]])
    assert torch.allclose(adv, deltas, atol=1e-5)


def test_valid_from_done():
    done = torch.tensor([[0., 0.], [1., 0.], [0., 1.], [1., 0.]])
    expected = torch.tensor([[1., 1.], [1., 1.], [0., 1.], [0., 0.]])
    assert torch.equal(valid_from_done(done), expected)
    assert torch.equal(valid_from_done(done.bool()), expected)
    np.testing.assert_array_equal(valid_from_done(done.numpy()), expected.numpy())


# --- n-step --------------------------------------------------------------------------------

N_REWARD = torch.tensor([[1., 1.], [2., 1.], [3., 1.], [4., 1.], [5., 1.]])
N_DONE = torch.tensor([[0, 0], [0, 0], [1, 0], [0, 0], [0, 1]], dtype=torch.bool)
# n = 3, gamma = 0.5. Col 0: done at t=2 cuts the sums; col 1: done at the last step.
N_RETURN = torch.tensor([[1 + 1 + 0.75, 1.75], [2 + 1.5, 1.75], [3., 1.75], [4 + 2.5, 1.5],
                         [5., 1.]])
N_DONE_N = torch.tensor([[1, 0], [1, 0], [1, 1], [0, 1], [0, 1]], dtype=torch.bool)


def test_n_step_full_windows_only():
    ret, done_n = discount_return_n_step(N_REWARD, N_DONE, 3, 0.5)
    assert ret.shape == (3, 2) and done_n.dtype == torch.bool
    assert torch.allclose(ret, N_RETURN[:3])
    assert torch.equal(done_n, N_DONE_N[:3])


def test_n_step_truncated_and_dests():
    ret_dest, done_dest = torch.zeros(5, 2), torch.zeros(5, 2)
    ret, done_n = discount_return_n_step(N_REWARD, N_DONE.float(), 3, 0.5, return_dest=ret_dest,
                                         done_n_dest=done_dest, do_truncated=True)
    assert ret is ret_dest and done_n is done_dest
    assert torch.allclose(ret, N_RETURN)
    assert torch.equal(done_n, N_DONE_N.float())
    ret_np, done_np = discount_return_n_step(N_REWARD.numpy(), N_DONE.numpy(), 3, 0.5,
                                             do_truncated=True)
    np.testing.assert_allclose(ret_np, N_RETURN.numpy())
    np.testing.assert_array_equal(done_np, N_DONE_N.numpy())


def test_n_step_one_is_reward():
    ret, done_n = discount_return_n_step(N_REWARD, N_DONE, 1, 0.5)
    assert torch.equal(ret, N_REWARD) and torch.equal(done_n, N_DONE)
    assert ret.data_ptr() != N_REWARD.data_ptr()  # a copy, not a view


def test_n_step_too_short_batch():
    with pytest.raises(ValueError):
        discount_return_n_step(N_REWARD[:2], N_DONE[:2], 3, 0.5)


# --- time limits ---------------------------------------------------------------------------

def test_discount_return_tl_timeout_bootstraps_termination_does_not():
    # Column 0's done at t=1 is a timeout; column 1's done at t=3 is a real termination.
    timeout = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    ret = discount_return_tl(REWARD, DONE, BOOTSTRAP, GAMMA, timeout, VALUE)
    # col 0: t=1 -> r + gamma * V[1] = 1 + 0.9 * 1 = 1.9; t=0 -> 1 + 0.9 * 1.9 = 2.71
    expected = torch.tensor([[2.71, 4.997], [1.9, 3.33], [10., 3.7], [10., 3.]])
    assert torch.allclose(ret, expected, atol=1e-5)
    # Without any timeout it is the plain discounted return.
    no_timeout = discount_return_tl(REWARD, DONE, BOOTSTRAP, GAMMA, torch.zeros(4, 2), VALUE)
    assert torch.allclose(no_timeout, RETURN, atol=1e-5)


def test_discount_return_tl_timeout_at_last_step_ignores_bootstrap_value():
    # At the batch end a timeout uses V[T-1]; bootstrap_value belongs to the next episode.
    timeout = torch.tensor([[False, False]] * 3 + [[False, True]])
    ret = discount_return_tl(REWARD, DONE, BOOTSTRAP.unsqueeze(0), GAMMA, timeout, VALUE)
    # col 1: t=3 -> 3 + 0.9 * 1 = 3.9; t=2 -> 1 + 0.9 * 3.9 = 4.51; t=1 -> 4.059; t=0 -> 5.6531
    assert torch.allclose(ret[:, 1], torch.tensor([5.6531, 4.059, 4.51, 3.9]), atol=1e-5)
    assert torch.allclose(ret[:, 0], RETURN[:, 0], atol=1e-5)


def test_timeout_without_done_is_ignored():
    timeout = torch.tensor([[True, True], [False, False], [True, False], [False, False]])
    ret = discount_return_tl(REWARD, DONE, BOOTSTRAP, GAMMA, timeout, VALUE)
    assert torch.allclose(ret, RETURN, atol=1e-5)


def test_gae_tl_hand_values():
    timeout = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    adv, ret = generalized_advantage_estimation_tl(REWARD, VALUE, DONE, BOOTSTRAP, GAMMA, LAM,
                                                   timeout)
    # col 0, t=1: delta = 1 + 0.9 * V[1] - V[1] = 0.9; t=0: 1.4 + 0.45 * 0.9 = 1.805
    expected = ADVANTAGE.clone()
    expected[1, 0], expected[0, 0] = 0.9, 1.805
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.allclose(ret, expected + VALUE, atol=1e-5)
    # Real termination (no timeout flag) gives plain GAE.
    adv_plain, _ = generalized_advantage_estimation_tl(REWARD, VALUE, DONE, BOOTSTRAP, GAMMA,
                                                       LAM, torch.zeros(4, 2, dtype=torch.bool))
    assert torch.allclose(adv_plain, ADVANTAGE, atol=1e-5)


def test_gae_tl_lambda_one_matches_discount_return_tl():
    torch.manual_seed(1)
    reward, value = torch.randn(8, 3), torch.randn(8, 3)
    done = torch.rand(8, 3) < 0.3
    timeout = done & (torch.rand(8, 3) < 0.5)
    bootstrap = torch.randn(1, 3)
    adv, ret = generalized_advantage_estimation_tl(reward, value, done, bootstrap, 0.97, 1.0,
                                                   timeout)
    expected = discount_return_tl(reward, done, bootstrap, 0.97, timeout, value)
    assert torch.allclose(ret, expected, atol=1e-5)
    assert torch.allclose(adv, expected - value, atol=1e-5)
    ret_np = discount_return_tl(reward.numpy(), done.numpy(), bootstrap.numpy(), 0.97,
                                timeout.numpy(), value.numpy())
    np.testing.assert_allclose(ret_np, expected.numpy(), atol=1e-5)


def test_rlpyt_import_path_reexports_the_same_functions():
    from rlframe.algos import utils
    for name in ("discount_return", "discount_return_n_step", "discount_return_tl",
                 "generalized_advantage_estimation", "generalized_advantage_estimation_tl",
                 "valid_from_done"):
        assert getattr(utils, name) is getattr(returns, name), name
