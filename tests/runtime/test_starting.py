"""``runtime.starting`` and ``start()``: creating instances, idempotent on their key.

A start of a key that exists returns the existing instance and writes nothing; the new
instance is pending, due at once, with its 'created' event.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_workerflow.exceptions import WorkflowInputError, WorkflowVersionConflictError
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import starting
from django_workerflow.runtime.starting import BATCH_ROWS, NewInstance
from django_workerflow.values.states import WorkflowEventType
from tests.support.instances import refreshed

pytestmark = pytest.mark.django_db


def counts() -> tuple[int, int]:
    return WorkflowInstance.objects.count(), WorkflowEvent.objects.count()


def idle(self: Any) -> None:
    return None


# start(): idempotent on key -------------------------------------------------------------


def test_start__creates_a_pending_instance_due_now_with_its_created_event(
    define, workerflow_harness
):
    instance = starting.start(define(idle), key="order-1", input={"n": 1})

    row = refreshed(instance)
    assert (row.status, row.input, row.alarm_at) == (
        WorkflowStatus.PENDING,
        {"n": 1},
        workerflow_harness.now(),
    )
    assert list(row.workflow_events.values_list("type", flat=True)) == [WorkflowEventType.CREATED]


def test_start__again_with_the_same_key_returns_the_instance_and_writes_nothing(
    define, workerflow_harness
):
    definition = define(idle)
    first = starting.start(definition, key="order-1", input={"n": 1})
    before = counts()

    again = starting.start(definition, key="order-1", input={"n": 2})

    assert again.pk == first.pk
    assert again.input == {"n": 1}  # the first call pinned the input
    assert counts() == before


def test_start__again_after_the_instance_ran_returns_it_as_it_is(define, workerflow_harness):
    definition = define(lambda self: "done")
    first = starting.start(definition, key="order-1")
    workerflow_harness.drain()

    again = starting.start(definition, key="order-1")

    assert again.pk == first.pk
    assert (again.status, again.result) == (WorkflowStatus.COMPLETED, "done")


def test_start__of_a_key_that_another_definition_holds_is_refused(define, workerflow_harness):
    starting.start(define(idle), key="order-1")
    other = define(idle)

    with pytest.raises(WorkflowInputError, match="already belongs to a"):
        starting.start(other, key="order-1")


def test_start__at_another_version_of_an_unfinished_instance_is_a_version_conflict(
    define, workerflow_harness
):
    first = define(idle, name="versioned", version="1")
    define(idle, name="versioned", version="2")
    starting.start(first, key="order-1")

    with pytest.raises(WorkflowVersionConflictError, match="pinned to '1'"):
        starting.start("versioned", key="order-1", version="2")


def test_start__without_a_key_creates_a_new_instance_each_time(define, workerflow_harness):
    definition = define(idle)

    first, second = starting.start(definition), starting.start(definition)

    assert first.key != second.key
    assert counts()[0] == 2


# insert_pending and start_one ----------------------------------------------------------


def test_insert_pending__creates_one_instance_per_free_key_and_skips_taken_ones(
    define, workerflow_harness
):
    definition = define(idle)
    starting.start(definition, key="taken")
    entries = [NewInstance("a", "1"), NewInstance("taken", "2"), NewInstance("b", "null")]

    created = starting.insert_pending(
        definition.name, definition.version, entries, workerflow_harness.now()
    )

    assert [instance.key for instance in created] == ["a", "b"]
    assert {row.key: row.input for row in WorkflowInstance.objects.all()} == {
        "taken": None,
        "a": 1,
        "b": None,
    }
    assert WorkflowEvent.objects.filter(type=WorkflowEventType.CREATED).count() == 3


def test_insert_pending__a_key_given_twice_is_created_once(define, workerflow_harness):
    definition = define(idle)
    entries = [NewInstance("a", "1"), NewInstance("a", "2")]

    created = starting.insert_pending(
        definition.name, definition.version, entries, workerflow_harness.now()
    )

    assert [instance.key for instance in created] == ["a"]
    assert WorkflowInstance.objects.count() == 1


def test_insert_pending__refuses_more_rows_than_one_batch(define, workerflow_harness):
    definition = define(idle)
    entries = [NewInstance(f"k{n}", "null") for n in range(BATCH_ROWS + 1)]

    with pytest.raises(ValueError, match=f"at most {BATCH_ROWS} rows"):
        starting.insert_pending(
            definition.name, definition.version, entries, workerflow_harness.now()
        )
    assert not WorkflowInstance.objects.exists()


def test_insert_pending__returns_instances_as_saved_rows(define, workerflow_harness):
    definition = define(idle)

    (instance,) = starting.insert_pending(
        definition.name,
        definition.version,
        [NewInstance("a", '{"n": 1}')],
        workerflow_harness.now(),
    )

    assert instance.pk == WorkflowInstance.objects.get(key="a").pk
    assert instance.input == {"n": 1}
    assert not instance._state.adding


def test_start_one__of_a_taken_key_returns_none(define, workerflow_harness):
    definition = define(idle)
    starting.start(definition, key="taken")

    assert (
        starting.start_one(
            definition.name, definition.version, NewInstance("taken", "null"), 0, None, False
        )
        is None
    )
