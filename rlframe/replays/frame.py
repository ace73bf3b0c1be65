"""Storage of frame-stacked observations one frame per step.

An Atari observation is a stack of the last ``n_frames`` frames, ``[C, H, W]``
with ``C = n_frames``, oldest first. Consecutive observations share all but
one frame, so storing every stack wastes ``n_frames - 1`` copies. The frame
buffer keeps only each step's newest frame and rebuilds stacks when sampling.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlframe.replays.base import without_field
from rlframe.utils.buffer import buffer_from_example


class FrameBufferMixin:
    """Mixin in front of an n-step buffer: observations stored as single frames.

    ``samples_frames`` has ``T + n_frames - 1`` rows: row ``n_frames - 1 + t``
    holds the newest frame of step ``t``, and the first ``n_frames - 1`` rows
    repeat the last ones so that stacks crossing the wrap point are contiguous.
    A rebuilt stack has the frames older than an episode start zeroed, matching
    what the env returns after a reset. The oldest ``n_frames - 1`` steps are
    not sampled (their older frames are overwritten): ``off_forward`` is
    ``max(1, n_frames - 1)``.

    Args:
        example: namedtuple of one step whose ``observation`` is ``[n_frames, ...]``.
        **kwargs: the n-step buffer's other arguments (size, B, ...).

    Attributes:
        n_frames: frames per observation.
        samples_frames: ``[T + n_frames - 1, B, *frame_shape]``.
        samples_new_frames: ``[T, B, *frame_shape]`` view, the newest frame of each step.
    """

    def __init__(self, example: Any, **kwargs: Any):
        observation = np.asarray(example.observation)
        if observation.ndim < 1:
            raise ValueError("Frame buffers need an observation with a leading frame dim "
                             f"[n_frames, ...]; got shape {observation.shape}.")
        self.n_frames: int = int(observation.shape[0])
        super().__init__(example=without_field(example, "observation"), **kwargs)
        fm1 = self.n_frames - 1
        self.samples_frames: np.ndarray = buffer_from_example(
            observation[0], (self.T + fm1, self.B), share_memory=self.async_)
        self.samples_new_frames: np.ndarray = self.samples_frames[fm1:]
        self.off_forward = max(self.off_forward, fm1)
        self.validate_capacity()

    def append_samples(self, samples: Any) -> tuple[int, Any]:
        """Store a ``[T, B]`` chunk; only ``observation[:, :, -1]`` (the newest frame) is kept.

        Args:
            samples: namedarraytuple with the example's fields (observation
                ``[T, B, n_frames, ...]``).
        """
        t = self.t
        T, idxs = super().append_samples(without_field(samples, "observation"))
        self.samples_new_frames[idxs] = samples.observation[:, :, -1]
        fm1 = self.n_frames - 1
        if fm1 > 0 and t + T > self.T - fm1:
            # The chunk reached the last fm1 rows: refresh their copy at the front.
            self.samples_frames[:fm1] = self.samples_frames[-fm1:]
        return T, idxs

    def extract_observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Rebuilt frame stacks at rows ``T_idxs`` of envs ``B_idxs``.

        Args:
            T_idxs, B_idxs: integer index arrays of one shape ``S`` (e.g. [batch_B]
                or [batch_T, batch_B]).

        Returns:
            ``[*S, n_frames, *frame_shape]``, frames older than a ``done`` zeroed.
        """
        T_idxs = np.asarray(T_idxs)
        nf = self.n_frames
        # Step t's stack is samples_frames rows t .. t + nf - 1 (newest last).
        observation = np.stack([self.samples_frames[T_idxs + k, B_idxs] for k in range(nf)],
                               axis=T_idxs.ndim)
        done = self.samples.done
        older_episode = np.zeros(T_idxs.shape, dtype=bool)
        for k in range(nf - 2, -1, -1):
            # Frame k comes from step t - (nf - 1 - k); a done at or after it
            # (before t) means it belongs to an earlier episode.
            older_episode |= np.asarray(done[(T_idxs - (nf - 1 - k)) % self.T, B_idxs],
                                        dtype=bool)
            if older_episode.any():
                observation[older_episode, k] = 0
        return observation
