"""A retry keeps what happened before it: the earlier attempts, their errors and the first
attempt's start stay in the step history, in a retried task's result, in the admin's
timeline and in the export; attempt numbers continue."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import django
import pytest

import django_workerflow as workerflow
from django_workerflow.console.history import load_history
from django_workerflow.deploy.exports import export_history
from django_workerflow.models import Step, StepEventType, WorkflowInstance, WorkflowStatus
from django_workerflow.task_backend import worker_id
from django_workerflow.testing import Harness
from django_workerflow.values.clock import now
from tests.clusterapp import tasks
from tests.support.admin import change_url

if django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus
else:
    from django_tasks import TaskResultStatus

pytestmark = pytest.mark.django_db

STARTED = StepEventType.ATTEMPT_STARTED
SUCCEEDED = StepEventType.ATTEMPT_SUCCEEDED
FAILED = StepEventType.ATTEMPT_FAILED


@pytest.fixture
def task_harness(db: None) -> Iterator[Harness]:
    with Harness() as running:
        yield running


def retried_once(define, harness) -> WorkflowInstance:
    """An instance whose one-attempt step 'charge' failed, was retried a minute later and
    succeeded."""
    calls = {"n": 0}

    def charge():
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("card declined")
        return "charged"

    instance = workerflow.start(define(lambda self: self.run("charge", charge, max_attempts=1)))
    harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED
    harness.advance(timedelta(minutes=1))
    workerflow.retry(instance, reason="card fixed")
    harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    return instance


def test_retry__the_step_history_keeps_the_failed_attempt_and_the_first_start(define, harness):
    started = now()
    instance = retried_once(define, harness)
    step = Step.objects.get(instance=instance, step_id="charge")

    events = list(step.events.all())

    assert [(e.type, e.attempt_number) for e in events] == [
        (STARTED, 1),
        (FAILED, 1),
        (STARTED, 2),
        (SUCCEEDED, 2),
    ]
    assert events[0].recorded_at == started == step.created_at
    assert events[1].error_message.endswith("card declined")
    assert "card declined" in events[1].traceback
    assert events[2].recorded_at == started + timedelta(minutes=1)
    assert events[3].result == "charged"


def test_retry__the_admin_timeline_and_the_export_keep_the_earlier_attempt(
    define, harness, admin_client
):
    instance = retried_once(define, harness)

    [node] = load_history(instance, now()).nodes
    exported = export_history(instance)
    page = admin_client.get(change_url(instance)).content.decode()

    assert [(a.number, a.outcome) for a in node.attempts] == [(1, "failed"), (2, "succeeded")]
    assert node.attempts[0].error.endswith("card declined")
    [step] = exported["steps"]
    assert [(e["type"], e["attempt_number"]) for e in step["events"]] == [
        (STARTED, 1),
        (FAILED, 1),
        (STARTED, 2),
        (SUCCEEDED, 2),
    ]
    assert "card declined" in page


def test_retry__a_retried_task_reports_both_attempts_and_the_error(task_harness, tmp_path: Path):
    path = tmp_path / "flaky"
    result = tasks.flaky.using(queue_name="default").enqueue(str(path), 1)  # one attempt
    task_harness.drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    first_started = result.started_at

    task_harness.advance(timedelta(minutes=1))
    workerflow.retry(result.id, reason="fixed")
    task_harness.drain()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert "attempt 1 fails on purpose" in result.errors[0].traceback
    assert result.worker_ids == [worker_id(), worker_id()]
    assert result.started_at == first_started
    assert result.last_attempted_at == first_started + timedelta(minutes=1)


def test_retry__a_task_retried_after_its_retries_ran_out_keeps_them_all(
    task_harness, tmp_path: Path
):
    path = tmp_path / "flaky"
    result = tasks.flaky.enqueue(str(path), 3)  # the "retries" queue: 3 attempts, all fail
    task_harness.advance(timedelta(minutes=1))
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3

    workerflow.retry(result.id)
    task_harness.drain()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.attempts == 4
    assert len(result.errors) == 3


def test_retry__a_retried_task_s_context_sees_the_attempt_numbers_continue(
    task_harness, tmp_path: Path
):
    path = tmp_path / "context"
    # One attempt on the default queue: attempt 1 fails, and the retry runs attempt 2.
    result = tasks.flaky_with_context.using(queue_name="default").enqueue(str(path))
    task_harness.drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED

    workerflow.retry(result.id)
    task_harness.drain()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 2, "errors": 1}
    assert path.read_text().splitlines() == ["1", "2"]
