"""What the instance page and the change list show when something is wrong or finished: the
summary at the top, tracebacks, unreached steps, a definition no worker has, and the small
things a first trial found (the send-event form, "paused for", finished instances)."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

import django_workerflow as workerflow
from django_workerflow import registry
from django_workerflow.models import WorkflowInstance
from tests.support.admin import change_url, changelist_url, text
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import fail_every_attempt, get

pytestmark = pytest.mark.django_db


def order_execute(self):
    self.run("reserve", lambda: {"sku": "A-1"})
    self.sleep("cool-off", 60)
    return self.wait("payment", "payment.received", timeout=3600)


def broken_execute(self):
    def charge():
        lines = ["a", "b"]
        return lines["total"]  # the user's bug, on a line the traceback must show

    return self.run("charge", charge, max_attempts=2)


@pytest.fixture
def order_v1(define):
    return define(order_execute, name="order", version="1")


# The summary --------------------------------------------------------------------------------


def test_change_page__opens_with_a_summary_not_a_column_of_read_only_rows(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()

    body = text(admin_client.get(change_url(get("order-1"))))

    summary = body[body.index('id="wf-summary"') : body.index('id="wf-data"')]
    assert "Running" in summary
    assert "Waiting on" in summary
    assert "sleeping until" in summary
    assert "Created" in summary
    assert "Next alarm" in summary
    assert 'id="wf-controls"' in summary
    assert "Pause" in summary
    assert not re.search(r'class="form-row[^"]*field-', body)
    assert body.index('id="wf-summary"') < body.index('id="wf-timeline"')


def test_change_page__a_finished_instance_shows_no_waiting_on_and_no_result_none_yet(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow.start(order_v1, key="order-2")
    workerflow_harness.drain()
    workerflow.cancel("order-1", reason="customer asked")

    cancelled = text(admin_client.get(change_url(get("order-1"))))
    running = text(admin_client.get(change_url(get("order-2"))))

    assert "Waiting on" not in cancelled
    assert "none yet" not in cancelled
    assert "Ended" in cancelled
    assert "cancelled: customer asked" in cancelled
    assert "Waiting on" in running
    assert "none yet" in running


def test_change_page__a_cancelled_instances_open_step_is_not_shown_as_still_waiting(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()
    workerflow.cancel("order-1")

    response = admin_client.get(change_url(get("order-1")))
    body = text(response)

    timeline = response.context["history"].timeline
    step_row = next(row for row in timeline.rows if row.label == "cool-off")
    assert step_row.summary == "never finished: the workflow ended first"
    assert not any(segment.open for row in timeline.rows for segment in row.segments)
    assert "sleeping until" not in body
    assert "Never finished" in body


def test_timeline__paused_for_shows_the_pause_not_the_lifetime(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(minutes=20))
    workerflow.pause("order-1")
    workerflow_harness.advance(timedelta(minutes=5))

    response = admin_client.get(change_url(get("order-1")))

    instance_row = response.context["history"].timeline.rows[0]
    assert instance_row.summary == "paused for 5 min"


def test_send_event_form__is_pre_filled_with_the_awaited_event_name(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow.start(order_v1, key="order-2")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(minutes=2))

    page = admin_client.get(change_url(get("order-1"), "send_event"))
    action = admin_client.post(
        changelist_url(),
        {
            "action": "send_event",
            "index": 0,
            "_selected_action": [get("order-1").pk, get("order-2").pk],
        },
    )

    assert page.context["form"]["event_name"].value() == "payment.received"
    assert 'value="payment.received"' in text(page)
    assert action.context["form"]["event_name"].value() == "payment.received"


def test_send_event_form__with_nothing_awaited_is_empty(admin_client, order_v1, workerflow_harness):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()

    page = admin_client.get(change_url(get("order-1"), "send_event"))

    assert page.context["form"]["event_name"].value() is None


# Tracebacks ---------------------------------------------------------------------------------


def test_change_page__shows_the_failures_tracebacks_collapsed(
    admin_client, define, workerflow_harness
):
    workerflow.start(define(broken_execute, name="broken"), key="broken-1")
    fail_every_attempt(workerflow_harness)

    body = text(admin_client.get(change_url(get("broken-1"))))

    section = body[body.index('id="wf-tracebacks"') :]
    assert section.count('<details class="wf-traceback">') == 3  # the workflow, 2 attempts
    assert "<details open" not in section
    assert "The workflow's failure" in section
    assert "Attempt 2 of step 'charge'" in section
    assert "Attempt 1 of step 'charge'" in section
    assert 'return lines["total"]' in section
    assert "TypeError: list indices must be integers or slices, not str" in section


def test_change_page__without_a_failure_shows_no_traceback_section(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()

    assert 'id="wf-tracebacks"' not in text(admin_client.get(change_url(get("order-1"))))


# Drift --------------------------------------------------------------------------------------


def test_change_page__lists_unreached_steps_with_a_warning(
    admin_client, define, workerflow_harness
):
    shape = {"version": 1}

    def execute(self):
        self.run("a", lambda: 1)
        self.sleep("b" if shape["version"] == 1 else "c", 60)

    workerflow.start(define(execute), key="changing")
    workerflow_harness.drain()
    shape["version"] = 2
    WorkflowInstance.objects.filter(key="changing").update(alarm_at=workerflow_harness.now())
    workerflow_harness.drain()

    body = text(admin_client.get(change_url(get("changing"))))

    section = body[body.index('id="wf-unreached"') :]
    assert "Steps no longer reached" in section
    assert "1 recorded step the current definition no longer reaches" in section
    assert "<code>b</code>" in section


def test_missing_definition__is_shown_in_the_list_and_on_the_page_not_as_pending(
    admin_client, order_v1, workerflow_harness
):
    WorkflowInstanceFactory(key="orphan-1", definition_name="gone", definition_version="3")
    workerflow.start(order_v1, key="order-1")

    listing = text(admin_client.get(changelist_url()))
    page = text(admin_client.get(change_url(get("orphan-1"))))
    healthy = text(admin_client.get(change_url(get("order-1"))))

    words = "no worker has workflow 'gone' version '3'"
    assert words in listing
    assert listing.count("no worker has workflow") == 1
    assert words in page
    assert "`workflows` module" in page
    assert "starting" not in page
    assert "no worker has workflow" not in healthy


def test_missing_definition__a_finished_instance_is_not_flagged(admin_client, workerflow_harness):
    WorkflowInstanceFactory(key="old-1", definition_name="gone", status="completed")

    assert "no worker has workflow" not in text(admin_client.get(changelist_url()))


def test_missing_definition__goes_away_when_the_definition_is_registered(
    admin_client, define, workerflow_harness
):
    WorkflowInstanceFactory(key="orphan-1", definition_name="late", definition_version="1")
    assert registry.lookup("late", "1") is None
    define(order_execute, name="late", version="1")

    assert "no worker has workflow" not in text(admin_client.get(changelist_url()))


def test_send_event__a_queued_event_says_which_events_the_instance_waits_for(
    admin_client, order_v1, workerflow_harness
):
    workerflow.start(order_v1, key="order-1")
    workerflow_harness.drain()
    workerflow_harness.advance(timedelta(minutes=2))

    response = admin_client.post(
        change_url(get("order-1"), "send_event"),
        {"event_name": "payment.recieved", "payload": ""},
        follow=True,
    )
    out = StringIO()
    call_command("workerflow", "send-event", "order-1", "payment.recieved", stdout=out)

    assert [str(m) for m in response.context["messages"]] == [
        "Sent event 'payment.recieved' to 'order-1': queued, no step waits for it yet "
        "(the instance waits for 'payment.received')."
    ]
    assert out.getvalue() == (
        "Event 'payment.recieved' sent to 'order-1': queued until a step waits "
        "(the instance waits for 'payment.received').\n"
    )
