"""A worker's death, staged: the exception a callback raises for the worker process dying
in the middle of it (nothing in the engine catches a ``WorkerDeath``)."""

from __future__ import annotations

from collections.abc import Callable

from django_workerflow.testing import WorkerDeath


class WorkerDiedError(WorkerDeath):
    """Stands for the worker process dying in the middle of a callback."""


def dies_once(result: str = "ok") -> Callable[[], str]:
    """A callback whose first call dies as the worker would, and whose next calls return
    ``result``."""
    deaths = [1]

    def callback() -> str:
        if deaths:
            deaths.pop()
            raise WorkerDiedError()
        return result

    return callback
