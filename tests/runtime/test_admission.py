"""Admission (django_workerflow/runtime/flow/admission.py), called directly on rows: a
definition's limits, the priorities start() accepts, the queue admitted as far as the free
slots allow in priority order, and which finished instance frees a slot. The feature, through
start() and the ticks, is tested in test_flow_control.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.flow import admission
from django_workerflow.values.clock import now
from django_workerflow.values.states import WorkflowStatus
from tests.support.factories import WorkflowInstanceFactory

pytestmark = pytest.mark.django_db


def queued(name: str, **fields) -> WorkflowInstance:
    return WorkflowInstanceFactory(
        definition_name=name, status=WorkflowStatus.PENDING, admitted_at=None, **fields
    )


def holding_a_slot(name: str) -> WorkflowInstance:
    return WorkflowInstanceFactory(
        definition_name=name, status=WorkflowStatus.RUNNING, admitted_at=now()
    )


def test_limits_of__a_definition_without_limits_is_none(define_with):
    assert admission.limits_of(define_with()) is None


def test_limits_of__reads_the_concurrency_and_the_rate_limit(define_with):
    per_minute = (5, timedelta(minutes=1))

    assert admission.limits_of(define_with(max_concurrency=3)) == admission.Limits(
        max_concurrency=3, rate_count=None, rate_period=None
    )
    assert admission.limits_of(define_with(rate_limit=per_minute)) == admission.Limits(
        max_concurrency=None, rate_count=5, rate_period=timedelta(minutes=1)
    )


@pytest.mark.parametrize("priority", [-(2**31), 0, 2**31 - 1])
def test_check_priority__accepts_the_integers_the_database_stores(priority):
    admission.check_priority(priority)


@pytest.mark.parametrize(
    ("priority", "message"),
    [
        (True, "not bool"),
        (1.5, "not float"),
        (2**31, "out of range"),
        (-(2**31) - 1, "out of range"),
    ],
)
def test_check_priority__refuses_what_is_not_a_stored_integer(priority, message):
    with pytest.raises(WorkflowInputError, match=message):
        admission.check_priority(priority)


def test_gate_row__of_an_unshared_key_is_the_definitions_own():
    assert admission.gate_row("billing", "tenant-7") == ("billing", "tenant-7")


def test_admit_waiting__admits_as_many_as_the_free_slots_lowest_priority_first(define_with):
    name = define_with(max_concurrency=3).name
    holding_a_slot(name)
    late = queued(name, priority=5)
    urgent = queued(name, priority=-1)
    normal = queued(name, priority=0)

    with transaction.atomic():
        admitted = admission.admit_waiting(name, "", now())

    assert admitted == [urgent.pk, normal.pk]
    still_queued = WorkflowInstance.objects.filter(definition_name=name, admitted_at=None)
    assert list(still_queued.values_list("pk", flat=True)) == [late.pk]


def test_admit_waiting__with_every_slot_in_use_admits_nothing(define_with):
    name = define_with(max_concurrency=1).name
    holding_a_slot(name)
    waiting = queued(name)

    with transaction.atomic():
        assert admission.admit_waiting(name, "", now()) == []

    assert WorkflowInstance.objects.get(pk=waiting.pk).admitted_at is None


def test_holds_slot__only_an_admitted_instance_of_a_limited_definition(define_with):
    limited = define_with(max_concurrency=1).name
    unlimited = define_with().name

    assert admission.holds_slot(holding_a_slot(limited))
    assert not admission.holds_slot(queued(limited))
    assert not admission.holds_slot(holding_a_slot(unlimited))
