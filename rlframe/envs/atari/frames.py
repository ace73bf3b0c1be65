"""Atari frame processing: rlpyt's 104x80 halving and DeepMind-style area resizing.

Both take the grayscale max of the last two raw frames of a frame skip and write one
processed frame into the observation stack, allocating nothing per step.
"""
from __future__ import annotations

import math
import sys

import numpy as np

RAW_H, RAW_W = 210, 160  # ALE screen size.
RLPYT_SHAPE = (104, 80)  # Cropped to 208 rows, then halved.
_LITTLE_ENDIAN = sys.byteorder == "little"
DEEPMIND_SHAPE = (84, 84)
"""DeepMind's frame size (DQN Nature paper; Stable-Baselines3 and EnvPool by default)."""


def downsample(frame: np.ndarray, out: np.ndarray | None = None,
               scratch: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """2x2 block mean, rounded half up, of a cropped frame:
    ``(a[0::2, 0::2] + a[1::2, 0::2] + a[0::2, 1::2] + a[1::2, 1::2] + 2) // 4``.

    Pairs of rows are summed into uint16; each pair of neighbouring uint16 sums is then
    read as one little-endian uint32 ``e + 65536 * o``, whose product with 65537 holds
    ``e + o`` in its upper half (the ``65536 * o * 65536`` term falls off the top). So
    the column pairs are summed by one multiplication instead of two strided reads.

    Args:
        frame: [2h, 2w] uint8 (rlpyt's [208, 160]).
        out: [h, w] uint8 to write into (a new array if None).
        scratch: uint16 [h, 2w] and uint32 [h, w] arrays to reuse (AtariEnv passes
            its own, so a step allocates nothing).

    Returns:
        [h, w] uint8 (``out``).
    """
    h, w = frame.shape[0] // 2, frame.shape[1] // 2
    rows, sums = scratch if scratch is not None else (np.empty((h, 2 * w), np.uint16),
                                                      np.empty((h, w), np.uint32))
    np.add(frame[0::2], frame[1::2], out=rows, dtype=np.uint16)  # Pairs of rows.
    if _LITTLE_ENDIAN:
        np.multiply(rows.view(np.uint32), 65537, out=sums)  # Upper half: e + o.
        sums += 2 << 16  # Round half up: (e + o + 2) >> 2 lands in bits 18 and up.
        sums >>= 18
    else:
        np.add(rows[:, 0::2], rows[:, 1::2], out=sums)
        sums += 2
        sums >>= 2
    if out is None:
        return sums.astype(np.uint8)
    np.copyto(out, sums, casting="unsafe")
    return out


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """Weights of an area (box) resize of one axis from ``n_in`` to ``n_out <= n_in`` cells.

    Output cell ``i`` covers the input interval ``[i * s, (i + 1) * s)``, ``s = n_in /
    n_out``; it is the mean of the input cells over that interval, each weighted by the
    length of its overlap (OpenCV's ``INTER_AREA`` when shrinking).

    Returns:
        [n_out, n_in] float32; every row sums to 1.
    """
    if not 1 <= n_out <= n_in:
        raise ValueError(f"area_weights: need 1 <= n_out <= n_in, got n_in={n_in}, "
                         f"n_out={n_out}.")
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            weights[i, j] = min(hi, j + 1) - max(lo, j)
    return (weights / scale).astype(np.float32)


class AreaResize:
    """Resizes [210, 160] uint8 frames to ``shape`` by area averaging, rounded to the
    nearest level: ``round(rows @ frame @ cols.T)`` with :func:`area_weights` for each
    axis, in float32 scratch arrays kept between calls.

    The weights repeat with a period of ``gcd(n_in, n_out)`` blocks along each axis
    (84 of 210 rows: every 5 rows give 2), so each product runs block by block, on a
    [n_out / g, n_in / g] matrix, instead of on mostly zero [n_out, n_in] ones.

    DeepMind's Atari frames (84x84, as in the DQN Nature paper, Stable-Baselines3's
    ``WarpFrame`` and EnvPool) resize the whole screen this way; OpenCV computes the
    same weights, and its result differs from this one by at most one level where
    rounding falls the other way.

    Args:
        shape: ``(height, width)``, at most ``(210, 160)``.
    """

    def __init__(self, shape: tuple[int, int]) -> None:
        h, w = int(shape[0]), int(shape[1])
        self.shape = (h, w)
        self._row_blocks, self._col_blocks = math.gcd(RAW_H, h), math.gcd(RAW_W, w)
        self._rows = area_weights(RAW_H // self._row_blocks, h // self._row_blocks)
        self._cols_t = np.ascontiguousarray(
            area_weights(RAW_W // self._col_blocks, w // self._col_blocks).T)
        self._frame = np.zeros((RAW_H, RAW_W), np.float32)
        self._half = np.zeros((h, RAW_W), np.float32)
        self._out = np.zeros((h, w), np.float32)

    def __call__(self, frame: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Resize ``frame`` [210, 160] uint8 into ``out`` [h, w] uint8 (new if None)."""
        (h, w), g_rows, g_cols = self.shape, self._row_blocks, self._col_blocks
        np.copyto(self._frame, frame)
        np.matmul(self._rows, self._frame.reshape(g_rows, RAW_H // g_rows, RAW_W),
                  out=self._half.reshape(g_rows, h // g_rows, RAW_W))
        # The column blocks of all rows as one 2-D product (a 3-D one runs a product per row).
        np.matmul(self._half.reshape(h * g_cols, RAW_W // g_cols), self._cols_t,
                  out=self._out.reshape(h * g_cols, w // g_cols))
        np.rint(self._out, out=self._out)
        if out is None:
            return self._out.astype(np.uint8)
        np.copyto(out, self._out, casting="unsafe")
        return out
