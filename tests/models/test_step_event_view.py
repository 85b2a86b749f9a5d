"""``StepEvent`` is the whole step history: every query on the model (filters, ``count()``,
``values_list()``, the reverse managers, ordering) sees the events a run step keeps on its
row as well as the stored ones, as ``step_events_of()`` merged them; and it is read only."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.exceptions import ReadOnlyHistoryError
from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    StoredStepEvent,
    WorkflowInstance,
    step_events_of,
)
from django_workerflow.models.history import STEP_EVENT_VIEW, derived_event_pk
from django_workerflow.values.clock import now
from tests.models.step_history_oracle import (
    EVENT_FIELDS,
    fields_of,
    old_step_events_of,
    random_history,
)
from tests.support.factories import WorkflowInstanceFactory

pytestmark = pytest.mark.django_db

STARTED = StepEventType.ATTEMPT_STARTED
SUCCEEDED = StepEventType.ATTEMPT_SUCCEEDED
FAILED = StepEventType.ATTEMPT_FAILED


def flaky_instance(define, harness) -> WorkflowInstance:
    """A completed instance: 'flaky' failed once then succeeded, 'after' succeeded."""
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 2:
            raise ValueError("down")
        return "up"

    def execute(self):
        self.run("flaky", flaky, max_attempts=2, backoff=lambda n: 0)
        return self.run("after", lambda: 7)

    instance = workerflow.start(define(execute))
    harness.drain()
    instance.refresh_from_db()
    return instance


def test_the_model__reads_every_event_of_a_run_step_stored_or_kept_on_its_row(define, harness):
    instance = flaky_instance(define, harness)

    assert list(instance.step_events.values_list("step__step_id", "type", "attempt_number")) == [
        ("flaky", STARTED, 1),
        ("flaky", FAILED, 1),
        ("flaky", STARTED, 2),
        ("flaky", SUCCEEDED, 2),
        ("after", STARTED, 1),
        ("after", SUCCEEDED, 1),
    ]
    # Half of them are not stored: the model still counts and filters them.
    assert StoredStepEvent.objects.filter(instance=instance).count() == 2
    assert StepEvent.objects.filter(instance=instance).count() == 6
    assert StepEvent.objects.filter(instance=instance, type=SUCCEEDED).count() == 2
    after = Step.objects.get(instance=instance, step_id="after")
    assert [(e.type, e.result) for e in after.events.all()] == [(STARTED, None), (SUCCEEDED, 7)]
    assert after.events.get(type=SUCCEEDED).recorded_at == after.resolved_at


def test_the_model__is_what_step_events_of_returned_on_random_histories():
    rng = random.Random(36)
    start = now()
    for _ in range(40):
        instance = random_history(rng, start)
        expected = fields_of(old_step_events_of(instance))

        assert fields_of(StepEvent.objects.filter(instance=instance)) == expected
        assert fields_of(instance.step_events.all()) == expected
        assert fields_of(step_events_of(instance)) == expected
        assert StepEvent.objects.filter(instance=instance).count() == len(expected)
        start += timedelta(seconds=1)


def test_the_model__reads_an_instance_s_history_in_one_query(
    define, harness, django_assert_num_queries
):
    instance = flaky_instance(define, harness)

    with django_assert_num_queries(1):
        events = list(instance.step_events.select_related("step"))

    assert len(events) == 6


def test_derived_events__have_negative_primary_keys_that_stay_the_same(define, harness):
    instance = flaky_instance(define, harness)
    after = Step.objects.get(instance=instance, step_id="after")

    start, success = after.events.all()

    assert (start.pk, success.pk) == (
        derived_event_pk(after.pk, STARTED),
        derived_event_pk(after.pk, SUCCEEDED),
    )
    assert start.pk < 0
    assert success.pk < 0
    assert StepEvent.objects.get(pk=success.pk).result == 7
    stored_pks = set(StoredStepEvent.objects.values_list("pk", flat=True))
    assert stored_pks <= set(StepEvent.objects.values_list("pk", flat=True))


def test_an_event_also_stored__is_not_derived_again(claimed_store):
    # A release from before derived events finished a step this one started: its success
    # is stored, and the view shows it once.
    store, instance = claimed_store()
    store.create_started_run_step("s", parent_step_id=None, max_attempts=1)
    store.mark_attempt_succeeded("s", 1, '"done"')
    step = Step.objects.get(instance=instance, step_id="s")
    StoredStepEvent.objects.create(
        instance=instance,
        step=step,
        type=SUCCEEDED,
        attempt_number=1,
        result="done",
        recorded_at=step.resolved_at,
    )

    assert list(step.events.values_list("type", "pk")) == [
        (STARTED, derived_event_pk(step.pk, STARTED)),
        (SUCCEEDED, StoredStepEvent.objects.get(step=step).pk),
    ]


def test_at_one_instant__events_are_ordered_step_by_step(claimed_store):
    # Two parallel branches whose events were stored out of step order at one instant: the
    # view orders them by step (the old merge kept the stored order; documented on the
    # model). A derived start comes before its step's stored events, a derived success after.
    _, instance = claimed_store()
    at = now()
    first, second = (
        Step.objects.create(
            instance=instance,
            step_id=name,
            type=StepType.RUN,
            state=StepState.SUCCEEDED,
            attempt_count=2,
            created_at=at,
            resolved_at=at,
            result=name,
            derived_attempt_events=True,
        )
        for name in ("first", "second")
    )
    for step in (second, first):
        StoredStepEvent.objects.create(
            instance=instance, step=step, type=FAILED, attempt_number=1, recorded_at=at
        )
        StoredStepEvent.objects.create(
            instance=instance, step=step, type=STARTED, attempt_number=2, recorded_at=at
        )

    assert list(instance.step_events.values_list("step__step_id", "type", "attempt_number")) == [
        ("first", STARTED, 1),
        ("first", FAILED, 1),
        ("first", STARTED, 2),
        ("first", SUCCEEDED, 2),
        ("second", STARTED, 1),
        ("second", FAILED, 1),
        ("second", STARTED, 2),
        ("second", SUCCEEDED, 2),
    ]


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda event: event.save(), id="save"),
        pytest.param(lambda event: event.delete(), id="delete"),
        pytest.param(lambda event: StepEvent.objects.all().delete(), id="queryset.delete"),
        pytest.param(lambda event: StepEvent.objects.update(error_name="x"), id="update"),
        pytest.param(
            lambda event: StepEvent.objects.create(
                instance_id=event.instance_id,
                step_id=event.step_id,
                type=STARTED,
                recorded_at=now(),
            ),
            id="create",
        ),
        pytest.param(lambda event: StepEvent.objects.bulk_create([event]), id="bulk_create"),
    ],
)
def test_writes__raise_a_read_only_error_that_names_the_way(define, harness, write):
    instance = flaky_instance(define, harness)
    event = instance.step_events.first()
    before = list(instance.step_events.values_list("pk", flat=True))

    with pytest.raises(ReadOnlyHistoryError, match=r"(?s)read.*view.*engine alone.*purge"):
        write(event)

    assert list(instance.step_events.values_list("pk", flat=True)) == before


def test_deleting_an_instance__takes_its_history_with_it(define, harness):
    instance = flaky_instance(define, harness)
    pk = instance.pk

    instance.delete()

    assert not StepEvent.objects.filter(instance_id=pk).exists()
    assert not StoredStepEvent.objects.filter(instance_id=pk).exists()


def test_the_view__has_a_column_for_every_field_of_the_model():
    with connection.cursor() as cursor:
        description = connection.introspection.get_table_description(cursor, STEP_EVENT_VIEW)
    columns = {column.name for column in description}

    assert columns == {field.column for field in StepEvent._meta.concrete_fields}
    assert {"id", *EVENT_FIELDS} == {field.attname for field in StepEvent._meta.concrete_fields}


def test_an_instance_without_steps__has_an_empty_history():
    assert list(WorkflowInstanceFactory().step_events.all()) == []
