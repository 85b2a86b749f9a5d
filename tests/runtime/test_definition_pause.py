"""Pausing a whole definition (pause_definition, resume_definition, is_definition_paused),
on SQLite and PostgreSQL: the switch and its audit, what it holds (at the claim and at a step
boundary), what it keeps accepting, and how resuming lets the held instances go on."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow.deploy import health
from django_workerflow.exceptions import WorkflowInputError, WorkflowNotRegisteredError
from django_workerflow.models import (
    DefinitionPause,
    DefinitionPauseRecord,
    WorkflowInstance,
)
from django_workerflow.runtime import sweeping
from django_workerflow.runtime.tick import tick
from django_workerflow.testing import Harness
from django_workerflow.values.states import TickEnding
from tests.support import flow as flow_helpers
from tests.support.admin import staff_client, text
from tests.support.instances import refreshed, status_of, step

pytestmark = pytest.mark.django_db

CALLS: list[str] = []


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    yield
    CALLS.clear()


def two_steps(self):
    self.run("a", lambda: CALLS.append(f"{self.key}:a"))
    self.run("b", lambda: CALLS.append(f"{self.key}:b"))
    return "done"


def run_cli(*args: str) -> str:
    out = StringIO()
    call_command("workerflow", *args, stdout=out)
    return out.getvalue()


# The switch and its audit -------------------------------------------------------------


def test_pause_definition__is_recorded_with_who_when_and_why(define, harness):
    definition = define(two_steps)

    assert workerflow.pause_definition(definition.name, reason="partner down", actor="ops") is True

    assert workerflow.is_definition_paused(definition.name) is True
    row = DefinitionPause.objects.get(definition_name=definition.name)
    assert (row.reason, row.paused_by, row.paused_at) == ("partner down", "ops", harness.now())
    record = DefinitionPauseRecord.objects.get(definition_name=definition.name)
    assert (record.action, record.actor, record.reason, record.at) == (
        "paused",
        "ops",
        "partner down",
        harness.now(),
    )


def test_pause_definition__again_changes_nothing_and_says_so(define, harness):
    definition = define(two_steps)
    workerflow.pause_definition(definition.name, reason="first", actor="ops")

    assert workerflow.pause_definition(definition.name, reason="second", actor="bob") is False

    assert DefinitionPause.objects.get(definition_name=definition.name).reason == "first"
    assert DefinitionPauseRecord.objects.filter(definition_name=definition.name).count() == 1


def test_resume_definition__is_recorded_and_false_when_not_paused(define, harness):
    definition = define(two_steps)
    assert workerflow.resume_definition(definition.name) is False
    workerflow.pause_definition(definition.name, reason="deploy", actor="ops")

    assert workerflow.resume_definition(definition.name, actor="bob", reason="fixed") is True

    assert workerflow.is_definition_paused(definition.name) is False
    records = DefinitionPauseRecord.objects.filter(definition_name=definition.name)
    assert [(r.action, r.actor, r.reason) for r in records] == [
        ("resumed", "bob", "fixed"),
        ("paused", "ops", "deploy"),
    ]


def test_pause_definition__of_an_unknown_name_names_the_registered_ones(define, harness):
    definition = define(two_steps)

    with pytest.raises(WorkflowNotRegisteredError, match=definition.name) as raised:
        workerflow.pause_definition("no-such-workflow", reason="x")

    assert "'no-such-workflow'" in str(raised.value)
    assert not DefinitionPause.objects.exists()


@pytest.mark.parametrize("reason", ["", "   "])
def test_pause_definition__needs_a_reason(define, harness, reason):
    definition = define(two_steps)

    with pytest.raises(WorkflowInputError, match="needs a reason"):
        workerflow.pause_definition(definition.name, reason=reason)

    assert not workerflow.is_definition_paused(definition.name)


def test_resume_definition__of_a_paused_name_no_longer_registered_works(define, harness):
    DefinitionPause.objects.create(
        definition_name="gone-workflow", reason="old", paused_at=harness.now()
    )

    assert workerflow.resume_definition("gone-workflow") is True
    with pytest.raises(WorkflowNotRegisteredError):
        workerflow.resume_definition("gone-workflow")


# What a pause holds ---------------------------------------------------------------------


def test_pause_definition__holds_every_instance_at_the_claim(define, harness):
    definition = define(two_steps)
    other = define(two_steps)
    workerflow.pause_definition(definition.name, reason="bad deploy")

    held = [workerflow.start(definition, key=f"held-{n}") for n in range(3)]
    free = workerflow.start(other, key="free")
    harness.drain()

    assert [status_of(i.key) for i in held] == ["pending"] * 3
    assert status_of(free.key) == "completed"
    assert CALLS == ["free:a", "free:b"]
    # A bell that rings anyway finds it held, and changes nothing.
    assert tick(held[0].pk).outcome == TickEnding.HELD
    assert refreshed(held[0]).alarm_at is not None


def test_pause_definition__stops_a_running_instance_at_its_next_step_boundary(define, harness):
    name = "pausing-itself"

    def execute(self):
        self.run("a", lambda: workerflow.pause_definition(name, reason="stop") and "ran")
        self.run("b", lambda: CALLS.append("b"))
        return "done"

    instance = workerflow.start(define(execute, name=name), key="self-pausing")
    harness.drain()

    # The step that ran is recorded; the next one did not start.
    assert step(instance, "a").state == "succeeded"
    assert not instance.steps.filter(step_id="b").exists()
    assert CALLS == []
    held = refreshed(instance)
    assert (held.status, held.lease_token) == ("running", None)
    assert held.alarm_at == harness.now()

    workerflow.resume_definition(name)
    harness.drain()

    assert status_of(instance.key) == "completed"
    assert CALLS == ["b"]


def test_pause_definition__accepts_events_and_child_starts_and_keeps_them(define, harness):
    child = define(lambda self: self.run("c", lambda: "child done"), name="held-child")

    def parent(self):
        got = self.wait("go", "go")
        return [got, self.child("kid", child)]

    waiting = workerflow.start(define(parent, name="free-parent"), key="p")
    harness.drain()
    workerflow.pause_definition("held-child", reason="partner down")

    workerflow.send_event(waiting, "go", "payload")
    harness.drain()

    kid = WorkflowInstance.objects.get(key="p/kid")
    assert (kid.status, status_of("p")) == ("pending", "running")
    workerflow.pause_definition("free-parent", reason="too")
    workerflow.resume_definition("held-child")
    harness.drain()
    # The child finished; the parent, now paused itself, holds its result unread.
    assert (status_of("p/kid"), status_of("p")) == ("completed", "running")

    workerflow.resume_definition("free-parent")
    harness.drain()
    assert refreshed(waiting).result == ["payload", "child done"]


def test_pause_definition__lets_an_event_to_a_held_instance_wait(define, harness):
    name = "held-waiter"
    waiting = workerflow.start(define(lambda self: self.wait("go", "go"), name=name), key="w")
    harness.drain()
    workerflow.pause_definition(name, reason="hold")

    workerflow.send_event(waiting, "go", 42)
    harness.drain()
    assert status_of("w") == "running"

    workerflow.resume_definition(name)
    harness.drain()
    assert (status_of("w"), refreshed(waiting).result) == ("completed", 42)


def test_pause_definition__keeps_a_user_paused_instance_paused_after_resume(define, harness):
    definition = define(lambda self: self.sleep("nap", 60) or self.run("x", lambda: 1))
    mine = workerflow.start(definition, key="mine")
    workerflow.start(definition, key="theirs")
    harness.drain()
    workerflow.pause(mine)
    workerflow.pause_definition(definition.name, reason="deploy")

    workerflow.resume_definition(definition.name)
    harness.advance(120)

    assert (status_of("mine"), status_of("theirs")) == ("paused", "completed")
    workerflow.resume(mine)
    harness.drain()
    assert status_of("mine") == "completed"


def test_pause_definition__lets_schedules_record_their_occurrences(define_with):
    definition = define_with(
        lambda self: self.input["scheduled_at"], name="paused-nightly", schedule="0 3 * * *"
    )
    start = datetime(2026, 11, 30, 12, tzinfo=UTC)
    with Harness(start=start, schedules=["paused-nightly"]) as harness:
        workerflow.pause_definition(definition.name, reason="maintenance")
        harness.advance_to(datetime(2026, 12, 2, 4, tzinfo=UTC))

        held = WorkflowInstance.objects.filter(definition_name=definition.name)
        assert sorted(held.values_list("status", flat=True)) == ["pending", "pending"]

        workerflow.resume_definition(definition.name)
        harness.drain()
        assert sorted(held.values_list("result", flat=True)) == [
            "2026-12-01T03:00:00+00:00",
            "2026-12-02T03:00:00+00:00",
        ]


def test_resume_definition__runs_the_held_in_due_order_under_the_limit(define_with):
    order: list[str] = []

    def record(self):
        self.run("only", lambda: order.append(self.key))
        return self.wait("hold", "go")

    definition = define_with(record, name="limited", max_concurrency=2)
    with Harness(start=datetime(2026, 12, 1, tzinfo=UTC)) as harness:
        workerflow.pause_definition(definition.name, reason="partner down")
        for n in range(4):
            workerflow.start(definition, key=f"k{n}")
            harness.advance(1)
        harness.drain()
        assert order == []

        workerflow.resume_definition(definition.name)
        harness.drain()

        # The first two admitted run, earliest first; the limit holds the others queued.
        assert order == ["k0", "k1"]
        assert flow_helpers.admitted_keys(definition.name) == ["k0", "k1"]
        workerflow.send_event("k0", "go")
        harness.drain()
        assert order == ["k0", "k1", "k2"]


def test_sweep__rings_no_bell_for_a_held_instance(define, harness):
    definition = define(two_steps)
    instance = workerflow.start(definition, key="overdue")
    workerflow.pause_definition(definition.name, reason="hold")
    harness.advance(600)

    overdue, _upcoming = sweeping.sweep_backlog(harness.now())
    assert instance.pk not in overdue.values_list("pk", flat=True)
    assert not health.check(now=harness.now()).overdue


# Health and the command ------------------------------------------------------------------


def test_health__lists_a_paused_definition_as_a_warning(define, harness):
    definition = define(two_steps)
    workerflow.pause_definition(definition.name, reason="partner down", actor="ops")

    found = health.check(now=harness.now())

    assert [p.definition_name for p in found.paused] == [definition.name]
    assert f"definition {definition.name!r} paused" in found.message
    assert "partner down" in found.message


def test_command__pauses_and_resumes_a_definition(define, harness):
    definition = define(two_steps)

    out = run_cli("pause-definition", definition.name, "--reason", "bad deploy")
    assert f"Paused definition {definition.name!r}" in out
    assert workerflow.is_definition_paused(definition.name)
    assert DefinitionPause.objects.get().paused_by.startswith("manage.py")

    out = run_cli("resume-definition", definition.name)
    assert f"Resumed definition {definition.name!r}" in out
    assert not workerflow.is_definition_paused(definition.name)


def test_command__refuses_a_pause_without_a_reason_or_of_an_unknown_name(define, harness):
    with pytest.raises(CommandError, match="needs a reason"):
        run_cli("pause-definition", define(two_steps).name)
    with pytest.raises(CommandError, match="no-such"):
        run_cli("pause-definition", "no-such", "--reason", "x")


def test_command__resume_of_a_definition_not_paused_is_refused(define, harness):
    with pytest.raises(CommandError, match="is not paused"):
        run_cli("resume-definition", define(two_steps).name)


# The admin ---------------------------------------------------------------------------------


def test_admin_definitions_page__lists_definitions_with_counts_and_pauses(define, harness):
    from django.urls import reverse

    definition = define(two_steps)
    workerflow.start(definition, key="one")
    workerflow.pause_definition(definition.name, reason="partner down", actor="ops")
    client = staff_client("view_workflowinstance")

    page = text(client.get(reverse("admin:workerflow_definitions")))

    assert definition.name in page
    assert "paused" in page
    assert "by ops: partner down" in page
    assert 'value="Resume"' not in page  # no permission to change it
    overview = text(client.get(reverse("admin:workerflow_overview")))
    assert f"Definition {definition.name} is paused" in overview
    assert "partner down" in overview


def test_admin_definitions_page__pauses_and_resumes_under_its_own_permission(define, harness):
    from django.urls import reverse

    definition = define(two_steps)
    viewer = staff_client("view_workflowinstance")
    operator = staff_client("view_workflowinstance", "pause_definition")
    pause_url = reverse("admin:workerflow_definitions_pause")
    resume_url = reverse("admin:workerflow_definitions_resume")

    refused = viewer.post(pause_url, {"definition": definition.name, "reason": "x"})
    assert refused.status_code == 403
    no_reason = operator.post(pause_url, {"definition": definition.name, "reason": ""})
    assert no_reason.status_code == 302
    assert not workerflow.is_definition_paused(definition.name)

    operator.post(pause_url, {"definition": definition.name, "reason": "bad deploy"})
    pause = DefinitionPause.objects.get(definition_name=definition.name)
    assert (pause.reason, pause.paused_by) == ("bad deploy", "user-1")
    page = text(operator.get(reverse("admin:workerflow_definitions")))
    assert 'value="Resume"' in page

    operator.post(resume_url, {"definition": definition.name, "reason": "fixed"})
    assert not workerflow.is_definition_paused(definition.name)
    records = DefinitionPauseRecord.objects.filter(definition_name=definition.name)
    assert [(r.action, r.actor, r.reason) for r in records] == [
        ("resumed", "user-1", "fixed"),
        ("paused", "user-1", "bad deploy"),
    ]


def test_resume_definition__rings_the_due_held_instances_earliest_alarm_first(
    define, harness, monkeypatch
):
    from django_workerflow.runtime import definition_pauses

    definition = define(lambda self: self.sleep("nap", self.input["nap"]))
    workerflow.start(definition, key="late", input={"nap": 30})
    workerflow.start(definition, key="early", input={"nap": 10})
    workerflow.start(definition, key="far", input={"nap": 86_400})
    harness.drain()
    workerflow.pause_definition(definition.name, reason="hold")
    harness.advance(60)
    rung: list[tuple[str, object]] = []
    keys = dict(WorkflowInstance.objects.values_list("pk", "key"))
    monkeypatch.setattr(
        definition_pauses.bells, "arm", lambda pk, when: rung.append((keys[pk], when))
    )

    workerflow.resume_definition(definition.name)

    # Due ones now, earliest alarm first; one a day away is left to its own bell.
    assert rung == [("early", harness.now()), ("late", harness.now())]
