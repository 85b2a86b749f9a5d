"""OpenTelemetry traces of ticks and step attempts, when ``opentelemetry-api`` is installed.

Without it (the ``traces`` extra) every helper here does nothing: :func:`carrier` answers
None and :func:`tick_trace` the shared :data:`OFF` trace, whose methods return at once.

With it, a tick is a ``workerflow.tick`` span, a child of the span that was current when
the instance was started (its W3C context is stored with the instance, see
:func:`carrier`), and each run step attempt whose callback runs is a ``workerflow.step``
span under it. A replayed step returns its recorded outcome and makes no span. Sleeps,
waits and received events are events of the tick's span, and the tick's span links to
the ``send_event()`` span of each event it receives. A tick whose span is not recorded
(no SDK configured, or sampled out) makes no step spans and no events: the step helpers
then pay one attribute check.

A definition that names sensitive fields (``sensitive``) has its errors recorded by their
class name only: an exception's message and traceback may quote a sensitive value, and a
trace has no reader permissions (the masked message is in the admin and ``show``).

This module is a leaf, at the bottom of the layers: the engine, the store's callers and
the runtime all use it, and it imports nothing of the package.
"""

from __future__ import annotations

import json
from datetime import datetime
from types import TracebackType
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the traces extra is not installed: every helper does nothing
    ENABLED = False
else:
    ENABLED = True

#: The name of the tracer that makes every span of the engine.
TRACER_NAME = "django_workerflow"
TICK_SPAN = "workerflow.tick"
STEP_SPAN = "workerflow.step"


def carrier() -> str | None:
    """The current span's context as the W3C headers' JSON text, to store with an instance
    or an event so that a worker's tick continues the caller's trace; None without
    OpenTelemetry or without a valid current span (nothing extra is stored)."""
    if not ENABLED or not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return json.dumps(headers, separators=(",", ":"), sort_keys=True)


def _extracted(text: str | None) -> Any:
    """The context stored as ``text`` by :func:`carrier` (None: none, or unreadable)."""
    if not text:
        return None
    try:
        headers = json.loads(text)
    except ValueError:
        return None
    return propagate.extract(headers) if isinstance(headers, dict) else None


class TickTrace:
    """The trace of one tick: its span, current while the tick runs, and what its passes
    report. The disabled trace (:data:`OFF`) has no span and records nothing.

    A tick receives an event when one of its passes returns a wait step's payload that no
    earlier tick returned: the wait was satisfied during this tick (the pass found it
    waiting or claimed a queued event for it, or an earlier pass of the tick suspended on
    it), or by the ``send_event()`` that woke the tick (``since``: the time of that wake,
    the instance's last change before the tick claimed it; None if nothing woke it). When
    several events woke the instance between two ticks, only the last wake's time is
    known, so only the waits it satisfied count. Its ``send_event()`` span is linked once
    the pass has ended (:meth:`link_received`).
    """

    __slots__ = (
        "_attributes",
        "_quiet_errors",
        "_received",
        "_since",
        "_span",
        "_token",
        "_unlinked",
        "_waiting",
        "recording",
    )

    def __init__(
        self,
        span: Any = None,
        attributes: dict[str, str] | None = None,
        since: datetime | None = None,
        *,
        quiet_errors: bool = False,
    ) -> None:
        self._span = span
        self._attributes = attributes or {}
        # Record errors by their class name only (a definition with sensitive fields).
        self._quiet_errors = quiet_errors
        self._since = since
        self._token: Any = None
        self._waiting: set[str] = set()
        self._received: set[str] = set()
        self._unlinked: list[int] = []
        #: Whether the span records: if not, the step helpers skip every call below.
        self.recording = span is not None and span.is_recording()

    def __enter__(self) -> TickTrace:
        if self._span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is None:
            return
        if isinstance(exc, Exception):
            _record_error(self._span, exc, quiet=self._quiet_errors)
        otel_context.detach(self._token)
        self._span.end()

    def finished(self, outcome: str, error: BaseException | None = None) -> None:
        """Note the tick's outcome (a :class:`~django_workerflow.values.states.TickEnding`
        value), and the error that failed the instance."""
        if not self.recording:
            return
        self._span.set_attribute("workerflow.tick_outcome", outcome)
        if error is not None:
            _record_error(self._span, error, quiet=self._quiet_errors)

    def step(self, step_id: str, step_type: str, attempt: int) -> StepSpan | None:
        """The span of one attempt whose callback runs, entered around the callback (None:
        the tick is not recorded)."""
        if not self.recording:
            return None
        attributes: dict[str, str | int] = {
            **self._attributes,
            "workerflow.step_id": step_id,
            "workerflow.step_type": step_type,
            "workerflow.attempt": attempt,
        }
        tracer = trace.get_tracer(TRACER_NAME)
        span = tracer.start_span(STEP_SPAN, attributes=attributes)
        return StepSpan(span, quiet_errors=self._quiet_errors)

    def slept(self, step_id: str, wake_at: datetime | None) -> None:
        """A pass suspends on a sleep until ``wake_at``."""
        if self.recording:
            self._event("workerflow.sleep", step_id, wake_at=_iso(wake_at))

    def waiting(self, step_id: str, event_name: str, timeout_at: datetime | None) -> None:
        """A pass suspends on a wait for ``event_name``."""
        if self.recording:
            self._waiting.add(step_id)
            self._event(
                "workerflow.wait", step_id, event_name=event_name, timeout_at=_iso(timeout_at)
            )

    def satisfied(
        self,
        step_pk: int,
        step_id: str,
        event_name: str,
        resolved_at: datetime | None,
        *,
        fresh: bool,
    ) -> None:
        """A pass returns a wait step's payload: an event, if this tick receives it
        (``fresh``: the pass read the step waiting, or created it)."""
        if not self.recording or step_id in self._received:
            return
        new = (
            fresh
            or step_id in self._waiting
            or (self._since is not None and resolved_at is not None and resolved_at >= self._since)
        )
        if new:
            self._received.add(step_id)
            self._unlinked.append(step_pk)
            self._event("workerflow.event", step_id, event_name=event_name)

    def to_link(self) -> list[int]:
        """The wait steps whose event this tick received and has not linked yet."""
        return self._unlinked

    def link_received(self, carriers: list[str]) -> None:
        """Link the tick's span to the ``send_event()`` spans stored as ``carriers`` (of the
        steps :meth:`to_link` named, which are linked now)."""
        self._unlinked = []
        add_link = getattr(self._span, "add_link", None)  # opentelemetry-api 1.23 and later
        if add_link is None:  # pragma: no cover - an older API: the span keeps no links
            return
        for text in carriers:
            context = _extracted(text)
            if context is None:
                continue  # unreadable (and None would mean the current context: this span)
            linked = trace.get_current_span(context).get_span_context()
            if linked.is_valid:
                add_link(linked)

    def _event(self, name: str, step_id: str, **attributes: str) -> None:
        self._span.add_event(name, {"workerflow.step_id": step_id, **attributes})


class StepSpan:
    """A step attempt's span, current while its callback runs; an exception the callback
    raises is recorded on it with its traceback."""

    __slots__ = ("_quiet_errors", "_span", "_token")

    def __init__(self, span: Any, *, quiet_errors: bool = False) -> None:
        self._span = span
        self._token: Any = None
        self._quiet_errors = quiet_errors

    def __enter__(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A BaseException here is the engine's control flow (a nested step suspends), not
        # the attempt's failure.
        if isinstance(exc, Exception):
            _record_error(self._span, exc, quiet=self._quiet_errors)
        otel_context.detach(self._token)
        self._span.end()


#: The trace of every tick while OpenTelemetry is absent.
OFF = TickTrace()


def tick_trace(
    name: str,
    version: str,
    instance_key: str,
    parent: str | None,
    since: datetime | None,
    *,
    quiet_errors: bool = False,
) -> TickTrace:
    """The trace of a tick of an instance: a child of the context ``parent`` stored at its
    start (or of the current one); ``since`` is the time of the wake that made it due (see
    :class:`TickTrace`); with ``quiet_errors``, errors are recorded by class name only.
    :data:`OFF` without OpenTelemetry."""
    if not ENABLED:
        return OFF
    attributes = {
        "workerflow.name": name,
        "workerflow.version": version,
        "workerflow.instance_key": instance_key,
    }
    tracer = trace.get_tracer(TRACER_NAME)
    span = tracer.start_span(TICK_SPAN, context=_extracted(parent), attributes=attributes)
    return TickTrace(span, attributes, since, quiet_errors=quiet_errors)


def _record_error(span: Any, exc: BaseException, *, quiet: bool) -> None:
    if quiet:  # no message, no traceback: they may quote a sensitive value
        span.add_event("exception", {"exception.type": type(exc).__qualname__})
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        return
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def _iso(when: datetime | None) -> str:
    return when.isoformat() if when is not None else ""
