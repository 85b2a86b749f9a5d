"""JSON documents of instances for ``manage.py workerflow list --format json`` and ``show``.

The shape is documented in docs/operations.md and kept stable: fields are only ever added.
Every time is ISO 8601 with its offset, in the project's ``TIME_ZONE``; an absent time or
value is ``null``. User data (keys, step ids, errors) is given as it is: JSON escapes it.
The values a definition names ``sensitive`` come masked unless the history was read with
``reveal`` (``show --reveal``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from django_workerflow.console.composition import Composition
from django_workerflow.console.describe import cancel_reason_of, waiting_on
from django_workerflow.console.history import History
from django_workerflow.console.steptree import StepNode
from django_workerflow.console.summary import build_summary
from django_workerflow.models import FinishDelivery, WorkflowInstance, WorkflowStatus
from django_workerflow.values.masking import Masker
from django_workerflow.values.progress import Progress


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def list_document(
    instances: Iterable[WorkflowInstance],
    now: datetime,
    maskers: Mapping[int, Masker] | None = None,
) -> dict[str, Any]:
    """``{"instances": [...]}``, newest first, as ``list`` prints them (the errors "waiting
    on" quotes masked by ``maskers``, by instance primary key)."""
    maskers = maskers or {}
    return {
        "instances": [
            {
                **_identity(instance),
                "waiting_on": maskers.get(instance.pk, Masker()).text(
                    waiting_on(
                        instance,
                        getattr(instance, "attention_steps", []),
                        now,
                        cancel_reason=cancel_reason_of(instance),
                        limit=None,
                    )
                )
                or None,
            }
            for instance in instances
        ]
    }


def show_document(
    history: History, composition: Composition, now: datetime, *, tracebacks: bool = False
) -> dict[str, Any]:
    """The instance, its steps, inbound events, parent, children and ``on_finish``
    delivery, as ``show`` prints them."""
    instance = history.instance
    summary = build_summary(history, now)
    step_ids = {node.step.pk: node.step.step_id for node in history.nodes}
    document = {
        **_identity(instance),
        "waiting_on": summary.waiting_on or None,
        "ended": summary.outcome or None,
        "missing_definition": summary.missing_definition or None,
        "timeout": _timeout(instance),
        "input": history.input,
        "result": history.result if instance.status == WorkflowStatus.COMPLETED else None,
        "error": {"name": instance.error_name, "message": history.error_message}
        if instance.error_name or instance.error_message
        else None,
        "step_count": history.step_count,
        "steps": [_step(node, step_ids) for node in history.nodes],
        "unreached_step_ids": list(summary.unreached_step_ids),
        "inbound_event_count": history.inbound_event_count,
        "inbound_events": [
            {
                "event_name": event.event_name,
                "created_at": iso(event.created_at),
                "payload": history.event_payload(event),
                "claimed_by_step_id": event.claimed_by.step_id if event.claimed_by else None,
            }
            for event in reversed(history.inbound_events)
        ],
        "parent_key": composition.parent.key if composition.parent else None,
        "child_count": composition.child_count,
        "children": [
            {
                "key": child.key,
                "definition": child.definition_name,
                "status": str(child.status),
                "detached": child.detached,
            }
            for child in composition.children
        ],
        "on_finish_delivery": _delivery(composition.delivery, history.masker),
    }
    if tracebacks:
        document["tracebacks"] = [
            {"title": traceback.title, "text": traceback.text} for traceback in summary.tracebacks
        ]
    return document


def iso(when: datetime | None) -> str | None:
    """ISO 8601 with the offset, in the current time zone (None stays None)."""
    return None if when is None else timezone.localtime(when).isoformat()


def _identity(instance: WorkflowInstance) -> dict[str, Any]:
    return {
        "key": instance.key,
        "definition": instance.definition_name,
        "version": instance.definition_version,
        "status": str(instance.status),
        "created_at": iso(instance.created_at),
        "updated_at": iso(instance.updated_at),
        "finished_at": iso(instance.finished_at),
        "alarm_at": iso(instance.alarm_at),
        "progress": _progress(instance.progress),
        "attributes": instance.attributes or {},
    }


def _timeout(instance: WorkflowInstance) -> dict[str, Any] | None:
    if instance.timeout_seconds is None:
        return None
    return {
        "seconds": instance.timeout_seconds,
        "deadline_at": iso(instance.deadline_at),
        "left_seconds_while_paused": instance.timeout_left_seconds,
    }


def _progress(progress: Progress | None) -> dict[str, Any] | None:
    if progress is None:
        return None
    return {
        "current": progress.current,
        "total": progress.total,
        "fraction": progress.fraction,
        "message": progress.message,
        "updated_at": iso(progress.updated_at),
    }


def _delivery(delivery: FinishDelivery | None, masker: Masker) -> dict[str, Any] | None:
    if delivery is None:
        return None
    return {
        "attempt_count": delivery.attempt_count,
        "next_attempt_at": iso(delivery.next_attempt_at),
        "acknowledged_at": iso(delivery.acknowledged_at),
        "last_error": masker.text(delivery.last_error_message or delivery.last_error_name) or None,
    }


def _step(node: StepNode, step_ids: dict[int, str]) -> dict[str, Any]:
    step = node.step
    return {
        "step_id": step.step_id,
        "parent_step_id": step_ids.get(step.parent_id) if step.parent_id else None,
        "depth": node.depth,
        "type": str(step.type),
        "state": str(step.state),
        "attempt_count": step.attempt_count,
        "max_attempts": step.max_attempts,
        "created_at": iso(step.created_at),
        "resolved_at": iso(step.resolved_at),
        "next_attempt_at": iso(step.next_attempt_at),
        "wake_at": iso(step.wake_at),
        "event_name": step.event_name or None,
        "timeout_at": iso(step.timeout_at),
        "value": node.value if node.has_value else None,
        "error": node.error or None,
        "attempts": [
            {
                "number": attempt.number,
                "started_at": iso(attempt.started_at),
                "ended_at": iso(attempt.ended_at),
                "outcome": str(attempt.outcome),
                "error": attempt.error or None,
            }
            for attempt in node.attempts
        ],
    }
