"""Control flow that travels through user code without being caught by ``except Exception``."""

from __future__ import annotations

from django_workerflow.values.states import StopReason


class Suspension(BaseException):
    """The current execution cannot go further in this tick (a sleep, wait or retry is pending)."""


class ExecutionStopped(Suspension):
    """The tick must stop now: the instance left 'running' or the worker lost its lease."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason = reason


class TickAborted(BaseException):
    """The engine's own bookkeeping hit a database error: the tick ends at once, without
    recording anything more; its lease runs out and the next tick recovers the instance."""


class WorkerDeath(BaseException):
    """Stands for the worker process dying where it is raised (tests): like a SIGKILL, it
    records nothing on its way out, so the attempt it escapes is found interrupted later."""


#: Raised by the worker host, not by user code: django-q2's task timeout (a SystemExit) is
#: followed by the worker's destruction. Named, not imported: this layer has no django-q2.
_HOST_SIGNALS = frozenset({("django_q.exceptions", "TimeoutException")})


def passes_through(exc: BaseException) -> bool:
    """Whether ``exc``, escaping user code (a step's callback, a task function, a workflow's
    ``execute``), travels on unrecorded: the engine's own signals, a generator being closed,
    the worker host's own exit, a simulated worker death. Anything else that escapes
    (``SystemExit`` from ``exit()``, ``KeyboardInterrupt``, any ``Exception``) is the
    attempt's failure, recorded with its class; the worker process lives on."""
    if isinstance(exc, (Suspension, TickAborted, WorkerDeath, GeneratorExit)):
        return True
    cls = type(exc)
    return any((c.__module__, c.__qualname__) in _HOST_SIGNALS for c in cls.__mro__)
