"""``manage.py workerflow list`` and ``show`` with ``--format json``: the documented shape
(docs/operations.md), every time ISO 8601 with its offset."""

from __future__ import annotations

import json
from datetime import datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

import django_workerflow as workerflow

pytestmark = pytest.mark.django_db

INSTANCE_FIELDS = {
    "key",
    "definition",
    "version",
    "status",
    "created_at",
    "updated_at",
    "finished_at",
    "alarm_at",
    "progress",
    "attributes",
    "waiting_on",
}
STEP_FIELDS = {
    "step_id",
    "parent_step_id",
    "depth",
    "type",
    "state",
    "attempt_count",
    "max_attempts",
    "created_at",
    "resolved_at",
    "next_attempt_at",
    "wake_at",
    "event_name",
    "timeout_at",
    "value",
    "error",
    "attempts",
}


def run_json(*args: str) -> Any:
    out = StringIO()
    call_command("workerflow", *args, "--format", "json", stdout=out)
    return json.loads(out.getvalue())


def assert_zoned(text: str | None) -> None:
    """An ISO 8601 time that says its offset."""
    assert text is not None
    assert datetime.fromisoformat(text).utcoffset() is not None
    assert text.endswith("+00:00")  # the test project's TIME_ZONE is UTC


def shop(self):
    def outer():
        return self.run("inner", lambda: {"sku": "A-1"})

    self.run("reserve", outer)
    self.sleep("cool-off", 3600)
    return self.wait("payment", "payment.received", timeout=7200)


@pytest.fixture
def waiting_with_a_queued_event(define, workerflow_harness):
    """Instance ``w-1`` waiting for 'payment.received', an unrelated event queued."""
    workerflow.start(define(shop, name="shop", version="v1"), key="w-1", input={"order": 1})
    workerflow_harness.drain()
    workerflow_harness.advance(3600)
    workerflow.send_event("w-1", "gift.wrapped", {"ribbon": "red"})
    workerflow_harness.drain()


def test_list_json__gives_each_instance_newest_first_with_zoned_times(
    waiting_with_a_queued_event, define
):
    workerflow.start(define(shop, name="billing"), key="b-1")

    document = run_json("list")

    assert [row["key"] for row in document["instances"]] == ["b-1", "w-1"]
    row = document["instances"][1]
    assert set(row) == INSTANCE_FIELDS
    assert (row["definition"], row["version"], row["status"]) == ("shop", "v1", "running")
    assert row["waiting_on"].startswith("waiting for event 'payment.received'")
    assert row["finished_at"] is None
    for field in ("created_at", "updated_at", "alarm_at"):
        assert_zoned(row[field])


def test_list_json__filters_like_the_text_and_gives_an_empty_list(waiting_with_a_queued_event):
    assert run_json("list", "--status", "failed") == {"instances": []}
    assert [row["key"] for row in run_json("list", "--name", "shop")["instances"]] == ["w-1"]


def test_show_json__gives_the_instance_its_step_tree_and_inbound_events(
    waiting_with_a_queued_event,
):
    document = run_json("show", "w-1")

    assert set(document) >= INSTANCE_FIELDS
    assert document["input"] == {"order": 1}
    assert document["result"] is None
    assert document["error"] is None
    assert document["step_count"] == 4
    steps = {step["step_id"]: step for step in document["steps"]}
    assert list(steps) == ["reserve", "inner", "cool-off", "payment"]
    assert all(set(step) == STEP_FIELDS for step in steps.values())
    assert steps["inner"]["parent_step_id"] == "reserve"
    assert steps["inner"]["depth"] == 1
    assert steps["inner"]["value"] == {"sku": "A-1"}
    assert steps["inner"]["attempts"][0]["outcome"] == "succeeded"
    assert (steps["payment"]["state"], steps["payment"]["event_name"]) == (
        "waiting",
        "payment.received",
    )
    assert_zoned(steps["payment"]["timeout_at"])
    assert_zoned(steps["cool-off"]["wake_at"])
    assert_zoned(steps["reserve"]["attempts"][0]["started_at"])
    [event] = document["inbound_events"]
    assert event["event_name"] == "gift.wrapped"
    assert event["payload"] == {"ribbon": "red"}
    assert event["claimed_by_step_id"] is None
    assert_zoned(event["created_at"])
    assert "tracebacks" not in document
    assert document["parent_key"] is None
    assert (document["child_count"], document["children"]) == (0, [])
    assert document["on_finish_delivery"] is None


def test_show_json__names_the_parent_and_the_children(define, workerflow_harness):
    child = define(lambda self: self.wait("go", "go"), name="parcel")

    def execute(self):
        self.start_child("ship", child, key="order-1/parcel")
        self.wait("done", "done")

    workerflow.start(define(execute, name="order"), key="order-1")
    workerflow_harness.drain()

    parent = run_json("show", "order-1")
    kid = run_json("show", "order-1/parcel")

    assert parent["child_count"] == 1
    assert parent["children"] == [
        {"key": "order-1/parcel", "definition": "parcel", "status": "running", "detached": False}
    ]
    assert kid["parent_key"] == "order-1"


def test_show_json__gives_why_an_instance_failed_and_its_tracebacks(define, workerflow_harness):
    def execute(self):
        def boom():
            raise ValueError("out of stock")

        self.run("reserve", boom, max_attempts=1)

    workerflow.start(define(execute), key="f-1")
    workerflow_harness.drain()

    document = run_json("show", "f-1", "--traceback")

    assert document["status"] == "failed"
    assert_zoned(document["finished_at"])
    assert document["ended"] == "failed in step 'reserve': ValueError: out of stock"
    assert document["error"]["name"] == "MaxAttemptsExceededError"
    assert document["steps"][0]["error"] == "ValueError: out of stock"
    assert document["steps"][0]["attempts"][0]["outcome"] == "failed"
    assert any("ValueError: out of stock" in t["text"] for t in document["tracebacks"])


def test_show_json__keeps_user_data_as_it_is(define, workerflow_harness):
    def execute(self):
        self.run("evil\x1b[31m\nstep", lambda: "x")
        self.wait("w", "e")

    workerflow.start(define(execute), key="k-evil")
    workerflow_harness.drain()

    out = StringIO()
    call_command("workerflow", "show", "k-evil", "--format", "json", stdout=out)

    assert "\x1b" not in out.getvalue()  # JSON escapes control characters
    assert json.loads(out.getvalue())["steps"][0]["step_id"] == "evil\x1b[31m\nstep"


def test_list_and_show_json__give_the_instances_progress(define, workerflow_harness):
    def execute(self):
        self.set_progress(4200, 10000, message="importing rows")
        self.wait("go", "go")

    workerflow.start(define(execute), key="p-1")
    workerflow.start(define(lambda self: self.wait("go", "go"), name="still"), key="p-2")
    workerflow_harness.drain()

    shown = run_json("show", "p-1")["progress"]
    listed = {row["key"]: row["progress"] for row in run_json("list")["instances"]}

    assert listed == {"p-1": shown, "p-2": None}
    assert {k: shown[k] for k in ("current", "total", "fraction", "message")} == {
        "current": 4200,
        "total": 10000,
        "fraction": 0.42,
        "message": "importing rows",
    }
    assert_zoned(shown["updated_at"])
