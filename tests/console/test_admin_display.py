"""The operations console's display of instances each test builds for itself: the step
tree, the timeline, what an instance waits on, escaping of hostile text, and the change
list's query count. (tests/console/test_admin.py has the tests that share one scenario.)"""

from __future__ import annotations

import html
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance
from tests.support.admin import ATTEMPTS, change_url, changelist_url, shop_execute, text

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def shop_with_counted_attempts(define):
    ATTEMPTS.clear()
    return define(shop_execute, name="shop", version="v1")


def test_changelist__queries_are_the_same_for_5_and_50_rows(
    admin_client, shop_with_counted_attempts, workerflow_harness
):
    def count_for(rows: int) -> int:
        WorkflowInstance.objects.all().delete()
        for n in range(rows):
            workerflow.start(
                shop_with_counted_attempts, key=f"bulk-{rows}-{n}", input={"failures": n % 2}
            )
        workerflow_harness.drain()
        admin_client.get(changelist_url())
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(changelist_url())
        assert len(response.context["cl"].result_list) == rows
        assert "retrying step 'charge'" in text(response)
        return len(queries)

    assert count_for(5) == count_for(50)


def test_change_page__shows_the_step_tree_nested_by_parent(
    admin_client, define, workerflow_harness
):
    def execute(self):
        def outer():
            self.run("inner", lambda: "deep")
            self.sleep("nap", 60)
            return "outer done"

        return self.run("outer", outer)

    workerflow.start(define(execute), key="nested-1")
    workerflow_harness.drain()
    response = admin_client.get(change_url(WorkflowInstance.objects.get(key="nested-1")))
    body = response.content.decode()

    nodes = response.context["history"].nodes
    assert [(node.step.step_id, node.depth) for node in nodes] == [
        ("outer", 0),
        ("inner", 1),
        ("nap", 1),
    ]
    assert 'data-step="inner" data-depth="1"' in body
    assert 'data-step="nap" data-depth="1"' in body
    assert "sleeping until" in text(response)


def test_change_page__draws_a_timeline_with_retries_sleeps_and_waits(
    admin_client, shop_with_counted_attempts, workerflow_harness
):
    workerflow.start(shop_with_counted_attempts, key="journey-1", input={"failures": 2})
    workerflow_harness.drain()
    workerflow_harness.advance(0.25)
    workerflow_harness.advance(0.5)
    workerflow_harness.advance(3600)
    instance = WorkflowInstance.objects.get(key="journey-1")

    response = admin_client.get(change_url(instance))
    body = response.content.decode()
    timeline = response.context["history"].timeline

    rows = {row.label: row for row in timeline.rows}
    assert list(rows) == ["workflow", "reserve", "charge", "cool-off", "payment"]
    charge_kinds = [segment.kind for segment in rows["charge"].segments]
    assert charge_kinds == [
        "attempt-failed",
        "backoff",
        "attempt-failed",
        "backoff",
        "attempt-succeeded",
    ]
    assert [s.kind for s in rows["cool-off"].segments] == ["sleep-elapsed"]
    assert [s.kind for s in rows["payment"].segments] == ["wait"]
    assert rows["payment"].segments[0].open
    assert rows["cool-off"].segments[0].width > 40
    assert "wf-seg wf-seg-backoff" in body
    assert "wf-seg wf-seg-wait wf-open" in body
    assert "3 attempts, 2 failed" in html.unescape(body)


def test_hostile_ids_names_and_payloads_are_rendered_escaped(
    admin_client, define, workerflow_harness
):
    def execute(self):
        self.run(HOSTILE, lambda: {"html": HOSTILE})
        return self.wait(f"wait {HOSTILE}", HOSTILE)

    workerflow.start(define(execute, name=f"evil {HOSTILE}"), key=f"key-{HOSTILE}", input=HOSTILE)
    workerflow_harness.drain()
    instance = WorkflowInstance.objects.get()
    workerflow.send_event(instance, f"other {HOSTILE}", {"x": HOSTILE})

    listing = admin_client.get(changelist_url()).content.decode()
    page = admin_client.get(change_url(instance)).content.decode()
    sent = admin_client.post(
        change_url(instance, "send_event"),
        {"event_name": HOSTILE, "payload": json.dumps(HOSTILE)},
        follow=True,
    ).content.decode()

    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for body in (listing, page, sent):
        assert "<script>alert(1)" not in body
        assert escaped in body
    assert page.count(escaped) >= 6


def test_waiting_on__names_a_few_parallel_steps_and_counts_the_rest(
    admin_client, define, workerflow_harness
):
    def execute(self):
        self.all(*[lambda i=i: self.wait(f"w{i}", f"e{i}") for i in range(5)])

    workerflow.start(define(execute), key="fan-out")
    workerflow_harness.drain()

    body = text(admin_client.get(changelist_url()))

    assert "waiting for event 'e0' in step 'w0'" in body
    assert "2 more steps" in body


def test_waiting_on__a_pending_instance_is_starting(
    admin_client, shop_with_counted_attempts, workerflow_harness
):
    workerflow.start(shop_with_counted_attempts, key="fresh")
    workerflow_harness.clock.advance(timedelta(minutes=2))

    body = text(admin_client.get(changelist_url()))

    assert "starting: waiting for a worker since" in body
    assert "(2 min ago)" in body


# Progress ------------------------------------------------------------------------------


def test_progress__the_list_and_the_change_page_draw_a_bar_with_the_fraction_and_message(
    admin_client, define, workerflow_harness
):
    def execute(self):
        self.set_progress(4_200, 10_000, message=f"importing {HOSTILE}")
        self.wait("go", "go")

    instance = workerflow.start(define(execute), key="bar-1")
    workerflow.start(define(lambda self: self.wait("go", "go")), key="bar-none")
    workerflow_harness.drain()

    listing = admin_client.get(changelist_url()).content.decode()
    page = admin_client.get(change_url(instance)).content.decode()
    for body in (listing, page):
        assert 'role="progressbar"' in body
        assert 'aria-valuenow="42.0"' in body
        assert "width: 42.0%" in body
        assert "42% (4,200 of 10,000): importing &lt;script&gt;" in body
        assert HOSTILE not in body
    assert listing.count('role="progressbar"') == 1  # bar-none reported nothing
    assert 'id="wf-progress"' in page


def test_progress__without_a_total_shows_the_count_and_no_bar(
    admin_client, define, workerflow_harness
):
    instance = workerflow.start(
        define(lambda self: (self.set_progress(17, message="rows"), self.wait("go", "go"))),
        key="bar-2",
    )
    workerflow_harness.drain()
    page = admin_client.get(change_url(instance)).content.decode()
    assert 'role="progressbar"' not in page
    assert '<span class="wf-progress-text" title="17: rows">17: rows</span>' in page


def test_progress__the_list_cuts_a_long_message_and_shows_it_whole_on_hover(
    admin_client, define, workerflow_harness
):
    message = "copying " + "x" * 200
    workerflow.start(
        define(lambda self: (self.set_progress(1, 2, message=message), self.wait("go", "go"))),
        key="bar-3",
    )
    workerflow_harness.drain()
    listing = admin_client.get(changelist_url()).content.decode()
    assert f'title="50% (1 of 2): {message}"' in listing
    assert "x" * 61 not in listing.replace(message, "")
