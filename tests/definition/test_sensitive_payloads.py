"""Sensitive payload fields (issue 42, part 3): a definition's ``sensitive`` paths are shown
masked on every surface to readers without ``workerflow.view_sensitive_payloads``, and
revealed to those with it (the admin) or on request (``--reveal``); what is stored and what
the workflow's code sees never change."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

import django_workerflow as workerflow
from django_workerflow import metrics, registry, testing
from django_workerflow.definition import sensitive
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.deploy import exports
from django_workerflow.exceptions import WorkflowDefinitionError
from django_workerflow.models import InboundEvent, Step, StepEvent, WorkflowInstance
from django_workerflow.process_counters import PROCESS_COUNTERS
from django_workerflow.values.masking import MASK, Masker, parse_all
from tests.support.admin import change_url, changelist_url, staff_client, text
from tests.support.commands import workerflow_output as command
from tests.support.tracing import Spans

pytestmark = pytest.mark.django_db

CARD = "4242424242424242"
TOKEN = "tok_SECRET123"
EVENT_CARD = "5555444433331111"
SEEN: list[tuple[str, Any]] = []
"""What the workflow's code saw, in order."""


class Checkout(WorkflowDefinition, register=False):
    name = "sensitive-checkout"
    sensitive = ["input.card", "result.token", "events.payment.card", "steps.charge.card_last4"]

    def execute(self) -> Any:
        SEEN.append(("input", self.input["card"]))
        charged = self.run("charge", lambda: {"card_last4": self.input["card"][-6:], "amount": 42})
        SEEN.append(("step", charged["card_last4"]))
        payment = self.wait("payment", "payment")
        SEEN.append(("event", payment["card"]))
        return {"token": TOKEN, "amount": charged["amount"]}


class Declined(WorkflowDefinition, register=False):
    """Its charge step fails with a message that quotes the card number."""

    name = "sensitive-declined"
    sensitive = ["input.card"]

    def execute(self) -> Any:
        def charge() -> None:
            raise ValueError(f"card {self.input['card']} declined")

        self.run("charge", charge, max_attempts=self.input["attempts"])


class Notified(WorkflowDefinition, register=False):
    """Its ``on_finish`` fails with a message that quotes the card number."""

    name = "sensitive-notified"
    sensitive = ["input.card"]

    def execute(self) -> str:
        return "done"

    def on_finish(self, outcome: Any) -> None:
        raise RuntimeError(f"the receipt for card {CARD} bounced")


@pytest.fixture(autouse=True)
def definitions() -> Iterator[None]:
    SEEN.clear()
    with testing.registered(Checkout, Declined, Notified):
        yield


@pytest.fixture
def paid(harness: Any) -> WorkflowInstance:
    """A completed checkout: the card in its input, step, event and result."""
    workerflow.start(Checkout, key="paid", input={"card": CARD, "name": "Ada"})
    harness.drain()
    workerflow.send_event("paid", "payment", {"card": EVENT_CARD, "amount": 42})
    harness.drain()
    return WorkflowInstance.objects.get(key="paid")


@pytest.fixture
def declined(harness: Any) -> WorkflowInstance:
    """A failed instance whose error message and traceback quote the card number."""
    workerflow.start(Declined, key="declined", input={"card": CARD, "attempts": 1})
    harness.drain()
    return WorkflowInstance.objects.get(key="declined")


@pytest.fixture
def retrying(harness: Any) -> WorkflowInstance:
    """A running instance whose "waiting on" quotes the failed attempt's error."""
    workerflow.start(Declined, key="retrying", input={"card": CARD, "attempts": 3})
    harness.drain()
    return WorkflowInstance.objects.get(key="retrying")


def values_of(instance: WorkflowInstance) -> dict[str, Any]:
    """The rows as stored, read afresh."""
    instance.refresh_from_db()
    return {
        "input": instance.input,
        "result": instance.result,
        "error": instance.error_message,
        "steps": list(Step.objects.filter(instance=instance).values_list("result", "payload")),
        "events": list(InboundEvent.objects.filter(instance=instance).values_list("payload")),
        "step_events": list(
            StepEvent.objects.filter(instance=instance).values_list("error_message", "traceback")
        ),
    }


# Declaring ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "words"),
    [
        (["card"], "'card' starts with 'card'; start it with one of 'input', 'result'"),
        (["steps"], "'steps' names no step id"),
        (["events"], "'events' names no event name"),
        (["input..card"], "'input..card' has an empty segment"),
        (["steps[charge.v2"], "opens a '[' it does not close"),
        (["steps[a]b"], "has text right after ']'"),
        ([3], "3 is a int, not a dotted path string"),
        ("input.card", "must be a list of dotted paths"),
    ],
)
def test_declaring__a_bad_path_is_refused_when_the_class_is_defined(paths: Any, words: str):
    with pytest.raises(WorkflowDefinitionError) as raised:

        class Bad(WorkflowDefinition, register=False):
            name = "bad-sensitive"
            sensitive = paths

            def execute(self) -> None:
                pass

    assert "is misconfigured" in str(raised.value)
    assert words in str(raised.value)


def test_declaring__every_problem_is_reported_at_once():
    with pytest.raises(WorkflowDefinitionError) as raised:

        class Bad(WorkflowDefinition, register=False):
            name = "bad-sensitive"
            sensitive = ["input.card", "cards", "steps"]

            def execute(self) -> None:
                pass

    assert "'cards' starts with" in str(raised.value)
    assert "'steps' names no step id" in str(raised.value)


# The masker -----------------------------------------------------------------------------


def test_masker__walks_nested_objects_lists_wildcards_and_patterns():
    masker = Masker.build(
        parse_all(
            [
                "input.cards.number",
                "input.owner.*",
                "input.whole",
                "steps.charge-*.last4",
                "steps[fetch.v2]",
                "events.payment",
            ]
        )
    )
    value = {
        "cards": [{"number": "1111", "kind": "visa"}, {"number": "2222"}, "loose"],
        "owner": {"name": "Ada", "mail": "ada@example.com"},
        "whole": {"a": [1, 2]},
        "other": "kept",
    }
    before = copy.deepcopy(value)
    assert masker.input(value) == {
        "cards": [{"number": MASK, "kind": "visa"}, {"number": MASK}, "loose"],
        "owner": {"name": MASK, "mail": MASK},
        "whole": MASK,
        "other": "kept",
    }
    assert value == before  # a copy: the value given is not changed
    assert masker.step("charge-7", {"last4": "1234", "ok": True}) == {"last4": MASK, "ok": True}
    assert masker.step("charge", {"last4": "1234"}) == {"last4": "1234"}
    assert masker.step("fetch.v2", [1]) == MASK
    assert masker.step("wait-it", {"x": 1}, "payment") == MASK  # a wait's received event
    assert masker.result({"cards": "x"}) == {"cards": "x"}  # another section


def test_masker__masks_error_texts_by_exact_occurrence_of_values_of_three_characters_or_more():
    masker = Masker.build(
        parse_all(["input.card", "input.cvc", "input.tiny", "events.pay.iban"]),
        input={"card": CARD, "cvc": 123, "tiny": "eu"},
        events=[("pay", {"iban": "FR7630006000011234567890189"})],
    )
    message = f"card {CARD} cvc 123 in eu, iban FR7630006000011234567890189"
    assert masker.text(message) == f"card {MASK} cvc {MASK} in eu, iban {MASK}"


def test_masker__hides_nothing_for_a_definition_without_paths_or_a_revealing_reader(paid):
    assert sensitive.masker_for(paid, reveal=True) is sensitive.REVEALED
    assert not Masker.build(()).active


# The workflow's code and the rows --------------------------------------------------------


def test_workflow_code__sees_the_real_values_and_the_rows_keep_them(paid):
    assert SEEN[-3:] == [("input", CARD), ("step", CARD[-6:]), ("event", EVENT_CARD)]
    stored = values_of(paid)
    assert stored["input"] == {"card": CARD, "name": "Ada"}
    assert stored["result"] == {"token": TOKEN, "amount": 42}
    assert [{"card_last4": CARD[-6:], "amount": 42}] == [r for r, _ in stored["steps"] if r]
    assert stored["events"] == [({"card": EVENT_CARD, "amount": 42},)]


def test_surfaces__showing_an_instance_changes_no_row(paid, declined):
    before = [values_of(paid), values_of(declined)]
    staff_client("view_workflowinstance").get(change_url(paid))
    staff_client("view_workflowinstance").get(change_url(declined))
    command("show", "paid", "--format", "json")
    command("show", "declined", "--traceback")
    command("export", "paid")
    command("list")
    assert [values_of(paid), values_of(declined)] == before


# The admin ------------------------------------------------------------------------------


def test_admin__the_instance_page_masks_every_sensitive_value_without_the_permission(paid):
    page = text(staff_client("view_workflowinstance").get(change_url(paid)))
    for value in (CARD, CARD[-6:], EVENT_CARD, TOKEN):
        assert value not in page
    assert page.count(MASK) >= 4  # input, step value, inbound event, result
    assert "Ada" in page  # what is not named stays readable


@pytest.mark.parametrize("who", ["permission", "superuser"])
def test_admin__the_instance_page_shows_the_values_to_a_reader_allowed_to_see_them(paid, who):
    if who == "superuser":
        client = Client()
        client.force_login(User.objects.create_superuser("root"))
    else:
        client = staff_client("view_workflowinstance", sensitive.PERMISSION_CODENAME)
    page = text(client.get(change_url(paid)))
    for value in (CARD, CARD[-6:], EVENT_CARD, TOKEN):
        assert value in page
    assert MASK not in page


def test_admin__errors_tracebacks_step_events_and_the_timeline_are_masked(declined):
    page = text(staff_client("view_workflowinstance").get(change_url(declined)))
    assert CARD not in page
    assert f"card {MASK} declined" in page
    allowed = staff_client("view_workflowinstance", sensitive.PERMISSION_CODENAME)
    assert f"card {CARD} declined" in text(allowed.get(change_url(declined)))


def test_admin__the_list_masks_the_errors_waiting_on_quotes(retrying):
    listed = text(staff_client("view_workflowinstance").get(changelist_url()))
    assert "retrying step 'charge'" in listed
    assert CARD not in listed
    assert f"card {MASK} declined" in listed
    allowed = staff_client("view_workflowinstance", sensitive.PERMISSION_CODENAME)
    assert f"card {CARD} declined" in text(allowed.get(changelist_url()))


def test_admin_and_show__the_on_finish_delivery_errors_are_masked(harness):
    workerflow.start(Notified, key="notified", input={"card": CARD})
    harness.drain()
    instance = WorkflowInstance.objects.get(key="notified")
    assert CARD in instance.finish_deliveries.get().last_error_message  # stored as raised
    page = text(staff_client("view_workflowinstance").get(change_url(instance)))
    assert f"the receipt for card {MASK} bounced" in page
    assert CARD not in page
    assert CARD not in command("show", "notified")
    assert CARD not in command("show", "notified", "--format", "json")
    assert CARD in command("show", "notified", "--reveal")


# The command line -----------------------------------------------------------------------


def test_show__masks_by_default_and_reveals_on_request(paid):
    shown = command("show", "paid")
    for value in (CARD, EVENT_CARD, TOKEN):
        assert value not in shown
    assert f'"card":"{MASK}"' in shown
    revealed = command("show", "paid", "--reveal")
    for value in (CARD, EVENT_CARD, TOKEN):
        assert value in revealed


def test_show_json__masks_values_and_reveals_on_request(paid):
    document = json.loads(command("show", "paid", "--format", "json"))
    assert document["input"] == {"card": MASK, "name": "Ada"}
    assert document["result"] == {"token": MASK, "amount": 42}
    assert document["inbound_events"][0]["payload"] == {"card": MASK, "amount": 42}
    charge = next(step for step in document["steps"] if step["step_id"] == "charge")
    payment = next(step for step in document["steps"] if step["step_id"] == "payment")
    assert charge["value"] == {"card_last4": MASK, "amount": 42}
    assert payment["value"] == {"card": MASK, "amount": 42}
    revealed = json.loads(command("show", "paid", "--format", "json", "--reveal"))
    assert revealed["input"]["card"] == CARD
    assert revealed["inbound_events"][0]["payload"]["card"] == EVENT_CARD


def test_show__masks_the_error_and_tracebacks(declined):
    shown = command("show", "declined", "--traceback")
    assert "ValueError" in shown
    assert CARD not in shown
    document = json.loads(command("show", "declined", "--format", "json", "--traceback"))
    assert CARD not in json.dumps(document)
    charge = next(step for step in document["steps"] if step["step_id"] == "charge")
    assert charge["error"].endswith(f"card {MASK} declined")
    assert any(MASK in traceback["text"] for traceback in document["tracebacks"])
    assert CARD in command("show", "declined", "--traceback", "--reveal")


@pytest.mark.parametrize("format", ["text", "json"])
def test_list__masks_the_errors_waiting_on_quotes(retrying, format):
    listed = command("list", "--format", format)
    assert CARD not in listed
    assert MASK in listed
    assert CARD in command("list", "--format", format, "--reveal")


def test_export__masks_values_and_errors_by_default_and_reveals_on_request(paid, declined):
    for key in ("paid", "declined"):
        assert CARD not in command("export", key)
        assert CARD in command("export", key, "--reveal")
    document = exports.export_history(paid)
    assert document["input"]["card"] == MASK
    charge = next(step for step in document["steps"] if step["step_id"] == "charge")
    assert charge["result"]["card_last4"] == MASK
    assert all(
        event["result"] is None or event["result"]["card_last4"] == MASK
        for event in charge["events"]
    )
    assert exports.export_history(paid, reveal=True)["input"]["card"] == CARD


# Logs, traces, metrics ------------------------------------------------------------------


def test_logs__carry_no_sensitive_value_not_even_in_tracebacks(harness, caplog):
    caplog.set_level(logging.DEBUG, logger="django_workerflow")
    workerflow.start(Declined, key="logged", input={"card": CARD, "attempts": 2})
    harness.drain()
    harness.advance(60)
    assert "workflow failed key=logged" in caplog.text
    assert CARD not in caplog.text


def test_logs__a_definition_without_sensitive_fields_keeps_its_traceback(define, harness, caplog):
    def fail(self: Any) -> None:
        raise ValueError(f"card {self.input} declined")

    caplog.set_level(logging.DEBUG, logger="django_workerflow")
    workerflow.start(define(fail), key="plain", input=CARD)
    harness.drain()
    assert CARD in caplog.text  # the rule applies to sensitive definitions only


def test_logs__logged_payloads_are_masked(paid, harness, caplog, settings):
    settings.WORKERFLOW_LOG_PAYLOADS = True
    caplog.set_level(logging.INFO, logger="django_workerflow")
    workerflow.start(Checkout, key="logged-payload", input={"card": CARD})
    harness.drain()
    workerflow.send_event("logged-payload", "payment", {"card": EVENT_CARD, "amount": 7})
    assert f'payload={{"card":"{MASK}","amount":7}}' in caplog.text
    assert EVENT_CARD not in caplog.text


def test_traces__record_errors_by_class_name_only(harness, spans: Spans):
    workerflow.start(Declined, key="traced", input={"card": CARD, "attempts": 1})
    harness.drain()
    recorded = spans.finished()
    assert recorded
    texts = []
    for span in recorded:
        texts.append(json.dumps(dict(span.attributes or {})))
        texts.append(span.status.description or "")
        texts += [json.dumps(dict(event.attributes or {})) for event in span.events]
    assert any("ValueError" in text for text in texts)
    assert not any(CARD in text for text in texts)


def test_metrics__labels_carry_no_payload_value(paid, declined):
    snapshot = json.dumps(PROCESS_COUNTERS.totals(), default=str)
    assert "sensitive-checkout" in snapshot  # the definition's name is a label
    for value in (CARD, EVENT_CARD, TOKEN):
        assert value not in snapshot
    pytest.importorskip("prometheus_client")
    exposition = metrics.text().decode()
    for value in (CARD, EVENT_CARD, TOKEN):
        assert value not in exposition


def test_paths__every_registered_version_applies():
    class Later(WorkflowDefinition, register=False):
        name = "sensitive-checkout"
        version = "2"
        sensitive = ["input.name"]

        def execute(self) -> None:
            pass

    with testing.registered(Later):
        texts = {path.text for path in sensitive.paths("sensitive-checkout")}
    assert texts == {*Checkout.sensitive, "input.name"}
    assert registry.lookup("sensitive-checkout", "2") is None
