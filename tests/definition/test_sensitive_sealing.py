"""Sensitive values sealed at rest (``WORKERFLOW_PAYLOAD_CODEC``, the Fernet codec): the
database holds no sensitive value in clear, and the workflow's code, replays, ``wait_result``,
``on_finish``, the console and the exports read the real values; keys rotate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow import testing
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.deploy import exports
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import WorkflowInstance
from django_workerflow.values import sealing
from django_workerflow.values.masking import MASK
from tests.support.admin import change_url, staff_client, text
from tests.support.commands import workerflow_output as command

fernet = pytest.importorskip("cryptography.fernet", reason="the encryption extra is absent")

pytestmark = pytest.mark.django_db

CARD = "4242424242424242"
TOKEN = "tok_SECRET123"
EVENT_CARD = "5555444433331111"
CODEC = "django_workerflow.values.fernet.FernetCodec"
SEEN: list[tuple[str, Any]] = []
HEARD: list[Any] = []
SEALED_COLUMNS = [
    ("workerflow_workflowinstance", "input"),
    ("workerflow_workflowinstance", "result"),
    ("workerflow_step", "result"),
    ("workerflow_step", "payload"),
    ("workerflow_stepevent", "result"),
    ("workerflow_stepevent", "payload"),
    ("workerflow_inboundevent", "payload"),
]


class Checkout(WorkflowDefinition, register=False):
    name = "sealed-checkout"
    sensitive = ["input.card", "result.token", "events.payment.card", "steps.charge.card"]

    def execute(self) -> Any:
        SEEN.append(("input", self.input["card"]))
        charged = self.run("charge", lambda: {"card": self.input["card"], "amount": 42})
        SEEN.append(("step", charged["card"]))
        payment = self.wait("payment", "payment")
        SEEN.append(("event", payment["card"]))
        return {"token": TOKEN, "amount": charged["amount"]}

    def on_finish(self, outcome: Any) -> None:
        HEARD.append(outcome.result)
        SEEN.append(("on_finish input", self.input["card"]))


class Parent(WorkflowDefinition, register=False):
    name = "sealed-parent"
    sensitive = ["input.card"]

    def execute(self) -> Any:
        result = self.child("pay", Checkout, input={"card": self.input["card"]})
        SEEN.append(("child", result["token"]))
        return "done"


@pytest.fixture(autouse=True)
def sealed(settings: Any) -> Iterator[str]:
    """The Fernet codec with one key (returned)."""
    key = fernet.Fernet.generate_key().decode()
    settings.WORKERFLOW_PAYLOAD_CODEC = CODEC
    settings.WORKERFLOW_FERNET_KEYS = [key]
    SEEN.clear()
    HEARD.clear()
    with testing.registered(Checkout, Parent):
        yield key


def stored_texts() -> str:
    """Every text of the columns that hold values, as the database has it."""
    texts = []
    with connection.cursor() as cursor:
        for table, column in SEALED_COLUMNS:
            cursor.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")
            texts += [row[0] for row in cursor.fetchall()]
    return "\n".join(texts)


def pay(harness: Any, key: str = "paid") -> WorkflowInstance:
    workerflow.start(Checkout, key=key, input={"card": CARD, "name": "Ada"})
    harness.drain()
    workerflow.send_event(key, "payment", {"card": EVENT_CARD, "amount": 42})
    harness.drain()
    return WorkflowInstance.objects.get(key=key)


def test_sealed__the_database_holds_no_sensitive_value_in_clear(harness):
    paid = pay(harness)
    texts = stored_texts()
    for value in (CARD, EVENT_CARD, TOKEN):
        assert value not in texts
    assert sealing.MARKER in texts
    assert '"name": "Ada"' in texts or '"name":"Ada"' in texts  # the rest stays readable
    assert paid.input["name"] == "Ada"
    assert paid.input["card"].startswith(sealing.MARKER)


def test_sealed__the_workflow_code_wait_result_and_on_finish_read_the_real_values(harness):
    pay(harness)
    assert {what for what, _ in SEEN} == {"input", "step", "event", "on_finish input"}
    assert {value for _, value in SEEN} == {CARD, EVENT_CARD}
    assert workerflow.wait_result("paid", timeout=0) == {"token": TOKEN, "amount": 42}
    assert HEARD == [{"token": TOKEN, "amount": 42}]
    assert ("on_finish input", CARD) in SEEN


def test_sealed__a_parent_reads_its_childs_sealed_result(harness):
    workerflow.start(Parent, key="parent", input={"card": CARD})
    harness.drain()
    workerflow.send_event("parent/pay", "payment", {"card": EVENT_CARD})
    harness.drain()
    assert WorkflowInstance.objects.get(key="parent").status == "completed"
    assert ("child", TOKEN) in SEEN
    assert CARD not in stored_texts()
    assert TOKEN not in stored_texts()


def test_sealed__start_many_and_a_fork_with_a_new_input_seal_it(harness):
    workerflow.start_many(Checkout, [("many-1", {"card": CARD})])
    paid = pay(harness)
    workerflow.fork(paid, key="forked", input={"card": "4000000000000002"}, reason="test")
    harness.drain()
    texts = stored_texts()
    assert CARD not in texts
    assert "4000000000000002" not in texts
    assert ("input", "4000000000000002") in SEEN


def test_sealed__the_console_and_exports_open_then_mask(harness):
    paid = pay(harness)
    page = text(staff_client("view_workflowinstance").get(change_url(paid)))
    assert sealing.MARKER not in page
    assert CARD not in page
    assert MASK in page
    allowed = staff_client("view_workflowinstance", "view_sensitive_payloads")
    assert CARD in text(allowed.get(change_url(paid)))
    shown = json.loads(command("show", "paid", "--format", "json", "--reveal"))
    assert shown["input"]["card"] == CARD
    assert shown["result"]["token"] == TOKEN
    assert MASK in command("show", "paid")
    document = exports.export_history(paid, reveal=True)
    assert sealing.MARKER not in json.dumps(document)
    assert document["input"]["card"] == CARD


def test_sealed__replays_and_check_replay_read_the_real_values(harness):
    paid = pay(harness)
    report = testing.replay(exports.export_history(paid, reveal=True))
    assert report.outcome == "completed"
    workerflow.start(Checkout, key="waiting", input={"card": CARD})
    harness.drain()
    command("check-replay")  # raises CommandError (exit 1) if an instance would break


def test_rotation__a_new_key_first_still_opens_the_old_values_then_reseal_drops_it(
    harness, sealed, settings
):
    paid = pay(harness)
    new = fernet.Fernet.generate_key().decode()
    settings.WORKERFLOW_FERNET_KEYS = [new, sealed]
    assert workerflow.wait_result(paid.key, timeout=0)["token"] == TOKEN
    before = stored_texts()
    assert "row" in command("reseal")
    assert stored_texts() != before  # sealed again, with the new key
    settings.WORKERFLOW_FERNET_KEYS = [new]
    assert workerflow.wait_result(paid.key, timeout=0)["token"] == TOKEN
    assert CARD in command("show", "paid", "--reveal")


def test_rotation__dropping_the_key_too_early_says_what_to_do(harness, settings):
    paid = pay(harness)
    settings.WORKERFLOW_FERNET_KEYS = [fernet.Fernet.generate_key().decode()]
    with pytest.raises(WorkflowStateError, match="Keep every old key"):
        workerflow.wait_result(paid.key, timeout=0)


def test_codec__misconfigured_keys_and_a_missing_codec_say_what_to_do(settings):
    settings.WORKERFLOW_FERNET_KEYS = "not-a-list"
    with pytest.raises(WorkflowStateError, match="not a list of keys"):
        sealing.codec()
    settings.WORKERFLOW_FERNET_KEYS = ["short"]
    with pytest.raises(WorkflowStateError, match="not a Fernet key"):
        sealing.codec()
    settings.WORKERFLOW_PAYLOAD_CODEC = "no.such.Codec"
    with pytest.raises(WorkflowStateError, match="cannot be imported"):
        sealing.codec()


def test_codec__without_the_setting_nothing_is_sealed_and_reseal_refuses(harness, settings):
    settings.WORKERFLOW_PAYLOAD_CODEC = None
    pay(harness)
    assert CARD in stored_texts()
    assert sealing.MARKER not in stored_texts()
    with pytest.raises(Exception, match="WORKERFLOW_PAYLOAD_CODEC is not set"):
        command("reseal")


def test_check_e002__a_codec_that_cannot_be_built_is_an_error(settings):
    from django_workerflow import checks
    from django_workerflow.checks import check_payload_codec

    assert check_payload_codec() == []
    settings.WORKERFLOW_FERNET_KEYS = ["short"]
    [error] = check_payload_codec()
    assert error.id == "workerflow.E002"
    assert "not a Fernet key" in error.msg
    assert error.hint.endswith("#workerflow-e002.")
    assert "\nworkerflow.E002\n" in checks.__doc__
    settings.WORKERFLOW_PAYLOAD_CODEC = None
    assert check_payload_codec() == []
