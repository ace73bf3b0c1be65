"""Runner interface, and the logger a runner writes to."""
from __future__ import annotations

from typing import Any

from rlframe.utils.logging.current import current_logger
from rlframe.utils.logging.run_logger import Logger


class BaseRunner:
    """Drives sampler, agent and algorithm through training: ``train()``.

    A runner owns the logger of the run it trains in, ``runner.logger``. It binds
    when ``train()`` starts: the runners' ``train`` first calls :meth:`bind_logger`,
    which takes the logger current then
    (:func:`~rlframe.utils.logging.current.current_logger`): the run's logger inside
    ``logger_context``, and the quiet logger that SyncRl ranks and AsyncRl children
    make current with ``use_logger``. A runner written from scratch calls
    ``self.bind_logger()`` at the start of its own ``train``. The runner keeps
    that logger after ``train()`` returns, until its next ``train()``; before its
    first one, ``runner.logger`` is the current logger. rlpyt's module functions
    (``logger.log``, ...) go on acting on the current logger, which is the same one
    while the run trains.

    A runner sent to another process (pickled) arrives unbound, and binds there when
    its ``train()`` starts.
    """

    # A class default, so that subclasses need not call ``BaseRunner.__init__``.
    _logger: Logger | None = None

    @property
    def logger(self) -> Logger:
        """The logger of the run this runner trains (or last trained) in."""
        return self._logger if self._logger is not None else current_logger()

    def bind_logger(self, run_logger: Logger | None = None) -> Logger:
        """Write to ``run_logger`` from now on (default: the current logger).

        ``train()`` calls it on entry; call it yourself to log through
        ``runner.logger`` to a run before training in it.

        Args:
            run_logger: the logger to bind to.

        Returns:
            The logger bound.
        """
        if run_logger is None:
            run_logger = current_logger()
        elif not isinstance(run_logger, Logger):
            raise TypeError(f"run_logger must be a Logger (or None for the current one), "
                            f"got {type(run_logger).__name__}.")
        self._logger = run_logger
        return run_logger

    def __getstate__(self) -> dict[str, Any]:
        # A logger holds open files and belongs to this process: a copy in another
        # process binds to that process's current logger when it trains.
        state = dict(self.__dict__)
        state.pop("_logger", None)
        return state

    def train(self) -> None:
        raise NotImplementedError

