"""Return and advantage computations over time-major ``[T, B]`` batches.

All functions take torch tensors (numpy arrays also work) with time as the
leading dim: ``reward``, ``done``, ``value`` are ``[T, B]`` (or ``[T]``). ``done``
may be bool or float; it is converted to the reward's dtype internally. Batches
may contain episode ends anywhere: the sampler resets the environment in the
middle of a batch, so after ``done[t]`` the entry ``t + 1`` belongs to the next
episode, and returns never flow across it.
"""
from __future__ import annotations

from typing import Union

import numpy as np
import torch

Array = Union[torch.Tensor, np.ndarray]


def _as_dtype_of(x: Array | float, like: Array) -> Array:
    """``x`` converted to ``like``'s array type, dtype and device."""
    if isinstance(like, torch.Tensor):
        return torch.as_tensor(x, device=like.device).to(like.dtype)
    return np.asarray(x).astype(like.dtype)


def _zeros_like(x: Array) -> Array:
    return torch.zeros_like(x) if isinstance(x, torch.Tensor) else np.zeros_like(x)


def _bootstrap_like(bootstrap_value: Array | float, reward: Array) -> Array:
    """``bootstrap_value`` given as [B] or [1, B] (or a scalar), shaped like ``reward[0]``."""
    bv = _as_dtype_of(bootstrap_value, reward)
    step_shape = tuple(reward.shape[1:])
    if bv.ndim > 0 and tuple(bv.shape) != step_shape:
        if int(np.prod(bv.shape)) != int(np.prod(step_shape)):
            raise ValueError(f"bootstrap_value shape {tuple(bv.shape)} does not match one time "
                             f"step of reward, shape {step_shape} (or [1, *{step_shape}]).")
        bv = bv.reshape(step_shape)
    return bv


def _rows(x: Array) -> list | tuple:
    """``x[0], x[1], ...`` as views, taken in one call (indexing each step costs a call)."""
    return x.unbind(0) if isinstance(x, torch.Tensor) else list(x)


def _stack_into(steps: list, like: Array, dest: Array | None) -> Array:
    """Stack per-step [B] results (listed from ``t = 0``) into [T, B] of ``like``'s
    dtype, in ``dest`` if given."""
    if not steps:
        return _zeros_like(like) if dest is None else dest
    stacked = torch.stack(steps) if isinstance(steps[0], torch.Tensor) else np.stack(steps)
    if dest is None:
        return stacked if stacked.dtype == like.dtype else _as_dtype_of(stacked, like)
    dest[:] = stacked
    return dest


def _discounted(reward: Array, done: Array, bootstrap_value: Array | float, discount: float,
                timeout: Array | None, value: Array | None, return_dest: Array | None) -> Array:
    """Backward recursion for discounted returns; ``timeout`` (where also done) adds
    ``discount * value[t]`` to the step's return.

    Only the recursion runs step by step; what does not depend on the next step is
    computed for all steps at once, with the same arithmetic.
    """
    done_f = _as_dtype_of(done, reward)
    not_done = _rows(1 - done_f)
    cut_value = (None if timeout is None
                 else _rows((_as_dtype_of(timeout, reward) * done_f) * value))
    rewards = _rows(reward)
    running = _bootstrap_like(bootstrap_value, reward)
    steps = []
    for t in reversed(range(reward.shape[0])):
        tail = not_done[t] * running
        if cut_value is not None:
            tail = tail + cut_value[t]
        running = rewards[t] + discount * tail
        steps.append(running)
    return _stack_into(steps[::-1], reward, return_dest)


def _gae(reward: Array, value: Array, done: Array, bootstrap_value: Array | float,
         discount: float, gae_lambda: float, timeout: Array | None,
         advantage_dest: Array | None, return_dest: Array | None) -> tuple[Array, Array]:
    """Backward recursion for GAE; ``timeout`` (where also done) makes the step's
    bootstrap term ``discount * value[t]``.

    The TD errors of all steps are computed at once; only the advantage recursion
    runs step by step (two ops a step), with the same arithmetic as step by step.
    """
    done_f = _as_dtype_of(done, reward)
    not_done = 1 - done_f
    bootstrap_value = _bootstrap_like(bootstrap_value, reward)
    if isinstance(reward, torch.Tensor):
        next_value = torch.cat([value[1:], bootstrap_value.unsqueeze(0)])
    else:
        next_value = np.concatenate([value[1:], bootstrap_value[None]])
    bootstrap = not_done * next_value
    if timeout is not None:
        bootstrap = bootstrap + (_as_dtype_of(timeout, reward) * done_f) * value
    delta = _rows(reward + discount * bootstrap - value)
    decay = _rows(discount * gae_lambda * not_done)
    running = 0.
    steps = []
    for t in reversed(range(reward.shape[0])):
        running = delta[t] + decay[t] * running
        steps.append(running)
    advantage = _stack_into(steps[::-1], reward, advantage_dest)
    return_ = advantage + value
    if return_dest is not None:
        return_dest[:] = return_
        return_ = return_dest
    return advantage, return_


def discount_return(reward: Array, done: Array, bootstrap_value: Array | float, discount: float,
                    return_dest: Array | None = None) -> Array:
    """Discounted return within each episode, bootstrapped after the last step.

    ``return[t] = reward[t] + discount * (1 - done[t]) * return[t + 1]``, with
    ``return[T] = bootstrap_value``.

    Args:
        reward: [T, B].
        done: [T, B] bool or float.
        bootstrap_value: [B] or [1, B], value of the observation after the batch.
        discount: discount factor.
        return_dest: optional [T, B] output written in place.

    Returns:
        return [T, B].
    """
    return _discounted(reward, done, bootstrap_value, discount, None, None, return_dest)


def generalized_advantage_estimation(
    reward: Array, value: Array, done: Array, bootstrap_value: Array | float, discount: float,
    gae_lambda: float, advantage_dest: Array | None = None, return_dest: Array | None = None,
) -> tuple[Array, Array]:
    """Generalized advantage estimation (Schulman et al., 2016).

    ``delta[t] = reward[t] + discount * (1 - done[t]) * value[t + 1] - value[t]``,
    ``advantage[t] = delta[t] + discount * gae_lambda * (1 - done[t]) * advantage[t + 1]``,
    with ``value[T] = bootstrap_value``; ``return = advantage + value``. With
    ``gae_lambda=1`` this is :func:`discount_return` minus ``value``.

    Args:
        reward, value: [T, B].
        done: [T, B] bool or float.
        bootstrap_value: [B] or [1, B], value of the observation after the batch.
        discount, gae_lambda: discount factor and GAE lambda.
        advantage_dest, return_dest: optional [T, B] outputs written in place.

    Returns:
        ``(advantage [T, B], return [T, B])``.
    """
    return _gae(reward, value, done, bootstrap_value, discount, gae_lambda, None,
                advantage_dest, return_dest)


def discount_return_tl(reward: Array, done: Array, bootstrap_value: Array | float,
                       discount: float, timeout: Array, value: Array,
                       return_dest: Array | None = None) -> Array:
    """:func:`discount_return` that bootstraps through time-limit truncations.

    Where ``done[t]`` and ``timeout[t]`` are both true the episode was cut by a time
    limit, not ended, so its return should continue with ``V(s_{t+1})``. That state
    was never seen by the agent: the sampler reset the environment, and entry
    ``t + 1`` of the batch (or ``bootstrap_value`` at the last step) is already the
    next episode's first observation. The value of the last *observed* state stands
    in for it (``V(s_{t+1}) ~= V(s_t)``)::

        return[t] = reward[t] + discount * value[t]          # done by timeout
        return[t] = reward[t]                                # done, not timeout
        return[t] = reward[t] + discount * return[t + 1]     # not done

    Every step keeps a usable target, so no extra training mask is needed. A
    ``timeout`` entry where ``done`` is false is ignored. The env should report
    ``timeout`` only when the episode was not also terminated.

    Args:
        reward: [T, B].
        done: [T, B] bool or float.
        bootstrap_value: [B] or [1, B], value of the observation after the batch.
        discount: discount factor.
        timeout: [T, B] bool or float, true where ``done`` came from a time limit.
        value: [T, B] value estimates of the batch's observations.
        return_dest: optional [T, B] output written in place.

    Returns:
        return [T, B].
    """
    return _discounted(reward, done, bootstrap_value, discount, timeout, value, return_dest)


def generalized_advantage_estimation_tl(
    reward: Array, value: Array, done: Array, bootstrap_value: Array | float, discount: float,
    gae_lambda: float, timeout: Array, advantage_dest: Array | None = None,
    return_dest: Array | None = None,
) -> tuple[Array, Array]:
    """:func:`generalized_advantage_estimation` that bootstraps through time-limit truncations.

    At a step done by timeout, ``delta[t] = reward[t] + discount * value[t] - value[t]``
    (the unseen final state's value is approximated by ``value[t]``, see
    :func:`discount_return_tl`), and the advantage does not flow back from the next
    episode. With ``gae_lambda=1`` the return equals :func:`discount_return_tl`.

    Args:
        reward, value: [T, B].
        done: [T, B] bool or float.
        bootstrap_value: [B] or [1, B], value of the observation after the batch.
        discount, gae_lambda: discount factor and GAE lambda.
        timeout: [T, B] bool or float, true where ``done`` came from a time limit.
        advantage_dest, return_dest: optional [T, B] outputs written in place.

    Returns:
        ``(advantage [T, B], return [T, B])``.
    """
    return _gae(reward, value, done, bootstrap_value, discount, gae_lambda, timeout,
                advantage_dest, return_dest)


def discount_return_n_step(
    reward: Array, done: Array, n_step: int, discount: float, return_dest: Array | None = None,
    done_n_dest: Array | None = None, do_truncated: bool = False,
) -> tuple[Array, Array]:
    """n-step discounted reward sums (without the bootstrap term) and n-step done flags.

    ``return[t] = sum_{k<n} discount^k * reward[t+k]``, stopping after the first
    done in ``t .. t+k-1``; ``done_n[t]`` is true if any of ``done[t .. t+n-1]`` is
    (so the caller bootstraps ``discount^n * Q(s_{t+n})`` only where ``done_n`` is false).

    Args:
        reward: [T, B] (or [T]).
        done: [T, B] bool or float.
        n_step: number of steps summed.
        discount: discount factor.
        return_dest, done_n_dest: optional outputs written in place.
        do_truncated: if False, compute only the ``T - n_step + 1`` steps that have n
            future rewards; if True, compute all T, the last ``n_step - 1`` using what
            the batch holds.

    Returns:
        ``(return, done_n)``, each [T', B] with T' = T or T - n_step + 1; ``done_n``
        has ``done``'s dtype.
    """
    T = reward.shape[0]
    length = T if do_truncated else T - (n_step - 1)
    if length <= 0:
        raise ValueError(f"discount_return_n_step: n_step={n_step} needs at least {n_step} time "
                         f"steps when do_truncated=False, got T={T}.")
    done_f = _as_dtype_of(done, reward)
    maximum = torch.maximum if isinstance(reward, torch.Tensor) else np.maximum
    return_ = reward[:length] * 1  # a copy
    done_n = done_f[:length] * 1
    for k in range(1, n_step):
        m = min(length, T - k)  # positions t with t + k still inside the batch
        return_[:m] += (discount ** k) * reward[k:k + m] * (1 - done_n[:m])
        done_n[:m] = maximum(done_n[:m], done_f[k:k + m])
    done_n = _as_dtype_of(done_n, done)
    if return_dest is not None:
        return_dest[:] = return_
        return_ = return_dest
    if done_n_dest is not None:
        done_n_dest[:] = done_n
        done_n = done_n_dest
    return return_, done_n


def valid_from_done(done: Array) -> Array:
    """Mask that is 1 up to and including the first done along T, 0 after.

    Used where each ``B`` column is one episode segment (recurrent training, or
    samplers that do not reset mid-batch).

    Args:
        done: [T, B] bool or float.

    Returns:
        valid [T, B] float32.
    """
    if isinstance(done, torch.Tensor):
        done_f = done.to(torch.float32)
        valid = torch.ones_like(done_f)
        valid[1:] = 1 - torch.clamp(torch.cumsum(done_f[:-1], dim=0), max=1)
        return valid
    done_f = np.asarray(done).astype(np.float32)
    valid = np.ones_like(done_f)
    valid[1:] = 1 - np.minimum(np.cumsum(done_f[:-1], axis=0), 1)
    return valid
