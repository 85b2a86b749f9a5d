"""The counters and histograms kept in process memory (django_workerflow.process_counters):
the wake lag of every cause, the tick duration, the flush to the process's row, and a scrape
that sums every process's row with its own memory in place of its own row (docs/metrics.md)."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import ProcessMetrics
from django_workerflow.process_counters import PROCESS_COUNTERS, TICK_DURATION, WAKE_LAG
from django_workerflow.runtime.tick import tick
from django_workerflow.store import flushed_totals
from django_workerflow.testing import Harness
from django_workerflow.values.states import TickEnding
from tests.metrics.scraping import URL, scrape, value
from tests.support.instances import fail_first_attempt

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.metrics.scraping")]

T0 = datetime(2026, 12, 1, 2, 59, 0, tzinfo=UTC)
assert URL  # the view these tests scrape is mounted by tests.metrics.test_metrics' urlpatterns


@pytest.fixture(autouse=True)
def fresh_meters() -> None:
    """Each test starts as a new process: an earlier test's flush, rolled back with its
    transaction, would otherwise look like this process's retired row."""
    PROCESS_COUNTERS.start_afresh()


def lag(families: dict[str, Any], definition: str, cause: str) -> tuple[float, float] | None:
    """The wake lag's (count, sum) for ``definition`` and ``cause``; None: no sample."""
    labels = (("cause", cause), ("definition", definition))
    samples = families[WAKE_LAG]
    count = samples.get((f"{WAKE_LAG}_count", labels))
    return None if count is None else (count, samples[(f"{WAKE_LAG}_sum", labels)])


# Wake lag, by cause ----------------------------------------------------------------------


def test_wake_lag__start__is_creation_to_the_first_tick(define_with):
    definition = define_with(execute=lambda self: "done")
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="late-start")
        harness.clock.advance(timedelta(seconds=2))  # no worker took it for 2 s
        harness.drain()
        families = scrape()
    assert lag(families, definition.name, "start") == (1, pytest.approx(2.0))


def test_wake_lag__debounced_start__counts_from_the_debounced_first_tick(define_with):
    definition = define_with(execute=lambda self: "done")
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="burst", input=1, debounce=10)
        harness.clock.advance(timedelta(seconds=5))
        workerflow.start(definition, key="burst", input=2, debounce=10)
        harness.clock.advance(timedelta(seconds=12))  # due at T0+15 s, ticked at T0+17 s
        harness.drain()
        families = scrape()
    assert lag(families, definition.name, "start") == (1, pytest.approx(2.0))


def test_wake_lag__retry__is_the_attempts_due_time_to_the_tick(define_with):
    calls: list[int] = []
    flaky = fail_first_attempt(calls)

    def retried(self: WorkflowDefinition) -> int:
        return self.run("flaky", flaky, max_attempts=2)

    definition = define_with(execute=retried)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="retried")
        harness.drain()
        harness.clock.advance(timedelta(minutes=5))  # far past the backoff
        harness.drain()
        families = scrape()
    count, total = lag(families, definition.name, "retry") or (0, 0)
    assert count == 1
    assert 200 < total < 300  # 5 min less the backoff's delay (a few seconds)
    assert lag(families, definition.name, "sleep") is None


def test_wake_lag__event__is_its_arrival_to_the_tick(define_with):
    definition = define_with()  # waits for "go"
    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="waiter")
        harness.drain()
        workerflow.send_event(instance.key, "go", {"n": 1})
        harness.clock.advance(timedelta(seconds=4))
        harness.drain()
        families = scrape()
    assert lag(families, definition.name, "event") == (1, pytest.approx(4.0))


def test_wake_lag__child__is_the_childs_finish_to_the_parents_tick(define_with):
    child = define_with()  # waits for "go"

    def parent(self: WorkflowDefinition) -> Any:
        return self.child("kid", child, key="the-kid")

    definition = define_with(execute=parent)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="parent")
        harness.drain()
        workerflow.send_event("the-kid", "go", {"n": 1})
        harness.drain()  # the child finishes and wakes its parent, which ticks at once
        families = scrape()
    assert lag(families, definition.name, "child") == (1, 0.0)
    assert lag(families, child.name, "event") == (1, 0.0)


def test_wake_lag__schedule__is_the_occurrence_to_the_first_tick(define_with):
    definition = define_with(lambda self: None, name="metrics-nightly", schedule="0 3 * * *")
    with Harness(start=T0, schedules=["metrics-nightly"]) as harness:
        harness.drain()
        harness.advance_to(datetime(2026, 12, 1, 3, tzinfo=UTC))
        families = scrape()
    assert lag(families, definition.name, "schedule") == (1, 0.0)
    assert lag(families, definition.name, "start") is None


def test_wake_lag__a_duplicate_bell_that_finds_nothing_due__records_none(define_with):
    def nap(self: WorkflowDefinition) -> None:
        self.sleep("nap", timedelta(seconds=10))

    definition = define_with(execute=nap)
    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="sleeper")
        harness.drain()
        assert tick(instance.pk).outcome == TickEnding.NOT_DUE  # a stale bell
        harness.advance(timedelta(seconds=10))
        assert tick(instance.pk).outcome == TickEnding.INACTIVE  # a duplicate bell
        families = scrape()
    assert lag(families, definition.name, "start") == (1, 0.0)
    assert lag(families, definition.name, "sleep") == (1, 0.0)


# Tick duration ---------------------------------------------------------------------------


def test_tick_duration__counts_each_tick_that_claimed_the_instance(define_with):
    with Harness(start=T0) as harness:

        def slow(self: WorkflowDefinition) -> None:
            self.run("work", lambda: harness.clock.advance(timedelta(seconds=0.3)) and None)
            self.sleep("nap", timedelta(seconds=10))

        definition = define_with(execute=slow)
        workerflow.start(definition, key="ticked")
        harness.drain()
        harness.advance(timedelta(seconds=10))
        families = scrape()
    labels = (("definition", definition.name),)
    samples = families[TICK_DURATION]
    assert samples[(f"{TICK_DURATION}_count", labels)] == 2
    assert samples[(f"{TICK_DURATION}_sum", labels)] == pytest.approx(0.3)
    assert samples[(f"{TICK_DURATION}_bucket", (*labels, ("le", "0.25")))] == 1
    assert samples[(f"{TICK_DURATION}_bucket", (*labels, ("le", "0.5")))] == 2


# Flushing and summing the processes ------------------------------------------------------


def two_steps(self: WorkflowDefinition) -> int:
    return self.run("a", lambda: 1) + self.run("b", lambda: 2)


@contextmanager
def ran_two_steps(
    define_with: Any, key: str
) -> Iterator[tuple[type[WorkflowDefinition], dict[str, str], Harness]]:
    """A harness in which an instance of a new two-step definition ran to its end: the
    definition, the labels of its run steps' counters, and the harness."""
    definition = define_with(execute=two_steps)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key=key)
        harness.drain()
        yield definition, {"definition": definition.name, "step_type": "run"}, harness


def test_scrape__the_scraping_processs_unflushed_ticks_count(define_with):
    with ran_two_steps(define_with, "harnessed") as (_definition, labels, _harness):
        assert not ProcessMetrics.objects.filter(process=PROCESS_COUNTERS.process).exists()
        assert value(scrape(), "workerflow_step_attempts_started", **labels) == 2


def test_scrape__after_a_flush__counts_nothing_twice(define_with):
    with ran_two_steps(define_with, "flushed") as (definition, labels, harness):
        before = scrape()
        flushed_totals.flush()
        row = ProcessMetrics.objects.get(process=PROCESS_COUNTERS.process)
        assert (row.pid, PROCESS_COUNTERS.unflushed) == (os.getpid(), 0)
        assert scrape() == before
        workerflow.start(definition, key="after-the-flush")
        harness.drain()
        assert value(scrape(), "workerflow_step_attempts_started", **labels) == 4


def test_scrape__sums_the_rows_of_the_other_processes_dead_or_alive(define_with):
    with ran_two_steps(define_with, "here") as (definition, labels, _harness):
        other = PROCESS_COUNTERS.totals()  # another process that did the same work, then died
        ProcessMetrics.objects.create(
            process=uuid.uuid4(), host="elsewhere", pid=1, flushed_at=timezone.now(), totals=other
        )
        families = scrape()
    assert value(families, "workerflow_step_attempts_started", **labels) == 4
    name = "workerflow_step_attempt_duration_seconds"
    assert families[name][(f"{name}_count", (("definition", definition.name),))] == 4


def test_flush_if_due__writes_at_most_once_per_interval(define_with, settings):
    settings.WORKERFLOW_SWEEP_SECONDS = 3600
    with ran_two_steps(define_with, "one") as (definition, _labels, harness):
        flushed_totals.flush()
        assert flushed_totals.flush_if_due() is False  # nothing new
        workerflow.start(definition, key="two")
        harness.drain()
        assert flushed_totals.flush_if_due() is False  # new, but flushed a moment ago
        settings.WORKERFLOW_SWEEP_SECONDS = 0
        assert flushed_totals.flush_if_due() is True
        assert PROCESS_COUNTERS.unflushed == 0


def test_meters__a_forked_child_starts_from_zero_as_a_process_of_its_own(define_with):
    with ran_two_steps(define_with, "parent-counted"):
        pass  # this process counted its steps
    reading, writing = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        pid = os.fork()
    if pid == 0:  # the child: report and leave at once, touching nothing else
        started = PROCESS_COUNTERS.counters["workerflow_step_attempts_started"]
        os.write(writing, f"{PROCESS_COUNTERS.process} {len(started)}".encode())
        os._exit(0)
    os.close(writing)
    os.waitpid(pid, 0)
    with os.fdopen(reading) as pipe:
        process, counted = pipe.read().split()
    assert process != str(PROCESS_COUNTERS.process)
    assert counted == "0"


# Retiring the rows of processes gone quiet -------------------------------------------------


def age_rows(**filters: Any) -> None:
    """Make rows look flushed long ago, as a process that stopped leaves its row."""
    old = timezone.now() - flushed_totals.retire_after() - timedelta(seconds=1)
    ProcessMetrics.objects.filter(**filters).update(flushed_at=old)


def test_retire__merges_quiet_rows_into_one_and_the_counters_stay(define_with):
    with ran_two_steps(define_with, "counted") as (definition, labels, _harness):
        for pid in (11, 12, 13):  # three processes that stopped, and one still flushing
            ProcessMetrics.objects.create(
                process=uuid.uuid4(),
                host="h",
                pid=pid,
                flushed_at=timezone.now(),
                totals=PROCESS_COUNTERS.totals(),
            )
        age_rows(pid__in=[11, 12])
        before = scrape()
        assert flushed_totals.retire() == 2
        assert flushed_totals.retire() == 0
        assert set(ProcessMetrics.objects.values_list("pid", flat=True)) == {0, 13}
        assert scrape() == before
        age_rows(pid=13)
        assert flushed_totals.retire() == 1
        assert scrape() == before
    labels = {"definition": definition.name, "step_type": "run"}
    assert value(before, "workerflow_step_attempts_started", **labels) == 8


def test_retire__a_live_process_whose_row_was_retired__counts_nothing_twice(define_with):
    with ran_two_steps(define_with, "before-idle") as (definition, labels, harness):
        flushed_totals.flush()
        age_rows(process=PROCESS_COUNTERS.process)  # this process went idle
        assert flushed_totals.retire() == 1
        # Not flushed since: the scrape sees its row gone and its totals in the retired row.
        assert value(scrape(), "workerflow_step_attempts_started", **labels) == 2
        workerflow.start(definition, key="after-idle")
        harness.drain()
        flushed_totals.flush()  # learns of the retirement, writes only what is new
        own = ProcessMetrics.objects.get(process=PROCESS_COUNTERS.process).totals
        assert value(scrape(), "workerflow_step_attempts_started", **labels) == 4
    started = {
        tuple(key): count for key, count in own["counters"]["workerflow_step_attempts_started"]
    }
    assert started[(definition.name, "run")] == 2


# The numbers a row holds ------------------------------------------------------------------


def counts_and_sums(totals: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Every count of a totals document (counter values, histogram buckets and counts), and
    every histogram's sum."""
    counts = [count for series in totals["counters"].values() for _, count in series]
    sums = []
    for series in totals["histograms"].values():
        for _, values in series:
            counts.extend(values[:-1])
            sums.append(values[-1])
    return counts, sums


def test_rows__hold_counts_as_integers_and_sums_as_floats(define_with):
    """A scrape decodes every row a live worker flushed again since the last one: integers
    decode in well under half the time of floats (``0.0``). A process's own row, the
    retired row (merged) and a row flushed after its retirement (a difference) alike."""
    with ran_two_steps(define_with, "integral") as (definition, _labels, harness):
        flushed_totals.flush()
        age_rows(process=PROCESS_COUNTERS.process)
        assert flushed_totals.retire() == 1
        workerflow.start(definition, key="integral-after")
        harness.drain()
        flushed_totals.flush()
        rows = list(ProcessMetrics.objects.all())
    assert len(rows) == 2
    for row in rows:
        counts, sums = counts_and_sums(row.totals)
        assert counts
        assert all(type(count) is int for count in counts), row.totals
        assert sums
        assert all(type(total) is float for total in sums), row.totals


def test_wake_lag__a_start_with_a_schedules_key_and_input__counts_as_start(define_with):
    # Only a schedule's own start counts `schedule`: a key and input shaped like an
    # occurrence's do not make a user's start one.
    definition = define_with(lambda self: None, name="metrics-lookalike")
    with Harness(start=T0) as harness:
        occurrence = "2026-11-30T03:00:00+00:00"
        workerflow.start(
            definition, key=f"{definition.name}@{occurrence}", input={"scheduled_at": occurrence}
        )
        harness.drain()
        families = scrape()
    assert lag(families, definition.name, "start") == (1, 0.0)
    assert lag(families, definition.name, "schedule") is None
