"""Replay buffers for off-policy algorithms.

Storage is preallocated ``[T, B]`` numpy arrays (T time steps per env, B
envs), written in chunks as the sampler produces them and read back as torch
tensors with a leading ``[batch_B]`` (or ``[batch_T, batch_B]``) dimension.

Layout:

* :mod:`~rlframe.replays.base`: :class:`BaseReplayBuffer` interface.
* :mod:`~rlframe.replays.n_step`: ring storage and n-step returns.
* :mod:`~rlframe.replays.sum_tree`: :class:`SumTree` for prioritized sampling.
* :mod:`~rlframe.replays.frame`: :class:`FrameBufferMixin`, storing one frame per step.
* :mod:`~rlframe.replays.non_sequence`: single-step samples (DQN, DDPG, TD3, SAC).
* :mod:`~rlframe.replays.sequence`: ``[batch_T, batch_B]`` sequences (R2D1).

Buffers are assembled from mixins, outermost first: the sampling mixin
(uniform or prioritized), then the observation storage (frames or whole
observations), then the n-step storage.
"""
