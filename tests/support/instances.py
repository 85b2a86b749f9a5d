"""Helpers for the runtime tests: claim an instance as a tick does, read an instance's steps,
parents, failures and events, and a step callback that fails once."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction

from django_workerflow.conf import settings
from django_workerflow.models import Step, WorkflowInstance
from django_workerflow.runtime.starting import start
from django_workerflow.store import lease
from django_workerflow.store.steps import StepStore
from django_workerflow.values.clock import now

VERSION = "2026-03-19"
OTHER_VERSION = "2026-03-20"
ONE_DAY = timedelta(days=1)


def claim(instance: WorkflowInstance) -> StepStore:
    """Claim the instance as a tick does (running, leased), and return that tick's store."""
    token = uuid.uuid4().hex
    with transaction.atomic():
        locked = WorkflowInstance.objects.select_for_update().get(pk=instance.pk)
        lease.claim(locked, token, now())
    return StepStore(instance.pk, lease_token=token, start_child=start)


def take_over(instance: WorkflowInstance) -> StepStore:
    """Let the current lease expire, then claim the instance as a second worker."""
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        lease_expires_at=now() - timedelta(seconds=1)
    )
    return claim(instance)


def get(key: str) -> WorkflowInstance:
    """The instance of ``key``, read afresh."""
    return WorkflowInstance.objects.get(key=key)


def status_of(key: str) -> str:
    return get(key).status


def step(instance: WorkflowInstance, step_id: str) -> Step:
    return instance.steps.get(step_id=step_id)


def parent_id(instance: WorkflowInstance, step_id: str) -> str | None:
    parent = step(instance, step_id).parent
    return parent.step_id if parent is not None else None


def attempt_failures(instance: WorkflowInstance, step_id: str) -> int:
    return instance.step_events.filter(step__step_id=step_id, type="attempt_failed").count()


def workflow_event_types(instance: WorkflowInstance) -> list[str]:
    return [event.type for event in instance.workflow_events.all()]


def waits_for_go(self: Any) -> Any:
    """A definition body that waits in step 'go' for the event 'go' and returns its payload."""
    return self.wait("go", "go")


def refreshed(instance: WorkflowInstance) -> WorkflowInstance:
    instance.refresh_from_db()
    return instance


def fail_every_attempt(harness: Any) -> None:
    """Run the instances' attempts one by one until their retries are used up (three
    attempts, backoffs under ten minutes)."""
    harness.drain()
    for _ in range(3):
        harness.advance(600)


def lease_runs_out(harness: Any) -> None:
    """Let a dead tick's lease expire: the take-over, then the interrupted step's retry."""
    harness.advance(settings.LEASE_SECONDS + 1)
    harness.advance(1)


def fail_first_attempt(calls: list[int], value: Any = 1) -> Callable[[], Any]:
    """A step callback that raises on its first call only (a retry backoff follows)."""

    def callback() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("transient")
        return value

    return callback
