"""What a newcomer reads in the console: times with their zone in one format, a child step's
timeline row, the concurrency key a queued instance waits behind, "forked to", step events
folded under their step, the schedules page's recent instances and both zones, and the
confirmation pages' markup for this Django version."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import django
import pytest
from django.test import override_settings
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow.console.time_words import clock_text, format_when
from django_workerflow.models import FinishDelivery, WorkflowInstance
from django_workerflow.testing import Harness
from tests.support.admin import change_url, changelist_url, text

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
SCHEDULES = reverse("admin:workerflow_workflowschedule_changelist")


# One time format, with its zone ---------------------------------------------------------


def test_format_when__says_the_zone_and_the_date_only_when_not_today():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert format_when(now + timedelta(minutes=5), now) == "12:05:00 UTC (in 5 min)"
    assert format_when(now + timedelta(days=2), now, relative=False) == "Dec 03 12:00:00 UTC"
    later = now + timedelta(days=400)
    assert format_when(later, now, relative=False) == "2028-01-05 12:00:00 UTC"
    assert format_when(now, now, relative=False, zone=False) == "12:00:00"
    assert clock_text(now + timedelta(milliseconds=250)) == "2026-12-01 12:00:00.250 UTC"


@override_settings(TIME_ZONE="Europe/Paris")
def test_format_when__in_another_zone_names_it():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert format_when(now, now, relative=False) == "13:00:00 CET"


def test_change_list__headers_name_the_zone_of_their_times(
    admin_client, define, workerflow_harness
):
    workerflow.start(define(lambda self: self.sleep("nap", 60)), key="napper")
    workerflow_harness.drain()
    page = text(admin_client.get(changelist_url()))
    assert "Created / updated (UTC)" in page
    assert "Next alarm (UTC)" in page


def test_on_finish_attempts__show_formatted_times_not_iso_strings(
    admin_client, define, workerflow_harness
):
    def hook(self, outcome):
        raise ConnectionError("webhook down")

    definition = define(lambda self: None)
    definition.on_finish = hook
    instance = workerflow.start(definition, key="hooked")
    workerflow_harness.drain()
    delivery = FinishDelivery.objects.get(instance=instance)
    assert delivery.attempts, "the hook was attempted"
    table = text(admin_client.get(change_url(instance)))
    table = table[table.index('id="wf-delivery-attempts"') :]
    table = table[: table.index("</table>")]
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", table), table
    assert re.search(r"\d\d:\d\d:\d\d UTC", table), table


# Timeline, queue, forks, step events -----------------------------------------------------


@pytest.fixture
def parent(define, workerflow_harness):
    """'order-1' waited for one child workflow, which failed after a few seconds."""

    def parcel(self):
        self.sleep("pick-up", 3)
        raise RuntimeError("carrier down")

    parcel_definition = define(parcel, name="test-newcomer-parcel")

    def order(self):
        return self.child("ship", parcel_definition)

    instance = workerflow.start(define(order, name="test-newcomer-order"), key="order-1")
    workerflow_harness.drain()
    workerflow_harness.advance(3)
    return instance


def timeline_row(body: str, label: str) -> str:
    match = re.search(
        rf'<div class="wf-tl-row" data-kind="[^"]*">\s*<div class="wf-tl-label" title="{label}">'
        r".*?</div>\s*</div>",
        body,
        re.DOTALL,
    )
    assert match, f"no timeline row {label!r}"
    return match.group(0)


def test_timeline__a_child_step_row_says_how_its_child_ended_and_draws_a_bar(admin_client, parent):
    body = text(admin_client.get(change_url(parent)))
    row = timeline_row(body, "ship")
    assert "child workflow failed after 3 s" in row
    assert "attempt" not in row.split('class="wf-tl-summary"')[1]
    assert 'class="wf-seg wf-seg-child-failed"' in row
    assert ".wf-seg-child-failed {" in body  # the bar has a colour


def test_waiting_on__a_queued_instance_names_its_concurrency_key(admin_client, define_with):
    definition = define_with(max_concurrency=1, concurrency_key=lambda self: self.input["who"])
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="first", input={"who": "paris-1"})
        queued = workerflow.start(definition, key="second", input={"who": "paris-1"})
        harness.drain()
        listing = text(admin_client.get(changelist_url()))
        page = text(admin_client.get(change_url(queued)))
    expected = "queued behind 'paris-1': 1 of 1 slots in use"
    assert expected in listing
    assert expected in page


def test_fork__the_source_says_forked_to_in_its_summary_and_in_the_list(
    admin_client, define, workerflow_harness
):
    def flaky(self):
        self.run("send", lambda: 1 / 0, max_attempts=1)

    definition = define(flaky, name="test-newcomer-flaky")
    source = workerflow.start(definition, key="invoice-1")
    workerflow_harness.drain()
    fork = workerflow.fork(source, key="invoice-1~1")

    summary = text(admin_client.get(change_url(source)))
    summary = summary[summary.index('id="wf-summary"') : summary.index('id="wf-data"')]
    assert 'id="wf-forked-to"' in summary
    assert f'href="{change_url(fork)}">invoice-1~1</a>' in summary
    listing = text(admin_client.get(changelist_url(status="failed")))
    assert "failed in step 'send': ZeroDivisionError" in listing
    assert "forked to 'invoice-1~1'" in listing


def test_step_events__are_folded_under_each_step(admin_client, parent):
    body = text(admin_client.get(change_url(parent)))
    section = body[body.index('id="wf-step-events"') :]
    groups = re.findall(r'<details class="wf-step-events" data-step="([^"]+)">', section)
    assert groups == ["ship"]
    assert "<details open" not in section
    assert "1 event" in section or "2 events" in section


# Schedules ----------------------------------------------------------------------------


@pytest.fixture
def paris_nightly(define_with):
    definition = define_with(
        lambda self: None,
        name="paris-nightly",
        schedule="0 3 * * *",
        schedule_timezone="Europe/Paris",
    )
    with Harness(start=datetime(2026, 11, 29, 12, tzinfo=UTC), schedules=["paris-nightly"]) as h:
        h.advance(timedelta(days=2))
        yield definition


def test_schedules_page__lists_recent_instances_with_status_and_a_link_to_all(
    admin_client, paris_nightly
):
    page = text(admin_client.get(SCHEDULES))
    runs = WorkflowInstance.objects.filter(definition_name="paris-nightly").order_by("-created_at")
    assert [run.key for run in runs] == [
        "paris-nightly@2026-12-01T02:00:00+00:00",
        "paris-nightly@2026-11-30T02:00:00+00:00",
    ]
    for run in runs:
        assert f'href="{change_url(run)}" title="{run.key}"' in page
    assert page.count('<span class="wf-badge wf-status-completed">Completed</span>') == 2
    assert f'href="{changelist_url()}?schedule=paris-nightly">All its instances</a>' in page


def test_schedules_page__shows_times_in_the_schedules_zone_and_in_utc(admin_client, paris_nightly):
    with Harness(start=datetime(2026, 12, 1, 12, tzinfo=UTC)):
        page = text(admin_client.get(SCHEDULES))
    assert "Dec 02 03:00:00 CET<br>Dec 02 02:00:00 UTC<br>(in 14 h)" in page
    assert "with Redis: 15 to 47 s late" in page


@pytest.mark.parametrize("page_name", ["workerflow_overview", "workerflow_definitions"])
def test_app_pages__draw_the_breadcrumbs_of_this_django_version(admin_client, page_name):
    page = admin_client.get(reverse(f"admin:{page_name}")).content.decode()
    app = reverse("admin:app_list", kwargs={"app_label": "workerflow"})
    if django.VERSION >= (6, 0):
        assert '<ol class="breadcrumbs">' in page
        assert f'<li><a href="{app}">' in page  # Home > Workflows > the page
    else:
        assert '<div class="breadcrumbs">' in page
        assert f'&rsaquo; <a href="{app}">' in page
    assert page_name.replace("workerflow_", "wf-") in page  # the page's own body class


# Confirmation pages ---------------------------------------------------------------------


def test_confirmation_page__draws_the_breadcrumbs_and_buttons_of_this_django_version(
    admin_client, define, workerflow_harness
):
    definition = define(lambda self: self.run("send", lambda: 1 / 0, max_attempts=1))
    failed = workerflow.start(definition, key="invoice-2")
    workerflow_harness.drain()
    for view in ("retry", "fork"):
        page = admin_client.get(change_url(failed, view)).content.decode()
        if django.VERSION >= (6, 0):
            assert '<ol class="breadcrumbs">' in page
            assert '<li aria-current="page">' in page
        else:
            assert '<div class="breadcrumbs">' in page
            assert "&rsaquo;" in page
        # Django's own fieldset template, and the delete confirmation's buttons.
        assert '<fieldset class="module aligned ' in page
        assert '<div class="wf-confirm">' in page
        assert 'class="button cancel-link">No, take me back</a>' in page
