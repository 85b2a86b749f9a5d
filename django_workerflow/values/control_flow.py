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
