"""The overview page (Workflows, then Overview): who may see it, and that its figures and links
match instances started through the public API and run by the harness."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow.console import overview
from django_workerflow.models import (
    FinishDelivery,
    WorkerHeartbeat,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime.flow.schedules import sync as schedule_sync
from django_workerflow.store import instance_counts
from django_workerflow.testing import Harness
from django_workerflow.values import clock
from tests.support.admin import changelist_url, staff_client, text

pytestmark = pytest.mark.django_db

OVERVIEW = "admin:workerflow_overview"


def _fail(self):
    def boom():
        raise RuntimeError("no")

    return self.run("boom", boom, max_attempts=1)


@pytest.fixture
def overview_scenario(define, define_with, workerflow_harness):
    """Three completed and one failed 'ov-report', two running and two queued 'ov-gated'
    (max_concurrency=2, concurrency key 'tenant-a')."""
    report = define(lambda self: self.run("sum", lambda: 3), name="ov-report")
    failing = define(_fail, name="ov-report-failing")
    gated = define_with(name="ov-gated", max_concurrency=2, concurrency_key=lambda self: "tenant-a")
    for n in range(3):
        workerflow.start(report, key=f"report-{n}")
    workerflow.start(failing, key="failing-0")
    for n in range(4):
        workerflow.start(gated, key=f"gated-{n}")
    workerflow_harness.drain()
    return report, failing, gated


def _links(body: str) -> dict[str, dict[str, list[str]]]:
    """Every link to the change list on the page, by its text: its query parameters."""
    base = reverse("admin:workerflow_workflowinstance_changelist")
    found = {}
    for href, label in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', body):
        href = html.unescape(href)
        if urlsplit(href).path == base:
            found.setdefault(label, parse_qs(urlsplit(href).query))
    return found


def _words(body: str) -> str:
    """The page's text with its tags removed: what a reader sees."""
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def _listed(admin_client, href: str) -> int:
    """How many instances the change list at ``href`` shows (it must accept the filter)."""
    response = admin_client.get(html.unescape(href))
    assert response.status_code == 200, href
    assert "e=1" not in response.get("Location", ""), href
    return response.context["cl"].queryset.count()


def test_overview__anonymous__is_sent_to_the_login_page(client):
    response = client.get(reverse(OVERVIEW))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_overview__staff_without_the_view_permission__is_refused():
    assert staff_client().get(reverse(OVERVIEW)).status_code == 403


def test_overview__with_the_view_permission__is_shown(overview_scenario):
    response = staff_client("view_workflowinstance").get(reverse(OVERVIEW))
    assert response.status_code == 200
    assert "Overview" in text(response)


def test_overview__is_linked_from_the_app_index_and_the_change_list(admin_client):
    url = reverse(OVERVIEW)
    app_index = admin_client.get(reverse("admin:app_list", args=["workerflow"]))
    assert f'href="{url}"' in app_index.content.decode()
    assert f'href="{url}"' in admin_client.get(changelist_url()).content.decode()


def test_overview__counts_by_status__match_the_instances_and_link_to_the_filtered_list(
    admin_client, overview_scenario
):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    for name in ("ov-report", "ov-report-failing", "ov-gated"):
        statuses = WorkflowInstance.objects.filter(definition_name=name).values_list(
            "status", flat=True
        )
        for status in set(statuses):
            count = list(statuses).count(status)
            query = f"definition_name={name}&amp;status__exact={status}"
            assert re.search(rf'href="[^"]*\?{re.escape(query)}">{count}</a>', body), (name, status)


def test_overview__every_link__opens_the_list_showing_what_it_counts(
    admin_client, overview_scenario
):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    for match in re.finditer(r'<a href="([^"]*\?[^"]*)">(\d+)</a>', body):
        href, count = html.unescape(match.group(1)), int(match.group(2))
        response = admin_client.get(href)
        assert response.status_code == 200, href
        assert response.context["cl"].queryset.count() == count, href


def test_overview__queued_per_gate__counts_pending_not_admitted(admin_client, overview_scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    gates = body.split('id="wf-gates"')[1].split("</div>")[0]
    assert "ov-gated" in gates
    assert "tenant-a" in gates
    assert re.search(r"admitted_at__isnull=True[^\"]*\">2</a>", gates)
    queued = WorkflowInstance.objects.filter(
        definition_name="ov-gated", status=WorkflowStatus.PENDING, admitted_at__isnull=True
    )
    assert queued.count() == 2


def test_overview__draws_the_last_24_hours_as_inline_svg(admin_client, overview_scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    assert body.count('<svg class="wf-chart"') == 3
    assert "<script" not in body.split('id="content-main"')[1]
    assert re.search(r"<title>[^<]*: 3 completed</title>", body)
    assert re.search(r"<title>[^<]*: 1 failed</title>", body)
    # The totals are links now (below): read as a reader sees them.
    assert "3 started, 3 completed, 0 failed" in _words(body)


def test_overview__oldest_instances_link_to_their_pages(admin_client, overview_scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    oldest = body.split('id="wf-oldest"')[1].split("</table>")[0]
    running = WorkflowInstance.objects.filter(status="running").order_by("created_at", "id")[0]
    pending = WorkflowInstance.objects.filter(status="pending").order_by("created_at", "id")[0]
    for instance in (running, pending):
        url = reverse("admin:workerflow_workflowinstance_change", args=[instance.pk])
        assert f'href="{url}"' in oldest


def test_overview__queries__do_not_grow_with_instances(
    admin_client, overview_scenario, define, workerflow_harness
):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(reverse(OVERVIEW)).status_code == 200
        return len(queries)

    before = count()
    more = define(lambda self: 1, name="ov-more")
    for n in range(30):
        workerflow.start(more, key=f"more-{n}")
    workerflow_harness.drain()
    assert count() == before


def test_overview__shows_clusters_deliveries_and_schedules_in_both_zones(admin_client, define_with):
    define_with(name="ov-nightly", schedule="0 3 * * *", schedule_timezone="Europe/Paris")
    with Harness(start=datetime(2026, 12, 1, 12, tzinfo=UTC), schedules=frozenset({"ov-nightly"})):
        schedule_sync(clock.now())
        WorkerHeartbeat.objects.create(queue="reports", beat_at=clock.now())
        body = text(admin_client.get(reverse(OVERVIEW)))
    schedules = body.split('id="wf-schedules"')[1]
    assert "ov-nightly" in schedules
    assert "Dec 02 03:00:00 CET" in schedules
    assert "Dec 02 02:00:00 UTC" in schedules
    assert "?schedule=ov-nightly" in schedules
    clusters = body.split('id="wf-clusters"')[1].split("</table>")[0]
    assert "reports" in clusters
    assert "12:00:00 UTC" in clusters
    # The count is a link now (test_overview__pending_deliveries__...): read as text.
    assert "0 pending" in _words(body.split('id="wf-deliveries"')[1])


T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def hours(define):
    """Six hours of 'ov-hourly' instances: in hour h, h + 1 started and completed and one
    failed (started, then failing at once), the page read at the end of the sixth hour."""
    done = define(lambda self: self.run("sum", lambda: 3), name="ov-hourly")
    failing = define(_fail, name="ov-hourly-failing")
    with Harness(start=T0) as harness:
        for hour in range(6):
            for n in range(hour + 1):
                workerflow.start(done, key=f"hourly-{hour}-{n}")
            workerflow.start(failing, key=f"hourly-failing-{hour}")
            harness.drain()
            harness.clock.advance(timedelta(hours=1))
        yield harness


def test_overview__the_charts_totals__link_to_the_instances_they_count(admin_client, hours):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    totals = re.findall(
        r'<a href="([^"]+)">(\d+)</a> (started|completed|failed)',
        body.split('id="wf-hourly"')[1].split('id="wf-wake-lag"')[0],
    )
    figures = {(word, int(count)) for _, count, word in totals}
    assert {("started", 21), ("completed", 21), ("failed", 0)} <= figures  # ov-hourly
    assert {("started", 6), ("completed", 0), ("failed", 6)} <= figures  # ...-failing
    assert len(totals) == 6
    for href, count, _ in totals:
        assert _listed(admin_client, href) == int(count), href


def test_overview__each_bar__links_to_the_instances_of_its_hour(admin_client, hours):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    bars = re.findall(
        r'<a href="([^"]+)"><rect class="wf-bar wf-bar-(\w+)"[^>]*><title>[^<]*: (\d+) \w+</title>',
        body,
    )
    assert len(bars) == 2 * 24 * 3  # two definitions, 24 hours, three series
    drawn = [(href, key, int(n)) for href, key, n in bars if int(n)]
    # ov-hourly: 1..6 started and completed; ov-hourly-failing: 1 started and 1 failed.
    assert sorted(n for _, key, n in drawn if key == "completed") == [1, 2, 3, 4, 5, 6]
    assert sorted(n for _, key, n in drawn if key == "failed") == [1] * 6
    empty = [(href, key, 0) for href, key, n in bars if not int(n)][:3]
    for href, key, n in drawn + empty:
        assert _listed(admin_client, href) == n, (key, href)


def test_overview__wake_lag__p50_and_p99_of_the_sleeps_woken_in_the_last_hour(admin_client, define):
    sleeper = define(lambda self: self.sleep("nap", timedelta(seconds=10)), name="ov-sleeper")
    with Harness(start=T0) as harness:
        workerflow.start(sleeper, key="woken-long-ago")  # woke on time, two hours ago
        harness.drain()
        harness.clock.advance(timedelta(seconds=10))
        harness.drain()
        harness.clock.advance(timedelta(hours=2))
        for n in range(5):  # due 10 s after each start, one a second: woken 10..6 s late
            workerflow.start(sleeper, key=f"woken-{n}")
            harness.drain()
            harness.clock.advance(timedelta(seconds=1))
        harness.clock.advance(timedelta(seconds=15))
        harness.drain()
        response = admin_client.get(reverse(OVERVIEW))
    (row,) = [d for d in response.context["definitions"] if d.name == "ov-sleeper"]
    # Linear interpolation over 6, 7, 8, 9, 10 s on both databases (percentile_cont).
    assert row.wake_lag == overview.WakeLag(5, timedelta(seconds=8), timedelta(seconds=9.96))
    section = response.content.decode().split('id="wf-wake-lag"')[1].split("</table>")[0]
    assert re.search(r'wf-lag-p50">8 s<', section)
    assert re.search(r'wf-lag-p99">10 s<', section)  # 9.96 s, rounded to a tenth


@pytest.mark.skipif(
    connection.vendor == "postgresql", reason="PostgreSQL computes them over every sleep"
)
def test_overview__wake_lag__without_percentile_cont__is_computed_over_the_newest_sleeps(
    admin_client, define, monkeypatch
):
    monkeypatch.setattr(overview, "LAG_SAMPLE", 3)
    sleeper = define(lambda self: self.sleep("nap", timedelta(seconds=10)), name="ov-sampled")
    with Harness(start=T0) as harness:
        for n in range(5):
            workerflow.start(sleeper, key=f"sampled-{n}")
            harness.drain()
            harness.clock.advance(timedelta(seconds=1))
        harness.clock.advance(timedelta(seconds=15))
        harness.drain()
        response = admin_client.get(reverse(OVERVIEW))
    (row,) = [d for d in response.context["definitions"] if d.name == "ov-sampled"]
    assert row.wake_lag.sleeps == 3
    assert row.wake_lag.sampled
    assert "(the newest)" in _words(response.content.decode().split('id="wf-wake-lag"')[1])


def test_percentile__interpolates_between_the_closest_ranks_as_percentile_cont():
    seconds = [timedelta(seconds=n) for n in (1, 2, 3, 4)]
    assert overview.percentile(seconds, 0.5) == timedelta(seconds=2.5)
    assert overview.percentile(seconds, 0.99) == timedelta(seconds=3.97)
    assert overview.percentile(seconds[:1], 0.99) == timedelta(seconds=1)


def test_overview__waiting_longest_for_a_worker__is_the_instance_no_worker_has(
    admin_client, define
):
    report = define(lambda self: self.run("sum", lambda: 3), name="ov-deployed")
    with Harness(start=T0) as harness:
        stranded = workerflow.start(report, key="stranded")
        # Its version is deployed nowhere: no worker takes it (the harness is the worker).
        WorkflowInstance.objects.filter(pk=stranded.pk).update(definition_version="9")
        harness.clock.advance(timedelta(minutes=1))
        later = workerflow.start(report, key="later")
        WorkflowInstance.objects.filter(pk=later.pk).update(definition_version="9")
        harness.clock.advance(timedelta(minutes=9))
        workerflow.start(report, key="served")
        harness.drain()  # runs 'served'; only defers the two of version 9
        harness.clock.advance(timedelta(minutes=5))
        response = admin_client.get(reverse(OVERVIEW))
    rows = {row.label: row for row in response.context["oldest"]}
    waiting = rows["waiting longest for a worker"]
    assert waiting.instance is not None
    assert waiting.instance.key == "stranded"
    row = re.search(r"waiting longest for a worker</th><td>(.*?)</td>", response.content.decode())
    assert row
    url = reverse("admin:workerflow_workflowinstance_change", args=[stranded.pk])
    assert f'href="{url}"' in row.group(1)
    assert "ov-deployed, since" in _words(row.group(1))


def test_overview__pending_deliveries__link_to_the_instances_whose_hook_has_not_returned(
    admin_client, define
):
    report = define(lambda self: self.run("sum", lambda: 3), name="ov-delivering")
    with Harness(start=T0) as harness:
        instances = [workerflow.start(report, key=f"delivering-{n}") for n in range(4)]
        harness.drain()
        now = harness.now()
    # Rows as a finish creates them: two pending, one of those retried and finished again
    # (a second pending row), one acknowledged.
    for instance in (instances[0], instances[1], instances[1]):
        FinishDelivery.objects.create(instance=instance, created_at=now, next_attempt_at=now)
    FinishDelivery.objects.create(instance=instances[2], created_at=now, acknowledged_at=now)
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    section = body.split('id="wf-deliveries"')[1].split("</div>")[0]
    link = re.search(r'<a href="([^"]+)">(\d+)</a>', section)
    assert link
    assert link.group(2) == "2"
    assert _listed(admin_client, link.group(1)) == 2
    listed = admin_client.get(html.unescape(link.group(1))).context["cl"].queryset
    assert {i.key for i in listed} == {"delivering-0", "delivering-1"}
    assert "2 pending" in _words(section)
    assert "(3 deliveries" in _words(section)


@pytest.mark.postgres_only
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's sample and estimate")
def test_overview__over_a_large_table__estimates_the_large_counts_and_counts_the_rest(
    admin_client, overview_scenario, monkeypatch
):
    # "Large" made small: any table is sampled whole, and 3 or more is a large count.
    monkeypatch.setattr(instance_counts, "SAMPLE_FROM", 1)
    monkeypatch.setattr(instance_counts, "SAMPLE_ROWS", 10**9)
    monkeypatch.setattr(instance_counts, "EXACT_BELOW", 3)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {WorkflowInstance._meta.db_table}")  # exact reltuples
    counts = overview.counts_by_status()
    assert counts["ov-report"] == {"completed": (3, True)}
    assert counts["ov-report-failing"] == {"failed": (1, False)}
    assert counts["ov-gated"] == {"running": (2, False), "pending": (2, False)}
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    row = body.split('<th scope="row">ov-report</th>')[1].split("</tr>")[0]
    assert re.search(r'status__exact=completed" title="estimated[^"]*">~3</a>', row)
    assert re.search(r'definition_name=ov-report" title="estimated[^"]*">~3</a>', row)
