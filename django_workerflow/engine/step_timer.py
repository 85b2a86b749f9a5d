"""The time limit of a run step's attempt: a timer that interrupts its callback.

In the main thread of a POSIX process (a django-q2 worker runs its tasks there) the limit is a
``SIGALRM`` timer whose handler raises :class:`StepTimeoutError` in the callback: it ends a
``time.sleep``, a blocking socket read (PEP 475 lets the handler's exception through) and a
busy Python loop. A callback inside one C call (``os.system``, a C extension's long
computation) only sees the exception when that call returns; if it never does, the worker's
process timeout ends it and the engine counts the attempt as interrupted.

Anywhere else (another thread, a platform without ``setitimer``) no signal can be used: the
limit is checked when the callback returns, and an attempt that overran is recorded as timed
out then.

The timer nests: an earlier ``ITIMER_REAL`` timer (an enclosing run step's, django-q2's task
``timeout``) keeps its deadline and its handler. The timer fires at the earlier of the two
deadlines, and hands a signal meant for the enclosing timer on to its handler.

The same timer bounds an attempt by its instance's deadline (an instance ``timeout``), when
that comes first: it then raises the error the caller gives (``expired``), not
:class:`StepTimeoutError`.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any, TypeVar

from django_workerflow.exceptions import StepTimeoutError, WorkflowInputError

_Result = TypeVar("_Result")


def timeout_problem(value: object) -> str | None:
    """Why ``value`` is not a step timeout (None: it is one): a positive, finite number of
    seconds or a positive timedelta."""
    if isinstance(value, timedelta):
        return None if value > timedelta(0) else "must be a positive timedelta"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (
            f"is a {type(value).__name__}; give a number of seconds or a timedelta, e.g. 30 "
            "or timedelta(minutes=5)"
        )
    if math.isnan(value) or math.isinf(value):
        return "must be a finite number of seconds"
    if value <= 0:
        return "must be more than 0 seconds (leave it out, or None, for no limit)"
    return None


def timeout_seconds(value: float | timedelta, *, step_id: str) -> float:
    """``value`` in seconds; WorkflowInputError if it is not a step timeout."""
    problem = timeout_problem(value)
    if problem is not None:
        raise WorkflowInputError(f"The timeout of run step '{step_id}' {problem}, not {value!r}.")
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


#: Makes the error an attempt over its limit raises, when that is not the step's own
#: StepTimeoutError (the instance's deadline came first).
Expired = Callable[[], BaseException]


def run_limited(
    fn: Callable[[], _Result], *, step_id: str, seconds: float, expired: Expired | None = None
) -> _Result:
    """Call ``fn`` and return its result; StepTimeoutError (or what ``expired`` makes) if it
    runs longer than ``seconds`` (interrupted where a signal can be used, otherwise found
    when ``fn`` returns)."""
    started = time.monotonic()
    if _signals_usable():
        with _Alarm(step_id, seconds, expired):
            value = fn()
    else:
        value = fn()
    elapsed = time.monotonic() - started
    if elapsed > seconds:
        # No signal reached it, or it swallowed the one that did.
        if expired is not None:
            raise expired()
        raise StepTimeoutError(_message(step_id, seconds, elapsed), step_id=step_id)
    return value


def _signals_usable() -> bool:
    # signal.signal() works in the main thread of the main interpreter only.
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _message(step_id: str, seconds: float, elapsed: float | None = None) -> str:
    """Interrupted at the deadline (``elapsed`` None), or found over time on return."""
    what = (
        "was interrupted"
        if elapsed is None
        else f"was found over time when it returned after {elapsed:.3g} s (the timer could "
        "not interrupt it there, or it caught the interruption); its result is discarded"
    )
    return (
        f"Run step '{step_id}' ran longer than its timeout of {seconds:g} s and {what}. The "
        "attempt is retried under the step's max_attempts; make the callback finish sooner "
        "(a shorter network timeout, smaller pieces of work), or raise the step's timeout."
    )


class _Alarm:
    """The ``SIGALRM`` timer of one attempt, restoring the previous handler and timer on
    exit (the previous timer with what is left of its time)."""

    def __init__(self, step_id: str, seconds: float, expired: Expired | None = None) -> None:
        self.step_id = step_id
        self.seconds = seconds
        self.expired = expired

    def __enter__(self) -> None:
        self.previous_handler = signal.getsignal(signal.SIGALRM)
        outer_left, self.outer_interval = signal.getitimer(signal.ITIMER_REAL)
        now = time.monotonic()
        self.deadline = now + self.seconds
        self.outer_deadline = now + outer_left if outer_left > 0 else None
        self.own_first = self.outer_deadline is None or self.deadline <= self.outer_deadline
        self.armed = True
        try:
            signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds if self.own_first else outer_left)
        except BaseException:
            # The enclosing timer fired in between and its handler raised: put it all back.
            self.__exit__()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: a handler installed outside Python, which cannot be put back from here.
        previous = signal.SIG_DFL if self.previous_handler is None else self.previous_handler
        signal.signal(signal.SIGALRM, previous)
        if self.outer_deadline is not None:
            # Already due: fire at once, so the enclosing timer is late, never lost.
            left = max(self.outer_deadline - time.monotonic(), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, self.outer_interval)

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            return  # the callback has returned: run_limited checks its time
        if self.own_first:
            self.armed = False
            if self.expired is not None:
                raise self.expired()
            raise StepTimeoutError(_message(self.step_id, self.seconds), step_id=self.step_id)
        # The enclosing timer's deadline: arm our own, then hand the signal on.
        self.own_first = True
        self.outer_deadline = None
        signal.setitimer(signal.ITIMER_REAL, max(self.deadline - time.monotonic(), 1e-6))
        _hand_on(self.previous_handler, signum, frame)


def _hand_on(handler: Any, signum: int, frame: FrameType | None) -> None:
    """Do what ``handler``, the previous ``SIGALRM`` disposition, would have done."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        # The default action ends the process: the enclosing timer meant it.
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGALRM)
