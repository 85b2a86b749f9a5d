"""Debounce: a burst of starts under one key starts one instance, with the last input, on
SQLite and PostgreSQL, under the harness's virtual clock."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, WorkflowDefinitionError, WorkflowInputError
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.signals import workflow_status_changed
from django_workerflow.testing import Harness

T0 = datetime(2026, 12, 5, 9, 0, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db

RUNS: list[object] = []


def record_input(self: WorkflowDefinition) -> object:
    return self.run("record", lambda: RUNS.append(self.input) or self.input)


def wait_then_record(self: WorkflowDefinition) -> object:
    self.run("first", lambda: None)
    return self.wait("hold", "go")


@pytest.fixture(autouse=True)
def _runs():
    RUNS.clear()
    yield
    RUNS.clear()


def events(key: str) -> list[str]:
    return list(
        WorkflowEvent.objects.filter(instance__key=key)
        .order_by("recorded_at", "id")
        .values_list("type", flat=True)
    )


# The burst ---------------------------------------------------------------------------


def test_burst__one_instance_runs_once_with_the_last_input(define_with):
    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        instances = []
        for index in range(10):
            instances.append(
                workerflow.start(definition, key="order-1", input={"n": index}, debounce=5)
            )
            harness.advance(timedelta(seconds=1))  # inside the window each time
        assert {instance.pk for instance in instances} == {instances[0].pk}
        assert WorkflowInstance.objects.count() == 1
        assert RUNS == []
        # The last start was at T0+9s: its first tick comes at T0+14s, not before.
        harness.advance_to(T0 + timedelta(seconds=13.9))
        assert RUNS == []
        harness.advance_to(T0 + timedelta(seconds=14))
    assert RUNS == [{"n": 9}]
    instance = WorkflowInstance.objects.get(key="order-1")
    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.result == {"n": 9}
    assert events("order-1") == ["created", *["debounced"] * 9, "started", "completed"]


def test_first_start__puts_the_first_tick_off_by_the_debounce(define_with):
    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="k", input=1, debounce=timedelta(minutes=2))
        assert instance.alarm_at == T0 + timedelta(minutes=2)
        harness.drain()
        assert RUNS == []
        harness.advance(timedelta(minutes=2))
    assert RUNS == [1]


def test_max_debounce__bounds_the_delay_from_the_first_start(define_with):
    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        for index in range(30):
            workerflow.start(definition, key="k", input=index, debounce=5, max_debounce=12)
            harness.advance(timedelta(seconds=1))  # a start every second, for 30 seconds
            if RUNS:
                break
        # Starts at T0..T0+11s were debounced; the tick at T0+12s ran the input of T0+11s.
        assert RUNS == [11]
        harness.drain()
    assert WorkflowInstance.objects.count() == 1


def test_definition_debounce__applies_to_plain_starts_and_a_start_overrides_it(define_with):
    definition = define_with(record_input, debounce=60, max_debounce=timedelta(minutes=5))
    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="a", input="first")
        assert instance.alarm_at == T0 + timedelta(seconds=60)
        workerflow.start(definition, key="a", input="second", debounce=10)
        assert WorkflowInstance.objects.get(key="a").alarm_at == T0 + timedelta(seconds=10)
        harness.advance(timedelta(seconds=10))
    assert RUNS == ["second"]


def test_once_started__a_debounced_start_returns_the_instance_unchanged(define_with):
    definition = define_with(wait_then_record)
    with Harness(start=T0) as harness:
        first = workerflow.start(definition, key="k", input="first", debounce=1)
        harness.advance(timedelta(seconds=1))
        again = workerflow.start(definition, key="k", input="second", debounce=1)
        assert again.pk == first.pk
        assert again.input == "first"
        assert again.status == WorkflowStatus.RUNNING
        workerflow.send_event("k", "go")
        harness.drain()
        finished = workerflow.start(definition, key="k", input="third", debounce=1)
        assert finished.status == WorkflowStatus.COMPLETED
        assert finished.input == "first"
    assert "debounced" not in events("k")


def test_paused_or_cancelled__a_debounced_start_changes_nothing(define_with):
    definition = define_with(record_input)
    with Harness(start=T0):
        workerflow.start(definition, key="k", input="first", debounce=30)
        workerflow.cancel("k")
        again = workerflow.start(definition, key="k", input="second", debounce=30)
    assert again.status == WorkflowStatus.CANCELLED
    assert again.input == "first"
    assert RUNS == []


def test_start_without_debounce__stays_idempotent_and_keeps_the_input(define_with):
    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        first = workerflow.start(definition, key="k", input="first", debounce=30)
        plain = workerflow.start(definition, key="k", input="second")
        assert plain.pk == first.pk
        assert plain.input == "first"
        harness.advance(timedelta(seconds=30))
    assert RUNS == ["first"]


def test_a_key_of_another_workflow__raises_and_replaces_nothing(define_with):
    mine = define_with(record_input)
    other = define_with(record_input)
    with Harness(start=T0):
        workerflow.start(mine, key="k", input="mine", debounce=30)
        with pytest.raises(WorkflowInputError, match="already belongs"):
            workerflow.start(other, key="k", input="theirs", debounce=30)
    assert WorkflowInstance.objects.get(key="k").input == "mine"


def test_workflow_status_changed__is_sent_once_for_the_burst(define_with):
    definition = define_with(record_input)
    heard = []

    def listener(sender, instance, status, previous_status, **kwargs):
        heard.append((instance.key, previous_status, status))

    workflow_status_changed.connect(listener)
    try:
        with Harness(start=T0) as harness:
            for index in range(5):
                workerflow.start(definition, key="k", input=index, debounce=10)
            harness.drain()
    finally:
        workflow_status_changed.disconnect(listener)
    assert heard == [("k", None, "pending")]


def test_debounced_start__logs_the_delay(define_with, caplog):
    definition = define_with(record_input)
    caplog.set_level(logging.INFO, logger="django_workerflow")
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="k", input=1, debounce=10)
        harness.advance(timedelta(seconds=4))
        workerflow.start(definition, key="k", input=2, debounce=10, max_debounce=12)
    lines = [r.getMessage() for r in caplog.records if "debounced" in r.getMessage()]
    assert lines == [
        f"workflow debounced key=k definition={definition.name} delay=10.000",
        f"workflow debounced key=k definition={definition.name} delay=8.000",
    ]


def test_astart__debounces_like_start(define_with):
    from asgiref.sync import async_to_sync

    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        async_to_sync(workerflow.astart)(definition, key="k", input=1, debounce=5)
        async_to_sync(workerflow.astart)(definition, key="k", input=2, debounce=5)
        harness.advance(timedelta(seconds=5))
    assert RUNS == [2]


# Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"debounce": -1}, "`debounce` -1 must be a positive, finite duration"),
        ({"debounce": 0}, "`debounce` 0 must be a positive, finite duration"),
        ({"debounce": timedelta(0)}, "must be a positive, finite duration"),
        ({"debounce": float("nan")}, "`debounce` nan must be a positive, finite duration"),
        ({"debounce": "5"}, "`debounce` '5' must be a number of seconds or a timedelta, not str"),
        ({"debounce": True}, "must be a number of seconds or a timedelta, not bool"),
        ({"debounce": 31 * 86400}, "must be at most 30 days"),
        ({"max_debounce": 10}, "`max_debounce` bounds a debounce: set `debounce` too"),
        ({"debounce": 10, "max_debounce": 5}, "`max_debounce` 5 is shorter than `debounce` 10"),
        ({"debounce": 10, "max_debounce": -5}, "`max_debounce` -5 must be a positive"),
        ({"debounce": 10, "max_concurrency": 2}, "cannot be combined with `max_concurrency`"),
        (
            {"debounce": 10, "rate_limit": (1, timedelta(seconds=1))},
            "cannot be combined with `max_concurrency` or `rate_limit`",
        ),
    ],
)
def test_definition__refuses_a_bad_debounce(settings, message):
    with pytest.raises(WorkflowDefinitionError, match="misconfigured") as raised:
        type(
            "BadDebounce",
            (WorkflowDefinition,),
            {"name": "bad-debounce", "execute": record_input, "__module__": __name__, **settings},
            register=False,
        )
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"debounce": -1}, "debounce= -1 must be a positive, finite duration"),
        ({"debounce": 0}, "debounce= 0 must be a positive, finite duration"),
        ({"debounce": "soon"}, "debounce= 'soon' must be a number of seconds or a timedelta"),
        ({"max_debounce": 10}, "max_debounce= bounds a debounce: set debounce= too"),
        ({"debounce": 10, "max_debounce": 1}, "max_debounce= 1 is shorter than debounce= 10"),
    ],
)
def test_start__refuses_a_bad_debounce_and_writes_nothing(define_with, kwargs, message):
    definition = define_with(record_input)
    with pytest.raises(WorkflowInputError) as raised:
        workerflow.start(definition, key="k", input=1, **kwargs)
    assert message in str(raised.value)
    assert not WorkflowInstance.objects.exists()


def test_start__a_max_debounce_shorter_than_the_definitions_debounce_is_refused(define_with):
    definition = define_with(record_input, debounce=60)
    with pytest.raises(WorkflowInputError, match="max_debounce= 30 is shorter than debounce= 60"):
        workerflow.start(definition, key="k", max_debounce=30)


def test_start__without_a_key_cannot_be_debounced(define_with):
    definition = define_with(record_input)
    with pytest.raises(WorkflowInputError, match=r"needs a key: .* pass key="):
        workerflow.start(definition, input=1, debounce=5)
    assert not WorkflowInstance.objects.exists()


def test_start__of_a_workflow_with_flow_control_cannot_be_debounced(define_with):
    definition = define_with(record_input, max_concurrency=2)
    with pytest.raises(WorkflowInputError, match=r"concurrency or rate limit.*without debounce"):
        workerflow.start(definition, key="k", input=1, debounce=5)
    assert not WorkflowInstance.objects.exists()


def test_start_many__of_a_debounced_workflow_is_refused(define_with):
    definition = define_with(record_input, debounce=5)
    with pytest.raises(WorkflowInputError, match="start_many\\(\\) does not debounce"):
        workerflow.start_many(definition, [("a", 1), ("b", 2)])
    assert not WorkflowInstance.objects.exists()


def test_wake__runs_a_debounced_instance_at_once(define_with):
    from django_workerflow.runtime import control

    definition = define_with(record_input)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="k", input="now", debounce=3600)
        assert control.wake("k")
        harness.drain()
    assert RUNS == ["now"]


def test_child_of_a_debounced_definition__starts_after_the_debounce(define_with):
    child = define_with(record_input, debounce=30)

    def parent(self: WorkflowDefinition) -> object:
        return self.child("child", child, input="from-parent")

    parent_definition = define_with(parent)
    with Harness(start=T0) as harness:
        workerflow.start(parent_definition, key="p")
        harness.drain()
        assert RUNS == []
        assert WorkflowInstance.objects.get(key="p/child").alarm_at == T0 + timedelta(seconds=30)
        harness.advance(timedelta(seconds=30))
    assert RUNS == ["from-parent"]
    assert WorkflowInstance.objects.get(key="p").result == "from-parent"
