"""An instance's steps as a tree, for pages and terminals.

The tree nests steps under the run step that was executing when they were reached; each node
carries the step's events and, for a run step, its attempts read from those events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_workerflow.console.describe import pretty_json, step_error
from django_workerflow.console.time_words import format_duration, short_time
from django_workerflow.models import Step, StepEvent, StepEventType, StepState, StepType
from django_workerflow.values.masking import Masker


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
    # An open step of a finished instance: it will never resolve (the instance was cancelled).
    abandoned: bool = False
    # An open step the current definition no longer reaches (``unreached_step_ids``): it
    # changed under the instance, so the step will not resolve either.
    unreached: bool = False
    #: Masks the sensitive values of the step's value and errors.
    masker: Masker = field(default_factory=Masker)

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
            return self.masker.text(step_error(self.step))
        return ""

    @property
    def duration_text(self) -> str:
        duration = self.duration
        return "" if duration is None else format_duration(duration)

    @property
    def has_value(self) -> bool:
        """True when the step settled with a value: a succeeded step (a run step's or a
        child's result) or a satisfied wait (its payload)."""
        return self.step.state in (StepState.SUCCEEDED, StepState.SATISFIED)

    @property
    def value(self) -> Any:
        """The value the step settled with (see :attr:`has_value`), else None; its
        sensitive values masked."""
        step = self.step
        if step.state == StepState.SUCCEEDED:
            return self.masker.step(step.step_id, step.result)
        if step.state == StepState.SATISFIED:
            return self.masker.step(step.step_id, step.payload, step.event_name)
        return None

    @property
    def value_json(self) -> str:
        """:attr:`value` as indented JSON ("" when the step has none)."""
        return pretty_json(self.value) if self.has_value else ""

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


def step_tree(
    steps: Iterable[Step], events: Iterable[StepEvent] = (), masker: Masker | None = None
) -> list[StepNode]:
    """The steps in depth-first order (children after their parent, each level by creation),
    each with its events and attempts; ``masker`` masks their values and errors."""
    masker = masker or Masker()
    nodes = {step.pk: StepNode(step, masker=masker) for step in steps}
    for event in events:
        node = nodes.get(event.step_id)
        if node is not None:
            node.events.append(event)
    roots: list[StepNode] = []
    for node in nodes.values():
        node.attempts = _attempts(node.events, masker)
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


def _attempts(events: list[StepEvent], masker: Masker) -> list[Attempt]:
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
                attempt.error = masker.text(event.error_message or event.error_name)
                attempt.next_attempt_at = event.next_attempt_at
    return attempts
