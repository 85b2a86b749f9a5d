"""An instance's history as data for pages and terminals: the step tree and the timeline.

The tree nests steps under the run step that was executing when they were reached. The
timeline draws each step as a bar from its creation to its resolution (or to now), split into
segments: each attempt of a run step, the backoff between attempts, a sleep, a wait. Positions
are percentages of the instance's lifetime, so the page draws it with plain HTML and CSS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from ..clock import now as clock_now
from ..models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from .describe import format_duration, pretty_json, step_error

# Steps shown on one page; an instance with more says how many it leaves out.
MAX_STEPS = 500
# Width, in percent of the track, under which a segment is drawn at the minimum width.
MIN_WIDTH = 0.4
TICKS = 4


@dataclass(slots=True)
class Attempt:
    """One attempt of a run step, read from its step events."""

    number: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: StepState = StepState.RUNNING  # then SUCCEEDED or FAILED
    error: str = ""
    next_attempt_at: datetime | None = None

    @property
    def duration(self) -> timedelta | None:
        return None if self.ended_at is None else self.ended_at - self.started_at

    @property
    def duration_text(self) -> str:
        duration = self.duration
        return "" if duration is None else format_duration(duration)


@dataclass(slots=True)
class StepNode:
    """A step with its depth in the tree, its attempts and its events."""

    step: Step
    depth: int = 0
    children: list[StepNode] = field(default_factory=list)
    events: list[StepEvent] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def duration(self) -> timedelta | None:
        if self.step.resolved_at is None:
            return None
        return self.step.resolved_at - self.step.created_at

    @property
    def indent(self) -> range:
        return range(self.depth)

    @property
    def retried(self) -> bool:
        """True when the step's attempts are worth listing: more than one, or a failure."""
        return len(self.attempts) > 1 or any(a.outcome == StepState.FAILED for a in self.attempts)

    @property
    def error(self) -> str:
        if self.step.state in (StepState.FAILED, StepState.TIMED_OUT):
            return step_error(self.step)
        return ""

    @property
    def duration_text(self) -> str:
        duration = self.duration
        return "" if duration is None else format_duration(duration)

    @property
    def value_json(self) -> str:
        """A succeeded run step's result or a satisfied wait's payload, as indented JSON."""
        if self.step.state == StepState.SUCCEEDED:
            return pretty_json(self.step.result)
        if self.step.state == StepState.SATISFIED:
            return pretty_json(self.step.payload)
        return ""

    @property
    def detail(self) -> str:
        """What a sleep or wait step waits for."""
        step = self.step
        if step.type == StepType.SLEEP:
            return f"until {short_time(step.wake_at)}"
        if step.type == StepType.WAIT:
            words = f"event '{step.event_name}'"
            return f"{words} until {short_time(step.timeout_at)}" if step.timeout_at else words
        if step.state == StepState.PENDING and step.next_attempt_at and step.attempt_count:
            return f"next attempt at {short_time(step.next_attempt_at)}"
        return ""

    @property
    def attempts_text(self) -> str:
        step = self.step
        if step.type != StepType.RUN:
            return ""
        if step.max_attempts:
            return f"{step.attempt_count} of {step.max_attempts}"
        return str(step.attempt_count)


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


# The tree --------------------------------------------------------------------------------


def step_tree(steps: Iterable[Step], events: Iterable[StepEvent] = ()) -> list[StepNode]:
    """The steps in depth-first order (children after their parent, each level by creation),
    each with its events and attempts."""
    nodes = {step.pk: StepNode(step) for step in steps}
    for event in events:
        node = nodes.get(event.step_id)
        if node is not None:
            node.events.append(event)
    roots: list[StepNode] = []
    for node in nodes.values():
        node.attempts = _attempts(node.events)
        parent = nodes.get(node.step.parent_id) if node.step.parent_id else None
        (parent.children if parent else roots).append(node)
    ordered: list[StepNode] = []
    stack = [(node, 0) for node in reversed(roots)]
    while stack:
        node, depth = stack.pop()
        node.depth = depth
        ordered.append(node)
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return ordered


def _attempts(events: list[StepEvent]) -> list[Attempt]:
    attempts: list[Attempt] = []
    for event in events:
        if event.type == StepEventType.ATTEMPT_STARTED:
            attempts.append(Attempt(event.attempt_number or len(attempts) + 1, event.recorded_at))
        elif event.type in (StepEventType.ATTEMPT_SUCCEEDED, StepEventType.ATTEMPT_FAILED):
            if not attempts:
                continue
            attempt = attempts[-1]
            attempt.ended_at = event.recorded_at
            if event.type == StepEventType.ATTEMPT_SUCCEEDED:
                attempt.outcome = StepState.SUCCEEDED
            else:
                attempt.outcome = StepState.FAILED
                attempt.error = event.error_message or event.error_name
                attempt.next_attempt_at = event.next_attempt_at
    return attempts


# The timeline ----------------------------------------------------------------------------


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
    rows = [_instance_row(instance, list(workflow_events), end)]
    rows += [_step_row(node, end) for node in nodes]
    span = (end - start).total_seconds()
    for row in rows:
        for segment in [*row.segments, *row.marks]:
            _place(segment, start, span)
    ticks = [
        Tick(left=100 * i / TICKS, label="+" + format_duration((end - start) * i / TICKS))
        for i in range(1, TICKS)
    ]
    return Timeline(start=start, end=end, rows=rows, ticks=ticks)


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
        WorkflowEventType.PAUSED: WorkflowStatus.PAUSED,
    }
    kind: str = WorkflowStatus.PENDING
    since = instance.created_at
    for event in events:
        follows = follows_event.get(event.type)
        if follows is not None:
            segments.append(_span(kind, since, event.recorded_at))
            kind, since = follows, event.recorded_at
        elif event.type in (
            WorkflowEventType.COMPLETED,
            WorkflowEventType.FAILED,
            WorkflowEventType.CANCELLED,
        ):
            segments.append(_span(kind, since, event.recorded_at))
            kind, since = "", event.recorded_at
    if kind:
        segments.append(_span(kind, since, end, open=True))
    segments = [segment for segment in segments if segment.end > segment.start or segment.open]
    marks = [
        Segment(f"mark-{event.type}", event.recorded_at, event.recorded_at, _event_label(event))
        for event in events
        if event.type not in (WorkflowEventType.CREATED, WorkflowEventType.STARTED)
    ]
    lifetime = format_duration(end - instance.created_at)
    summary = (
        f"{instance.status} after {lifetime}"
        if instance.finished_at
        else f"{instance.status} for {lifetime}"
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


def _span(kind: str, start: datetime, end: datetime, *, open: bool = False) -> Segment:
    duration = format_duration(end - start)
    label = f"{kind} {clock_text(start)} - {'now' if open else clock_text(end)} ({duration})"
    return Segment(kind, start, end, label, open=open)


def _step_row(node: StepNode, end: datetime) -> Row:
    step = node.step
    if step.type == StepType.RUN:
        segments = _run_segments(node, end)
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


def _run_segments(node: StepNode, end: datetime) -> list[Segment]:
    step = node.step
    segments: list[Segment] = []
    cursor = step.created_at
    for attempt in node.attempts:
        if attempt.started_at > cursor:
            kind = "backoff" if segments else "pending"
            segments.append(_span(kind, cursor, attempt.started_at))
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
        kind = "backoff" if segments else "pending"
        waiting = _span(kind, cursor, max(end, cursor), open=True)
        if step.next_attempt_at is not None:
            waiting.label += f"; next attempt at {clock_text(step.next_attempt_at)}"
        segments.append(waiting)
    return segments


def _summary(node: StepNode, end: datetime) -> str:
    """The row's outcome in a few words: "3 attempts, 2 failed; succeeded after 1 min"."""
    step = node.step
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
    failed = sum(1 for attempt in node.attempts if attempt.outcome == StepState.FAILED)
    words = f"{len(node.attempts)} attempt{'s' if len(node.attempts) != 1 else ''}"
    if failed:
        words += f", {failed} failed"
    return f"{words}; {step.state} after {took}" if resolved else f"{words}; {step.state}"


def short_time(when: datetime | None) -> str:
    """A local time to the second, with the date when it is not today's."""
    if when is None:
        return ""
    local, today = timezone.localtime(when), timezone.localtime(clock_now()).date()
    return local.strftime("%H:%M:%S" if local.date() == today else "%b %d %H:%M:%S")


def clock_text(when: datetime | None) -> str:
    """A full local timestamp, with milliseconds when there are any."""
    if when is None:
        return ""
    local = timezone.localtime(when)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond // 1000:03d}"
    return text
