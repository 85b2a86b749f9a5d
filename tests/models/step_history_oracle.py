"""The step history as ``step_events_of()`` merged it before ``StepEvent`` read a view: the
oracle the view is compared with, and random histories to compare them on.

The merge reads the stored events (``StoredStepEvent``, by recorded_at then id) and places
the two events a run step keeps on its row among them, in Python.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django_workerflow.models import (
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    StoredStepEvent,
    WorkflowInstance,
)
from tests.support.factories import WorkflowInstanceFactory

#: The fields of a step event a reader sees.
EVENT_FIELDS = (
    "instance_id",
    "step_id",
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
    "traceback",
)


def old_step_events_of(instance: WorkflowInstance | int) -> list[StepEvent]:
    """Every step event of ``instance``, merged as ``step_events_of()`` did (two queries)."""
    instance_pk = instance if isinstance(instance, int) else instance.pk
    steps = list(Step.objects.filter(instance_id=instance_pk).order_by("created_at", "id"))
    by_pk = {step.pk: step for step in steps}
    stored = [
        StepEvent(step=by_pk[row.step_id], **{f: getattr(row, f) for f in ("id", *EVENT_FIELDS)})
        for row in StoredStepEvent.objects.filter(instance_id=instance_pk).order_by(
            "recorded_at", "id"
        )
    ]
    return merged_step_events(steps, stored)


def merged_step_events(steps: Iterable[Step], stored: Sequence[StepEvent]) -> list[StepEvent]:
    """``stored`` (ordered by recorded_at, id; their order is kept) with the events the
    ``steps`` keep on their rows put in their place: by time, a step's derived start before
    its stored events and its derived success after them; at one instant, after the stored
    events of the steps created before it. An event also stored is not derived again."""
    derived = [event for step in steps for event in derived_step_events(step)]
    if not derived:
        return list(stored)
    times = [event.recorded_at for event in stored]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    kept = set()
    for index, event in enumerate(stored):
        first.setdefault(event.step_id, index)
        last[event.step_id] = index
        kept.add((event.step_id, event.type, event.attempt_number))
    placed: list[tuple[int, datetime, int, int, StepEvent]] = []
    for event in derived:
        if (event.step_id, event.type, event.attempt_number) in kept:
            continue
        at = bisect_left(times, event.recorded_at)
        end = bisect_right(times, event.recorded_at)
        while at < end and stored[at].step_id <= event.step_id:
            at += 1
        if event.type == StepEventType.ATTEMPT_STARTED:
            rank, index = 0, min(at, first.get(event.step_id, at))
        else:
            rank, index = 1, max(at, last.get(event.step_id, -1) + 1)
        placed.append((index, event.recorded_at, event.step_id, rank, event))
    placed.sort(key=lambda entry: entry[:4])
    merged: list[StepEvent] = []
    position = 0
    for index, *_, event in placed:
        merged.extend(stored[position:index])
        position = max(position, index)
        merged.append(event)
    merged.extend(stored[position:])
    return merged


def derived_step_events(step: Step) -> list[StepEvent]:
    """The events ``step`` keeps on its row (none unless ``derived_attempt_events``)."""
    if step.derived_attempt_events is not True:
        return []
    events = [
        StepEvent(
            instance_id=step.instance_id,
            step=step,
            type=StepEventType.ATTEMPT_STARTED,
            attempt_number=1,
            recorded_at=step.created_at,
            traceback="",
        )
    ]
    if step.state == StepState.SUCCEEDED and step.resolved_at is not None:
        events.append(
            StepEvent(
                instance_id=step.instance_id,
                step=step,
                type=StepEventType.ATTEMPT_SUCCEEDED,
                attempt_number=step.attempt_count,
                result=step.result,
                recorded_at=step.resolved_at,
                traceback="",
            )
        )
    return events


def fields_of(events: Iterable[StepEvent]) -> list[tuple[Any, ...]]:
    """What a reader sees of each event, in order (not the primary key: the merge's derived
    events had none)."""
    return [tuple(getattr(event, name) for name in EVENT_FIELDS) for event in events]


def random_history(rng: random.Random, start: datetime) -> WorkflowInstance:
    """An instance with a random history, written as the engine writes one: run steps that
    keep their start and success on their row (or, from an older release, store them),
    failed and retried attempts, sleeps and waits, several steps sharing one tick's instant.
    Within an instant events are stored in step order, as one replay pass stores them (where
    parallel branches store them out of step order, the view orders them by step: see
    ``StepEvent``)."""
    instance = WorkflowInstanceFactory()
    at = start
    for number in range(rng.randint(1, 8)):
        if rng.random() < 0.6:
            at += timedelta(milliseconds=rng.choice([0, 0, 1, 250]))
        kind = rng.choice([StepType.RUN, StepType.RUN, StepType.RUN, StepType.SLEEP])
        if kind == StepType.SLEEP:
            _sleep(instance, f"nap-{number}", at, rng)
            continue
        at = _run(instance, f"run-{number}", at, rng)
    return instance


def _run(instance: WorkflowInstance, step_id: str, at: datetime, rng: random.Random) -> datetime:
    derived = rng.random() < 0.85
    failures = rng.choice([0, 0, 1, 2])
    succeeds = rng.random() < 0.8
    step = Step.objects.create(
        instance=instance,
        step_id=step_id,
        type=StepType.RUN,
        state=StepState.RUNNING,
        attempt_count=1,
        max_attempts=failures + 1,
        created_at=at,
        derived_attempt_events=derived,
    )
    if not derived:
        _store(step, StepEventType.ATTEMPT_STARTED, at, attempt_number=1)
    for attempt in range(1, failures + 1):
        _store(
            step,
            StepEventType.ATTEMPT_FAILED,
            at,
            attempt_number=attempt,
            error_name="ValueError",
            error_message=f"down {attempt}",
            traceback=f"Traceback ... down {attempt}",
        )
        at += timedelta(milliseconds=rng.choice([0, 5]))
        _store(step, StepEventType.ATTEMPT_STARTED, at, attempt_number=attempt + 1)
    step.attempt_count = failures + 1
    if succeeds:
        at += timedelta(milliseconds=rng.choice([0, 0, 3]))
        step.state, step.resolved_at, step.result = StepState.SUCCEEDED, at, {"n": failures}
        # An older release finishing the step stores the success (the view derives none).
        if not derived or rng.random() < 0.1:
            _store(
                step,
                StepEventType.ATTEMPT_SUCCEEDED,
                at,
                attempt_number=step.attempt_count,
                result={"n": failures},
            )
    step.save()
    return at


def _sleep(instance: WorkflowInstance, step_id: str, at: datetime, rng: random.Random) -> None:
    wake = at + timedelta(milliseconds=rng.choice([0, 10]))
    step = Step.objects.create(
        instance=instance,
        step_id=step_id,
        type=StepType.SLEEP,
        state=StepState.ELAPSED,
        wake_at=wake,
        resolved_at=wake,
        created_at=at,
    )
    _store(step, StepEventType.SLEEP_WAITING, at, wake_at=wake)
    _store(step, StepEventType.SLEEP_ELAPSED, wake)


def _store(step: Step, event_type: str, at: datetime, **fields: Any) -> None:
    StoredStepEvent.objects.create(
        instance_id=step.instance_id, step=step, type=event_type, recorded_at=at, **fields
    )
