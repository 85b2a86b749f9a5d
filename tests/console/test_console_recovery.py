"""Retry and fork from the admin: the buttons, the list actions, their forms, their
permissions (checked on the server) and the admin history each use leaves."""

from __future__ import annotations

from collections import Counter

import pytest
from django.contrib.admin.models import LogEntry

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from tests.support.admin import change_url, changelist_url, messages_of, staff_client, text
from tests.support.instances import get

pytestmark = pytest.mark.django_db

CALLS: Counter[str] = Counter()
BROKEN = {"charge": True}


def checkout_v1(self):
    """Reserve, then charge: fails while ``BROKEN["charge"]``, once per attempt."""
    self.run("reserve", lambda: CALLS.update(["reserve"]) or {"sku": "A-1"})

    def charge():
        CALLS["charge"] += 1
        if BROKEN["charge"]:
            raise RuntimeError("card service unreachable")
        return {"charged": 42}

    return self.run("charge", charge, max_attempts=2)


def checkout_v2(self):
    """The fixed version: same reserve, a charge that works."""
    self.run("reserve", lambda: CALLS.update(["reserve"]) or {"sku": "A-1"})
    charged = self.run("charge", lambda: CALLS.update(["charge-v2"]) or {"charged": 42})
    return {"fixed": True, **charged}


@pytest.fixture
def checkout_versions(define, workerflow_harness):
    """Definitions v1 and v2 of ``checkout``; instance ``failed-1`` failed in ``charge``
    after two attempts; ``running-1`` sleeps between steps."""
    CALLS.clear()
    BROKEN["charge"] = True
    v1 = define(checkout_v1, name="checkout", version="1")
    define(checkout_v2, name="checkout", version="2")
    workerflow.start(v1, key="failed-1")
    workerflow.start(v1, key="failed-2")
    fail_every_attempt(workerflow_harness)
    assert WorkflowInstance.objects.get(key="failed-1").status == WorkflowStatus.FAILED
    return v1


@pytest.fixture
def sleeper_in_a_nap(define, workerflow_harness):
    def execute(self):
        self.run("first", lambda: 1)
        self.sleep("nap", 3600)

    workerflow.start(define(execute, name="sleeper"), key="sleeping-1")
    workerflow_harness.drain()
    return WorkflowInstance.objects.get(key="sleeping-1")


# Retry --------------------------------------------------------------------------------------


def test_retry_button__is_offered_on_a_failed_instance_only(
    admin_client, checkout_versions, sleeper_in_a_nap
):
    failed = admin_client.get(change_url(get("failed-1")))
    sleeping = admin_client.get(change_url(sleeper_in_a_nap))

    assert "retry" in [control["name"] for control in failed.context["controls"]]
    assert "Retry" in text(failed)
    assert "retry" not in [control["name"] for control in sleeping.context["controls"]]


def test_retry_button__confirms_with_a_reason_then_retries_and_logs(
    admin_client, checkout_versions, workerflow_harness
):
    instance = get("failed-1")

    confirm = admin_client.get(change_url(instance, "retry"))
    BROKEN["charge"] = False
    done = admin_client.post(
        change_url(instance, "retry"), {"reason": "card service is back"}, follow=True
    )

    assert confirm.status_code == 200
    assert "Retry failed workflows" in text(confirm)
    assert 'name="reason"' in text(confirm)
    assert messages_of(done) == ["Retried 'failed-1'. Reason: card service is back"]
    assert get("failed-1").status == WorkflowStatus.RUNNING
    retried = WorkflowEvent.objects.get(instance=instance, type="retried")
    assert retried.reason == "card service is back"
    entry = LogEntry.objects.get(object_id=str(instance.pk))
    assert "Retried 'failed-1'. Reason: card service is back" in entry.get_change_message()
    workerflow_harness.drain()
    assert get("failed-1").status == WorkflowStatus.COMPLETED
    assert CALLS["reserve"] == 2  # once per instance, never again on the retry


def test_retry_selected__retries_failed_and_reports_the_skipped(
    admin_client, checkout_versions, sleeper_in_a_nap
):
    selected = [get("failed-1"), get("failed-2"), sleeper_in_a_nap]

    confirm = admin_client.post(
        changelist_url(),
        {"action": "retry_selected", "index": 0, "_selected_action": [i.pk for i in selected]},
    )
    done = admin_client.post(
        changelist_url(),
        {
            "action": "retry_selected",
            "index": 0,
            "_selected_action": [i.pk for i in selected],
            "apply": "1",
            "reason": "deployed 1.4.2",
        },
        follow=True,
    )

    assert "will be skipped: not failed" in text(confirm)
    assert messages_of(done) == ["2 workflows retried; 1 skipped: not failed"]
    assert get("failed-1").status == get("failed-2").status == WorkflowStatus.RUNNING
    assert get("sleeping-1").status == WorkflowStatus.RUNNING
    assert LogEntry.objects.count() == 2


def test_retry__of_an_instance_no_longer_failed_is_skipped_with_its_status(
    admin_client, checkout_versions, sleeper_in_a_nap
):
    response = admin_client.post(change_url(sleeper_in_a_nap, "retry"), {"reason": ""}, follow=True)

    assert messages_of(response) == ["Skipped 'sleeping-1': it is running, not failed."]
    assert not LogEntry.objects.exists()


@pytest.fixture
def failed_parent(define, workerflow_harness):
    """'order-p' failed because its child 'order-p/ship' failed (while ``BROKEN["ship"]``)."""
    BROKEN["ship"] = True

    def ship():
        if BROKEN["ship"]:
            raise RuntimeError("carrier down")
        return "shipped"

    child = define(lambda self: self.run("ship", ship, max_attempts=1), name="parcel")
    workerflow.start(define(lambda self: self.child("ship", child), name="order"), key="order-p")
    workerflow_harness.drain()
    assert get("order-p").status == get("order-p/ship").status == WorkflowStatus.FAILED
    yield get("order-p")
    BROKEN.pop("ship")


def test_retry_form__names_the_failed_child_and_offers_to_retry_it_too(
    admin_client, failed_parent, workerflow_harness
):
    """Issue 20, item 9: the form names the failed child; retrying alone says the parent
    fails again; the checkbox retries both."""
    confirm = admin_client.get(change_url(failed_parent, "retry"))
    assert "'order-p' waits again for 'order-p/ship' (failed)." in text(confirm)
    assert 'name="with_children"' in text(confirm)

    BROKEN["ship"] = False
    alone = admin_client.post(change_url(failed_parent, "retry"), {"reason": ""}, follow=True)
    assert messages_of(alone) == [
        "Retried 'order-p'. It waits again for 'order-p/ship' (failed), so it fails again at "
        "once when it meets it. Retry 'order-p' with its failed children, or retry them "
        "first. No reason given."
    ]
    assert [m.level_tag for m in alone.context["messages"]] == ["warning"]
    workerflow_harness.drain()
    assert get("order-p").status == WorkflowStatus.FAILED

    both = admin_client.post(
        change_url(failed_parent, "retry"),
        {"reason": "carrier back", "with_children": "on"},
        follow=True,
    )
    assert messages_of(both) == [
        "Retried 'order-p' with its failed child 'order-p/ship'. Reason: carrier back"
    ]
    workerflow_harness.drain()
    assert (get("order-p").status, get("order-p").result) == ("completed", "shipped")


def test_retry_form__without_failed_children_offers_no_checkbox(admin_client, checkout_versions):
    confirm = admin_client.get(change_url(get("failed-1"), "retry"))
    assert "with_children" not in confirm.context["form"].fields
    assert "wf-failed-children" not in text(confirm)


def test_retry_selected__retries_the_selection_with_its_failed_children(
    admin_client, failed_parent, checkout_versions, workerflow_harness
):
    BROKEN["ship"] = False
    BROKEN["charge"] = False
    selected = [failed_parent.pk, get("failed-1").pk]
    confirm = admin_client.post(
        changelist_url(), {"action": "retry_selected", "index": 0, "_selected_action": selected}
    )
    assert "'order-p' waits again for 'order-p/ship' (failed)." in text(confirm)

    done = admin_client.post(
        changelist_url(),
        {
            "action": "retry_selected",
            "index": 0,
            "_selected_action": selected,
            "apply": "1",
            "with_children": "on",
        },
        follow=True,
    )
    assert messages_of(done) == ["1 workflow retried with failed children; 1 workflow retried"]
    workerflow_harness.drain()
    assert get("order-p").status == get("failed-1").status == WorkflowStatus.COMPLETED


# Fork ---------------------------------------------------------------------------------------


def test_fork_form__offers_the_instances_steps_and_the_registered_versions(
    admin_client, checkout_versions
):
    response = admin_client.get(change_url(get("failed-1"), "fork"))
    form = response.context["form"]

    assert response.status_code == 200
    assert [value for value, _ in form.fields["from_step"].choices] == ["", "reserve", "charge"]
    assert [value for value, _ in form.fields["version"].choices] == ["2", "1"]
    assert form.fields["version"].initial == "2"
    assert 'name="key"' in text(response)
    assert 'name="reason"' in text(response)


def test_fork_button__forks_onto_the_fixed_version_and_opens_the_fork(
    admin_client, checkout_versions, workerflow_harness
):
    source = get("failed-1")

    response = admin_client.post(
        change_url(source, "fork"),
        {"from_step": "charge", "version": "2", "key": "", "reason": "charge fixed in v2"},
    )

    fork = get("failed-1~1")
    assert response.status_code == 302
    assert response["Location"] == change_url(fork)
    assert fork.definition_version == "2"
    assert fork.forked_from_id == source.pk
    entry = LogEntry.objects.get(object_id=str(source.pk))
    assert "Forked 'failed-1' into 'failed-1~1' (checkout v2), from step 'charge'" in (
        entry.get_change_message()
    )
    fork_page = admin_client.get(change_url(fork))
    reserve = next(r for r in fork_page.context["history"].timeline.rows if r.label == "reserve")
    assert reserve.summary == "succeeded; copied from the source, not run here"
    page = text(fork_page)
    assert "forked from" in page
    assert "failed-1" in page
    workerflow_harness.drain()
    assert get("failed-1~1").status == WorkflowStatus.COMPLETED
    assert CALLS["reserve"] == 2  # copied into the fork, not run again
    assert CALLS["charge-v2"] == 1
    assert get("failed-1").status == WorkflowStatus.FAILED


def test_fork_button__with_a_taken_key_shows_the_error_and_forks_nothing(
    admin_client, checkout_versions
):
    response = admin_client.post(
        change_url(get("failed-1"), "fork"),
        {"from_step": "", "version": "2", "key": "failed-2", "reason": ""},
    )

    assert response.status_code == 200
    assert "Could not fork 'failed-1'" in text(response)
    assert WorkflowInstance.objects.count() == 2
    assert not LogEntry.objects.exists()


def test_fork_selected__opens_the_fork_page_of_the_one_selected(admin_client, checkout_versions):
    one = admin_client.post(
        changelist_url(),
        {"action": "fork_selected", "index": 0, "_selected_action": [get("failed-1").pk]},
    )
    two = admin_client.post(
        changelist_url(),
        {
            "action": "fork_selected",
            "index": 0,
            "_selected_action": [get("failed-1").pk, get("failed-2").pk],
        },
        follow=True,
    )

    assert one.status_code == 302
    assert one["Location"] == change_url(get("failed-1"), "fork")
    assert messages_of(two) == [
        "A fork is made from one workflow's steps: select exactly one workflow to fork."
    ]


# Permissions --------------------------------------------------------------------------------


def test_permissions__without_them_retry_and_fork_are_hidden(checkout_versions):
    viewer = staff_client("view_workflowinstance")

    page = viewer.get(change_url(get("failed-1")))
    listing = viewer.get(changelist_url())

    assert page.context["controls"] == []
    assert "Retry" not in text(page)
    assert "Fork…" not in text(page)
    assert "retry_selected" not in text(listing)
    assert "fork_selected" not in text(listing)


@pytest.mark.parametrize("view", ["retry", "fork"])
def test_permissions__a_crafted_post_is_refused(checkout_versions, view):
    viewer = staff_client("view_workflowinstance", "pause_workflowinstance")

    response = viewer.post(
        change_url(get("failed-1"), view), {"reason": "x", "version": "2", "from_step": ""}
    )

    assert response.status_code == 403
    assert get("failed-1").status == WorkflowStatus.FAILED
    assert WorkflowInstance.objects.count() == 2
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("action", ["retry_selected", "fork_selected"])
def test_permissions__a_crafted_action_post_is_refused(checkout_versions, action):
    viewer = staff_client("view_workflowinstance")

    response = viewer.post(
        changelist_url(),
        {"action": action, "index": 0, "_selected_action": [get("failed-1").pk], "apply": "1"},
    )

    assert response.status_code == 403
    assert get("failed-1").status == WorkflowStatus.FAILED


def test_permissions__each_needs_its_own(checkout_versions):
    retrier = staff_client("view_workflowinstance", "retry_workflowinstance")
    forker = staff_client("view_workflowinstance", "fork_workflowinstance")

    retrier_controls = retrier.get(change_url(get("failed-1"))).context["controls"]
    forker_controls = forker.get(change_url(get("failed-1"))).context["controls"]

    assert [control["name"] for control in retrier_controls] == ["retry"]
    assert [control["name"] for control in forker_controls] == ["fork"]
    assert retrier.get(change_url(get("failed-1"), "fork")).status_code == 403
    assert forker.get(change_url(get("failed-1"), "retry")).status_code == 403


def fail_every_attempt(harness) -> None:
    """Run the instances' attempts one by one until their retries are used up."""
    harness.drain()
    for _ in range(3):
        harness.advance(600)


def test_change_page__after_a_retry_the_timeline_runs_again_with_a_retried_mark(
    admin_client, checkout_versions
):
    workerflow.retry("failed-1", reason="service back")

    response = admin_client.get(change_url(get("failed-1")))

    row = response.context["history"].timeline.rows[0]
    assert row.segments[-1].kind == WorkflowStatus.RUNNING
    assert row.segments[-1].open
    assert any(mark.kind == "mark-retried" for mark in row.marks)
    assert "retried at" in text(response)
    assert "service back" in text(response)
