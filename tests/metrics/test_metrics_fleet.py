"""The scraping process's fleet (store/flushed_totals.py, Fleet): the other processes' rows
kept parsed and summed between scrapes by (process, flushed_at), re-read only where they
changed, and the counters and histograms rendered again only then (docs/metrics.md)."""

from __future__ import annotations

import gc
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import JSONField
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_workerflow import metrics, process_counters
from django_workerflow.models import ProcessMetrics
from django_workerflow.process_counters import PROCESS_COUNTERS, ProcessCounters, Series, summed
from django_workerflow.store import flushed_totals
from django_workerflow.store.flushed_totals import FLEET
from tests.metrics.scraping import URL, scrape, value

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.metrics.scraping")]
assert URL  # the view these tests scrape is mounted by tests.metrics.test_metrics' urlpatterns

STARTED = "workerflow_step_attempts_started"
LABELS = {"definition": "fleet-def", "step_type": "run"}
DURATION = "workerflow_step_attempt_duration_seconds"


@pytest.fixture(autouse=True)
def idle_scraper() -> None:
    """A scraping process that observed nothing (a web process): the fleet alone counts,
    so the kept sum and its rendered text are what a scrape answers."""
    PROCESS_COUNTERS.start_afresh()
    FLEET.forget()


def totals(started: int, seconds: float = 0.5) -> dict[str, Any]:
    """A process's totals: ``started`` attempts started and finished, each ``seconds``."""
    process_counters = ProcessCounters()
    for _ in range(started):
        process_counters.attempt_started("fleet-def", "run")
        process_counters.attempt_finished("fleet-def", "run", "succeeded", seconds)
    return process_counters.totals()


def row(started: int, at: datetime | None = None, **fields: Any) -> ProcessMetrics:
    return ProcessMetrics.objects.create(
        process=fields.pop("process", uuid.uuid4()),
        host="elsewhere",
        pid=fields.pop("pid", 1),
        flushed_at=at or timezone.now(),
        totals=totals(started),
    )


def started() -> float | None:
    return value(scrape(), STARTED, **LABELS)


def reflush(flushed: ProcessMetrics, started: int, at: datetime | None = None) -> None:
    """The row's process flushed again: new totals, a new ``flushed_at``."""
    ProcessMetrics.objects.filter(pk=flushed.pk).update(
        totals=totals(started), flushed_at=at or timezone.now()
    )


def test_a_row_flushed_again_is_read_again():
    flushed = row(2)
    assert started() == 2
    reflush(flushed, 5)
    assert started() == 5


def test_a_row_flushed_again_by_a_clock_behind_the_others__is_read_again():
    # Flushed no later than the last row kept: the first statement leaves its totals out.
    at = timezone.now()
    flushed, _ = row(2, at - timedelta(seconds=2)), row(3, at)
    assert started() == 5
    reflush(flushed, 7, at - timedelta(seconds=1))
    assert started() == 10


def test_a_new_row_flushed_by_a_clock_behind_the_others__is_read():
    at = timezone.now()
    row(3, at)
    assert started() == 3
    row(4, at - timedelta(seconds=1))
    assert started() == 7


def test_another_processs_new_row_appears():
    row(2)
    assert started() == 2
    row(3)
    assert started() == 5


def test_a_row_with_float_counts__as_an_earlier_release_flushed_it__still_counts():
    """Releases before integer counts wrote every count as a float (``1.0``); during a
    deploy their rows and the new ones share the table."""
    written = totals(2)
    floats = {
        "counters": {
            name: [[labels, float(count)] for labels, count in series]
            for name, series in written["counters"].items()
        },
        "histograms": {
            name: [[labels, [float(number) for number in values]] for labels, values in series]
            for name, series in written["histograms"].items()
        },
    }
    ProcessMetrics.objects.create(
        process=uuid.uuid4(), host="old", pid=2, flushed_at=timezone.now(), totals=floats
    )
    row(3)
    families = scrape()
    assert value(families, STARTED, **LABELS) == 5
    labels = (("definition", "fleet-def"),)
    assert families[DURATION][(f"{DURATION}_count", labels)] == 5
    assert families[DURATION][(f"{DURATION}_bucket", (*labels, ("le", "0.5")))] == 5
    assert families[DURATION][(f"{DURATION}_sum", labels)] == 2.5


def test_a_row_gone_is_forgotten():
    row(2)
    gone = row(3)
    assert started() == 5
    gone.delete()
    assert started() == 2


def test_retiring_rows__counts_nothing_twice_and_loses_nothing():
    for pid in (11, 12, 13):
        row(2, pid=pid)
    assert started() == 6
    old = timezone.now() - flushed_totals.retire_after() - timedelta(seconds=1)
    ProcessMetrics.objects.filter(pid__in=[11, 12]).update(flushed_at=old)
    assert started() == 6
    assert flushed_totals.retire() == 2
    assert started() == 6
    ProcessMetrics.objects.filter(pid=13).update(flushed_at=old)
    assert flushed_totals.retire() == 1
    assert set(ProcessMetrics.objects.values_list("pid", flat=True)) == {0}
    assert started() == 6


def test_an_unchanged_fleet__reads_no_totals_and_renders_the_same_text():
    row(2)
    row(3)
    first = metrics.text()
    with CaptureQueriesContext(connection) as captured:
        assert metrics.text() == first
    fleet_reads = [q["sql"] for q in captured.captured_queries if "processmetrics" in q["sql"]]
    assert len(fleet_reads) == 1
    assert (
        FLEET.read(PROCESS_COUNTERS.process).summed is FLEET.read(PROCESS_COUNTERS.process).summed
    )


def test_the_scraping_processs_own_row__its_memory_counts_instead():
    row(2, process=PROCESS_COUNTERS.process)  # its row, as it flushed it
    assert started() is None  # it observed nothing since it started
    PROCESS_COUNTERS.attempt_started("fleet-def", "run")
    assert started() == 1
    row(3)
    assert started() == 4


def test_a_scraping_process_that_observed__adds_its_own_to_the_kept_sum_without_summing_again():
    row(2)
    row(3)
    PROCESS_COUNTERS.attempt_started("fleet-def", "run")
    PROCESS_COUNTERS.attempt_finished("fleet-def", "run", "succeeded", 0.25)
    first = flushed_totals.fleet_series()
    assert first.counters[STARTED][("fleet-def", "run")] == 6
    assert (
        first.histograms[DURATION][("fleet-def",)]
        == summed([totals(2), totals(3), PROCESS_COUNTERS.totals()]).histograms[DURATION][
            ("fleet-def",)
        ]
    )
    # Nothing changed: the same sum, whose rendering is kept (an unchanged text).
    assert flushed_totals.fleet_series() is first
    text = metrics.text()
    assert metrics.text() == text
    PROCESS_COUNTERS.attempt_started("fleet-def", "run")
    assert flushed_totals.fleet_series().counters[STARTED][("fleet-def", "run")] == 7
    assert started() == 7


@pytest.mark.django_db(transaction=True)
def test_threads_scraping_at_once__each_sees_the_whole_fleet():
    for started_count in (1, 2, 3):
        row(started_count)
    seen: list[float] = []

    def read() -> None:
        try:
            seen.append(sum(FLEET.read(PROCESS_COUNTERS.process).summed.counters[STARTED].values()))
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [6.0] * 4


def test_summed__is_exactly_rounded_whatever_the_order():
    parts = [totals(1, seconds) for seconds in (0.1, 1e16, 0.2, -1e16, 0.3)]

    def duration_sum(fleet: Series) -> float:
        return fleet.histograms[DURATION][("fleet-def",)][-1]

    assert duration_sum(summed(parts)) == duration_sum(summed(reversed(parts))) == 0.6


def test_a_rows_totals__are_decoded_without_jsonfields_converter(monkeypatch):
    """The fleet reads each document as text and decodes it with json.loads: JSONField's
    converter cost a scrape after every row was flushed again about 1 ms at 50 rows."""
    row(2)
    row(3)

    def refuse(*args: Any) -> Any:
        raise AssertionError("JSONField.from_db_value was called")

    monkeypatch.setattr(JSONField, "from_db_value", refuse)
    assert started() == 5


def test_kept_rows__are_tuples_the_garbage_collector_stops_tracking():
    """A scrape keeps each row's totals in tuples of strings and numbers only: once they
    survived a collection the collector no longer tracks them, so a fleet flushed again
    before each scrape adds no work to its full collections (a decoded document's lists
    did, and those collections made a scrape's p99)."""
    row(2)
    row(3)
    assert started() == 5
    for _ in range(3):  # a tuple is untracked once what it holds is
        gc.collect()
    kept = [flat for _, flat in FLEET._rows.values()]  # noqa: SLF001 - what it keeps is the subject
    assert len(kept) == 2
    # One object a row (a named tuple stays tracked), none a series.
    assert all(type(part) is tuple and not gc.is_tracked(part) for flat in kept for part in flat)


def test_summed__adds_flattened_documents_as_it_adds_the_documents():
    other_buckets = {"histograms": {DURATION: [[["fleet-def"], [1, 1, 0.5]]]}}
    documents = [totals(2, 0.25), totals(3), other_buckets, process_counters.EMPTY]
    flat = process_counters.summed_flat(map(process_counters.flattened, documents))
    assert flat.counters == summed(documents).counters
    assert flat.counters[STARTED] == {("fleet-def", "run"): 5.0}
    assert flat.histograms == summed(documents).histograms
    assert flat.histograms[DURATION][("fleet-def",)][-2:] == (5.0, 2.0)
