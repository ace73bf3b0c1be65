"""Video files of RGB frames: MP4 through imageio's ffmpeg, else an animated GIF (Pillow).

MP4 frames go to ffmpeg as they come; a GIF holds its frames (one byte a pixel,
palette images) until :meth:`VideoWriter.close` writes it, so long episodes
are better recorded as MP4.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

VIDEO_FORMATS = ("mp4", "gif")
INSTALL_HINT = 'pip install "rlframe[video]"'


def available_formats() -> list[str]:
    """The formats this Python can write, preferred first: ``mp4`` needs ``imageio``
    and ``imageio-ffmpeg``, ``gif`` needs Pillow."""
    def importable(module: str) -> bool:
        return importlib.util.find_spec(module) is not None

    formats = []
    if importable("imageio") and importable("imageio_ffmpeg"):
        formats.append("mp4")
    if importable("PIL"):
        formats.append("gif")
    return formats


def choose_format(requested: str | None = None) -> str:
    """``requested`` if it can be written, else (``None``) the preferred available format.

    Raises:
        ImportError: the format's packages are missing, naming the extra to install.
    """
    if requested is not None and requested not in VIDEO_FORMATS:
        raise ValueError(f"video format {requested!r}: choose one of {VIDEO_FORMATS}.")
    available = available_formats()
    if requested is None and available:
        return available[0]
    if requested in available:
        return requested
    needs = {"mp4": "imageio and imageio-ffmpeg", "gif": "Pillow",
             None: "imageio with imageio-ffmpeg (MP4) or Pillow (GIF)"}[requested]
    raise ImportError(f"writing videos needs {needs}: {INSTALL_HINT}.")


class VideoWriter:
    """Frames appended one by one to a video file of format ``mp4`` or ``gif``.

    Args:
        path: the file to write (its extension is not checked).
        video_format: ``"mp4"`` or ``"gif"`` (see :func:`choose_format`).
        fps: frames per second of playback.
    """

    def __init__(self, path: str | os.PathLike, video_format: str, fps: float) -> None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got fps={fps!r}.")
        self.path: str = os.fspath(path)
        self.video_format: str = choose_format(video_format)
        self.fps: float = float(fps)
        self.n_frames: int = 0
        self._gif_frames: list[Any] = []
        self._mp4: Any = None
        if self.video_format == "mp4":
            import imageio
            # Frames of even height and width pass unscaled (libx264's yuv420p needs that).
            self._mp4 = imageio.get_writer(self.path, format="FFMPEG", mode="I", fps=self.fps,
                                           macro_block_size=2, ffmpeg_log_level="error")

    def append(self, frame: np.ndarray) -> None:
        """Add one frame, [H, W, 3] uint8 RGB."""
        frame = np.asarray(frame, dtype=np.uint8)
        if self._mp4 is not None:
            self._mp4.append_data(frame)
        else:
            from PIL import Image
            self._gif_frames.append(Image.fromarray(frame).convert("P", palette=Image.ADAPTIVE))
        self.n_frames += 1

    def close(self) -> None:
        """Finish the file (a GIF is written now)."""
        if self._mp4 is not None:
            self._mp4.close()
            self._mp4 = None
        elif self._gif_frames:
            first, *rest = self._gif_frames
            first.save(self.path, save_all=True, append_images=rest, loop=0,
                       duration=max(1, round(1000 / self.fps)))
            self._gif_frames = []

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
