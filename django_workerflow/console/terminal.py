"""Plain-text views of instances for ``manage.py workerflow show`` and ``list``.

Step ids, event names and errors are user data: control characters are escaped so that a
hostile name cannot move the cursor or recolour the operator's terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django_workerflow.console import attributes
from django_workerflow.console.describe import cancel_reason_of, waiting_on
from django_workerflow.console.history import History
from django_workerflow.console.progress import progress_figure, progress_line
from django_workerflow.console.summary import (
    MISSING_DEFINITION_HINT,
    Summary,
    Traceback,
    build_summary,
)
from django_workerflow.console.time_words import clock_text, format_when
from django_workerflow.models import StepState, WorkflowInstance, WorkflowStatus
from django_workerflow.values.masking import Masker

#: Shows every value as it is (no masker given for an instance).
REVEALED = Masker()

MAX_VALUE = 120
MAX_ID_WIDTH = 40
# The list's progress message is cut here (``show`` prints it whole), as the admin's list is.
MAX_PROGRESS_MESSAGE = 40


def render_show(history: History, now: datetime, *, tracebacks: bool = False) -> str:
    """The instance's status, data, step tree and inbound events; with ``tracebacks``, the
    instance's and its failed attempts' tracebacks too."""
    instance = history.instance
    summary = build_summary(history, now)
    lines = [
        f"Instance {safe(instance.key)} ({safe(instance.definition_name)} "
        f"v{safe(instance.definition_version)}): {instance.status}",
    ]
    lines += _state_lines(summary)
    lines += [
        f"Created {clock_text(instance.created_at)}; updated {clock_text(instance.updated_at)}"
        + (f"; finished {clock_text(instance.finished_at)}" if instance.finished_at else ""),
        f"Next alarm: {format_when(instance.alarm_at, now) or '-'}",
        f"Input:  {compact(history.input)}",
    ]
    if instance.status == WorkflowStatus.COMPLETED:
        lines.append(f"Result: {compact(history.result)}")
    if instance.error_name or instance.error_message:
        lines.append(f"Error:  {safe(history.error_message or instance.error_name)}")
    lines.append(f"Steps ({history.step_count}):" if history.nodes else "Steps: none yet")
    lines += _step_lines(history)
    if history.step_count > len(history.nodes):
        lines.append(f"  ... {history.step_count - len(history.nodes)} more steps not shown")
    if summary.unreached_step_ids:
        lines.append(f"Warning: {summary.unreached_warning}")
        lines += [f"  unreached: {safe(step_id)}" for step_id in summary.unreached_step_ids]
    if history.inbound_events:
        lines.append(f"Inbound events ({history.inbound_event_count}):")
        for event in reversed(history.inbound_events):
            claimed = (
                f"claimed by step {safe(event.claimed_by.step_id)}"
                if event.claimed_by
                else "queued"
            )
            lines.append(
                f"  {clock_text(event.created_at)}  {safe(event.event_name)}  "
                f"{compact(history.event_payload(event))}  {claimed}"
            )
    if tracebacks:
        lines += _traceback_lines(summary.tracebacks)
    return "\n".join(lines)


def _state_lines(summary: Summary) -> list[str]:
    """What needs attention, what the instance waits on or how it ended, its progress and
    its timeout: the summary's lines, those that have something to say."""
    lines = []
    if summary.missing_definition:
        lines.append(f"Warning: {safe(summary.missing_definition)}. {MISSING_DEFINITION_HINT}")
    if summary.waiting_on:
        lines.append(f"Waiting on: {safe(summary.waiting_on)}")
    if summary.outcome:
        lines.append(f"Ended: {safe(summary.outcome)}")
    progress = summary.instance.progress
    if progress is not None:
        lines.append(f"Progress: {safe(progress_line(progress))}")
    if summary.timeout:
        lines.append(f"Timeout: {summary.timeout}")
    if summary.instance.attributes:
        lines.append(f"Attributes: {safe(attributes.text(summary.instance))}")
    return lines


def _traceback_lines(tracebacks: list[Traceback]) -> list[str]:
    if not tracebacks:
        return ["Tracebacks: none recorded"]
    lines = []
    for traceback in tracebacks:
        lines.append(f"{safe(traceback.title)}:")
        # Line by line: newlines are the traceback's own, other control characters escaped.
        lines += [f"  {safe(line)}" for line in traceback.text.rstrip("\n").splitlines()]
    return lines


def _step_lines(history: History) -> list[str]:
    rows = []
    for node in history.nodes:
        step = node.step
        name = "  " * node.depth + safe(step.step_id)
        if len(name) > MAX_ID_WIDTH:
            name = name[: MAX_ID_WIDTH - 1] + "…"
        outcome = ""
        if node.error:
            outcome = f"error: {safe(node.error)}"
        elif node.has_value:
            outcome = f"-> {compact(node.value)}"
        took = f"took {node.duration_text}" if node.duration_text else ""
        attempts = f"{node.attempts_text} attempts" if node.attempts_text else ""
        rows.append(
            (name, node, [step.type, step.state, attempts, safe(node.detail), took, outcome])
        )
    width = max((len(name) for name, _, _ in rows), default=0)
    lines = []
    for name, node, cells in rows:
        text = "  ".join(cell for cell in cells if cell)
        lines.append(f"  {name.ljust(width)}  {text}")
        for attempt in node.attempts:
            if attempt.outcome == StepState.FAILED:
                indent = "  " * (node.depth + 2)
                lines.append(f"  {indent}attempt {attempt.number} failed: {safe(attempt.error)}")
    return lines


def render_list(
    instances: Iterable[WorkflowInstance],
    now: datetime,
    maskers: Mapping[int, Masker] | None = None,
) -> str:
    """One line per instance: key, definition, status, progress (a percentage, or the count
    without a total, and its message), last update and what it waits on (the errors it
    quotes masked by ``maskers``, by instance primary key)."""
    maskers = maskers or {}
    header = ("KEY", "DEFINITION", "STATUS", "PROGRESS", "UPDATED", "WAITING ON")
    rows = [
        (
            safe(instance.key),
            f"{safe(instance.definition_name)} v{safe(instance.definition_version)}",
            instance.status,
            safe(progress_figure(instance.progress, limit=MAX_PROGRESS_MESSAGE)) or "-",
            format_when(instance.updated_at, now, relative=False),
            safe(
                maskers.get(instance.pk, REVEALED).text(
                    waiting_on(
                        instance,
                        getattr(instance, "attention_steps", []),
                        now,
                        cancel_reason=cancel_reason_of(instance),
                        limit=80,
                    )
                )
            )
            or "-",
        )
        for instance in instances
    ]
    if not rows:
        return "No workflow instance matches."
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])), row[-1]]).rstrip()
        for row in [header, *rows]
    )


def compact(value: Any) -> str:
    """A JSON value on one line, cut at ``MAX_VALUE`` characters."""
    text = safe(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def safe(text: str | None) -> str:
    """``text`` with control characters (escape sequences, newlines) shown escaped."""
    text = text or ""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
