"""Concurrency limits, priorities and rate limits (issue 14), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, WorkflowInputError
from django_workerflow.console.describe import waiting_on
from django_workerflow.models import AdmissionGate, WorkflowInstance, WorkflowStatus
from django_workerflow.testing import Harness
from tests.support.flow import admitted_keys, queued_keys
from tests.support.instances import refreshed

T0 = datetime(2026, 12, 1, 14, 3, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def finish(key: str, harness: Harness) -> None:
    workerflow.send_event(key, "go")
    harness.drain()


# Concurrency limits ------------------------------------------------------------------


def test_start__beyond_max_concurrency__stays_pending_without_alarm(define_with):
    definition = define_with(max_concurrency=2)
    with Harness(start=T0) as harness:
        for index in range(4):
            workerflow.start(definition, key=f"job-{index}")
        harness.drain()
        assert admitted_keys(definition.name) == ["job-0", "job-1"]
        assert queued_keys(definition.name) == ["job-2", "job-3"]
        statuses = dict(WorkflowInstance.objects.values_list("key", "status"))
        assert statuses == {
            "job-0": WorkflowStatus.RUNNING,
            "job-1": WorkflowStatus.RUNNING,
            "job-2": WorkflowStatus.PENDING,
            "job-3": WorkflowStatus.PENDING,
        }
        assert WorkflowInstance.objects.get(key="job-2").alarm_at is None


def test_start__with_a_free_slot__is_admitted_in_its_own_transaction(define_with):
    definition = define_with(max_concurrency=1)
    with Harness(start=T0):
        instance = workerflow.start(definition, key="first")
    assert instance.admitted_at == T0
    assert refreshed(instance).alarm_at == T0


def test_finishing__admits_the_next_by_priority_then_creation(define_with):
    definition = define_with(max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="holder")
        harness.drain()
        for key, priority in [("late", 5), ("b", 0), ("urgent", -1), ("c", 0)]:
            harness.clock.advance(timedelta(seconds=1))
            workerflow.start(definition, key=key, priority=priority)
        order = []
        for current in ["holder", "urgent", "b", "c", "late"]:
            assert admitted_keys(definition.name) == [current]
            order.append(current)
            finish(current, harness)
        assert order == ["holder", "urgent", "b", "c", "late"]
        assert not queued_keys(definition.name)
        assert set(WorkflowInstance.objects.values_list("status", flat=True)) == {"completed"}


def test_failing_and_cancelling_a_running_instance__each_admit_the_next(define_with):
    def fail_on_go(self):
        self.wait("hold", "go")
        raise RuntimeError("boom")

    definition = define_with(fail_on_go, max_concurrency=1)
    with Harness(start=T0) as harness:
        for key in ["a", "b", "c"]:
            workerflow.start(definition, key=key)
        harness.drain()
        finish("a", harness)
        assert WorkflowInstance.objects.get(key="a").status == WorkflowStatus.FAILED
        assert admitted_keys(definition.name) == ["b"]
        workerflow.cancel("b", reason="operator")
        harness.drain()
        assert admitted_keys(definition.name) == ["c"]
        assert WorkflowInstance.objects.get(key="c").status == WorkflowStatus.RUNNING


def test_cancelling_a_queued_instance__frees_nothing_and_admits_nothing(define_with):
    definition = define_with(max_concurrency=1)
    with Harness(start=T0) as harness:
        for key in ["a", "b", "c"]:
            workerflow.start(definition, key=key)
        harness.drain()
        assert workerflow.cancel("b") is True
        harness.drain()
        assert admitted_keys(definition.name) == ["a"]
        assert queued_keys(definition.name) == ["c"]
        finish("a", harness)
        assert admitted_keys(definition.name) == ["c"]


def test_pausing_a_queued_instance__does_nothing_as_for_any_pending_instance(define_with):
    definition = define_with(max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a")
        queued = workerflow.start(definition, key="b")
        harness.drain()
        assert workerflow.pause(queued) is False
        assert queued_keys(definition.name) == ["b"]


def test_a_sleeping_or_paused_instance__keeps_its_slot(define_with):
    def nap(self):
        self.sleep("nap", timedelta(hours=1))
        return "rested"

    definition = define_with(nap, max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a")
        workerflow.start(definition, key="b")
        harness.drain()
        assert admitted_keys(definition.name) == ["a"]
        harness.advance(timedelta(minutes=30))
        assert queued_keys(definition.name) == ["b"]
        harness.advance(timedelta(minutes=31))
        assert WorkflowInstance.objects.get(key="a").status == WorkflowStatus.COMPLETED
        assert WorkflowInstance.objects.get(key="b").status == WorkflowStatus.RUNNING


def test_concurrency_key__limits_per_key(define_with):
    def per_customer(self):
        return f"customer-{self.input['customer']}"

    definition = define_with(max_concurrency=1, concurrency_key=per_customer)
    with Harness(start=T0) as harness:
        for key, customer in [("a1", 1), ("a2", 1), ("b1", 2), ("b2", 2)]:
            workerflow.start(definition, key=key, input={"customer": customer})
        harness.drain()
        assert sorted(admitted_keys(definition.name)) == ["a1", "b1"]
        assert WorkflowInstance.objects.get(key="a2").concurrency_key == "customer-1"
        finish("b1", harness)
        assert sorted(admitted_keys(definition.name)) == ["a1", "b2"]
    assert AdmissionGate.objects.filter(definition_name=definition.name).count() == 2


@pytest.mark.parametrize("how", ["name and version", "class", "start_many"])
def test_start__of_an_older_version__counts_against_the_highest_versions_limits(define_with, how):
    older = define_with(version="1")
    newest = define_with(name=older.name, version="2", max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(newest, key="new")
        if how == "class":
            workerflow.start(older, key="old")
        elif how == "start_many":
            workerflow.start_many(older.name, [("old", None)], version="1")
        else:
            workerflow.start(older.name, key="old", version="1")
        harness.drain()
        assert admitted_keys(older.name) == ["new"]
        assert queued_keys(older.name) == ["old"]
        assert WorkflowInstance.objects.get(key="old").definition_version == "1"
        finish("new", harness)
        assert admitted_keys(older.name) == ["old"]
        assert refreshed(WorkflowInstance.objects.get(key="old")).status == WorkflowStatus.RUNNING


def test_start__of_an_older_limited_version__is_not_limited_when_the_highest_has_no_limits(
    define_with,
):
    older = define_with(version="1", max_concurrency=1)
    define_with(name=older.name, version="2")
    with Harness(start=T0) as harness:
        for index in range(2):
            workerflow.start(older, key=f"old-{index}")
        harness.drain()
        statuses = dict(WorkflowInstance.objects.values_list("key", "status"))
    assert statuses == {"old-0": WorkflowStatus.RUNNING, "old-1": WorkflowStatus.RUNNING}
    assert queued_keys(older.name) == []


def test_priority__has_no_effect_without_a_limit(define_with):
    definition = define_with()
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a", priority=9)
        workerflow.start(definition, key="b", priority=-9)
        harness.drain()
        assert sorted(admitted_keys(definition.name)) == ["a", "b"]
    assert AdmissionGate.objects.count() == 0


@pytest.mark.parametrize("priority", [1.5, "1", True, None, 2**31])
def test_priority__must_be_an_integer_the_database_stores(define_with, priority):
    definition = define_with(max_concurrency=1)
    with pytest.raises(WorkflowInputError, match="priority"):
        workerflow.start(definition, key="a", priority=priority)
    assert not WorkflowInstance.objects.exists()


def test_concurrency_key__that_is_not_a_string_is_refused(define_with):
    definition = define_with(max_concurrency=1, concurrency_key=lambda self: 42)
    with pytest.raises(WorkflowInputError, match=r"concurrency_key\(\) returned 42"):
        workerflow.start(definition, key="a")


# Rate limits -------------------------------------------------------------------------


def test_rate_limit__admits_count_per_period_and_rings_at_the_earliest_time(define_with):
    definition = define_with(lambda self: "done", rate_limit=(2, timedelta(seconds=10)))
    with Harness(start=T0) as harness:
        for index in range(5):
            workerflow.start(definition, key=f"call-{index}")
        harness.drain()
        done = WorkflowInstance.objects.filter(status=WorkflowStatus.COMPLETED)
        assert sorted(done.values_list("key", flat=True)) == ["call-0", "call-1"]
        head = WorkflowInstance.objects.get(key="call-2")
        assert head.alarm_at == T0 + timedelta(seconds=10)
        assert WorkflowInstance.objects.get(key="call-3").alarm_at is None
        harness.advance(timedelta(seconds=9))
        assert done.count() == 2
        harness.advance(timedelta(seconds=1))
        assert done.count() == 4
        harness.advance(timedelta(seconds=10))
        assert done.count() == 5
        admissions = sorted(WorkflowInstance.objects.values_list("admitted_at", flat=True))
    seconds = [0, 0, 10, 10, 20]
    assert admissions == [T0 + timedelta(seconds=offset) for offset in seconds]


def test_rate_limit_and_concurrency__both_hold(define_with):
    definition = define_with(max_concurrency=1, rate_limit=(1, timedelta(minutes=1)))
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a")
        workerflow.start(definition, key="b")
        harness.drain()
        finish("a", harness)
        # The slot is free but the rate limit allows the next admission one minute after a.
        assert queued_keys(definition.name) == ["b"]
        assert WorkflowInstance.objects.get(key="b").alarm_at == T0 + timedelta(minutes=1)
        harness.advance(timedelta(minutes=1))
        assert admitted_keys(definition.name) == ["b"]


def test_rate_limit__cancelling_the_queue_head__passes_its_turn_to_the_next(define_with):
    definition = define_with(lambda self: "done", rate_limit=(1, timedelta(minutes=1)))
    with Harness(start=T0) as harness:
        for key in ["a", "b", "c", "d"]:
            workerflow.start(definition, key=key)
        harness.drain()
        assert WorkflowInstance.objects.get(key="b").alarm_at == T0 + timedelta(minutes=1)
        assert workerflow.cancel("b") is True
        harness.advance(timedelta(minutes=1))
        assert WorkflowInstance.objects.get(key="c").status == WorkflowStatus.COMPLETED
        assert WorkflowInstance.objects.get(key="d").alarm_at == T0 + timedelta(minutes=2)
        harness.advance(timedelta(minutes=1))
        assert WorkflowInstance.objects.get(key="d").status == WorkflowStatus.COMPLETED


# Waiting on ----------------------------------------------------------------------------


def test_waiting_on__says_queued_with_the_slots_or_the_rate_limit(define_with):
    limited = define_with(max_concurrency=2)
    rated = define_with(lambda self: None, rate_limit=(10, timedelta(seconds=1)))
    with Harness(start=T0) as harness:
        for index in range(3):
            workerflow.start(limited, key=f"l-{index}")
        for index in range(11):
            workerflow.start(rated, key=f"r-{index}")
        harness.drain()
        now = harness.now()
        queued = WorkflowInstance.objects.get(key="l-2")
        assert waiting_on(queued, [], now) == "queued: 2 of 2 slots in use"
        over = WorkflowInstance.objects.get(key="r-10")
        assert waiting_on(over, [], now) == "queued: rate limit 10 per second, next at 14:03:01 UTC"


def test_waiting_on__a_limit_per_key_names_the_key_it_is_queued_behind(define_with):
    definition = define_with(max_concurrency=1, concurrency_key=lambda self: self.input["who"])
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a1", input={"who": "customer-1"})
        workerflow.start(definition, key="a2", input={"who": "customer-1"})
        harness.drain()
        queued = WorkflowInstance.objects.get(key="a2")
        assert waiting_on(queued, [], harness.now()) == (
            "queued behind 'customer-1': 1 of 1 slots in use"
        )


# Declaring ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_concurrency": 0}, "`max_concurrency` = 0"),
        ({"max_concurrency": "5"}, "`max_concurrency` = '5'"),
        ({"rate_limit": (10, 1)}, "`rate_limit` = (10, 1)"),
        ({"rate_limit": (0, timedelta(seconds=1))}, "`rate_limit`"),
    ],
)
def test_invalid_flow_settings__raise_improperly_configured_naming_class_and_field(settings, field):
    with pytest.raises(ImproperlyConfigured) as error:
        type(
            "BadLimits",
            (WorkflowDefinition,),
            {
                "name": "bad-limits",
                "execute": lambda self: None,
                "__module__": __name__,
                **settings,
            },
        )
    assert f"{__name__}.BadLimits" in str(error.value)
    assert field in str(error.value)


# Retry and fork (issue 11) -------------------------------------------------------------


def fail_on_go(self):
    self.wait("hold", "go")
    raise RuntimeError("boom")


def test_a_retried_instance__takes_its_slot_back_without_queueing(define_with):
    definition = define_with(fail_on_go, max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a")
        workerflow.start(definition, key="b")
        harness.drain()
        finish("a", harness)
        assert admitted_keys(definition.name) == ["b"]
        workerflow.retry("a", reason="fixed")
        # Documented: the retry keeps its admission, so the limit is exceeded for a while.
        assert sorted(admitted_keys(definition.name)) == ["a", "b"]
        assert WorkflowInstance.objects.get(key="a").status == WorkflowStatus.RUNNING


def test_a_fork__of_a_limited_workflow_is_queued_until_a_slot_frees(define_with):
    definition = define_with(fail_on_go, max_concurrency=1)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="a")
        harness.drain()
        finish("a", harness)
        workerflow.start(definition, key="holder")
        fork = workerflow.fork("a")
        harness.drain()
        # The fork waits for the slot "holder" took, then its own tick admits it.
        assert refreshed(fork).admitted_at is None
        finish("holder", harness)
        assert refreshed(fork).admitted_at is not None
