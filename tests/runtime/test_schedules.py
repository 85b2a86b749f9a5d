"""Scheduled workflows at virtual time (issue 14), on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, WorkflowStateError, registry
from django_workerflow.models import WorkflowInstance, WorkflowSchedule, WorkflowStatus
from django_workerflow.runtime.flow import schedules
from django_workerflow.testing import Harness

pytestmark = pytest.mark.django_db
# The schedules these tests declare: the harness runs only those it is given.
SCHEDULED = [
    "nightly",
    "minutely",
    "hourly",
    "half-past-two",
    "slow-nightly",
    "ten-seconds",
    "keyed-nightly",
]


def record_scheduled_at(self):
    return self.input["scheduled_at"]


def keys(name: str) -> list[str]:
    return list(
        WorkflowInstance.objects.filter(definition_name=name)
        .order_by("created_at", "id")
        .values_list("key", flat=True)
    )


def nightly(define_with, **settings):
    return define_with(record_scheduled_at, name="nightly", schedule="0 3 * * *", **settings)


# Occurrences -------------------------------------------------------------------------


def test_schedule__starts_one_instance_per_occurrence_with_its_key_and_input(define_with):
    nightly(define_with, schedule_timezone="UTC")
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.drain()
        assert WorkflowInstance.objects.count() == 0
        harness.advance_to(datetime(2026, 12, 1, 3, tzinfo=UTC))
        instance = WorkflowInstance.objects.get()
        assert instance.key == "nightly@2026-12-01T03:00:00+00:00"
        assert instance.input == {"scheduled_at": "2026-12-01T03:00:00+00:00"}
        assert instance.created_at == datetime(2026, 12, 1, 3, tzinfo=UTC)
        assert instance.status == WorkflowStatus.COMPLETED
        harness.advance(timedelta(days=3))
        assert keys("nightly")[1:] == [
            "nightly@2026-12-02T03:00:00+00:00",
            "nightly@2026-12-03T03:00:00+00:00",
            "nightly@2026-12-04T03:00:00+00:00",
        ]
        # The walk stopped at each occurrence: each instance was created on time.
        created = WorkflowInstance.objects.order_by("id").values_list("created_at", flat=True)
        assert [when.hour for when in created] == [3, 3, 3, 3]
    row = WorkflowSchedule.objects.get(name="nightly")
    assert row.last_run_at == datetime(2026, 12, 4, 3, tzinfo=UTC)
    assert row.next_run_at == datetime(2026, 12, 5, 3, tzinfo=UTC)


def test_schedule__fires_exactly_once_however_often_it_is_fired(define_with):
    nightly(define_with, schedule_timezone="UTC")
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(hours=15))
        first = schedules.fire_due(harness.now(), names=["nightly"])
        again = schedules.fire_due(harness.now(), names=["nightly"])
        assert (len(first), again) == (1, [])
        schedules.sweep(harness.now())  # the sweeper's pass fires nothing more
    assert WorkflowInstance.objects.filter(definition_name="nightly").count() == 1


def test_after_downtime__only_the_latest_missed_occurrence_starts(define_with):
    nightly(define_with, schedule_timezone="UTC")
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(days=3))  # jumped: no walk, like a stopped cluster
        harness.drain()
    assert keys("nightly") == ["nightly@2026-12-03T03:00:00+00:00"]


def test_after_downtime_with_catch_up__every_missed_occurrence_starts_oldest_first(define_with):
    nightly(define_with, schedule_timezone="UTC", schedule_catch_up=True)
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(days=3))
        harness.drain()
    assert keys("nightly") == [
        "nightly@2026-12-01T03:00:00+00:00",
        "nightly@2026-12-02T03:00:00+00:00",
        "nightly@2026-12-03T03:00:00+00:00",
    ]


def test_catch_up__is_bounded_to_the_latest_max_catch_up_occurrences(define_with):
    define_with(record_scheduled_at, name="minutely", schedule="* * * * *", schedule_catch_up=True)
    start = datetime(2026, 12, 1, 0, 0, 30, tzinfo=UTC)
    with Harness(start=start, schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(minutes=250))
        harness.drain()
    started = keys("minutely")
    assert len(started) == schedules.MAX_CATCH_UP == 100
    assert started[0] == "minutely@2026-12-01T02:31:00+00:00"
    assert started[-1] == "minutely@2026-12-01T04:10:00+00:00"


def test_catch_up__of_exactly_max_catch_up_occurrences__starts_them_all_without_a_warning(
    define_with, caplog
):
    define_with(record_scheduled_at, name="minutely", schedule="* * * * *", schedule_catch_up=True)
    start = datetime(2026, 12, 1, 0, 0, 30, tzinfo=UTC)
    with Harness(start=start, schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(minutes=schedules.MAX_CATCH_UP))
        with caplog.at_level(logging.WARNING, logger=schedules.__name__):
            harness.drain()
    started = keys("minutely")
    assert len(started) == schedules.MAX_CATCH_UP
    assert started[0] == "minutely@2026-12-01T00:01:00+00:00"
    assert "catch-up bounded" not in caplog.text


def test_catch_up__that_cuts_older_occurrences__warns(define_with, caplog):
    define_with(record_scheduled_at, name="minutely", schedule="* * * * *", schedule_catch_up=True)
    start = datetime(2026, 12, 1, 0, 0, 30, tzinfo=UTC)
    with Harness(start=start, schedules=SCHEDULED) as harness:
        harness.drain()
        harness.clock.advance(timedelta(minutes=schedules.MAX_CATCH_UP + 1))
        with caplog.at_level(logging.WARNING, logger=schedules.__name__):
            harness.drain()
    assert len(keys("minutely")) == schedules.MAX_CATCH_UP
    assert "catch-up bounded name=minutely" in caplog.text


# Six fields: seconds first --------------------------------------------------------------


def test_six_field_cron__of_the_docs__runs_every_ten_seconds(define_with):
    # docs/schedules-and-flow-control.md: "*/10 * * * * *" runs every ten seconds.
    define_with(record_scheduled_at, name="ten-seconds", schedule="*/10 * * * * *")
    with Harness(start=datetime(2026, 12, 1, 12, 0, 0, 5, tzinfo=UTC), schedules=SCHEDULED) as h:
        h.drain()
        h.advance(timedelta(minutes=1))
    assert keys("ten-seconds") == [
        f"ten-seconds@2026-12-01T12:0{minute}:{second}0+00:00"
        for minute, second in [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0)]
    ]


# A schedule that fails ------------------------------------------------------------------


def test_a_cron_whose_date_never_comes__is_refused_when_the_class_is_defined():
    with pytest.raises(ImproperlyConfigured) as error:
        type(
            "NeverSchedule",
            (WorkflowDefinition,),
            {
                "name": "never",
                "schedule": "0 0 31 4 *",
                "execute": lambda self: None,
                "__module__": __name__,
            },
        )
    message = str(error.value)
    assert f"{__name__}.NeverSchedule" in message
    assert "`schedule` = '0 0 31 4 *' matches no date" in message


def test_a_schedule_whose_start_fails__is_logged_and_the_others_still_fire(define_with, caplog):
    def refuse(self):
        raise RuntimeError("no key for this input")

    define_with(
        record_scheduled_at,
        name="keyed-nightly",
        schedule="0 3 * * *",
        schedule_timezone="UTC",
        max_concurrency=1,
        concurrency_key=refuse,
    )
    nightly(define_with, schedule_timezone="UTC")
    start = datetime(2026, 11, 30, 12, tzinfo=UTC)
    with (
        Harness(start=start, schedules=SCHEDULED) as harness,
        caplog.at_level(logging.ERROR, logger=schedules.__name__),
    ):
        harness.advance_to(datetime(2026, 12, 1, 3, tzinfo=UTC))
        schedules.sweep(harness.now())  # the sweeper's pass goes on too
    assert keys("nightly") == ["nightly@2026-12-01T03:00:00+00:00"]
    assert keys("keyed-nightly") == []
    assert "schedule failed name=keyed-nightly" in caplog.text
    assert "RuntimeError: no key for this input" in caplog.text


# Daylight saving time ------------------------------------------------------------------


def test_schedule__follows_daylight_saving_changes_in_its_time_zone(define_with):
    nightly(define_with, schedule_timezone="Europe/Paris")
    with Harness(start=datetime(2026, 3, 27, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.advance(timedelta(days=3))
        spring = keys("nightly")
    assert spring == [
        "nightly@2026-03-28T02:00:00+00:00",  # 03:00 CET
        "nightly@2026-03-29T01:00:00+00:00",  # 03:00 CEST: the clocks went forward at 02:00
        "nightly@2026-03-30T01:00:00+00:00",
    ]


def test_schedule__in_the_autumn_change__runs_at_each_real_hour(define_with):
    define_with(record_scheduled_at, name="hourly", schedule="0 * * * *",
                schedule_timezone="Europe/Paris")  # fmt: skip
    with Harness(start=datetime(2026, 10, 24, 21, 30, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.advance_to(datetime(2026, 10, 25, 3, 30, tzinfo=UTC))
    hours = [key.split("T")[1][:5] for key in keys("hourly")]
    # Local 02:00 happens twice (CEST, then CET): one start each, one an hour apart in UTC.
    assert hours == ["22:00", "23:00", "00:00", "01:00", "02:00", "03:00"]


def test_a_local_time_skipped_in_spring__runs_once_at_the_end_of_the_gap(define_with):
    define_with(record_scheduled_at, name="half-past-two", schedule="30 2 * * *",
                schedule_timezone="Europe/Paris")  # fmt: skip
    with Harness(start=datetime(2026, 3, 28, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.advance(timedelta(days=2))
    assert keys("half-past-two") == [
        "half-past-two@2026-03-29T01:00:00+00:00",  # 02:30 did not exist: 03:00 CEST
        "half-past-two@2026-03-30T00:30:00+00:00",
    ]


# Sync and operator controls ----------------------------------------------------------


def test_sync__creates_rows_and_disables_a_schedule_removed_from_the_code(define_with):
    definition = nightly(define_with)
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    schedules.sync(now)
    row = WorkflowSchedule.objects.get(name="nightly")
    assert (row.cron, row.timezone, row.enabled, row.in_code) == ("0 3 * * *", "UTC", True, True)
    registry.unregister(definition)
    schedules.sync(now)
    row.refresh_from_db()
    assert (row.enabled, row.in_code) == (False, False)
    with pytest.raises(WorkflowStateError, match="no workflow definition declares it"):
        schedules.set_enabled("nightly", True, now)
    registry.register(definition)
    schedules.sync(now)
    row.refresh_from_db()
    assert (row.enabled, row.in_code) == (True, True)


def test_sync__a_schedule_that_fails_to_sync__is_logged_and_the_others_still_sync(
    define_with, monkeypatch, caplog
):
    nightly(define_with)
    define_with(record_scheduled_at, name="hourly", schedule="0 * * * *")
    real = schedules.next_occurrence

    def next_occurrence(cron, timezone, now):
        if cron == "0 3 * * *":
            raise RuntimeError("the nightly schedule cannot be read")
        return real(cron, timezone, now)

    monkeypatch.setattr(schedules, "next_occurrence", next_occurrence)
    with caplog.at_level(logging.ERROR, logger=schedules.__name__):
        schedules.sync(datetime(2026, 11, 30, 12, tzinfo=UTC))
    synced = set(WorkflowSchedule.objects.values_list("name", flat=True))
    assert "hourly" in synced  # the demo's own schedules sync too
    assert "nightly" not in synced
    assert "schedule failed name=nightly action=sync" in caplog.text


def test_a_disabled_schedule__starts_nothing_and_resumes_after_now_when_enabled(define_with):
    nightly(define_with)
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.drain()
        assert schedules.set_enabled("nightly", False, harness.now()) is True
        harness.advance(timedelta(days=2))
        assert WorkflowInstance.objects.count() == 0
        assert schedules.set_enabled("nightly", True, harness.now()) is True
        row = WorkflowSchedule.objects.get(name="nightly")
        assert row.next_run_at == datetime(2026, 12, 3, 3, tzinfo=UTC)


def test_run_now__starts_a_manual_instance_with_its_own_key(define_with):
    nightly(define_with)
    now = datetime(2026, 12, 1, 14, 3, 7, tzinfo=UTC)
    with Harness(start=now, schedules=SCHEDULED) as harness:
        instance = schedules.run_now("nightly", harness.now())
        harness.drain()
    assert instance.key == "nightly@manual-2026-12-01T14:03:07+00:00"
    assert instance.input == {"scheduled_at": "2026-12-01T14:03:07+00:00"}


def test_a_scheduled_workflow_with_a_concurrency_limit__queues_its_occurrences(define_with):
    define_with(name="slow-nightly", schedule="0 * * * *", max_concurrency=1)
    with Harness(start=datetime(2026, 12, 1, 0, 30, tzinfo=UTC), schedules=SCHEDULED) as harness:
        harness.advance(timedelta(hours=3))
        statuses = list(
            WorkflowInstance.objects.order_by("id").values_list("status", "admitted_at")
        )
    assert [status for status, _ in statuses] == ["running", "pending", "pending"]
    assert [admitted is None for _, admitted in statuses] == [False, True, True]


# Declaring ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"schedule": "0 3 * *"}, "`schedule` = '0 3 * *' has 4 fields"),
        ({"schedule": "0 25 * * *"}, "`schedule` = '0 25 * * *' is not a valid cron"),
        ({"schedule": 3}, "`schedule` = 3 is a int"),
        ({"schedule": "0 3 * * *", "schedule_timezone": "Mars/Olympus"}, "`schedule_timezone`"),
        ({"schedule": "0 3 * * *", "schedule_catch_up": "yes"}, "`schedule_catch_up`"),
    ],
)
def test_invalid_schedule__raises_improperly_configured_naming_class_and_field(settings, field):
    with pytest.raises(ImproperlyConfigured) as error:
        type(
            "BadSchedule",
            (WorkflowDefinition,),
            {"name": "bad", "execute": lambda self: None, "__module__": __name__, **settings},
        )
    assert f"{__name__}.BadSchedule" in str(error.value)
    assert field in str(error.value)


def test_start_of_a_scheduled_workflow_by_hand__still_works(define_with):
    definition = nightly(define_with)
    with Harness(start=datetime(2026, 12, 1, 12, tzinfo=UTC), schedules=SCHEDULED) as harness:
        instance = workerflow.start(definition, key="by-hand", input={"scheduled_at": "x"})
        harness.drain()
    assert WorkflowInstance.objects.get(pk=instance.pk).result == "x"


def test_harness__runs_no_schedule_unless_asked(define_with):
    nightly(define_with)
    with Harness(start=datetime(2026, 11, 30, 12, tzinfo=UTC)) as harness:
        harness.advance(timedelta(days=2))
    assert WorkflowInstance.objects.count() == 0


def test_demo_shop__nightly_report_runs_at_three_in_paris(db):
    with Harness(
        start=datetime(2026, 11, 30, 12, tzinfo=UTC), schedules=["shop-nightly-report"]
    ) as harness:
        harness.advance(timedelta(days=1))
    report = WorkflowInstance.objects.get(definition_name="shop-nightly-report")
    assert report.key == "shop-nightly-report@2026-12-01T02:00:00+00:00"
    assert report.status == WorkflowStatus.COMPLETED
    assert report.result == {
        "scheduled_at": "2026-12-01T02:00:00+00:00",
        "orders_by_status": {},
    }


def test_demo_shop__customer_export_runs_one_per_customer_at_a_time(db):
    with Harness(start=datetime(2026, 12, 1, 12, tzinfo=UTC)) as harness:
        for index, email in enumerate(["a@example.com", "a@example.com", "b@example.com"]):
            workerflow.start("shop-customer-export", key=f"export-{index}", input={"email": email})
        statuses = dict(WorkflowInstance.objects.values_list("key", "admitted_at"))
        harness.drain()
    assert statuses["export-1"] is None
    assert statuses["export-0"] is not None
    assert statuses["export-2"] is not None
    assert set(WorkflowInstance.objects.values_list("status", flat=True)) == {"completed"}
