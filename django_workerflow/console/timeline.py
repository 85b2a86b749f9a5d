"""An instance's history on one time axis, as data for the instance page.

The timeline draws each step as a bar from its creation to its resolution (or to now), split into
segments: each attempt of a run step, the backoff between attempts, a sleep, a wait. Positions
are percentages of the instance's lifetime, so the page draws it with plain HTML and CSS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django_workerflow.console.steptree import StepNode
from django_workerflow.console.time_words import clock_text, format_duration, short_time
from django_workerflow.models import (
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)

# Width, in percent of the track, under which a segment is drawn at the minimum width.
MIN_WIDTH = 0.4
TICKS = 4
#: The kind of the stretch between a failure and the operator's retry that followed it.
AWAITING_RETRY = "awaiting-retry"
#: The kind of an open step the current definition no longer reaches (it changed under the
#: instance): the step will not resolve, so it is not drawn as sleeping or waiting on.
UNREACHED = "unreached"


@dataclass(slots=True)
class Segment:
    """A stretch of a timeline row, placed in percent of the track."""

    kind: str
    start: datetime
    end: datetime
    label: str
    left: float = 0.0
    width: float = 0.0
    open: bool = False

    @property
    def style(self) -> str:
        """Inline CSS placing the segment (formatted here: templates would localize it)."""
        return f"left:{self.left:.3f}%;width:{self.width:.3f}%"


@dataclass(slots=True)
class Row:
    """One bar of the timeline: the instance itself, or one step."""

    label: str
    kind: str
    depth: int
    summary: str
    segments: list[Segment]
    marks: list[Segment] = field(default_factory=list)

    @property
    def indent(self) -> range:
        return range(self.depth)


@dataclass(slots=True)
class Tick:
    left: float
    label: str

    @property
    def style(self) -> str:
        return f"left:{self.left:.3f}%"


@dataclass(slots=True)
class Timeline:
    start: datetime
    end: datetime
    rows: list[Row]
    ticks: list[Tick]

    @property
    def duration_text(self) -> str:
        return format_duration(self.end - self.start)


def build_timeline(
    instance: WorkflowInstance,
    nodes: list[StepNode],
    workflow_events: Iterable[WorkflowEvent],
    now: datetime,
) -> Timeline:
    """Lay the instance and its steps out on one time axis, from creation to the end (the
    instance's finish, or now)."""
    start = instance.created_at
    end = instance.finished_at or max(now, instance.updated_at)
    for node in nodes:
        end = max(end, node.step.resolved_at or node.step.created_at)
    end = max(end, start + timedelta(milliseconds=1))
    events = list(workflow_events)
    retried = [event.recorded_at for event in events if event.type == WorkflowEventType.RETRIED]
    rows = [_instance_row(instance, events, end)]
    rows += [_step_row(node, end, retried) for node in nodes]
    if instance.forked_from_id is not None:
        for row, node in zip(rows[1:], nodes, strict=True):
            if node.step.resolved_at and _copied(node):
                row.summary = f"{node.step.state}; copied from the source, not run here"
    span = (end - start).total_seconds()
    for row in rows:
        for segment in [*row.segments, *row.marks]:
            _place(segment, start, span)
    ticks = [
        Tick(left=100 * i / TICKS, label="+" + format_duration((end - start) * i / TICKS))
        for i in range(1, TICKS)
    ]
    return Timeline(start=start, end=end, rows=rows, ticks=ticks)


def _copied(node: StepNode) -> bool:
    """A fork's run or child step that it copied: it has no history of its own here."""
    if node.step.type == StepType.RUN:
        return not node.attempts
    return node.step.type == StepType.CHILD and not node.events


def _place(segment: Segment, start: datetime, span: float) -> None:
    left = 100 * (segment.start - start).total_seconds() / span
    width = 100 * (segment.end - segment.start).total_seconds() / span
    segment.left = round(min(max(left, 0.0), 100.0 - MIN_WIDTH), 3)
    segment.width = round(min(max(width, MIN_WIDTH), 100.0 - segment.left), 3)


def _instance_row(instance: WorkflowInstance, events: list[WorkflowEvent], end: datetime) -> Row:
    """The instance's own bar: pending, running and paused stretches, and how it ended."""
    segments: list[Segment] = []
    # The status each event starts; a stretch's kind is the status it was spent in.
    follows_event: dict[str, str] = {
        WorkflowEventType.STARTED: WorkflowStatus.RUNNING,
        WorkflowEventType.RESUMED: WorkflowStatus.RUNNING,
        WorkflowEventType.RETRIED: WorkflowStatus.RUNNING,
        WorkflowEventType.PAUSED: WorkflowStatus.PAUSED,
    }
    kind: str = WorkflowStatus.PENDING
    since = instance.created_at
    for event in events:
        follows = follows_event.get(event.type)
        if follows is not None:
            if kind:
                segments.append(_span(kind, since, event.recorded_at))
            kind, since = follows, event.recorded_at
        elif event.type in (
            WorkflowEventType.COMPLETED,
            WorkflowEventType.FAILED,
            WorkflowEventType.CANCELLED,
        ):
            segments.append(_span(kind, since, event.recorded_at))
            # Failed, it waits for an operator's retry: drawn as such once one came.
            kind = AWAITING_RETRY if event.type == WorkflowEventType.FAILED else ""
            since = event.recorded_at
    if kind and not instance.is_terminal:
        segments.append(_span(kind, since, end, open=True))
    segments = [segment for segment in segments if segment.end > segment.start or segment.open]
    marks = [
        Segment(f"mark-{event.type}", event.recorded_at, event.recorded_at, _event_label(event))
        for event in events
        if event.type not in (WorkflowEventType.CREATED, WorkflowEventType.STARTED)
    ]
    # An unfinished instance has been in its status since its last stretch began.
    lifetime = format_duration(end - instance.created_at)
    summary = (
        f"{instance.status} after {lifetime}"
        if instance.finished_at
        else f"{instance.status} for {format_duration(end - since)}"
    )
    return Row(
        label="workflow",
        kind="instance",
        depth=0,
        summary=summary,
        segments=segments,
        marks=marks,
    )


def _event_label(event: WorkflowEvent) -> str:
    label = f"{event.type} at {clock_text(event.recorded_at)}"
    return f"{label}: {event.reason}" if event.reason else label


# How a label names a stretch whose kind is not plain words.
_WORDS = {AWAITING_RETRY: "failed, waiting for an operator's retry"}


def _span(kind: str, start: datetime, end: datetime, *, open: bool = False) -> Segment:
    duration = format_duration(end - start)
    words = _WORDS.get(kind, kind)
    label = f"{words} {clock_text(start)} - {'now' if open else clock_text(end)} ({duration})"
    return Segment(kind, start, end, label, open=open)


def _step_row(node: StepNode, end: datetime, retried: list[datetime]) -> Row:
    step = node.step
    if node.unreached:
        segments = [_span(f"{step.type}-{UNREACHED}", step.created_at, max(end, step.created_at))]
        segments[0].label = (
            f"{step.type} {step.step_id!r}: no longer reached by the current definition "
            f"(it changed under the instance): {segments[0].label}"
        )
    elif node.abandoned:
        finish = max(end, step.created_at)
        segments = [_span(f"{step.type}-abandoned", step.created_at, finish)]
        segments[0].label = f"{step.type} {step.step_id!r}: never finished: {segments[0].label}"
    elif step.type == StepType.RUN:
        segments = _run_segments(node, end, retried)
    else:
        finish = step.resolved_at or end
        kind = step.type if step.resolved_at is None else f"{step.type}-{step.state}"
        segments = [_span(kind, step.created_at, finish, open=step.resolved_at is None)]
        segments[0].label = f"{step.type} {step.step_id!r}: {segments[0].label}"
    return Row(
        label=step.step_id,
        kind=step.type,
        depth=node.depth,
        summary=_summary(node, end),
        segments=segments,
    )


def _run_segments(node: StepNode, end: datetime, retried: list[datetime]) -> list[Segment]:
    step = node.step
    segments: list[Segment] = []
    cursor = step.created_at
    for attempt in node.attempts:
        if attempt.started_at > cursor:
            segments += _gap(segments, cursor, attempt.started_at, retried)
        finish = attempt.ended_at or end
        segment = _span(
            f"attempt-{attempt.outcome}", attempt.started_at, finish, open=attempt.ended_at is None
        )
        segment.label = f"attempt {attempt.number} {attempt.outcome}: {segment.label}"
        if attempt.error:
            segment.label += f": {attempt.error}"
        segments.append(segment)
        cursor = finish
    if step.resolved_at is None and step.state == StepState.PENDING:
        gap = _gap(segments, cursor, max(end, cursor), retried, open=True)
        if step.next_attempt_at is not None:
            gap[-1].label += f"; next attempt at {clock_text(step.next_attempt_at)}"
        segments += gap
    return segments


def _gap(
    before: list[Segment],
    start: datetime,
    end: datetime,
    retried: list[datetime],
    *,
    open: bool = False,
) -> list[Segment]:
    """The stretch of a run step between two attempts (or before its first): a backoff, or,
    when an operator's retry came in it, the failure's wait for that retry, then pending."""
    retry = next((when for when in retried if start < when <= end), None)
    if not before:
        return [_span("pending", start, end, open=open)]
    if retry is None:
        return [_span("backoff", start, end, open=open)]
    gap = [_span(AWAITING_RETRY, start, retry)]
    if end > retry or open:
        gap.append(_span("pending", retry, end, open=open))
    return gap


def _left_open(node: StepNode) -> str:
    """Why an open step will not resolve, or "" for one that still may."""
    if node.unreached:
        return "no longer reached (the definition changed)"
    if node.abandoned:
        return "never finished: the workflow ended first"
    return ""


def _summary(node: StepNode, end: datetime) -> str:
    """The row's outcome in a few words: "3 attempts, 2 failed; succeeded after 1 min"."""
    step = node.step
    left_open = _left_open(node)
    if left_open:
        return left_open
    resolved = step.resolved_at is not None
    took = format_duration((step.resolved_at or end) - step.created_at)
    if step.type == StepType.SLEEP:
        return f"slept {took}" if resolved else f"sleeping until {short_time(step.wake_at)}"
    if step.type == StepType.WAIT:
        if step.state == StepState.SATISFIED:
            return f"event received after {took}"
        if step.state == StepState.TIMED_OUT:
            return f"timed out after {took}"
        return f"waiting for '{step.event_name}' for {took}"
    if step.type == StepType.CHILD:
        # A child step has no attempts: it started a child workflow and waits for its end.
        if step.state == StepState.SUCCEEDED:
            return f"child workflow completed after {took}"
        if step.state == StepState.FAILED and step.error_name == "WorkflowCancelledError":
            return f"child workflow cancelled after {took}"
        if step.state == StepState.FAILED:
            return f"child workflow failed after {took}"
        return f"waiting for the child workflow for {took}"
    if step.type == StepType.PATCH:
        return "patch marker recorded"
    failed = sum(1 for attempt in node.attempts if attempt.outcome == StepState.FAILED)
    words = f"{len(node.attempts)} attempt{'s' if len(node.attempts) != 1 else ''}"
    if failed:
        words += f", {failed} failed"
    return f"{words}; {step.state} after {took}" if resolved else f"{words}; {step.state}"
