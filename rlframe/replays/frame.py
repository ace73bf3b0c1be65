"""Storage of frame-stacked observations one frame per step.

An Atari observation is a stack of the last ``n_frames`` frames, ``[C, H, W]``
with ``C = n_frames``, oldest first. Consecutive observations share all but
one frame, so storing every stack wastes ``n_frames - 1`` copies. The frame
store keeps only each step's newest frame and rebuilds stacks when sampling.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlframe.replays.storage import RingStorage

if TYPE_CHECKING:
    import torch


class FrameStore:
    """Observations stored as their newest frame, stacks rebuilt on sampling.

    ``frames`` has ``T + n_frames - 1`` rows: row ``n_frames - 1 + t`` holds the
    newest frame of step ``t``, and the first ``n_frames - 1`` rows repeat the
    last ones so that stacks crossing the wrap point are contiguous. A rebuilt
    stack has the frames older than an episode start zeroed, matching what the
    env returns after a reset. The oldest ``n_frames - 1`` steps are not
    sampled (their older frames are overwritten): ``off_forward`` is
    ``max(1, n_frames - 1)``.

    Args:
        observation: one example observation ``[n_frames, *frame_shape]``.

    Attributes:
        n_frames: frames per observation.
        frames: ``[T + n_frames - 1, B, *frame_shape]``.
        new_frames: ``[T, B, *frame_shape]`` view, the newest frame of each step.
    """

    def __init__(self, observation: np.ndarray):
        observation = np.asarray(observation)
        if observation.ndim < 1:
            raise ValueError("Frame buffers need an observation with a leading frame dim "
                             f"[n_frames, ...]; got shape {observation.shape}.")
        self.n_frames: int = int(observation.shape[0])
        self.off_forward: int = max(1, self.n_frames - 1)
        self._frame_example: np.ndarray = observation[0]
        self.frames: np.ndarray | None = None
        self.new_frames: np.ndarray | None = None
        self._storage: RingStorage | None = None

    def build(self, storage: RingStorage) -> None:
        """Allocate the frame rows for ``storage``'s ``T`` and ``B``."""
        self._storage = storage
        fm1 = self.n_frames - 1
        self.frames = storage.allocate(self._frame_example, (storage.T + fm1, storage.B))
        self.new_frames = self.frames[fm1:]

    def write(self, t: int, T_new: int, idxs: slice | np.ndarray,
              observation: np.ndarray | torch.Tensor) -> None:
        """Keep ``observation[:, :, -1]`` (the newest frame) of a chunk written at row ``t``.

        Args:
            t: the cursor before the chunk was written.
            T_new: chunk length.
            idxs: the rows written.
            observation: ``[T_new, B, n_frames, *frame_shape]``.
        """
        self.new_frames[idxs] = observation[:, :, -1]
        fm1, T = self.n_frames - 1, self._storage.T
        if fm1 > 0 and t + T_new > T - fm1:
            # The chunk reached the last fm1 rows: refresh their copy at the front.
            self.frames[:fm1] = self.frames[-fm1:]

    def extract(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Rebuilt frame stacks at rows ``T_idxs`` of envs ``B_idxs``.

        Args:
            T_idxs, B_idxs: integer index arrays of one shape ``S`` (e.g. [batch_B]
                or [batch_T, batch_B]).

        Returns:
            ``[*S, n_frames, *frame_shape]``, frames older than a ``done`` zeroed.
        """
        T_idxs = np.asarray(T_idxs)
        nf, T = self.n_frames, self._storage.T
        # Step t's stack is frames rows t .. t + nf - 1 (newest last).
        observation = np.stack([self.frames[T_idxs + k, B_idxs] for k in range(nf)],
                               axis=T_idxs.ndim)
        done = self._storage.samples.done
        older_episode = np.zeros(T_idxs.shape, dtype=bool)
        for k in range(nf - 2, -1, -1):
            # Frame k comes from step t - (nf - 1 - k); a done at or after it
            # (before t) means it belongs to an earlier episode.
            older_episode |= np.asarray(done[(T_idxs - (nf - 1 - k)) % T, B_idxs], dtype=bool)
            if older_episode.any():
                observation[older_episode, k] = 0
        return observation
