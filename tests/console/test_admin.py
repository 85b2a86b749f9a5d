"""The operations console in the Django admin: list, instance page, actions, permissions.

Every test here starts from one scenario, built once for the module (``built_scenario``):
an instance in each state an operator meets. tests/console/test_admin_display.py has the console
tests that build instances of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, registry
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    StepState,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime import control
from django_workerflow.testing import Harness
from django_workerflow.values import clock
from django_workerflow.values.jsonvalue import MAX_NESTING
from tests.support.admin import (
    ATTEMPTS,
    change_url,
    changelist_url,
    messages_of,
    shop_execute,
    staff_client,
    text,
)
from tests.support.instances import status_of

pytestmark = pytest.mark.django_db

ADMIN = "admin"
SCENARIO_KEYS = (
    "waiting-1",
    "completed-1",
    "sleeping-1",
    "paused-1",
    "cancelled-1",
    "retrying-1",
    "failed-1",
)


@dataclass(frozen=True)
class BuiltScenario:
    """What building the scenario left behind besides rows: the harness's virtual time and
    the shop's attempt counts."""

    now: datetime
    attempts: dict[str, int]


def build_scenario(shop: type[WorkflowDefinition], harness: Harness) -> None:
    """One instance in each state an operator meets."""
    workerflow.start(shop, key="waiting-1", input={})
    workerflow.start(shop, key="completed-1", input={})
    harness.drain()
    harness.advance(3600)
    workerflow.send_event("completed-1", "payment.received", {"amount": 42})
    harness.drain()
    for key in ("sleeping-1", "paused-1", "cancelled-1"):
        workerflow.start(shop, key=key, input={})
    workerflow.start(shop, key="retrying-1", input={"failures": 1})
    workerflow.start(shop, key="failed-1", input={"failures": 5, "max_attempts": 1})
    harness.drain()
    workerflow.pause("paused-1")
    workerflow.cancel("cancelled-1", reason="customer asked")


def roll_back(atomic: transaction.Atomic, django_db_blocker: Any) -> None:
    """Leave ``atomic`` (entered by hand) rolling back everything done inside it."""
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)


@pytest.fixture(scope="module")
def built_scenario(django_db_setup: None, django_db_blocker: Any) -> Iterator[BuiltScenario]:
    """Build the scenario once for the module, in a transaction rolled back at its end.

    Like Django's ``TestCase.setUpTestData``: each test's own transaction (pytest-django's
    ``django_db``) nests inside this one as a savepoint and is rolled back after the test, so
    every test starts from the same rows and the tests stay independent.
    """
    shop = type(
        "Shop",
        (WorkflowDefinition,),
        {"name": "shop", "version": "v1", "execute": shop_execute, "__module__": __name__},
    )
    module_transaction = transaction.atomic()
    with ExitStack() as cleanup:
        cleanup.callback(registry.unregister, shop)
        with django_db_blocker.unblock():
            module_transaction.__enter__()
        cleanup.callback(roll_back, module_transaction, django_db_blocker)
        with django_db_blocker.unblock():
            ATTEMPTS.clear()
            with Harness() as harness:
                build_scenario(shop, harness)
            # The operator too: creating a superuser hashes a password, a fifth of a second.
            User.objects.create_superuser(ADMIN, "admin@example.com", "password")
        yield BuiltScenario(now=harness.now(), attempts=dict(ATTEMPTS))


@pytest.fixture
def workerflow_harness(db: None, built_scenario: BuiltScenario) -> Iterator[Harness]:
    """The harness, resuming at the virtual time the scenario was built at, with the shop's
    attempt counts as the scenario left them."""
    ATTEMPTS.clear()
    ATTEMPTS.update(built_scenario.attempts)
    with Harness(start=built_scenario.now) as harness:
        yield harness


@pytest.fixture
def admin_user(db: None, built_scenario: BuiltScenario) -> User:
    """The scenario's superuser, for pytest-django's ``admin_client``."""
    return User.objects.get(username=ADMIN)


@pytest.fixture
def admin_scenario(workerflow_harness: Harness) -> dict[str, WorkflowInstance]:
    """The scenario's instances by key, read afresh for each test."""
    instances = {instance.key: instance for instance in WorkflowInstance.objects.all()}
    assert sorted(instances) == sorted(SCENARIO_KEYS)
    return instances


def sent_events() -> list[InboundEvent]:
    """Inbound events beyond the payment that completed ``completed-1`` in the scenario."""
    return list(InboundEvent.objects.exclude(instance__key="completed-1"))


def run_action(client: Client, action: str, instances, follow: bool = True, **data):
    return client.post(
        changelist_url(),
        {"action": action, "index": 0, "_selected_action": [i.pk for i in instances], **data},
        follow=follow,
    )


@pytest.fixture
def make_staff(db) -> Callable[..., Client]:
    """``make_staff(*codenames)``: a logged-in staff client with exactly these permissions."""
    return staff_client


# Change list --------------------------------------------------------------------------------


def test_changelist__shows_key_definition_status_badge_times_and_alarm(
    admin_client, admin_scenario
):
    response = admin_client.get(changelist_url())

    assert response.status_code == 200
    body = text(response)
    for key in admin_scenario:
        assert key in body
    assert 'shop<br><span class="wf-version">vv1</span>' in body  # the version below the name
    assert 'class="wf-badge wf-status-paused"' in body
    for column in ("Key", "Definition", "Status", "Waiting on", "Created", "Next alarm"):
        assert column in body


def test_changelist__says_in_words_what_each_instance_waits_on(admin_client, admin_scenario):
    body = text(admin_client.get(changelist_url()))

    assert "sleeping until " in body
    assert "in step 'cool-off'" in body
    assert "waiting for event 'payment.received' until " in body
    assert "retrying step 'charge' at " in body
    assert "attempt 1 of 3 failed: RuntimeError: card declined" in body
    assert "failed in step 'charge': RuntimeError: card declined" in body
    assert "paused: sleeping until " in body
    assert "cancelled: customer asked" in body


def test_changelist__filters_by_status_definition_name_and_version(
    admin_client, admin_scenario, define
):
    other = define(shop_execute, name="billing", version="v2")
    workerflow.start(other, key="billing-1", input={})

    by_status = text(admin_client.get(changelist_url(status="paused")))
    by_name = text(admin_client.get(changelist_url(definition_name="billing")))
    by_version = text(admin_client.get(changelist_url(definition_version="v1")))

    assert "paused-1" in by_status
    assert "sleeping-1" not in by_status
    assert "billing-1" in by_name
    assert "sleeping-1" not in by_name
    assert "sleeping-1" in by_version
    assert "billing-1" not in by_version


def test_changelist__searches_key_and_definition_name(admin_client, admin_scenario, define):
    workerflow.start(define(shop_execute, name="billing"), key="invoice-7", input={})

    by_key = text(admin_client.get(changelist_url(q="retrying")))
    by_name = text(admin_client.get(changelist_url(q="billing")))

    assert "retrying-1" in by_key
    assert "sleeping-1" not in by_key
    assert "invoice-7" in by_name
    assert "retrying-1" not in by_name


def test_changelist__lists_newest_first_with_a_date_hierarchy(admin_client, admin_scenario):
    response = admin_client.get(changelist_url())
    keys = [instance.key for instance in response.context["cl"].result_list]
    created = [instance.created_at for instance in response.context["cl"].result_list]

    assert created == sorted(created, reverse=True)
    assert keys.index("failed-1") < keys.index("waiting-1")
    assert response.context["cl"].date_hierarchy == "created_at"
    year = admin_scenario["waiting-1"].created_at.year
    assert admin_client.get(changelist_url(created_at__year=str(year))).status_code == 200


# Change page --------------------------------------------------------------------------------


def test_change_page__shows_input_result_and_error_as_formatted_json(admin_client, admin_scenario):
    completed = text(admin_client.get(change_url(admin_scenario["completed-1"])))
    failed = text(admin_client.get(change_url(admin_scenario["failed-1"])))

    assert '{\n  "paid": {\n    "amount": 42\n  }\n}' in completed
    assert '<pre class="wf-json" id="wf-input">{}</pre>' in completed
    assert '"name": "MaxAttemptsExceededError"' in failed or '"name": "RuntimeError"' in failed
    assert "failed in step 'charge': RuntimeError: card declined" in failed


def test_change_page__shows_attempts_timings_and_errors_of_each_step(admin_client, admin_scenario):
    body = text(admin_client.get(change_url(admin_scenario["sleeping-1"])))
    retrying = text(admin_client.get(change_url(admin_scenario["retrying-1"])))

    assert 'data-step="reserve"' in body
    assert "1 of 3" in body
    assert '"sku": "A-1"' in body
    assert "Resolved" in body
    assert "failed at " in retrying
    assert "RuntimeError: card declined" in retrying
    assert "next attempt at" in retrying


def test_change_page__lists_step_workflow_and_inbound_events(admin_client, admin_scenario):
    workerflow.send_event("waiting-1", "gift.wrapped", {"ribbon": "red"})
    response = admin_client.get(change_url(admin_scenario["completed-1"]))
    body = text(response)
    waiting = text(admin_client.get(change_url(admin_scenario["waiting-1"])))
    cancelled = text(admin_client.get(change_url(admin_scenario["cancelled-1"])))

    assert "by step payment" in body.replace("<code>", "").replace("</code>", "")
    assert '"amount": 42' in body
    assert "attempt succeeded" in body.lower()
    assert "sleep elapsed" in body.lower()
    assert "Completed" in body
    assert "gift.wrapped" in waiting
    assert "queued</strong>: no step has claimed it" in waiting
    assert "customer asked" in cancelled


def test_change_page__is_read_only(admin_client, admin_scenario):
    instance = admin_scenario["sleeping-1"]
    response = admin_client.get(change_url(instance))

    assert 'name="_save"' not in response.content.decode()
    assert admin_client.post(change_url(instance), {"key": "x"}).status_code == 403
    assert admin_client.get(reverse("admin:workerflow_workflowinstance_add")).status_code == 403
    assert WorkflowInstance.objects.get(pk=instance.pk).key == "sleeping-1"


def test_change_page__offers_only_the_buttons_that_apply_to_the_status(
    admin_client, admin_scenario
):
    def buttons(key: str) -> list[str]:
        response = admin_client.get(change_url(admin_scenario[key]))
        return [control["name"] for control in response.context["controls"]]

    assert buttons("sleeping-1") == ["pause", "wake", "send_event", "cancel", "fork"]
    assert buttons("paused-1") == ["resume", "send_event", "cancel", "fork"]
    assert buttons("failed-1") == ["retry", "fork"]
    assert buttons("completed-1") == ["fork"]


# Actions on the change list -----------------------------------------------------------------


def test_pause_selected__reports_each_outcome_and_logs_the_change(admin_client, admin_scenario):
    selected = [admin_scenario[k] for k in ("sleeping-1", "waiting-1", "completed-1", "paused-1")]

    response = run_action(admin_client, "pause_selected", selected)

    assert messages_of(response) == [
        "2 workflows paused; 1 skipped: already completed; 1 skipped: paused, not running"
    ]
    assert status_of("sleeping-1") == status_of("waiting-1") == WorkflowStatus.PAUSED
    entries = LogEntry.objects.filter(action_flag=CHANGE).order_by("object_id")
    assert sorted(entry.object_repr for entry in entries) == ["shop:sleeping-1", "shop:waiting-1"]
    assert all(entry.get_change_message().startswith("Paused") for entry in entries)


def test_resume_selected__resumes_paused_and_skips_the_rest(admin_client, admin_scenario):
    selected = [admin_scenario["paused-1"], admin_scenario["sleeping-1"]]

    response = run_action(admin_client, "resume_selected", selected)

    assert messages_of(response) == ["1 workflow resumed; 1 skipped: running, not paused"]
    assert status_of("paused-1") == WorkflowStatus.RUNNING
    assert LogEntry.objects.get().get_change_message() == "Resumed 'paused-1'."


def test_cancel_selected__asks_for_confirmation_then_cancels_with_the_reason(
    admin_client, admin_scenario
):
    selected = [admin_scenario["sleeping-1"], admin_scenario["completed-1"]]

    confirm = run_action(admin_client, "cancel_selected", selected, follow=False)

    assert confirm.status_code == 200
    assert "will be skipped: already completed" in text(confirm)
    assert status_of("sleeping-1") == WorkflowStatus.RUNNING

    done = admin_client.post(
        changelist_url(),
        {
            "action": "cancel_selected",
            "_selected_action": [i.pk for i in selected],
            "apply": "1",
            "reason": "fraud suspected",
        },
        follow=True,
    )

    assert messages_of(done) == ["1 workflow cancelled; 1 skipped: already completed"]
    assert status_of("sleeping-1") == WorkflowStatus.CANCELLED
    event = WorkflowEvent.objects.get(instance__key="sleeping-1", type="cancelled")
    assert event.reason == "fraud suspected"
    assert LogEntry.objects.get().get_change_message() == (
        "Cancelled 'sleeping-1'. Reason: fraud suspected"
    )


def test_cancel_selected__without_a_reason_records_none(admin_client, admin_scenario):
    admin_client.post(
        changelist_url(),
        {
            "action": "cancel_selected",
            "_selected_action": [admin_scenario["waiting-1"].pk],
            "apply": 1,
        },
    )

    assert WorkflowEvent.objects.get(instance__key="waiting-1", type="cancelled").reason is None
    assert "No reason given" in LogEntry.objects.get().get_change_message()


def test_send_event__invalid_json_is_a_form_error_and_nothing_is_sent(admin_client, admin_scenario):
    selected = [admin_scenario["waiting-1"]]
    form = run_action(admin_client, "send_event", selected, follow=False)
    assert form.status_code == 200
    assert 'name="payload"' in form.content.decode()

    response = admin_client.post(
        changelist_url(),
        {
            "action": "send_event",
            "_selected_action": [admin_scenario["waiting-1"].pk],
            "apply": "1",
            "event_name": "payment.received",
            "payload": "{amount: 42",
        },
    )

    assert response.status_code == 200
    assert "This is not valid JSON" in text(response)
    assert not InboundEvent.objects.filter(instance__key="waiting-1").exists()
    assert not LogEntry.objects.exists()


def test_send_event__delivers_queues_or_skips_each_instance(
    admin_client, admin_scenario, workerflow_harness
):
    keys = ("waiting-1", "sleeping-1", "paused-1", "completed-1")
    response = admin_client.post(
        changelist_url(),
        {
            "action": "send_event",
            "_selected_action": [admin_scenario[key].pk for key in keys],
            "apply": "1",
            "event_name": "payment.received",
            "payload": '{"amount": 7}',
        },
        follow=True,
    )

    assert messages_of(response) == [
        "1 workflow received event 'payment.received' in a waiting step; "
        "2 workflows queued event 'payment.received'; 1 skipped: already completed"
    ]
    claimed = InboundEvent.objects.get(instance__key="waiting-1")
    assert claimed.claimed_by.step_id == "payment"
    assert claimed.payload == {"amount": 7}
    assert InboundEvent.objects.get(instance__key="sleeping-1").claimed_by is None
    messages = dict(LogEntry.objects.values_list("object_repr", "change_message"))
    assert messages["shop:waiting-1"] == (
        "Sent event 'payment.received' to 'waiting-1': step 'payment' claimed it."
    )
    assert "queued, the instance is paused" in messages["shop:paused-1"]
    workerflow_harness.drain()
    assert status_of("waiting-1") == WorkflowStatus.COMPLETED


def test_wake_now__runs_a_pending_retry_at_once(admin_client, admin_scenario, workerflow_harness):
    response = run_action(admin_client, "wake_now", [admin_scenario["retrying-1"]])

    assert messages_of(response) == [
        "Woke 'retrying-1': the next attempt of step 'charge' runs now."
    ]
    workerflow_harness.drain()  # the clock has not moved: without the wake it would wait
    charge = Step.objects.get(instance__key="retrying-1", step_id="charge")
    assert charge.state == StepState.SUCCEEDED
    assert ATTEMPTS["retrying-1"] == 2


def test_wake_now__never_skips_a_sleep_and_says_so(
    admin_client, admin_scenario, workerflow_harness
):
    selected = [
        admin_scenario["sleeping-1"],
        admin_scenario["waiting-1"],
        admin_scenario["paused-1"],
    ]

    response = run_action(admin_client, "wake_now", selected)

    assert messages_of(response) == [
        "1 workflow woken but still waiting for an event; "
        "1 workflow woken but still sleeping (a wake never skips a sleep); "
        "1 skipped: paused, not pending or running"
    ]
    workerflow_harness.drain()
    sleep = Step.objects.get(instance__key="sleeping-1", step_id="cool-off")
    assert sleep.state == StepState.WAITING
    single = run_action(admin_client, "wake_now", [admin_scenario["sleeping-1"]])
    assert "keeps sleeping in step 'cool-off' until" in messages_of(single)[0]
    assert "a wake never skips a sleep" in messages_of(single)[0]


# Buttons on the change page -----------------------------------------------------------------


def test_change_page_buttons__pause_resume_and_wake(admin_client, admin_scenario):
    instance = admin_scenario["sleeping-1"]

    paused = admin_client.post(change_url(instance, "pause"), follow=True)
    assert messages_of(paused) == ["Paused 'sleeping-1'."]
    assert status_of("sleeping-1") == WorkflowStatus.PAUSED
    again = admin_client.post(change_url(instance, "pause"), follow=True)
    assert messages_of(again) == ["Skipped 'sleeping-1': paused, not running."]
    resumed = admin_client.post(change_url(instance, "resume"), follow=True)
    assert messages_of(resumed) == ["Resumed 'sleeping-1'."]
    woken = admin_client.post(change_url(instance, "wake"), follow=True)
    assert "a wake never skips a sleep" in messages_of(woken)[0]
    assert woken.redirect_chain[-1][0] == change_url(instance)
    assert LogEntry.objects.count() == 3


def test_change_page_buttons__refuse_get(admin_client, admin_scenario):
    assert admin_client.get(change_url(admin_scenario["sleeping-1"], "pause")).status_code == 405
    assert status_of("sleeping-1") == WorkflowStatus.RUNNING


def test_change_page_cancel__confirms_then_cancels_with_reason(admin_client, admin_scenario):
    instance = admin_scenario["waiting-1"]

    form = admin_client.get(change_url(instance, "cancel"))
    assert form.status_code == 200
    assert status_of("waiting-1") == WorkflowStatus.RUNNING

    done = admin_client.post(change_url(instance, "cancel"), {"reason": "duplicate"}, follow=True)

    assert messages_of(done) == ["Cancelled 'waiting-1'. Reason: duplicate"]
    assert WorkflowEvent.objects.get(instance=instance, type="cancelled").reason == "duplicate"


def test_change_page_send_event__bad_payload_then_good(
    admin_client, admin_scenario, workerflow_harness
):
    instance = admin_scenario["waiting-1"]
    url = change_url(instance, "send_event")

    bad = admin_client.post(url, {"event_name": "payment.received", "payload": "[1, 2"})
    assert bad.status_code == 200
    assert "This is not valid JSON" in text(bad)
    assert not sent_events()

    good = admin_client.post(
        url, {"event_name": "payment.received", "payload": '{"ok": true}'}, follow=True
    )
    assert messages_of(good) == [
        "Sent event 'payment.received' to 'waiting-1': step 'payment' claimed it."
    ]
    workerflow_harness.drain()
    assert WorkflowInstance.objects.get(pk=instance.pk).result == {"paid": {"ok": True}}


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 100_000])
def test_send_event__a_payload_nested_beyond_the_limit_is_a_form_error(
    admin_client, admin_scenario, depth
):
    nested = "[" * depth + "]" * depth
    instance = admin_scenario["waiting-1"]
    on_the_list = admin_client.post(
        changelist_url(),
        {
            "action": "send_event",
            "_selected_action": [instance.pk],
            "apply": "1",
            "event_name": "payment.received",
            "payload": nested,
        },
    )
    on_the_page = admin_client.post(
        change_url(instance, "send_event"), {"event_name": "payment.received", "payload": nested}
    )

    for response in (on_the_list, on_the_page):
        assert response.status_code == 200
        assert f"more than the JSON nesting limit of {MAX_NESTING} levels" in text(response)
    assert not sent_events()
    assert not LogEntry.objects.exists()


def test_change_page_send_event__rejects_a_blank_event_name(admin_client, admin_scenario):
    response = admin_client.post(
        change_url(admin_scenario["waiting-1"], "send_event"), {"event_name": "  ", "payload": ""}
    )

    assert response.status_code == 200
    assert "This field is required" in text(response)
    assert not sent_events()


def test_change_page_views__404_for_an_unknown_instance(admin_client, admin_scenario):
    url = reverse("admin:workerflow_workflowinstance_pause", args=[999999])

    assert admin_client.post(url).status_code == 404


# Permissions --------------------------------------------------------------------------------


def test_permissions__a_viewer_sees_no_action_and_no_button(make_staff, admin_scenario):
    viewer = make_staff("view_workflowinstance")

    listing = viewer.get(changelist_url())
    page = viewer.get(change_url(admin_scenario["sleeping-1"]))

    assert listing.status_code == 200
    assert "action_form" not in listing.context or listing.context["action_form"] is None
    assert 'name="action"' not in listing.content.decode()
    assert page.status_code == 200
    assert page.context["controls"] == []
    assert 'id="wf-controls"' not in page.content.decode()


@pytest.mark.parametrize(
    "action", ["pause_selected", "resume_selected", "cancel_selected", "send_event", "wake_now"]
)
def test_permissions__a_crafted_action_post_is_refused(make_staff, admin_scenario, action):
    viewer = make_staff("view_workflowinstance")
    selected = [admin_scenario["sleeping-1"], admin_scenario["paused-1"]]

    response = run_action(
        viewer, action, selected, follow=False, apply="1", reason="x", event_name="e", payload="1"
    )

    assert response.status_code == 403
    assert status_of("sleeping-1") == WorkflowStatus.RUNNING
    assert status_of("paused-1") == WorkflowStatus.PAUSED
    assert not sent_events()
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("view", ["pause", "resume", "wake", "cancel", "send_event"])
def test_permissions__a_crafted_button_post_is_refused(make_staff, admin_scenario, view):
    viewer = make_staff("view_workflowinstance")

    response = viewer.post(
        change_url(admin_scenario["sleeping-1"], view), {"event_name": "e", "payload": "1"}
    )

    assert response.status_code == 403
    assert status_of("sleeping-1") == WorkflowStatus.RUNNING


def test_permissions__each_action_needs_its_own_permission(make_staff, admin_scenario):
    pauser = make_staff("view_workflowinstance", "pause_workflowinstance")

    actions = pauser.get(changelist_url()).context["action_form"].fields["action"].choices
    page = pauser.get(change_url(admin_scenario["sleeping-1"]))

    assert [name for name, _ in actions if name] == ["pause_selected"]
    assert [control["name"] for control in page.context["controls"]] == ["pause"]
    refused = run_action(pauser, "cancel_selected", [admin_scenario["sleeping-1"]], follow=False)
    assert refused.status_code == 403
    allowed = run_action(pauser, "pause_selected", [admin_scenario["sleeping-1"]])
    assert messages_of(allowed) == ["Paused 'sleeping-1'."]


def test_permissions__an_operator_with_every_permission_sees_every_action(
    make_staff, admin_scenario
):
    operator = make_staff(
        "view_workflowinstance",
        "pause_workflowinstance",
        "resume_workflowinstance",
        "cancel_workflowinstance",
        "send_event_workflowinstance",
    )

    actions = operator.get(changelist_url()).context["action_form"].fields["action"].choices

    assert [name for name, _ in actions if name] == [
        "pause_selected",
        "resume_selected",
        "cancel_selected",
        "send_event",
        "wake_now",
    ]


# Deletion -----------------------------------------------------------------------------------


def test_delete__is_refused_for_an_unfinished_instance(admin_client, admin_scenario):
    instance = admin_scenario["sleeping-1"]

    assert admin_client.get(change_url(instance, "delete")).status_code == 403
    assert admin_client.post(change_url(instance, "delete"), {"post": "yes"}).status_code == 403
    assert WorkflowInstance.objects.filter(pk=instance.pk).exists()


def test_delete__removes_a_finished_instance_with_all_its_rows(admin_client, admin_scenario):
    instance = admin_scenario["completed-1"]

    confirm = admin_client.get(change_url(instance, "delete"))
    assert confirm.status_code == 200
    assert "Step events" in text(confirm) or "step events" in text(confirm)
    admin_client.post(change_url(instance, "delete"), {"post": "yes"})

    assert not WorkflowInstance.objects.filter(pk=instance.pk).exists()
    assert not Step.objects.filter(instance_id=instance.pk).exists()
    assert not StepEvent.objects.filter(instance_id=instance.pk).exists()


def test_delete_selected__deletes_only_finished_instances(admin_client, admin_scenario):
    selected = [admin_scenario[k] for k in ("completed-1", "failed-1", "sleeping-1")]

    confirm = run_action(admin_client, "delete_selected", selected, follow=False)
    assert confirm.status_code == 200
    assert "1 skipped: not finished" in text(confirm)
    admin_client.post(
        changelist_url(),
        {
            "action": "delete_selected",
            "_selected_action": [i.pk for i in selected],
            "post": "yes",
        },
    )

    remaining = set(WorkflowInstance.objects.values_list("key", flat=True))
    assert "sleeping-1" in remaining
    assert not {"completed-1", "failed-1"} & remaining


# The runtime call behind the wake action ---------------------------------------------------


def test_runtime_retry_now__leaves_sleeps_and_finished_instances_alone(admin_scenario):
    assert control.retry_now("sleeping-1") == []
    assert control.retry_now("completed-1") == []
    assert control.retry_now("retrying-1") == ["charge"]
    charge = Step.objects.get(instance__key="retrying-1", step_id="charge")
    assert charge.next_attempt_at <= clock.now()
