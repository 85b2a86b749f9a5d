"""``manage.py workerflow check-replay``: live instances replayed against the code now
registered, with no callback run and no write."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow import NondeterminismError, WorkflowDefinition, testing
from django_workerflow.deploy import exports
from django_workerflow.deploy.replay_check import CheckFilter, check_instances
from django_workerflow.models import Step, StepEvent, WorkflowEvent, WorkflowInstance
from tests.support.sql_writes import WRITE

pytestmark = pytest.mark.django_db

CALLS: list[str] = []


def onboarding(self):
    self.run("create-account", lambda: CALLS.append("create-account"))
    self.run("welcome", lambda: CALLS.append("welcome"))
    self.sleep("nap", 3600)
    self.run("survey", lambda: CALLS.append("survey"))
    return "done"


def definition(execute: Callable[[Any], Any], version: str = "1") -> type[WorkflowDefinition]:
    """A definition named 'onboarding', not registered: testing.registered() does that."""
    attrs = {"name": "onboarding", "version": version, "execute": execute, "__module__": __name__}
    return types.new_class(
        "Onboarding", (WorkflowDefinition,), {"register": False}, lambda ns: ns.update(attrs)
    )


@pytest.fixture
def sleeping_onboardings(define, workerflow_harness):
    """Three onboarding instances asleep in 'nap'."""
    CALLS.clear()
    original = define(onboarding, name="onboarding", version="1")
    for number in range(3):
        workerflow.start(original, key=f"user-{number}")
    workerflow_harness.drain()
    CALLS.clear()
    return original


def check(*args: str) -> tuple[str, int]:
    out = StringIO()
    try:
        call_command("workerflow", "check-replay", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue() + str(exc), exc.returncode
    return out.getvalue(), 0


def rows() -> tuple[int, ...]:
    return tuple(
        model.objects.count() for model in (WorkflowInstance, Step, StepEvent, WorkflowEvent)
    )


def test_check_replay__passes_when_the_code_is_unchanged(sleeping_onboardings):
    output, code = check()
    assert code == 0
    assert "Checked 3 instances" in output
    assert "0 would break, 0 with warnings" in output


def test_check_replay__reports_a_step_reached_as_another_kind(sleeping_onboardings):
    def changed(self):
        self.run("create-account", lambda: None)
        self.sleep("welcome", 60)  # was a run step
        self.sleep("nap", 3600)

    with testing.registered():
        # Created inside the block: it replaces the registered definition too.
        type(
            "Onboarding",
            (WorkflowDefinition,),
            {"name": "onboarding", "version": "1", "execute": changed, "__module__": __name__},
        )
        output, code = check()
    assert code == 1
    assert output.count("BREAK") == 3
    assert "reached step 'welcome' as a sleep, but its history recorded a run" in output
    assert "3 of 3 instances would break" in output


def test_check_replay__reports_a_duplicate_step_id(sleeping_onboardings):
    def changed(self):
        self.run("create-account", lambda: None)
        self.run("create-account", lambda: None)

    with testing.registered(definition(changed)):
        output, code = check("--key", "user-1")
    assert code == 1
    assert "Step id 'create-account' was already used" in output


def test_check_replay__reports_a_version_that_is_not_registered(sleeping_onboardings, define):
    workerflow.start(define(onboarding, name="onboarding", version="2"), key="v2")
    with testing.registered():
        from django_workerflow import registry

        registry.unregister(registry.get("onboarding", "2"))
        output, code = check("--name", "onboarding", "--version", "2")
    assert code == 1
    assert "'v2'" in output
    assert "version '2', which is not registered (registered versions: 1)" in output


def test_check_replay__reports_execute_raising_outside_a_step(sleeping_onboardings):
    def changed(self):
        self.run("create-account", lambda: None)
        raise KeyError("plan")

    with testing.registered(definition(changed)):
        output, code = check()
    assert code == 1
    assert "execute() raised KeyError: 'plan' outside a step" in output


def test_check_replay__fails_on_a_step_renamed_in_place_naming_both_steps(sleeping_onboardings):
    def renamed(self):
        self.run("create-account", lambda: None)
        self.run("send-welcome", lambda: None)  # renamed: it would send the email again
        self.sleep("nap", 3600)

    with testing.registered(definition(renamed)):
        output, code = check()
    assert code == 1
    assert output.count("BREAK") == 3
    for key in ["user-0", "user-1", "user-2"]:
        assert (
            f"Instance '{key}' reaches the new step 'send-welcome' where its history recorded "
            "'welcome'"
        ) in output
    assert "'nap'" not in output  # reached after the renamed step: not judged
    assert "3 of 3 instances would break" in output


def test_check_replay__a_renamed_step_that_the_instances_sleep_past__is_caught(
    define, workerflow_harness
):
    def checkout(self):
        self.run("charge", lambda: CALLS.append("charge"))
        self.sleep("nap", 3600)
        return "shipped"

    define(checkout, name="checkout", version="1")
    workerflow.start("checkout", key="order-1")
    workerflow_harness.drain()

    def renamed(self):
        self.run("charge-card", lambda: CALLS.append("charge"))  # would charge again
        self.sleep("nap", 3600)
        return "shipped"

    changed = definition(renamed)
    changed.name = "checkout"
    with testing.registered(changed):
        output, code = check("--format", "json")
    assert code == 1
    [problem] = json.loads(output[: output.rindex("}") + 1])["breaks"]
    assert (problem["key"], problem["kind"], problem["step"]) == (
        "order-1",
        "new_step",
        "charge-card",
    )
    assert "where its history recorded 'charge'" in problem["message"]


def test_check_replay__allow_new_steps__turns_a_new_step_in_place_into_a_warning(
    sleeping_onboardings,
):
    def inserted(self):
        self.run("create-account", lambda: None)
        self.run("check-fraud", lambda: None)  # added before recorded steps, no rename
        self.run("welcome", lambda: None)
        self.sleep("nap", 3600)

    with testing.registered(definition(inserted)):
        output, code = check("--allow-new-steps", "--format", "json")
    assert code == 0
    report = json.loads(output)
    assert report["broken"] == 0
    assert [warning["kind"] for warning in report["warnings"]] == ["new_step"] * 3
    assert "'check-fraud' where its history recorded 'welcome'" in report["warnings"][0]["message"]


def test_check_replay__warns_of_recorded_steps_no_longer_reached(sleeping_onboardings):
    def removed(self):
        self.run("create-account", lambda: None)  # 'welcome' removed
        self.sleep("nap", 3600)

    with testing.registered(definition(removed)):
        output, code = check("--format", "json")
    assert code == 0
    report = json.loads(output)
    assert report["broken"] == 0
    assert [warning["kind"] for warning in report["warnings"]] == ["unreached"] * 3
    assert report["warnings"][0]["message"] == (
        "Instance 'user-0': recorded steps no longer reached on replay: 'welcome'."
    )


def test_check_replay__passes_a_step_added_after_the_last_recorded_one(sleeping_onboardings):
    def extended(self):
        onboarding(self)
        self.run("thank-you", lambda: None)

    with testing.registered(definition(extended)):
        output, code = check()
    assert code == 0
    assert "0 would break, 0 with warnings" in output


def test_check_replay__runs_no_callback_and_writes_nothing(
    sleeping_onboardings, define, workerflow_harness
):
    # One more instance with a run step in progress: its callback must not be called again.
    def slow(self):
        self.run("first", lambda: CALLS.append("first"))
        self.sleep("nap", 60)

    workerflow.start(define(slow, name="slow"), key="in-flight")
    workerflow_harness.drain()
    in_flight = WorkflowInstance.objects.get(key="in-flight")
    Step.objects.create(
        instance=in_flight,
        step_id="second",
        type="run",
        state="running",
        attempt_count=1,
        max_attempts=3,
        created_at=workerflow_harness.now(),
    )
    CALLS.clear()
    before = rows()

    def changed(self):
        self.run("create-account", lambda: CALLS.append("create-account"))
        self.run("welcome", lambda: CALLS.append("welcome"))
        self.sleep("nap", 3600)
        self.run("new-step", lambda: CALLS.append("new-step"))

    with testing.registered(definition(changed)), CaptureQueriesContext(connection) as queries:
        _, code = check()
    writes = [query["sql"] for query in queries.captured_queries if WRITE.match(query["sql"])]
    assert writes == []
    assert CALLS == []
    assert rows() == before
    assert code == 0


def test_check_replay__streams_instances_in_batches(sleeping_onboardings):
    # 3 instances in batches of 2: per batch one read of instances and one of their steps,
    # then one read that finds no more instances.
    with CaptureQueriesContext(connection) as queries:
        checked = list(check_instances(CheckFilter(), batch_size=2))
    selects = [query["sql"] for query in queries.captured_queries if "SELECT" in query["sql"]]
    assert [sql.split(" FROM ")[1].split()[0].strip('"') for sql in selects] == [
        "workerflow_workflowinstance",
        "workerflow_step",
        "workerflow_workflowinstance",
        "workerflow_step",
        "workerflow_workflowinstance",
    ]
    assert [instance.key for instance, _ in checked] == ["user-0", "user-1", "user-2"]
    assert all(not report.problems for _, report in checked)
    assert [report.steps_replayed for _, report in checked] == [3, 3, 3]


def test_check_replay__limit_and_paused_and_failed_instances(
    sleeping_onboardings, define, workerflow_harness
):
    workerflow.pause("user-0")

    def failing(self):
        self.run("boom", lambda: 1 / 0, max_attempts=1)

    workerflow.start(define(failing, name="failing"), key="failed-1")
    workerflow_harness.drain()
    assert check("--limit", "2")[0].startswith("Checked 2 instances")
    assert "Checked 3 instances" in check()[0]  # paused included, failed not
    assert "Checked 4 instances" in check("--include-failed")[0]


def test_check_replay__refuses_a_version_without_a_name(db):
    output, code = check("--version", "2")
    assert code == 2
    assert "--version needs --name" in output
    with pytest.raises(CommandError, match="--format"):
        call_command("workerflow", "check-replay", "--format", "xml")


def test_check_replay__a_write_by_execute_itself_is_refused_and_reported(sleeping_onboardings):
    def writes(self):
        WorkflowInstance.objects.filter(key=self.key).update(error_name="scribbled")
        self.run("create-account", lambda: None)

    before = rows()
    with testing.registered(definition(writes)):
        output, code = check()
    assert code == 1
    # Each refused write is rolled back to its own savepoint: the batch goes on.
    assert output.count("execute() raised") == 3
    assert "3 of 3 instances would break" in output
    assert not WorkflowInstance.objects.filter(error_name="scribbled").exists()
    assert rows() == before


def test_check_replay__stops_at_a_child_step_still_waiting(define, workerflow_harness):
    define(lambda self: self.sleep("nap", 3600), name="kid")

    def parent(self):
        self.run("before", lambda: CALLS.append("before"))
        return self.child("kid", "kid")

    define(parent, name="parent")
    workerflow.start("parent", key="parent-1")
    workerflow_harness.drain()
    CALLS.clear()
    reports = {instance.key: report for instance, report in check_instances(CheckFilter())}
    assert set(reports) == {"parent-1", "parent-1/kid"}
    assert reports["parent-1"].problems == ()
    assert reports["parent-1"].steps_replayed == 2
    assert CALLS == []


def fails_outside_a_step(self):
    self.run("create-account", lambda: CALLS.append("create-account"))
    raise LookupError(f"no plan for {self.key}")


@pytest.fixture
def failed_outside_a_step(define, workerflow_harness):
    """An instance that failed outside any step, after one step."""
    define(fails_outside_a_step, name="onboarding-failing")
    instance = workerflow.start("onboarding-failing", key="failing-1")
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert (instance.status, instance.error_name) == ("failed", "LookupError")
    return instance


def test_replay__of_an_unchanged_failure_outside_a_step__is_the_recorded_failure(
    failed_outside_a_step,
):
    report = testing.replay(exports.export_history(failed_outside_a_step))
    assert report.outcome == "failed"
    assert report.problems == ()
    output, code = check("--include-failed")
    assert code == 0
    assert "Checked 1 instance in" in output
    assert "0 would break, 0 with warnings" in output


def test_replay__of_a_failure_outside_a_step_that_now_raises_another_error__breaks(
    failed_outside_a_step,
):
    def changed(self):
        self.run("create-account", lambda: None)
        raise LookupError("no plan at all")

    changed_definition = definition(changed, version=failed_outside_a_step.definition_version)
    changed_definition.name = "onboarding-failing"
    history = exports.export_history(failed_outside_a_step)
    with pytest.raises(NondeterminismError, match="raised LookupError: no plan at all outside"):
        testing.replay(history, changed_definition)
    with testing.registered(changed_definition):
        output, code = check("--include-failed")
    assert code == 1
    assert "execute() raised LookupError: no plan at all outside a step" in output
