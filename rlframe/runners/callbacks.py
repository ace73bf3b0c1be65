"""Runner callbacks: extend a training run (stop early, log more, checkpoint) without
copying ``train()``.

A callback is any object with some of the methods of :class:`Callback`; the
runner calls those it finds, in the order of its ``callbacks`` list::

    runner = MinibatchRlEval(..., callbacks=[StopAtReturn(195.)])
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, NamedTuple, Sequence

if TYPE_CHECKING:
    # The runners import this module, so their module stays out of it: BaseRunner
    # (a leaf) names what every runner is.
    from rlframe.runners.base import BaseRunner
    from rlframe.samplers.collections import Samples

CALLBACK_METHODS = ("on_startup", "on_iteration_end", "on_log", "on_shutdown")

# Column of the environment steps trained so far (progress.csv's name).
CUM_STEPS_KEY = "Diagnostics/CumSteps"


class Callback:
    """Base class of runner callbacks; every method is an optional no-op.

    Subclass it and override what you need. Objects that do not subclass it
    work too, as long as they define at least one of these methods.
    """

    def on_startup(self, runner: BaseRunner) -> None:
        """Called once, after the runner's startup (sampler, agent and algo initialized).

        Args:
            runner: the runner (``runner.agent``, ``runner.algo``, ``runner.n_itr``, ...).
        """

    def on_iteration_end(self, runner: BaseRunner, itr: int, samples: Samples | None,
                         opt_info: NamedTuple) -> None:
        """Called after every training iteration, before its log point if it has one.

        The return value is ignored: stop a run from :meth:`on_log`.

        Args:
            runner: the runner.
            itr: the iteration just trained (0, 1, ... in order).
            samples: the batch trained on, ``[T, B]`` leading dims; the sampler
                overwrites this buffer next iteration, so copy what you keep. None
                with the asynchronous runners (their batches go to the replay).
            opt_info: the algorithm's ``OptInfo`` of this iteration.
        """

    def on_log(self, runner: BaseRunner, itr: int, diagnostics: dict[str, float]) -> bool | None:
        """Called once per diagnostics row, right after it was written.

        Args:
            runner: the runner.
            itr: the row's iteration (``MinibatchRlEval`` first logs a row at
                ``itr=-1``, before any training).
            diagnostics: the row, keyed like progress.csv's columns
                (``"Diagnostics/CumSteps"``, ``"ReturnAverage"``, ...).

        Returns:
            ``False`` to end the run after this log point: its snapshot is the
            final one, then the runner shuts down. Anything else continues.
        """
        return None

    def on_shutdown(self, runner: BaseRunner) -> None:
        """Called once when the run ends, also after an error or a stop by a callback.

        Runs before the sampler shuts down, for every run whose :meth:`on_startup`
        phase was reached.
        """


class StopAtReturn(Callback):
    """Ends the run at the first log row whose ``key`` reaches ``threshold``.

    Rows logged before any training iteration (``MinibatchRlEval``'s evaluation
    of the untrained agent) never stop the run: an agent that was not trained
    has not learned anything. Rows whose value is NaN (no completed
    trajectory in the window or the evaluation) do not count either.

    Args:
        threshold: stop once the value is ``>= threshold``.
        key: progress.csv column to watch (``"ReturnAverage"``: the average
            evaluation return with ``MinibatchRlEval``, the average return of the
            recent training trajectories with ``MinibatchRl``).

    Attributes:
        history: ``(env steps trained, value)`` for every log row of the last
            run, NaN values included; the steps are the row's
            ``Diagnostics/CumSteps`` (0 for the row logged before training).
        stopped_itr: iteration of the row that stopped the run (None if none did).
    """

    def __init__(self, threshold: float, key: str = "ReturnAverage"):
        if (not isinstance(threshold, numbers.Real) or isinstance(threshold, bool)
                or math.isnan(threshold)):
            raise TypeError(f"threshold must be a number (not NaN), got {threshold!r}.")
        if not isinstance(key, str):
            raise TypeError(f"key must be a progress.csv column name (str), got {key!r}.")
        self.threshold = float(threshold)
        self.key = key
        self.history: list[tuple[int, float]] = []
        self.stopped_itr: int | None = None
        self._trained = False

    def __repr__(self) -> str:
        return f"StopAtReturn(threshold={self.threshold!r}, key={self.key!r})"

    def on_startup(self, runner: BaseRunner) -> None:
        self.history = []
        self.stopped_itr = None
        self._trained = False

    def on_iteration_end(self, runner: BaseRunner, itr: int, samples: Samples | None,
                         opt_info: NamedTuple) -> None:
        self._trained = True

    def on_log(self, runner: BaseRunner, itr: int, diagnostics: dict[str, float]) -> bool:
        if self.key not in diagnostics:
            raise KeyError(f"StopAtReturn(key={self.key!r}): the logged row has no such "
                           f"column; available: {sorted(diagnostics)}.")
        value = float(diagnostics[self.key])
        steps = int(diagnostics.get(CUM_STEPS_KEY, 0)) if self._trained else 0
        self.history.append((steps, value))
        if self._trained and value >= self.threshold:  # False for NaN
            self.stopped_itr = itr
            return False
        return True


def is_callback(obj: object) -> bool:
    """Whether ``obj`` is a callback instance: it has one of :data:`CALLBACK_METHODS`."""
    if isinstance(obj, type):  # A class where an instance was meant.
        return False
    return any(callable(getattr(obj, name, None)) for name in CALLBACK_METHODS)


def check_callbacks(callbacks: Sequence[Callback] | None) -> list[Callback]:
    """The runner's ``callbacks`` argument as a list, or a TypeError naming the bad entry."""
    allowed = "an object with any of the methods " + ", ".join(CALLBACK_METHODS)
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        hint = " (wrap a single callback in a list)" if is_callback(callbacks) else ""
        raise TypeError(f"callbacks must be a list of callbacks (each {allowed}) or None, "
                        f"got {callbacks!r}{hint}.")
    for i, callback in enumerate(callbacks):
        if not is_callback(callback):
            hint = " (pass an instance, not the class)" if isinstance(callback, type) else ""
            raise TypeError(f"callbacks[{i}] must be a callback ({allowed}), "
                            f"got {callback!r}{hint}.")
    return list(callbacks)
