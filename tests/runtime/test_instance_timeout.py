"""Instance timeouts: a definition's ``timeout`` or ``start(timeout=...)`` bounds how long an
instance may run, paused time not counted; one not finished by then fails with
WorkflowTimeoutError through the usual failure path. On SQLite and PostgreSQL, under the
harness's virtual clock (the callbacks that run "long" move that clock), except where a
step's real-time timer is the point."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_workerflow as workerflow
from django_workerflow import (
    WaitStepTimedOutError,
    WorkflowDefinitionError,
    WorkflowFailedError,
    WorkflowInputError,
    WorkflowTimeoutError,
)
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from django_workerflow.testing import Harness
from django_workerflow.values.states import TickEnding
from tests.support.admin import change_url, text
from tests.support.instances import refreshed, step, workflow_event_types

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_timer_left_armed")]

TIMED_OUT = WorkflowTimeoutError.__name__


def naps(self):
    """Sleep an hour, then finish: longer than any timeout below."""
    self.sleep("nap", timedelta(hours=1))
    return "rested"


def waits_for_go(self):
    return self.wait("go", "go")


def started(harness: Harness, definition, **start) -> WorkflowInstance:
    instance = workerflow.start(definition, **start)
    harness.drain()
    return refreshed(instance)


# Firing ----------------------------------------------------------------------------------


def test_timeout__a_sleeping_instance_fails_at_its_deadline(harness, define_with):
    began = harness.now()
    instance = started(harness, define_with(naps, timeout=30), key="order-42")

    assert instance.status == WorkflowStatus.RUNNING
    assert instance.timeout_seconds == 30
    assert instance.deadline_at == began + timedelta(seconds=30)
    # The alarm rings at the deadline, before the sleep's end.
    assert instance.alarm_at == instance.deadline_at

    harness.advance(timedelta(seconds=29))
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(timedelta(seconds=1))

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.finished_at == began + timedelta(seconds=30)
    assert instance.error_name == TIMED_OUT
    assert instance.error_message == (
        "WorkflowTimeoutError: Instance 'order-42' did not finish within 30 s of running "
        "(timeout=30 s; time spent paused does not count); retry() runs it again with a fresh "
        "budget, or start it with a longer timeout."
    )
    # Not a step's failure: a retry just replays.
    assert instance.error_step_id == ""
    assert instance.alarm_at is None


def test_timeout__an_instance_waiting_for_an_event_fails_at_its_deadline(harness, define):
    began = harness.now()
    instance = started(harness, define(waits_for_go), timeout=10)
    assert instance.alarm_at == began + timedelta(seconds=10)

    harness.advance(timedelta(seconds=10))

    instance = refreshed(instance)
    assert (instance.status, instance.error_name) == (WorkflowStatus.FAILED, TIMED_OUT)
    # The wait itself did not time out: it has no deadline of its own.
    assert step(instance, "go").state == "waiting"
    # Too late now: a finished instance ignores the event.
    assert workerflow.send_event(instance, "go") is None


def test_timeout__a_wait_deadline_before_the_instance_deadline_stays_the_wait_s(harness, define):
    def execute(self):
        try:
            return self.wait("go", "go", timeout=5)
        except WaitStepTimedOutError:
            return self.wait("again", "go", timeout=60)

    began = harness.now()
    instance = started(harness, define(execute), timeout=20)
    assert instance.alarm_at == began + timedelta(seconds=5)

    harness.advance(timedelta(seconds=5))
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.RUNNING
    assert step(instance, "go").state == "timed_out"
    # The second wait's deadline (65 s) comes after the instance's (20 s): the alarm is the
    # instance's, and what rings there is the instance's timeout, not the wait's.
    assert instance.alarm_at == began + timedelta(seconds=20)

    harness.advance(timedelta(seconds=15))
    instance = refreshed(instance)
    assert (instance.status, instance.error_name) == (WorkflowStatus.FAILED, TIMED_OUT)
    assert step(instance, "again").state == "waiting"


def test_timeout__is_checked_at_each_step_a_running_pass_reaches(harness, define):
    calls: list[str] = []

    def slow(name):
        def work():
            calls.append(name)
            harness.clock.advance(timedelta(seconds=20))  # the step takes 20 s
            return name

        return work

    def execute(self):
        return [self.run(name, slow(name)) for name in ("one", "two", "three")]

    began = harness.now()
    instance = started(harness, define(execute), timeout=30)

    assert calls == ["one", "two"]
    assert (instance.status, instance.error_name) == (WorkflowStatus.FAILED, TIMED_OUT)
    assert instance.finished_at == began + timedelta(seconds=40)
    # The step that ran past the deadline kept its success; the next one never started.
    assert step(instance, "two").state == "succeeded"
    assert not instance.steps.filter(step_id="three").exists()


def test_timeout__interrupts_a_step_attempt_running_at_the_deadline(harness, define):
    """In real time: the outermost attempt's timer is bounded by the time left."""
    slow = {"on": True}

    def work():
        if slow["on"]:
            time.sleep(30)
        return "done"

    instance = workerflow.start(
        define(lambda self: self.run("work", work, backoff=lambda attempt: 0)), timeout=0.3
    )
    began = time.monotonic()
    harness.drain()
    took = time.monotonic() - began

    instance = refreshed(instance)
    assert (instance.status, instance.error_name) == (WorkflowStatus.FAILED, TIMED_OUT)
    assert took < 5, f"a 0.3 s timeout over a 30 s sleep took {took:.2f} s"
    # The attempt is recorded as failed with the instance's error, and names the step a
    # retry reopens.
    assert instance.error_step_id == "work"
    failed = instance.step_events.get(step__step_id="work", type="attempt_failed")
    assert failed.error_name == TIMED_OUT

    slow["on"] = False
    workerflow.retry(instance)
    harness.drain()
    assert refreshed(instance).result == "done"


def test_timeout__a_step_s_own_shorter_timeout_stays_a_step_timeout(harness, define):
    def execute(self):
        return self.run("work", lambda: time.sleep(30), timeout=0.2, max_attempts=1)

    instance = started(harness, define(execute), timeout=3600)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "MaxAttemptsExceededError"
    failed = instance.step_events.get(step__step_id="work", type="attempt_failed")
    assert failed.error_name == "StepTimeoutError"


def test_timeout__a_pass_woken_past_the_deadline_runs_none_of_the_workflow_s_code(harness, define):
    passes = []

    def execute(self):
        passes.append(harness.now())
        return self.wait("go", "go")

    instance = started(harness, define(execute), timeout=10)
    assert len(passes) == 1
    harness.advance(timedelta(seconds=10))
    assert refreshed(instance).error_name == TIMED_OUT
    assert len(passes) == 1


def test_timeout__the_workflow_cannot_catch_it(harness, define):
    def execute(self):
        try:
            self.sleep("nap", 60)
        except WorkflowTimeoutError:
            return "caught"
        return "rested"

    instance = started(harness, define(execute), timeout=10)
    harness.advance(timedelta(seconds=10))
    assert refreshed(instance).error_name == TIMED_OUT


# Pausing ---------------------------------------------------------------------------------


def test_pause__stops_the_clock_and_resume_goes_on_with_what_was_left(harness, define_with):
    instance = started(harness, define_with(naps, timeout=60))
    harness.advance(timedelta(seconds=20))
    assert workerflow.pause(instance)

    paused = refreshed(instance)
    assert (paused.deadline_at, paused.timeout_left_seconds) == (None, 40)
    harness.advance(timedelta(hours=2))  # paused far past the deadline and the nap
    assert refreshed(instance).status == WorkflowStatus.PAUSED

    workerflow.resume(instance)
    resumed_at = harness.now()
    harness.drain()
    instance = refreshed(instance)
    # Its clock went on with the 40 s left, and the nap, over meanwhile, let it complete.
    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.deadline_at == resumed_at + timedelta(seconds=40)


def test_pause__time_paused_is_not_counted_and_it_times_out_with_exactly_what_was_left(
    harness, define_with
):
    def execute(self):
        self.sleep("nap", timedelta(hours=1))
        return self.wait("go", "go")

    instance = started(harness, define_with(execute, timeout=600))
    harness.advance(timedelta(seconds=100))
    workerflow.pause(instance)
    harness.advance(timedelta(hours=3))
    workerflow.resume(instance)
    resumed_at = harness.now()
    harness.drain()
    assert refreshed(instance).alarm_at == resumed_at + timedelta(seconds=500)

    harness.advance(timedelta(seconds=499))
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(timedelta(seconds=1))

    instance = refreshed(instance)
    assert (instance.status, instance.error_name) == (WorkflowStatus.FAILED, TIMED_OUT)
    assert instance.finished_at == resumed_at + timedelta(seconds=500)


def test_definition_pause__moves_the_deadlines_by_its_length(harness, define_with):
    definition = define_with(waits_for_go, timeout=60)
    instance = started(harness, definition)
    other = started(harness, define_with(waits_for_go, timeout=60))
    deadline = refreshed(instance).deadline_at
    harness.advance(timedelta(seconds=10))

    workerflow.pause_definition(definition.name, reason="partner API down")
    harness.advance(timedelta(minutes=10))  # the deadline comes while held
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    workerflow.resume_definition(definition.name)
    harness.drain()

    assert refreshed(instance).deadline_at == deadline + timedelta(minutes=10)
    # Another definition's instance is not moved, and timed out meanwhile.
    assert refreshed(other).error_name == TIMED_OUT
    harness.advance(timedelta(seconds=49))
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(timedelta(seconds=1))
    assert refreshed(instance).error_name == TIMED_OUT


def test_definition_pause__a_held_instance_not_yet_started_keeps_its_whole_budget(
    harness, define_with
):
    definition = define_with(waits_for_go, timeout=60)
    workerflow.pause_definition(definition.name, reason="deploy")
    instance = workerflow.start(definition)
    harness.advance(timedelta(hours=1))
    assert refreshed(instance).deadline_at is None  # held before its first tick

    workerflow.resume_definition(definition.name)
    resumed_at = harness.now()
    harness.drain()
    assert refreshed(instance).deadline_at == resumed_at + timedelta(seconds=60)


# Once, and only while unfinished ---------------------------------------------------------


def test_timeout__never_fires_on_a_finished_instance(harness, define):
    instance = started(harness, define(waits_for_go), timeout=30)
    workerflow.send_event(instance, "go", "ok")
    harness.drain()
    assert refreshed(instance).status == WorkflowStatus.COMPLETED

    # The alarm of the deadline had a bell; it rings after the finish and finds nothing.
    harness.advance(timedelta(minutes=5))
    assert tick(instance.pk).outcome == TickEnding.INACTIVE
    instance = refreshed(instance)
    assert (instance.status, instance.result, instance.error_name) == ("completed", "ok", "")


def test_timeout__fires_once(harness, define_with, status_changes):
    heard = []
    definition = define_with(naps, timeout=30)
    definition.on_finish = lambda self, outcome: heard.append(outcome.error_name)
    instance = started(harness, definition)
    harness.advance(timedelta(seconds=30))
    harness.advance(timedelta(hours=2))
    assert tick(instance.pk).outcome == TickEnding.INACTIVE
    harness.drain()

    assert workflow_event_types(instance).count("failed") == 1
    assert status_changes.statuses(instance).count("failed") == 1
    assert heard == [TIMED_OUT]


def test_retry__of_a_timed_out_instance_gets_a_fresh_budget(harness, define_with):
    instance = started(harness, define_with(naps, timeout=30))
    harness.advance(timedelta(seconds=30))
    assert refreshed(instance).error_name == TIMED_OUT

    harness.advance(timedelta(minutes=5))
    workerflow.retry(instance, reason="give it another go")
    retried_at = harness.now()
    harness.drain()
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.RUNNING
    assert instance.deadline_at == retried_at + timedelta(seconds=30)

    harness.advance(timedelta(seconds=29))
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(timedelta(seconds=1))
    assert refreshed(instance).error_name == TIMED_OUT


def test_fork__of_a_timed_out_instance_gets_a_fresh_budget_from_its_first_tick(
    harness, define_with
):
    instance = started(harness, define_with(naps), timeout=30)
    harness.advance(timedelta(seconds=30))
    harness.advance(timedelta(minutes=5))

    fork = workerflow.fork(instance)
    assert (fork.timeout_seconds, fork.deadline_at) == (30, None)
    harness.drain()
    assert refreshed(fork).deadline_at == harness.now() + timedelta(seconds=30)


# Children and on_finish ------------------------------------------------------------------


def test_retry__of_a_parent_revives_its_cancelled_child_with_a_fresh_budget(harness, define_with):
    child = define_with(waits_for_go, timeout=30)
    broken = {"on": True}

    def boom():
        if broken["on"]:
            raise ValueError("boom")

    def execute(self):
        return self.all(
            lambda: self.child("child", child, key="kid"),
            lambda: (self.sleep("later", 1), self.run("boom", boom, max_attempts=1)),
        )

    instance = started(harness, define_with(execute))
    assert WorkflowInstance.objects.get(key="kid").status == WorkflowStatus.RUNNING
    harness.advance(timedelta(seconds=1))
    assert refreshed(instance).error_name == "MaxAttemptsExceededError"
    assert WorkflowInstance.objects.get(key="kid").status == WorkflowStatus.CANCELLED

    harness.advance(timedelta(minutes=5))
    broken["on"] = False
    workerflow.retry(instance)
    kid = WorkflowInstance.objects.get(key="kid")
    assert kid.status == WorkflowStatus.RUNNING
    assert kid.deadline_at == harness.now() + timedelta(seconds=30)


def test_timeout__cancels_the_children_and_on_finish_hears_it(harness, define_with):
    child = define_with(waits_for_go)
    heard = []

    def execute(self):
        return self.child("child", child, key="kid")

    parent = define_with(execute, timeout=30)
    parent.on_finish = lambda self, outcome: heard.append(
        (outcome.status, outcome.error_name, outcome.error_message)
    )
    instance = started(harness, parent, key="parent")
    assert WorkflowInstance.objects.get(key="kid").status == WorkflowStatus.RUNNING

    harness.advance(timedelta(seconds=30))

    assert refreshed(instance).error_name == TIMED_OUT
    kid = WorkflowInstance.objects.get(key="kid")
    assert kid.status == WorkflowStatus.CANCELLED
    assert [(status, name) for status, name, _ in heard] == [("failed", TIMED_OUT)]
    assert "Instance 'parent' did not finish within 30 s" in heard[0][2]


def test_children__use_their_own_definition_s_timeout(harness, define_with):
    child = define_with(waits_for_go, timeout=5)

    def execute(self):
        try:
            return self.child("child", child, key="kid")
        except WorkflowFailedError as exc:
            return exc.error_name

    instance = started(harness, define_with(execute))
    assert WorkflowInstance.objects.get(key="kid").timeout_seconds == 5
    harness.advance(timedelta(seconds=5))
    assert refreshed(instance).result == TIMED_OUT


# Where the budget comes from --------------------------------------------------------------


def test_start__takes_the_definition_s_timeout_or_its_own(harness, define_with):
    definition = define_with(naps, timeout=timedelta(minutes=5))

    assert workerflow.start(definition).timeout_seconds == 300
    assert workerflow.start(definition, timeout=10).timeout_seconds == 10
    assert workerflow.start(definition, timeout=timedelta(hours=2)).timeout_seconds == 7200
    assert workerflow.start(define_with(naps)).timeout_seconds is None
    many = workerflow.start_many(definition, [(None, 1), (None, 2)])
    assert [instance.timeout_seconds for instance in many] == [300, 300]
    many = workerflow.start_many(definition, [(None, 1)], timeout=7)
    assert [instance.timeout_seconds for instance in many] == [7]


def test_start__of_an_existing_key_keeps_that_instance_s_timeout(harness, define_with):
    definition = define_with(naps)
    workerflow.start(definition, key="k", timeout=10)
    assert workerflow.start(definition, key="k", timeout=99).timeout_seconds == 10


def test_start__a_debounced_instance_starts_its_clock_at_its_first_tick(harness, define_with):
    definition = define_with(naps, debounce=5)
    instance = workerflow.start(definition, key="d", timeout=30)
    harness.drain()
    assert refreshed(instance).deadline_at is None
    harness.advance(timedelta(seconds=5))
    assert refreshed(instance).deadline_at == harness.now() + timedelta(seconds=30)


def test_start__a_queued_instance_starts_its_clock_when_it_first_runs(harness, define_with):
    definition = define_with(waits_for_go, max_concurrency=1, timeout=60)
    first = started(harness, definition)
    second = started(harness, definition)
    assert refreshed(second).status == WorkflowStatus.PENDING

    harness.advance(timedelta(seconds=59))
    workerflow.send_event(first, "go")
    harness.drain()
    assert refreshed(first).status == WorkflowStatus.COMPLETED
    second = refreshed(second)
    assert second.status == WorkflowStatus.RUNNING
    assert second.deadline_at == harness.now() + timedelta(seconds=60)


@pytest.mark.parametrize(
    ("timeout", "words"),
    [
        (0, "must be more than 0 seconds"),
        (-5, "must be more than 0 seconds"),
        (math.nan, "must be a finite number of seconds"),
        (math.inf, "must be a finite number of seconds"),
        ("30", "is a str; give a number of seconds or a timedelta"),
        (True, "is a bool; give a number of seconds or a timedelta"),
        (timedelta(0), "must be a positive timedelta"),
        (10**10, "is too long"),
    ],
)
def test_start__refuses_a_timeout_that_is_not_a_positive_duration(
    harness, define_with, timeout, words
):
    definition = define_with(naps)
    with pytest.raises(WorkflowInputError) as raised:
        workerflow.start(definition, timeout=timeout)
    assert words in str(raised.value)
    assert "Pass seconds or a timedelta, e.g. timeout=300" in str(raised.value)
    with pytest.raises(WorkflowInputError, match=words):
        workerflow.start_many(definition, [(None, 1)], timeout=timeout)
    assert not WorkflowInstance.objects.exists()


@pytest.mark.parametrize("timeout", [0, -1, "1 h", timedelta(seconds=-1)])
def test_definition__with_a_bad_timeout_is_refused_when_declared(define_with, timeout):
    with pytest.raises(WorkflowDefinitionError, match=r"`timeout` = .* (must|is a)"):
        define_with(naps, timeout=timeout)


# An instance without a timeout pays nothing ------------------------------------------------


def test_no_timeout__a_tick_writes_none_of_the_timeout_columns(harness, define):
    instance = workerflow.start(define(naps))
    with CaptureQueriesContext(connection) as untimed:
        harness.drain()
        workerflow.pause(instance)
        workerflow.resume(instance)
        harness.advance(timedelta(hours=1))
    assert refreshed(instance).status == WorkflowStatus.COMPLETED
    # A status move and its event are one WITH statement on PostgreSQL (issue 39).
    writes = [q["sql"] for q in untimed.captured_queries if "UPDATE " in q["sql"]]
    assert writes
    # What the UPDATEs set: the claim's and the settle's statements read every column.
    assigned = [
        part
        for sql in writes
        for part in re.findall(r"\bSET\b(.*?)\b(?:FROM|WHERE)\b", sql, flags=re.DOTALL)
    ]
    assert not [part for part in assigned if "deadline_at" in part or "timeout_" in part]

    timed = workerflow.start(define(naps), timeout=7200)
    with CaptureQueriesContext(connection) as captured:
        harness.drain()
    updates = [q["sql"] for q in captured.captured_queries if "UPDATE " in q["sql"]]
    assert [sql for sql in updates if "deadline_at" in sql]  # the check can see them
    assert refreshed(timed).deadline_at is not None


# Seen by operators -------------------------------------------------------------------------


def test_admin_page__shows_the_deadline_and_while_paused_what_is_left(
    harness, define_with, admin_client
):
    instance = started(harness, define_with(naps, timeout=60), key="timed")
    body = text(admin_client.get(change_url(instance)))
    assert 'id="wf-timeout"' in body
    assert "1 min; deadline" in body
    assert "(in 1 min)" in body

    harness.advance(timedelta(seconds=20))
    workerflow.pause(instance)
    body = text(admin_client.get(change_url(instance)))
    assert "1 min; paused: 40 s left" in body

    untimed = started(harness, define_with(naps), key="untimed")
    assert 'id="wf-timeout"' not in text(admin_client.get(change_url(untimed)))


def test_show__prints_the_timeout_and_its_deadline(harness, define_with):
    instance = started(harness, define_with(naps, timeout=30), key="shown")

    out = StringIO()
    call_command("workerflow", "show", "shown", stdout=out)
    assert "Timeout: 30 s; deadline " in out.getvalue()
    assert "(in 30 s)" in out.getvalue()

    harness.advance(timedelta(seconds=30))
    out = StringIO()
    call_command("workerflow", "show", "shown", stdout=out)
    assert "Timeout: 30 s; timed out at " in out.getvalue()
    assert "Error:  WorkflowTimeoutError: Instance 'shown' did not finish" in out.getvalue()

    out = StringIO()
    call_command("workerflow", "show", "shown", "--format", "json", stdout=out)
    deadline = refreshed(instance).deadline_at
    assert json.loads(out.getvalue())["timeout"] == {
        "seconds": 30.0,
        "deadline_at": timezone.localtime(deadline).isoformat(),
        "left_seconds_while_paused": None,
    }
    # A timeout is not drift: the pass that failed reached none of the recorded steps.
    assert refreshed(instance).unreached_step_ids is None
