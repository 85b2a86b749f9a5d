"""What happened to an instance: its steps, their events, its lifecycle and inbound events."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import models
from django.db.models import DurationField, ExpressionWrapper, F, Q

from django_workerflow.models.fields import EngineDateTimeField, JSONTextField
from django_workerflow.models.instance import WorkflowInstance
from django_workerflow.values.states import StepEventType, StepState, StepType, WorkflowEventType
from django_workerflow.values.storable import MAX_INTEGER


class Step(models.Model):
    """A durable step of an instance: a run, a sleep or a wait."""

    # No index of its own: the unique (instance, step_id) constraint's index leads with it.
    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    step_id = models.CharField(max_length=200)
    type = models.CharField(max_length=8, choices=StepType.choices)
    state = models.CharField(max_length=16, choices=StepState.choices)
    # Its index (below) covers nested steps only: most steps have no parent, and an index
    # entry per step was a page write in every step's commit.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="children",
        db_index=False,
    )
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(null=True, blank=True)
    next_attempt_at = EngineDateTimeField(null=True, blank=True)
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    wake_at = EngineDateTimeField(null=True, blank=True)
    event_name = models.CharField(max_length=200, blank=True, default="")
    timeout_at = EngineDateTimeField(null=True, blank=True)
    payload = JSONTextField(null=True, blank=True)
    resolved_at = EngineDateTimeField(null=True, blank=True)
    created_at = EngineDateTimeField()
    # A child step's instance: the child it started, or the instance it waits for.
    child_instance = models.ForeignKey(
        WorkflowInstance,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="awaiting_steps",
        db_index=False,
    )
    # True on the run steps the engine creates: their first attempt's start and their
    # success are read from this row (created_at; resolved_at and the result), not stored
    # as step events, which were half of a step's commit. step_events_of() derives them.
    # False on the rows written before the column and on a fork's copies (which copy steps
    # without their events).
    derived_attempt_events = models.BooleanField(db_default=False)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "step_id"], name="workerflow_step_id_unique"
            )
        ]
        # Partial: only the rows that have a parent or a child instance (lookups by either
        # compare with a value, which implies NOT NULL, so both databases use them).
        indexes = [
            models.Index(
                fields=["parent"],
                condition=Q(parent__isnull=False),
                name="workerflow_step_parent",
            ),
            models.Index(
                fields=["child_instance"],
                condition=Q(child_instance__isnull=False),
                name="workerflow_step_child",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.step_id!r} ({self.state})"

    # Transitions of a retry (the instance row is locked; no tick holds a lease) ----------

    def reopen_run(self) -> None:
        """failed -> pending, due at once, with a fresh budget of its ``max_attempts``:
        attempt numbers continue (4, 5, 6 after 3). The budget stops at the largest count
        the column stores."""
        self.state = StepState.PENDING
        self.max_attempts = min(self.attempt_count + (self.max_attempts or 1), MAX_INTEGER)
        self.next_attempt_at = None
        self.resolved_at = None
        self.save(update_fields=["state", "max_attempts", "next_attempt_at", "resolved_at"])

    def reopen_wait(self, now: datetime) -> None:
        """timed_out -> waiting, its new deadline as far after ``now`` as the first one was
        after it began waiting."""
        self.state = StepState.WAITING
        if self.timeout_at is not None:
            self.timeout_at = now + (self.timeout_at - self.created_at)
        self.resolved_at = None
        self.save(update_fields=["state", "timeout_at", "resolved_at"])

    def reopen_start(self) -> None:
        """failed -> pending: a child start (or a ``wait_child`` lookup) that was refused is
        made again by the next pass, with the code and the definitions deployed then."""
        self.state = StepState.PENDING
        self.error_name = ""
        self.error_message = ""
        self.resolved_at = None
        self.save(update_fields=["state", "error_name", "error_message", "resolved_at"])

    def reopen_child(self) -> None:
        """failed -> waiting for the same instance: the parent's next pass reads how that
        instance stands (retry the failed child first for a different outcome)."""
        self.state = StepState.WAITING
        self.error_name = ""
        self.error_message = ""
        self.payload = None
        self.resolved_at = None
        self.save(update_fields=["state", "error_name", "error_message", "payload", "resolved_at"])


#: Wake lag, on a step event from :meth:`StepEventQuerySet.woken_sleeps`: how late the
#: tick that recorded a sleep elapsed (the event's ``recorded_at``) came after the sleep's
#: due time (:data:`WAKE_LAG_SINCE`, its step's ``wake_at``). The metrics' histogram and
#: the overview's percentiles both read it.
WAKE_LAG_SINCE = "step__wake_at"
WAKE_LAG = ExpressionWrapper(F("recorded_at") - F(WAKE_LAG_SINCE), output_field=DurationField())


class StepEventQuerySet(models.QuerySet["StepEvent"]):
    def woken_sleeps(self) -> StepEventQuerySet:
        """The ``sleep_elapsed`` events: one per sleep a tick woke (a fork copies steps, not
        their events, so a copied sleep is not counted again). Filtered on ``recorded_at``,
        the partial index ``workerflow_event_woken`` finds them without reading the rest."""
        return self.filter(type=StepEventType.SLEEP_ELAPSED, step__wake_at__isnull=False)


class StepEvent(models.Model):
    """One entry of a step's history: an attempt, a wait or a sleep transition."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="step_events"
    )
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=24, choices=StepEventType.choices)
    attempt_number = models.PositiveIntegerField(null=True, blank=True)
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    next_attempt_at = EngineDateTimeField(null=True, blank=True)
    wake_at = EngineDateTimeField(null=True, blank=True)
    event_name = models.CharField(max_length=200, blank=True, default="")
    timeout_at = EngineDateTimeField(null=True, blank=True)
    payload = JSONTextField(null=True, blank=True)
    recorded_at = EngineDateTimeField()
    # The failed attempt's formatted traceback (the user's frames, bounded); the engine's
    # statements leave the column out, so the database fills in the blank.
    traceback = models.TextField(blank=True, db_default="")

    objects = StepEventQuerySet.as_manager()

    class Meta:
        ordering = ["recorded_at", "id"]
        # Partial: the sleeps woken, by time (the overview's wake lag over the last hour);
        # one index entry per sleep, none for the other events.
        indexes = [
            models.Index(
                fields=["recorded_at"],
                condition=Q(type=StepEventType.SLEEP_ELAPSED),
                name="workerflow_event_woken",
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} of step #{self.step_id}"


def step_events_of(
    instance: WorkflowInstance | int, steps: Sequence[Step] | None = None
) -> list[StepEvent]:
    """Every step event of ``instance`` (of ``steps`` only, if given: its steps), stored and
    derived, oldest first, each with its ``step`` set: the history the console, the export
    and tests read. Read the step events through it, not through ``StepEvent.objects``,
    which holds only the stored ones."""
    instance_pk = instance if isinstance(instance, int) else instance.pk
    stored_events = StepEvent.objects.filter(instance_id=instance_pk)
    if steps is None:
        steps = list(Step.objects.filter(instance_id=instance_pk).order_by("created_at", "id"))
    else:
        stored_events = stored_events.filter(step__in=[step.pk for step in steps])
    by_pk = {step.pk: step for step in steps}
    stored = list(stored_events.order_by("recorded_at", "id"))
    for event in stored:
        event.step = by_pk[event.step_id]
    return merged_step_events(steps, stored)


def merged_step_events(steps: Iterable[Step], stored: Sequence[StepEvent]) -> list[StepEvent]:
    """``stored`` (ordered by recorded_at, id; their order is kept) with the events the
    ``steps`` keep on their rows put in their place: by time, a step's derived start before
    its stored events and its derived success after them; at one instant, after the stored
    events of the steps created before it. An event also stored is not derived again (an
    earlier release, during a rolling deploy, may finish a step this one started)."""
    derived = [event for step in steps for event in _derived_step_events(step)]
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
        # The first stored event after this instant, or at it and of a later step.
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


def _derived_step_events(step: Step) -> list[StepEvent]:
    """The events ``step`` keeps on its row (none unless ``derived_attempt_events``): its
    first attempt started at ``created_at``, and once it succeeded, the success of its last
    attempt at ``resolved_at`` with its result. Not saved; no primary key."""
    # "is not True": an unsaved row holds the column's DatabaseDefault, which is truthy.
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


class WorkflowEvent(models.Model):
    """One entry of an instance's lifecycle history."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="workflow_events"
    )
    type = models.CharField(max_length=16, choices=WorkflowEventType.choices)
    reason = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no reason given
    recorded_at = EngineDateTimeField()

    class Meta:
        ordering = ["recorded_at", "id"]

    def __str__(self) -> str:
        return self.type


class InboundEvent(models.Model):
    """An event sent to an instance: claimed by a wait step, or queued until one claims it."""

    instance = models.ForeignKey(
        WorkflowInstance, on_delete=models.CASCADE, related_name="inbound_events"
    )
    event_name = models.CharField(max_length=200)
    payload = JSONTextField(null=True, blank=True)
    created_at = EngineDateTimeField()
    claimed_by = models.OneToOneField(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="claimed_event"
    )
    claimed_at = EngineDateTimeField(null=True, blank=True)
    # The W3C trace context of the span that sent the event (django_workerflow.tracing):
    # the tick that receives it links to that span. NULL without OpenTelemetry or a span.
    trace_context = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no trace
    # The sender's idempotency key: a second send_event() with it to the instance returns
    # this event and stores nothing. NULL: sent without one (never deduplicated).
    idempotency_key = models.CharField(  # noqa: DJ001 - NULL: no key, unconstrained
        max_length=200, null=True, blank=True
    )

    #: Not stored: set by send_event() on an event no step claimed, the event names the
    #: instance's waiting steps wait for (so a misspelt name shows at once).
    waiting_for: list[str] | None = None

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["instance", "event_name", "created_at"],
                name="workerflow_inbound_queued",
                condition=Q(claimed_at__isnull=True),
            )
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["instance", "idempotency_key"],
                name="workerflow_event_idempotency",
                condition=Q(idempotency_key__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return self.event_name
