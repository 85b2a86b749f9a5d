"""What happened to an instance: its steps, their events, its lifecycle and inbound events."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import models
from django.db.models import Case, DurationField, ExpressionWrapper, F, Q, Value, When

from django_workerflow.exceptions import ReadOnlyHistoryError
from django_workerflow.models.fields import EngineDateTimeField, JSONTextField
from django_workerflow.models.instance import WorkflowInstance
from django_workerflow.values.states import StepEventType, StepState, StepType, WorkflowEventType
from django_workerflow.values.storable import MAX_INTEGER

_Event = TypeVar("_Event", bound=models.Model)


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
    # as step events, which were half of a step's commit. the StepEvent view derives them.
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


#: The view the public :class:`StepEvent` reads (migration 0018 creates it).
STEP_EVENT_VIEW = "workerflow_stepevent_history"


def history_order(path: str = "") -> tuple[Any, ...]:
    """The history's order, of step events reached through the relation ``path`` (for
    example ``"step_events__"`` from an instance): by time; at one instant, step by step (in
    primary key order), each step's derived start, stored events (in the order they were
    stored) and derived success. The view gives derived rows negative primary keys
    (:func:`derived_event_pk`)."""
    phase = Case(
        When(**{f"{path}id__gte": 0}, then=Value(1)),
        When(**{f"{path}type": StepEventType.ATTEMPT_STARTED}, then=Value(0)),
        default=Value(2),
    )
    return (f"{path}recorded_at", f"{path}step_id", phase.asc(), f"{path}id")


#: The order of :class:`StepEvent` (see :func:`history_order`).
STEP_EVENT_ORDER = history_order()


def derived_event_pk(step_pk: int, event_type: str) -> int:
    """The primary key the view gives an event it derives from the row of step ``step_pk``:
    negative, so that it never meets a stored event's."""
    return -2 * step_pk - (1 if event_type == StepEventType.ATTEMPT_STARTED else 0)


class StepEventQuerySet(models.QuerySet[_Event]):
    def woken_sleeps(self) -> StepEventQuerySet[_Event]:
        """The ``sleep_elapsed`` events: one per sleep a tick woke (a fork copies steps, not
        their events, so a copied sleep is not counted again). Filtered on ``recorded_at``,
        the partial index ``workerflow_event_woken`` finds them without reading the rest."""
        return self.filter(type=StepEventType.SLEEP_ELAPSED, step__wake_at__isnull=False)


class HistoryQuerySet(StepEventQuerySet["StepEvent"]):
    """The whole step history, read only: a write says what to use instead."""

    def update(self, **kwargs: Any) -> int:
        raise _read_only("updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise _read_only("deleted")

    def bulk_create(self, *args: Any, **kwargs: Any) -> list[StepEvent]:
        raise _read_only("created")

    def bulk_update(self, *args: Any, **kwargs: Any) -> int:
        raise _read_only("updated")


def _read_only(verb: str) -> ReadOnlyHistoryError:
    return ReadOnlyHistoryError(
        f"Step events cannot be {verb} through StepEvent: it reads the database view "
        f"{STEP_EVENT_VIEW!r}, the whole step history, stored and derived from the steps' "
        "rows. The engine alone records step events; to remove an instance's history, purge "
        "or delete the instance (its steps and events go with it)."
    )


class StoredStepEvent(models.Model):
    """A step event as the engine stores it: every event except a run step's first start
    and its success, which its row keeps (``Step.derived_attempt_events``). Private: read
    the history through :class:`StepEvent`."""

    instance = models.ForeignKey(WorkflowInstance, on_delete=models.CASCADE, related_name="+")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="+")
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

    objects = StepEventQuerySet["StoredStepEvent"].as_manager()

    class Meta:
        db_table = "workerflow_stepevent"
        verbose_name = "step event"
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


class StepEvent(models.Model):
    """One entry of a step's history: an attempt, a wait or a sleep transition.

    Every event of the history, read only: the rows of the database view
    ``workerflow_stepevent_history``, which unions the stored events with the two a run step
    keeps on its row (its first attempt's start at ``created_at``; once it succeeded, its
    last attempt's success at ``resolved_at`` with its result). A derived event has a
    negative primary key (:func:`derived_event_pk`) and a blank traceback. Ordered by
    :data:`STEP_EVENT_ORDER`. Saving or deleting raises :class:`ReadOnlyHistoryError`.
    """

    instance = models.ForeignKey(
        WorkflowInstance,
        on_delete=models.DO_NOTHING,
        related_name="step_events",
        db_constraint=False,
    )
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, related_name="events", db_constraint=False
    )
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
    traceback = models.TextField(blank=True, default="")

    objects = HistoryQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = STEP_EVENT_VIEW
        ordering = STEP_EVENT_ORDER

    def __str__(self) -> str:
        return f"{self.type} of step #{self.step_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise _read_only("saved")

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise _read_only("deleted")


def step_events_of(
    instance: WorkflowInstance | int, steps: Sequence[Step] | None = None
) -> list[StepEvent]:
    """Every step event of ``instance`` (of ``steps`` only, if given: its steps), oldest
    first, each with its ``step`` set: ``instance.step_events.all()`` (one query) with the
    steps given attached. An alias kept for the readers written before :class:`StepEvent`
    held the whole history."""
    instance_pk = instance if isinstance(instance, int) else instance.pk
    events = StepEvent.objects.filter(instance_id=instance_pk)
    if steps is None:
        return list(events.select_related("step"))
    by_pk = {step.pk: step for step in steps}
    found = list(events.filter(step__in=list(by_pk)))
    for event in found:
        event.step = by_pk[event.step_id]
    return found


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
