"""An instance's whole history as a JSON document, and back to recorded steps.

``manage.py workerflow export KEY`` writes the document; ``testing.replay()`` reads it. The
document carries a ``format`` number: readers refuse a format they do not know.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django_workerflow.definition import sensitive
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import Step, WorkflowEvent, WorkflowInstance
from django_workerflow.store.records import STEP_FIELDS, StepRecord, name_parents
from django_workerflow.values.masking import Masker

#: The version of the exported document's layout.
HISTORY_FORMAT = 1

_TIME_FIELDS = ("next_attempt_at", "wake_at", "timeout_at", "resolved_at", "created_at")
_EVENT_FIELDS = (
    "type",
    "attempt_number",
    "result",
    "error_name",
    "error_message",
    "next_attempt_at",
    "wake_at",
    "event_name",
    "timeout_at",
    "payload",
    "recorded_at",
)


def export_history(instance: WorkflowInstance, *, reveal: bool = False) -> dict[str, Any]:
    """The whole history of ``instance``: its steps with outcomes, parents and events, and
    its lifecycle events (a JSON-ready dict).

    The values its definition names ``sensitive`` are masked, in values and error texts,
    unless ``reveal``: a masked history replays with the masks as the step values.
    """
    masker = sensitive.masker_for(instance, reveal=reveal)
    steps = list(Step.objects.filter(instance=instance).order_by("created_at", "id"))
    rows = [_masked(masker, {name: getattr(step, name) for name in STEP_FIELDS}) for step in steps]
    step_ids = {row["id"]: row["step_id"] for row in rows}
    events: dict[int, list[dict[str, Any]]] = {}
    for event in instance.step_events.all():
        fields = {name: getattr(event, name) for name in _EVENT_FIELDS}
        fields["step_id"] = step_ids.get(event.step_id, "")
        fields = _masked(masker, fields)
        del fields["step_id"]
        events.setdefault(event.step_id, []).append(_times(fields))
    return {
        "format": HISTORY_FORMAT,
        "name": instance.definition_name,
        "version": instance.definition_version,
        "key": instance.key,
        "input": masker.input(instance.input),
        "status": instance.status,
        "result": masker.result(instance.result),
        "error_name": instance.error_name,
        "error_message": masker.text(instance.error_message),
        "attributes": instance.attributes or {},
        "steps": [_step(row, step_ids, events.get(row["id"], [])) for row in rows],
        "events": [
            _times(dict(event))
            for event in WorkflowEvent.objects.filter(instance=instance)
            .order_by("recorded_at", "id")
            .values("type", "reason", "recorded_at")
        ],
    }


def dumps(history: dict[str, Any]) -> str:
    """The document as indented JSON text (stable key order, for diffs in version control)."""
    return json.dumps(history, indent=2, ensure_ascii=False) + "\n"


def load(history: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A history given as a dict, or as the path of an exported file; check its format."""
    if isinstance(history, str | Path):
        path = Path(history)
        try:
            history = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise WorkflowInputError(
                f"Cannot read the history file {str(path)!r}: {exc}. Pass a file written by "
                "`manage.py workerflow export KEY -o FILE`, or its content as a dict."
            ) from exc
    if not isinstance(history, dict):
        raise WorkflowInputError(
            f"A history must be a dict or a file path, not {type(history).__name__}."
        )
    if history.get("format") != HISTORY_FORMAT:
        raise WorkflowInputError(
            f"This history has format {history.get('format')!r}; this version of "
            f"django-workerflow reads format {HISTORY_FORMAT}. Export it again."
        )
    missing = [name for name in ("name", "version", "key", "steps") if name not in history]
    if missing:
        raise WorkflowInputError(f"The history has no {', '.join(missing)}: export it again.")
    return history


def records(history: dict[str, Any]) -> list[StepRecord]:
    """The recorded steps of a loaded history, as the engine's in-memory records."""
    result: list[StepRecord] = []
    pks: dict[str, int] = {}
    for number, step in enumerate(history["steps"], start=1):
        try:
            values = {name: step.get(name) for name in STEP_FIELDS}
            values["id"] = number
            parent = step.get("parent")
            values["parent_id"] = pks[parent] if parent is not None else None
            for name in _TIME_FIELDS:
                if values[name] is not None:
                    values[name] = datetime.fromisoformat(values[name])
            values["error_name"] = values["error_name"] or ""
            values["error_message"] = values["error_message"] or ""
            values["event_name"] = values["event_name"] or ""
            values["attempt_count"] = values["attempt_count"] or 0
            record = StepRecord(*(values[name] for name in STEP_FIELDS))
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkflowInputError(
                f"Step {number} of the history is malformed ({exc!r}): export it again."
            ) from exc
        pks[record.step_id] = number
        result.append(record)
    return name_parents(result)


def _masked(masker: Masker, row: dict[str, Any]) -> dict[str, Any]:
    """A step's (or step event's) row with its sensitive values masked: its result, the
    payload it received (as its event's payload too) and its error message; values sealed
    at rest are opened first (the document is read without the codec)."""
    step_id = row["step_id"]
    row["result"] = masker.step(step_id, row["result"])
    row["payload"] = masker.step(step_id, row["payload"], row["event_name"] or "")
    if masker.active:
        row["error_message"] = masker.text(row["error_message"] or "")
    return row


def _step(
    row: dict[str, Any], step_ids: dict[int, str], events: list[dict[str, Any]]
) -> dict[str, Any]:
    step = _times(dict(row))
    step.pop("id")
    parent_pk = step.pop("parent_id")
    step["parent"] = step_ids.get(parent_pk) if parent_pk is not None else None
    step["events"] = events
    return step


def _times(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = value.isoformat()
    return row
