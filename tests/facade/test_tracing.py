"""OpenTelemetry traces: a span per tick, a child span per step attempt whose callback
runs (never for a replayed step), sleeps, waits and events as the tick's span events,
errors with their tracebacks, and the caller's trace carried into the tick through the
context stored with the instance and the event.

Spans are read from the SDK's in-memory exporter (``tests/support/tracing.py``); the
ticks run in this process under the test harness.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import django_workerflow as workerflow
from django_workerflow import NonRetryableStepError, tracing
from django_workerflow.models import InboundEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.values.states import TickEnding
from tests.support.tracing import Spans

pytestmark = pytest.mark.django_db

ATTRIBUTES = ("workerflow.name", "workerflow.version", "workerflow.instance_key")


def _charge(self):
    return self.run("charge", lambda: 42)


def _attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def _events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes or {})) for event in span.events]


# Spans, their names and attributes ------------------------------------------------------


def test_tick__is_a_span_with_a_child_span_per_step_attempt(spans: Spans, harness, define):
    definition = define(_charge)
    instance = workerflow.start(definition, key="order-1")

    harness.drain()

    (tick,) = spans.ticks()
    (step,) = spans.steps()
    identity = {
        "workerflow.name": definition.name,
        "workerflow.version": definition.version,
        "workerflow.instance_key": "order-1",
    }
    assert _attributes(tick) == {**identity, "workerflow.tick_outcome": TickEnding.COMPLETED}
    assert _attributes(step) == {
        **identity,
        "workerflow.step_id": "charge",
        "workerflow.step_type": "run",
        "workerflow.attempt": 1,
    }
    assert step.parent.span_id == tick.context.span_id
    assert step.context.trace_id == tick.context.trace_id
    assert tick.instrumentation_scope.name == "django_workerflow"
    assert tick.status.status_code == StatusCode.UNSET
    assert WorkflowInstance.objects.get(pk=instance.pk).status == WorkflowStatus.COMPLETED


def test_step__nested_in_a_run_step_is_a_child_of_its_span(spans: Spans, harness, define):
    def execute(self):
        return self.run("outer", lambda: self.run("inner", lambda: 1) + 1)

    workerflow.start(define(execute))
    harness.drain()

    by_id = {_attributes(span)["workerflow.step_id"]: span for span in spans.steps()}
    assert by_id["inner"].parent.span_id == by_id["outer"].context.span_id
    assert by_id["outer"].parent.span_id == spans.ticks()[0].context.span_id


def test_replay__a_recorded_step_makes_no_second_span(spans: Spans, harness, define):
    calls = []

    def execute(self):
        self.run("charge", lambda: calls.append("charge") or len(calls))
        self.sleep("cool-off", 60)
        return self.run("ship", lambda: "shipped")

    instance = workerflow.start(define(execute))
    harness.drain()
    first_tick = spans.ticks()
    harness.advance(60)

    ticks = spans.ticks()
    assert [_attributes(t)["workerflow.tick_outcome"] for t in ticks] == [
        TickEnding.SUSPENDED,
        TickEnding.COMPLETED,
    ]
    assert len(first_tick) == 1
    # The second tick replayed 'charge' from its record: one span for it in all.
    step_ids = [_attributes(span)["workerflow.step_id"] for span in spans.steps()]
    assert step_ids == ["charge", "ship"]
    assert calls == ["charge"]
    assert spans.steps()[1].parent.span_id == ticks[1].context.span_id
    assert WorkflowInstance.objects.get(pk=instance.pk).result == "shipped"


# Span events ------------------------------------------------------------------------------


def test_tick__records_a_sleep_as_an_event(spans: Spans, harness, define):
    workerflow.start(define(lambda self: self.sleep("nap", 30)))
    harness.drain()

    (tick,) = spans.ticks()
    wake_at = (harness.now()).isoformat()
    (name, attributes), *_ = _events(tick)
    assert name == "workerflow.sleep"
    assert attributes["workerflow.step_id"] == "nap"
    assert attributes["wake_at"] > wake_at


def test_tick__records_a_wait_then_the_event_it_receives_linked_to_its_sender(
    spans: Spans, harness, define
):
    instance = workerflow.start(define(lambda self: self.wait("approval", "approved")))
    harness.drain()
    with spans.tracer.start_as_current_span("webhook") as webhook:
        workerflow.send_event(instance, "approved", {"by": "ops"})

    harness.drain()

    waited, received = spans.ticks()
    assert _events(waited) == [
        (
            "workerflow.wait",
            {"workerflow.step_id": "approval", "event_name": "approved", "timeout_at": ""},
        )
    ]
    assert _events(received) == [
        ("workerflow.event", {"workerflow.step_id": "approval", "event_name": "approved"})
    ]
    (link,) = received.links
    assert link.context.span_id == webhook.get_span_context().span_id
    assert link.context.trace_id == webhook.get_span_context().trace_id
    stored = InboundEvent.objects.get(instance=instance).trace_context
    assert "traceparent" in json.loads(stored)


def test_tick__links_a_queued_event_that_its_wait_claims(spans: Spans, harness, define):
    def execute(self):
        self.sleep("first", 10)
        return self.wait("approval", "approved")

    instance = workerflow.start(define(execute))
    harness.drain()
    with spans.tracer.start_as_current_span("webhook") as webhook:
        workerflow.send_event(instance, "approved")  # queued: no step waits yet

    harness.advance(10)

    slept, received = spans.ticks()
    assert [name for name, _ in _events(slept)] == ["workerflow.sleep"]
    assert [name for name, _ in _events(received)] == ["workerflow.event"]
    assert [link.context.span_id for link in received.links] == [webhook.get_span_context().span_id]
    assert _attributes(received)["workerflow.tick_outcome"] == TickEnding.COMPLETED


def test_tick__links_each_event_once(spans: Spans, harness, define):
    def execute(self):
        got = self.wait("approval", "approved")
        self.sleep("after", 5)
        return got

    instance = workerflow.start(define(execute))
    harness.drain()
    with spans.tracer.start_as_current_span("webhook"):
        workerflow.send_event(instance, "approved")
    harness.drain()
    harness.advance(5)

    ticks = spans.ticks()
    assert [len(t.links) for t in ticks] == [0, 1, 0]
    assert ["workerflow.event" in [n for n, _ in _events(t)] for t in ticks] == [
        False,
        True,
        False,
    ]


def test_send_event__without_a_span_stores_no_trace_context(spans: Spans, harness, define):
    instance = workerflow.start(define(lambda self: self.wait("approval", "approved")))
    harness.drain()

    workerflow.send_event(instance, "approved")
    harness.drain()

    assert InboundEvent.objects.get(instance=instance).trace_context is None
    assert spans.ticks()[1].links == ()
    assert WorkflowInstance.objects.get(pk=instance.pk).status == WorkflowStatus.COMPLETED


# Errors -----------------------------------------------------------------------------------


def _fails(self):
    def boom():
        raise ValueError("card declined")

    return self.run("charge", boom, max_attempts=1)


def test_step__failure_is_recorded_on_its_span_with_the_traceback(spans: Spans, harness, define):
    workerflow.start(define(_fails))
    harness.drain()

    (step,) = spans.steps()
    assert step.status.status_code == StatusCode.ERROR
    assert step.status.description == "ValueError: card declined"
    ((name, attributes),) = _events(step)
    assert name == "exception"
    assert attributes["exception.type"] == "ValueError"
    assert "in boom" in attributes["exception.stacktrace"]
    # The instance failed: its tick's span says so, with the error that failed it.
    (tick,) = spans.ticks()
    assert _attributes(tick)["workerflow.tick_outcome"] == TickEnding.FAILED
    assert tick.status.status_code == StatusCode.ERROR
    assert [n for n, _ in _events(tick)] == ["exception"]


def test_step__each_attempt_is_a_span_of_its_own(spans: Spans, harness, define):
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("try again")
        return "ok"

    workerflow.start(define(lambda self: self.run("sync", flaky, max_attempts=2)))
    harness.drain()
    harness.advance(1)

    first, second = spans.steps()
    assert [_attributes(s)["workerflow.attempt"] for s in (first, second)] == [1, 2]
    assert first.status.status_code == StatusCode.ERROR
    assert second.status.status_code == StatusCode.UNSET
    assert [_attributes(t)["workerflow.tick_outcome"] for t in spans.ticks()] == [
        TickEnding.SUSPENDED,
        TickEnding.COMPLETED,
    ]


def test_step__a_non_retryable_failure_handled_by_execute_leaves_the_tick_ok(
    spans: Spans, harness, define
):
    def execute(self):
        def refuse():
            raise NonRetryableStepError("no")

        try:
            self.run("charge", refuse)
        except NonRetryableStepError:
            return "handled"

    workerflow.start(define(execute))
    harness.drain()

    (step,) = spans.steps()
    (tick,) = spans.ticks()
    assert step.status.status_code == StatusCode.ERROR
    assert tick.status.status_code == StatusCode.UNSET


def test_tick_trace__an_error_escaping_the_tick_is_recorded(spans: Spans):
    with (
        pytest.raises(RuntimeError),
        tracing.tick_trace("shop", "1", "order-9", None, None),
    ):
        raise RuntimeError("database went away")

    (tick,) = spans.ticks()
    assert tick.status.status_code == StatusCode.ERROR
    assert [n for n, _ in _events(tick)] == ["exception"]


# Propagation ------------------------------------------------------------------------------


def test_tick__continues_the_trace_of_the_span_that_started_the_instance(
    spans: Spans, harness, define
):
    with spans.tracer.start_as_current_span("POST /orders") as request:
        instance = workerflow.start(define(_charge))

    harness.drain()

    (tick,) = spans.ticks()
    assert tick.context.trace_id == request.get_span_context().trace_id
    assert tick.parent.span_id == request.get_span_context().span_id
    stored = json.loads(WorkflowInstance.objects.get(pk=instance.pk).trace_context)
    assert stored["traceparent"].split("-")[1] == f"{tick.context.trace_id:032x}"


def test_start__without_a_span_stores_no_trace_context(spans: Spans, harness, define):
    instance = workerflow.start(define(_charge))
    harness.drain()

    assert WorkflowInstance.objects.get(pk=instance.pk).trace_context is None
    (tick,) = spans.ticks()
    assert tick.parent is None


def test_start_many__stores_the_trace_context_with_every_instance(spans: Spans, define):
    definition = define(_charge)
    with spans.tracer.start_as_current_span("import"):
        started = workerflow.start_many(definition, [("a", 1), ("b", 2)])

    contexts = WorkflowInstance.objects.filter(pk__in=[i.pk for i in started])
    assert [c.trace_context is not None for c in contexts] == [True, True]


def test_start__of_a_queued_definition_stores_the_trace_context(spans: Spans, define):
    definition = define(_charge)
    definition.max_concurrency = 1
    with spans.tracer.start_as_current_span("enqueue"):
        instance = workerflow.start(definition)

    assert WorkflowInstance.objects.get(pk=instance.pk).trace_context is not None


def test_child__tick_is_a_child_of_the_parent_tick_that_started_it(spans: Spans, harness, define):
    child = define(_charge)
    workerflow.start(define(lambda self: self.child("kid", child)))

    harness.drain()

    ticks = spans.ticks()
    (kid,) = [t for t in ticks if _attributes(t)["workerflow.instance_key"].endswith("/kid")]
    # The parent's first tick started the child; its second received the child's result.
    started, _resumed = [t for t in ticks if t is not kid]
    assert kid.parent.span_id == started.context.span_id
    assert kid.context.trace_id == started.context.trace_id


def test_tick__with_an_unreadable_stored_context_starts_a_trace_of_its_own(
    spans: Spans, harness, define
):
    first = workerflow.start(define(_charge))
    second = workerflow.start(define(_charge))
    WorkflowInstance.objects.filter(pk=first.pk).update(trace_context="not json")
    WorkflowInstance.objects.filter(pk=second.pk).update(trace_context="[]")

    harness.drain()

    assert [t.parent for t in spans.ticks()] == [None, None]
    assert all(_attributes(t)["workerflow.tick_outcome"] == "completed" for t in spans.ticks())


# Without an SDK, or without OpenTelemetry -------------------------------------------------


def test_tick_trace__with_the_api_alone_records_nothing():
    # No SDK provider: the API's no-op tracer; the step helpers skip their spans.
    traced = tracing.tick_trace("shop", "1", "order-9", None, None)

    with traced:
        assert traced.recording is False
        assert traced.step("charge", "run", 1) is None
        traced.slept("nap", None)
        traced.finished(TickEnding.COMPLETED)
    assert tracing.carrier() is None


@pytest.fixture
def without_opentelemetry() -> Iterator[None]:
    """``django_workerflow.tracing`` as imported where opentelemetry is not installed."""
    names = [
        name for name in sys.modules if name == "opentelemetry" or name.startswith("opentelemetry.")
    ]
    saved = {name: sys.modules[name] for name in names}
    try:
        for name in names:
            sys.modules[name] = None  # type: ignore[assignment] # an import of it fails
        importlib.reload(tracing)
        yield
    finally:
        sys.modules.update(saved)
        importlib.reload(tracing)


def test_engine__without_opentelemetry_runs_and_stores_no_trace_context(
    without_opentelemetry, spans: Spans, harness, define
):
    assert tracing.ENABLED is False
    with spans.tracer.start_as_current_span("request"):
        instance = workerflow.start(
            define(lambda self: self.wait("go", "go") + self.run("charge", lambda: 1))
        )
    harness.drain()
    with spans.tracer.start_as_current_span("webhook"):
        workerflow.send_event(instance, "go", 1)
    harness.drain()

    assert WorkflowInstance.objects.get(pk=instance.pk).result == 2
    assert WorkflowInstance.objects.get(pk=instance.pk).trace_context is None
    assert InboundEvent.objects.get(instance=instance).trace_context is None
    assert spans.ticks() == []
    assert tracing.tick_trace("shop", "1", "k", None, None) is tracing.OFF


@pytest.mark.parametrize("stored", ["not json", "{}"])
def test_tick__links_no_span_for_an_event_whose_stored_context_is_unreadable(
    spans: Spans, harness, define, stored
):
    instance = workerflow.start(define(lambda self: self.wait("approval", "approved")))
    harness.drain()
    with spans.tracer.start_as_current_span("webhook"):
        workerflow.send_event(instance, "approved")
    InboundEvent.objects.filter(instance=instance).update(trace_context=stored)

    harness.drain()

    received = spans.ticks()[1]
    assert [n for n, _ in _events(received)] == ["workerflow.event"]
    assert received.links == ()
