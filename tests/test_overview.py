"""The overview page (Workflows, then Overview): who may see it, and that its figures and links
match instances started through the public API and run by the harness."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow.models import WorkerHeartbeat, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.flow.schedules import sync as schedule_sync
from django_workerflow.testing import Harness
from django_workerflow.values import clock

from . import flow_helpers
from .admin_helpers import changelist_url, staff_client, text

pytestmark = pytest.mark.django_db

define_with = flow_helpers.define_with
OVERVIEW = "admin:workerflow_overview"


def _fail(self):
    def boom():
        raise RuntimeError("no")

    return self.run("boom", boom, max_attempts=1)


@pytest.fixture
def scenario(define, define_with, workerflow_harness):
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


def test_overview__anonymous__is_sent_to_the_login_page(client):
    response = client.get(reverse(OVERVIEW))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_overview__staff_without_the_view_permission__is_refused():
    assert staff_client().get(reverse(OVERVIEW)).status_code == 403


def test_overview__with_the_view_permission__is_shown(scenario):
    response = staff_client("view_workflowinstance").get(reverse(OVERVIEW))
    assert response.status_code == 200
    assert "Overview" in text(response)


def test_overview__is_linked_from_the_app_index_and_the_change_list(admin_client):
    url = reverse(OVERVIEW)
    app_index = admin_client.get(reverse("admin:app_list", args=["workerflow"]))
    assert f'href="{url}"' in app_index.content.decode()
    assert f'href="{url}"' in admin_client.get(changelist_url()).content.decode()


def test_overview__counts_by_status__match_the_instances_and_link_to_the_filtered_list(
    admin_client, scenario
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


def test_overview__every_link__opens_the_list_showing_what_it_counts(admin_client, scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    for match in re.finditer(r'<a href="([^"]*\?[^"]*)">(\d+)</a>', body):
        href, count = html.unescape(match.group(1)), int(match.group(2))
        response = admin_client.get(href)
        assert response.status_code == 200, href
        assert response.context["cl"].queryset.count() == count, href


def test_overview__queued_per_gate__counts_pending_not_admitted(admin_client, scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    gates = body.split('id="wf-gates"')[1].split("</div>")[0]
    assert "ov-gated" in gates
    assert "tenant-a" in gates
    assert re.search(r"admitted_at__isnull=True[^\"]*\">2</a>", gates)
    queued = WorkflowInstance.objects.filter(
        definition_name="ov-gated", status=WorkflowStatus.PENDING, admitted_at__isnull=True
    )
    assert queued.count() == 2


def test_overview__draws_the_last_24_hours_as_inline_svg(admin_client, scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    assert body.count('<svg class="wf-chart"') == 3
    assert "<script" not in body.split('id="content-main"')[1]
    assert re.search(r"<title>[^<]*: 3 completed</title>", body)
    assert re.search(r"<title>[^<]*: 1 failed</title>", body)
    assert "3 started, 3 completed, 0 failed" in body


def test_overview__oldest_instances_link_to_their_pages(admin_client, scenario):
    body = admin_client.get(reverse(OVERVIEW)).content.decode()
    oldest = body.split('id="wf-oldest"')[1].split("</table>")[0]
    running = WorkflowInstance.objects.filter(status="running").order_by("created_at", "id")[0]
    pending = WorkflowInstance.objects.filter(status="pending").order_by("created_at", "id")[0]
    for instance in (running, pending):
        url = reverse("admin:workerflow_workflowinstance_change", args=[instance.pk])
        assert f'href="{url}"' in oldest


def test_overview__queries__do_not_grow_with_instances(
    admin_client, scenario, define, workerflow_harness
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
    assert "0 pending" in body.split('id="wf-deliveries"')[1].replace("<strong>", "").replace(
        "</strong>", ""
    )
