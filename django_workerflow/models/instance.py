"""An instance of a workflow definition, and its transitions.

A transition calls nothing: it assigns its fields, saves exactly those and records its
workflow event. One that changes the status moves through :meth:`WorkflowInstance._move`,
which checks the move against the state machine (:mod:`django_workerflow.values.transitions`),
writes it only if the row still has the status it was read with, and announces that status
as the previous one. The caller holds the row lock and does what follows in the open, by
name: finishing an instance is :func:`django_workerflow.runtime.finishing.instance_finished`,
called right after ``set_completed``, ``set_failed`` or ``set_cancelled``.

The fields admission and the bells write on rows they do not load (``admitted_at``,
``alarm_at``, ``bell_at``) are written by the queryset's named methods
(:meth:`WorkflowInstanceQuerySet.admit` and its neighbours), never by a bare ``update()``.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models, transaction
from django.db.models import F, Q, Value

from django_workerflow import registry
from django_workerflow.models.attributes import AttributesField
from django_workerflow.models.fields import EngineDateTimeField, JSONTextField
from django_workerflow.models.flow import FLOW_INDEXES
from django_workerflow.models.pauses import DefinitionPause
from django_workerflow.signals import workflow_status_changed
from django_workerflow.store.instance_writes import move_with_event, record_event, save_fields
from django_workerflow.values import progress, transitions
from django_workerflow.values.progress import Progress
from django_workerflow.values.states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    WakeCause,
    WorkflowEventType,
    WorkflowStatus,
)

if TYPE_CHECKING:
    from django_workerflow.models.history import InboundEvent


class WorkflowInstanceQuerySet(models.QuerySet["WorkflowInstance"]):
    def active(self) -> WorkflowInstanceQuerySet:
        """Instances the engine may still tick: pending or running."""
        return self.filter(status__in=ACTIVE_STATUSES)

    def unheld(self) -> WorkflowInstanceQuerySet:
        """Instances whose definition is not paused (a paused definition's are held: no
        bell rings for them until it is resumed)."""
        paused = DefinitionPause.objects.values("definition_name")
        return self.exclude(definition_name__in=paused)

    def held(self, definition_name: str) -> WorkflowInstanceQuerySet:
        """The active instances of ``definition_name``: what a pause of it holds."""
        return self.active().filter(definition_name=definition_name)

    def due(self, now: datetime) -> WorkflowInstanceQuerySet:
        """Active instances whose alarm has come and whose definition is not paused,
        earliest first."""
        return self.active().unheld().filter(alarm_at__lte=now).order_by("alarm_at", "id")

    def finished(self) -> WorkflowInstanceQuerySet:
        return self.filter(status__in=TERMINAL_STATUSES)

    def create_pending(
        self,
        *,
        key: str,
        definition_name: str,
        definition_version: str,
        input: Any,
        now: datetime,
        priority: int = 0,
        concurrency_key: str = "",
        queued: bool = False,
        parent_pk: int | None = None,
        detached: bool = False,
        trace_context: str | None = None,
        timeout_seconds: float | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> WorkflowInstance:
        """Create a pending instance and record its creation: admitted and due at once, or
        ``queued`` (no alarm) until :mod:`~django_workerflow.runtime.flow.admission` admits it.
        ``timeout_seconds``: its timeout's budget, whose clock starts at its first tick;
        ``attributes``: its searchable attributes, checked (None: none)."""
        instance = self.create(
            attributes=attributes or None,
            timeout_seconds=timeout_seconds,
            parent_id=parent_pk,
            trace_context=trace_context,
            detached=detached,
            key=key,
            definition_name=definition_name,
            definition_version=definition_version,
            input=input,
            status=transitions.CREATED,
            alarm_at=None if queued else now,
            admitted_at=None if queued else now,
            priority=priority,
            concurrency_key=concurrency_key,
            created_at=now,
            updated_at=now,
        )
        instance._record(WorkflowEventType.CREATED, now, previous=None)  # noqa: SLF001 - the model's manager records the model's event
        return instance

    def create_fork(
        self,
        source: WorkflowInstance,
        *,
        key: str,
        version: str,
        input: Any,
        now: datetime,
        reason: str | None,
    ) -> WorkflowInstance:
        """Create a pending fork of ``source``, due at once, with the source's last
        progress (not a step: no fork point changes it) and the budget of its timeout (the
        whole of it, from the fork's first tick); its history starts with a ``forked`` event
        naming the source."""
        fork = self.create(
            # The fork is of the same business object: it keeps the source's attributes.
            attributes=source.attributes,
            timeout_seconds=source.timeout_seconds,
            key=key,
            definition_name=source.definition_name,
            definition_version=version,
            input=input,
            status=transitions.CREATED,
            alarm_at=now,
            created_at=now,
            updated_at=now,
            forked_from=source,
            progress_current=source.progress_current,
            progress_total=source.progress_total,
            progress_message=source.progress_message,
            progress_at=source.progress_at,
        )
        text = f"forked from '{source.key}'" + (f": {reason}" if reason else "")
        fork._record(WorkflowEventType.FORKED, now, previous=None, reason=text)  # noqa: SLF001 - the model's manager records the model's event
        return fork

    # Admission and the bells: fields of rows the caller has not loaded, each written here,
    # in the transaction that made the change (the caller holds or skipped the row locks).

    def admit(self, pks: Collection[int], now: datetime) -> None:
        """Admit the queued instances ``pks``: each holds a slot from ``now`` and is due."""
        self.filter(pk__in=pks).update(admitted_at=now, alarm_at=now, updated_at=now)

    def schedule_queue_head(self, pk: int, slot: datetime) -> None:
        """Set the alarm of the head of a rate-limited queue to its rate-limit ``slot``."""
        self.filter(pk=pk).update(alarm_at=slot)

    def wake_queued(self, pk: int, now: datetime) -> None:
        """Make the queued instance ``pk`` due at ``now``: its tick asks for admission."""
        self.filter(pk=pk).update(alarm_at=now, updated_at=now)

    def unschedule_queued(self, pk: int, now: datetime) -> None:
        """Clear the alarm of ``pk`` if it is still queued and the alarm has come: it then
        waits, with no alarm, for a freed slot to admit it."""
        self.filter(pk=pk, admitted_at__isnull=True, alarm_at__lte=now).update(alarm_at=None)

    def deferred_unregistered(self, now: datetime, until: datetime) -> Any:
        """(id, definition name, version) of the active instances deferred because their
        definition was not registered, whose re-check comes after ``now``, by ``until``."""
        return self.filter(
            status__in=ACTIVE_STATUSES,
            alarm_at__gt=now,
            alarm_at__lte=until,
            alarm_cause=WakeCause.UNREGISTERED,
        ).values_list("pk", "definition_name", "definition_version")

    def recheck_unregistered(self, pk: int, now: datetime) -> bool:
        """Make the deferred instance ``pk`` due at ``now`` (if it still is deferred)."""
        return bool(
            self.filter(pk=pk, alarm_cause=WakeCause.UNREGISTERED, alarm_at__gt=now).update(
                alarm_at=now, updated_at=now
            )
        )

    def note_bell(self, pk: int, when: datetime) -> None:
        """Record that a bell for ``when`` is queued for the instance ``pk``."""
        self.filter(pk=pk).update(bell_at=when)

    def delay_deadlines(self, by: timedelta) -> int:
        """Move the deadline of these instances ``by`` later (a definition pause's length:
        time held does not count against their timeout); how many moved. The caller holds
        their row locks (:func:`django_workerflow.store.locks.delay_deadlines`)."""
        return self.filter(deadline_at__isnull=False).update(
            deadline_at=F("deadline_at") + Value(by, output_field=models.DurationField())
        )


class WorkflowInstance(models.Model):
    """One run of a definition, identified by its ``key``."""

    key = models.CharField(max_length=255, unique=True)
    definition_name = models.CharField(max_length=200)
    definition_version = models.CharField(max_length=100)
    input = JSONTextField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.PENDING
    )
    result = JSONTextField(null=True, blank=True)
    error_name = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    alarm_at = EngineDateTimeField(null=True, blank=True)
    # What the alarm wakes the instance for (a WakeCause; empty: nothing the wake lag
    # metric counts). Set with the alarm by release_lease and request_wake; any other
    # transition that sets the alarm clears it (_update). A default in the database too, for
    # the rows written by hand (a data migration's INSERT that names its columns).
    alarm_cause = models.CharField(max_length=16, blank=True, default="", db_default="")
    # Ownership: the worker holding the lease is the only one executing the instance.
    lease_token = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL: no lease
    lease_expires_at = EngineDateTimeField(null=True, blank=True)
    # Recorded steps that the last whole replay did not reach: the definition changed.
    unreached_step_ids = JSONTextField(null=True, blank=True)
    # When the last bell queued for the alarm rings (see workers/bells.py); None: none queued.
    bell_at = EngineDateTimeField(null=True, blank=True)
    # Set when something changed under a running tick: it takes one more pass.
    wake_requested = models.BooleanField(default=False)
    created_at = EngineDateTimeField()
    updated_at = EngineDateTimeField()
    finished_at = EngineDateTimeField(null=True, blank=True)
    # Flow control (admission.py): lower priority first; admitted_at None: queued.
    priority = models.IntegerField(default=0)
    concurrency_key = models.CharField(max_length=255, blank=True, default="")
    admitted_at = EngineDateTimeField(null=True, blank=True)
    # The formatted traceback of the failure that failed the instance (the user's frames).
    error_traceback = models.TextField(blank=True, default="", db_default="")
    # The step whose failure failed the instance ("" when execute() raised outside a step):
    # what retry() reopens.
    error_step_id = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The other steps whose failure escaped execute() with it (the other failed branches of
    # an all()): retry() reopens them too. None: none.
    other_error_step_ids = JSONTextField(null=True, blank=True)
    # The instance this one was forked from (see fork()).
    # Its index (below) covers forks only, as the parent's covers children: most instances
    # are neither, and every start would otherwise add an entry to both (issue 24).
    forked_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="forks",
        db_index=False,
    )
    # The instance whose child step started this one (None: a top-level instance).
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,
    )
    # A detached child outlives its parent: no cancel cascades to it.
    detached = models.BooleanField(default=False, db_default=False)
    # The last progress the workflow reported (set_progress(); values/progress.py): kept
    # on the row, not in a table of its own, because there is one value per instance, read
    # with the instance (the change list, wait_progress) and written in the tick's own
    # transactions on a row they already lock. progress_at None: never reported.
    progress_current = models.FloatField(null=True, blank=True)
    progress_total = models.FloatField(null=True, blank=True)
    progress_message = models.TextField(blank=True, default="", db_default="")
    progress_at = EngineDateTimeField(null=True, blank=True)
    # The W3C trace context of the span that started the instance, as JSON headers
    # (django_workerflow.tracing): its ticks' spans are children of that span. NULL without
    # OpenTelemetry or without a span (the common path stores nothing).
    trace_context = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no trace
    # The instance timeout (docs/concepts.md, "Instance timeouts"): its budget in seconds of
    # running (a start's timeout=, else its definition's; None: no limit), the deadline while
    # the clock runs (the alarm of a suspended instance is never later), and what was left of
    # the budget while it is paused (the clock stops; resume() starts it again). All three
    # NULL on an instance without a timeout, whose tick reads them with the row and writes
    # none of them.
    timeout_seconds = models.FloatField(null=True, blank=True)
    deadline_at = EngineDateTimeField(null=True, blank=True)
    timeout_left_seconds = models.FloatField(null=True, blank=True)
    # The instance's searchable attributes (set_attributes(), start(attributes=...);
    # values/attributes.py): a JSON object of short values, NULL without any. On
    # PostgreSQL a GIN index serves filter(attributes__<name>=value) (models/attributes.py).
    attributes = AttributesField(null=True, blank=True, default=None)

    objects = WorkflowInstanceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Serves due() on both databases: SQLite without statistics otherwise prefers
            # the (status, finished_at) index, 40x slower at 100,000 sleeping instances.
            models.Index(
                fields=["status", "alarm_at"],
                name="workerflow_alarm_due",
                condition=Q(alarm_at__isnull=False),
            ),
            models.Index(fields=["definition_name", "status"], name="workerflow_name_status"),
            # The unfinished instances' counts and oldest creation per status, definition and
            # version (the Prometheus gauges, metrics.py): an index-only scan of a small set
            # however long the history.
            models.Index(
                fields=["status", "definition_name", "definition_version", "created_at"],
                name="workerflow_unfinished",
                condition=Q(status__in=["pending", "running", "paused"]),
            ),
            # Finished instances only (every query of it bounds finished_at): a start writes
            # no entry to it (issue 24).
            models.Index(
                fields=["status", "finished_at"],
                name="workerflow_status_finished",
                condition=Q(finished_at__isnull=False),
            ),
            *FLOW_INDEXES,
            # The admin's list order, unfiltered and filtered by status, and its version
            # filter's choices (console/list_filters.py) (issue 15).
            models.Index(fields=["definition_version"], name="workerflow_version"),
            models.Index(fields=["-created_at", "-id"], name="workerflow_created"),
            models.Index(fields=["status", "-created_at", "-id"], name="workerflow_status_created"),
            models.Index(
                fields=["forked_from"],
                condition=Q(forked_from__isnull=False),
                name="workerflow_forked_from",
            ),
            models.Index(
                fields=["parent"], condition=Q(parent__isnull=False), name="workerflow_parent"
            ),
        ]
        permissions = [
            ("pause_workflowinstance", "Can pause workflow instances"),
            ("resume_workflowinstance", "Can resume workflow instances"),
            ("cancel_workflowinstance", "Can cancel workflow instances"),
            ("send_event_workflowinstance", "Can send events to workflow instances"),
            ("retry_workflowinstance", "Can retry failed workflow instances"),
            ("fork_workflowinstance", "Can fork workflow instances"),
            ("view_sensitive_payloads", "Can view the sensitive payload values of instances"),
        ]

    def __str__(self) -> str:
        return f"{self.definition_name}:{self.key}"

    @property
    def progress(self) -> Progress | None:
        """The last progress the workflow reported (None: none yet), as of this object's
        last read: refresh it (``refresh_from_db()``) or wait for a newer one with
        :func:`django_workerflow.wait_progress`."""
        return progress.from_row(
            self.progress_current, self.progress_total, self.progress_message, self.progress_at
        )

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    # Conveniences: the runtime's verbs, on the instance. The runtime imports this module,
    # so each of these imports it when called (the contract lists them in pyproject.toml).

    def pause(self) -> bool:
        """Pause a running instance at its next step boundary; False if nothing changed.
        See :func:`django_workerflow.pause`."""
        from django_workerflow.runtime import control  # upward, at call time: see above

        return control.pause(self)

    def resume(self) -> None:
        """Resume a paused instance; WorkflowStateError if it is not paused. See
        :func:`django_workerflow.resume`."""
        from django_workerflow.runtime import control  # upward, at call time: see above

        control.resume(self)

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel a non-terminal instance; False if it had already finished. See
        :func:`django_workerflow.cancel`."""
        from django_workerflow.runtime import control  # upward, at call time: see above

        return control.cancel(self, reason=reason)

    def send_event(
        self,
        event_name: str,
        payload: Any = None,
        *,
        missing_ok: bool = False,
        idempotency_key: str | None = None,
    ) -> InboundEvent | None:
        """Send an event to this instance. See :func:`django_workerflow.send_event`."""
        from django_workerflow.runtime import events  # upward, at call time: see above

        return events.send_event(
            self, event_name, payload, missing_ok=missing_ok, idempotency_key=idempotency_key
        )

    def retry(self, reason: str | None = None, *, with_children: bool = False) -> None:
        """Run a failed instance again from the step that failed it; ``with_children`` also
        retries the failed children it waits for. See :func:`django_workerflow.retry`."""
        from django_workerflow.runtime import reruns  # upward, at call time: see above

        reruns.retry(self, reason=reason, with_children=with_children)

    def fork(
        self,
        *,
        from_step: str | None = None,
        key: str | None = None,
        version: str | None = None,
        input: Any = ...,
        reason: str | None = None,
    ) -> WorkflowInstance:
        """A new instance that keeps this one's settled steps before ``from_step``. See
        :func:`django_workerflow.fork`."""
        from django_workerflow.runtime import reruns  # upward, at call time: see above

        return reruns.fork(
            self, from_step=from_step, key=key, version=version, input=input, reason=reason
        )

    def wait_result(self, timeout: float | timedelta | None = None) -> Any:
        """Block until the instance finishes and return its result. See
        :func:`django_workerflow.wait_result`."""
        from django_workerflow.runtime.composition import results  # upward: see above

        return results.wait_result(self, timeout)

    async def await_result(self, timeout: float | timedelta | None = None) -> Any:
        """Await the instance's end without holding a thread for the whole wait. See
        :func:`django_workerflow.await_result`."""
        from django_workerflow.runtime.composition import results  # upward: see above

        return await results.await_result(self, timeout)

    # Transitions: the caller holds the row lock (select_for_update) -------------------

    def claim_lease(self, token: str, expires: datetime) -> None:
        """Take the lease of a running instance; its alarm becomes the lease expiry, so the
        instance comes due again by itself if the worker dies."""
        self._update(
            lease_token=token, lease_expires_at=expires, alarm_at=expires, wake_requested=False
        )

    def start_running(self, token: str, expires: datetime, now: datetime) -> None:
        """pending -> running, under the lease of the tick that starts it; the timeout's
        clock starts with the whole budget."""
        self._move(
            WorkflowStatus.RUNNING,
            WorkflowEventType.STARTED,
            now,
            lease_token=token,
            lease_expires_at=expires,
            alarm_at=expires,
            wake_requested=False,
            updated_at=now,
            **self._clock_from(now, self.timeout_seconds),
        )

    def set_paused(self, now: datetime) -> None:
        """running -> paused: no step starts until it is resumed; no alarm meanwhile. The
        timeout's clock stops: what is left of the budget is kept, the deadline dropped."""
        clock: dict[str, Any] = {}
        if self.deadline_at is not None:
            left = max((self.deadline_at - now).total_seconds(), 0.0)
            clock = {"deadline_at": None, "timeout_left_seconds": left}
        self._move(
            WorkflowStatus.PAUSED,
            WorkflowEventType.PAUSED,
            now,
            alarm_at=None,
            updated_at=now,
            **clock,
        )

    def set_resumed(self, now: datetime) -> None:
        """paused -> running, due at once; the timeout's clock goes on with what was left."""
        self._move(
            WorkflowStatus.RUNNING,
            WorkflowEventType.RESUMED,
            now,
            alarm_at=now,
            updated_at=now,
            **self._clock_from(now, self.timeout_left_seconds),
        )

    def set_cancelled(self, now: datetime, reason: str | None) -> None:
        """Any unfinished status -> cancelled. The lease stays: a tick still executing
        records its step in flight, then finds the status and ends."""
        self._move(
            WorkflowStatus.CANCELLED,
            WorkflowEventType.CANCELLED,
            now,
            reason=reason,
            alarm_at=None,
            updated_at=now,
            finished_at=now,
        )

    def set_completed(self, result: Any, now: datetime) -> None:
        """running -> completed with ``result``, releasing the tick's lease."""
        self._move(
            WorkflowStatus.COMPLETED,
            WorkflowEventType.COMPLETED,
            now,
            result=result,
            **_tick_finished(now),
        )

    def set_failed(
        self,
        error_name: str,
        error_message: str,
        now: datetime,
        *,
        traceback: str = "",
        step_id: str = "",
        other_step_ids: list[str] | None = None,
    ) -> None:
        """running -> failed with the error (its traceback, and the steps whose failure it
        is, if any: ``step_id`` first), releasing the tick's lease."""
        self._move(
            WorkflowStatus.FAILED,
            WorkflowEventType.FAILED,
            now,
            error_name=error_name,
            error_message=error_message,
            error_traceback=traceback,
            error_step_id=step_id,
            other_error_step_ids=other_step_ids or None,
            **_tick_finished(now),
        )

    def set_retried(self, now: datetime, reason: str | None) -> None:
        """failed -> running, due at once; the failure's fields are cleared (its attempts
        keep their tracebacks), and the timeout's clock starts again with the whole budget."""
        self._move(
            WorkflowStatus.RUNNING,
            WorkflowEventType.RETRIED,
            now,
            reason=reason,
            error_name="",
            error_message="",
            error_traceback="",
            error_step_id="",
            other_error_step_ids=None,
            alarm_at=now,
            updated_at=now,
            finished_at=None,
            **self._clock_from(now, self.timeout_seconds),
        )

    def set_revived(self, status: str, now: datetime, reason: str) -> None:
        """cancelled -> ``status`` (running, pending or paused: what it was when its parent's
        finish cancelled it), due at once unless paused. A retry of that parent takes the
        cancellation back: the instance goes on from its recorded steps, with the whole
        budget of its timeout (running: from now; paused: kept for its resume; pending: from
        its first tick)."""
        clock: dict[str, Any] = {}
        if status == WorkflowStatus.RUNNING:
            clock = self._clock_from(now, self.timeout_seconds)
        elif self.timeout_seconds is not None:
            paused = status == WorkflowStatus.PAUSED
            clock = {
                "deadline_at": None,
                "timeout_left_seconds": self.timeout_seconds if paused else None,
            }
        self._move(
            WorkflowStatus(status),
            WorkflowEventType.RETRIED,
            now,
            reason=reason,
            alarm_at=None if status == WorkflowStatus.PAUSED else now,
            updated_at=now,
            finished_at=None,
            **clock,
        )

    def set_debounced(self, input: Any, alarm_at: datetime, now: datetime, rang: bool) -> None:
        """A debounced start replaced the input of this pending instance, which has not
        started its first step, and put its first tick off to ``alarm_at`` (``rang``: a bell
        for it was queued, recorded in the same update). The status does not change."""
        changes: dict[str, Any] = {"bell_at": alarm_at} if rang else {}
        self._update(
            input=input,
            alarm_at=alarm_at,
            alarm_cause=WakeCause.START,
            updated_at=now,
            **changes,
        )
        self._record(
            WorkflowEventType.DEBOUNCED,
            now,
            previous=self.status,
            reason=f"input replaced; first tick at {alarm_at.isoformat()}",
        )

    def note_forked(self, fork: WorkflowInstance, now: datetime, reason: str | None) -> None:
        """Record on the source that ``fork`` was forked from it; nothing else changes."""
        text = f"forked to '{fork.key}'" + (f": {reason}" if reason else "")
        self._record(WorkflowEventType.FORKED, now, previous=self.status, reason=text)

    def release_lease(
        self, alarm_at: datetime | None, now: datetime, cause: WakeCause | None = None
    ) -> None:
        """End the tick: drop the lease and set the alarm, due for ``cause`` (an inactive
        instance has none; lease renewals moved it while the tick ran)."""
        active = self.status in ACTIVE_STATUSES
        self._update(
            lease_token=None,
            lease_expires_at=None,
            wake_requested=False,
            alarm_at=alarm_at if active else None,
            alarm_cause=cause if active and alarm_at is not None and cause else "",
            updated_at=now,
        )

    def request_wake(
        self, now: datetime, *, leased: bool, cause: WakeCause | None = None, rang: bool = False
    ) -> None:
        """Ask for a tick now, for ``cause`` (None: none the wake lag counts); a tick
        holding the lease sees ``wake_requested`` and passes again, so the alarm (its lease
        expiry) stays. ``rang``: a bell for ``now`` was queued (``bells.ring``), recorded
        in the same update."""
        if leased:
            self._update(wake_requested=True, updated_at=now)
            return
        changes: dict[str, Any] = {"bell_at": now} if rang else {}
        self._update(
            wake_requested=True, updated_at=now, alarm_at=now, alarm_cause=cause or "", **changes
        )

    def found_leased(self) -> bool:
        """A bell found the instance leased: its tick takes one more pass before it ends,
        and the alarm moves to the lease's expiry, the next chance to progress if the holder
        died. True if the alarm moved (the caller arms a bell there)."""
        changes: dict[str, Any] = {} if self.wake_requested else {"wake_requested": True}
        expires = self.lease_expires_at
        moved = expires is not None and (self.alarm_at is None or self.alarm_at < expires)
        if moved:
            changes["alarm_at"] = expires
        if changes:
            self._update(**changes)
        return moved

    def clear_wake_request(self) -> None:
        """The tick is about to take the pass that was asked for."""
        self._update(wake_requested=False)

    def defer(self, alarm_at: datetime) -> None:
        """Look at the instance again at ``alarm_at`` (its definition is not registered):
        a worker that has the definition makes it due at once when it starts
        (:meth:`WorkflowInstanceQuerySet.recheck_unregistered`)."""
        self._update(alarm_at=alarm_at, alarm_cause=WakeCause.UNREGISTERED)

    def note_unreached(self, step_ids: list[str] | None) -> None:
        """Keep the recorded steps the last whole replay no longer reached (None: none)."""
        self._update(unreached_step_ids=step_ids)

    def _clock_from(self, now: datetime, seconds: float | None) -> dict[str, Any]:
        """The fields that start the timeout's clock at ``now`` with ``seconds`` left: none
        for an instance without a timeout (``seconds`` None), whose transitions write the
        same columns as they would without the feature."""
        if seconds is None:
            return {}
        return {"deadline_at": now + timedelta(seconds=seconds), "timeout_left_seconds": None}

    def _update(self, **fields: Any) -> None:
        """Assign ``fields`` and save exactly those: the one way a transition writes
        anything but the status (which moves through :meth:`_move`)."""
        self._write(fields)

    def _move(
        self,
        target: WorkflowStatus,
        event_type: str,
        now: datetime,
        *,
        reason: str | None = None,
        **fields: Any,
    ) -> None:
        """Move to the status ``target`` with ``fields`` and record ``event_type``: the one
        way the status changes. The move must be one the state machine allows
        (:func:`~django_workerflow.values.transitions.check`), and is written only if the
        row still has the status this object was read with, which is announced as the
        previous one; otherwise :class:`~django_workerflow.exceptions.InstanceTransitionError` and
        nothing written."""
        previous = self.status
        transitions.check(self.key, previous, target)
        changes = {"status": target, **fields}
        # What the object had, put back if nothing is written (_write may clear the cause).
        kept = {name: getattr(self, name) for name in (*changes, "alarm_cause")}
        if "alarm_at" in changes and "alarm_cause" not in changes:
            changes["alarm_cause"] = ""
        for name, value in changes.items():
            setattr(self, name, value)
        # On PostgreSQL the update and its event are one statement.
        event = (self.workflow_events.model, event_type, reason, now)
        moved = move_with_event(self, list(changes), previous, event)
        if moved is None:
            moved = save_fields(self, list(changes), status_was=previous)
            if moved:
                record_event(self.workflow_events.model, self.pk, event_type, reason, now)
        if not moved:
            for name, value in kept.items():
                setattr(self, name, value)
            rows = type(self)._default_manager.filter(pk=self.pk)
            found = rows.values_list("status", flat=True).first()
            raise transitions.changed_under(self.key, previous, found, target)
        self._announce(previous)

    def _write(self, fields: dict[str, Any], status_was: str | None = None) -> bool:
        """Assign ``fields`` and save exactly those (with ``status_was``, only if the row's
        status still is that: False if not). An alarm set without a cause has none (the
        cause of the alarm it replaces is void)."""
        if "alarm_at" in fields and "alarm_cause" not in fields:
            fields["alarm_cause"] = ""
        for name, value in fields.items():
            setattr(self, name, value)
        return save_fields(self, list(fields), status_was=status_was)

    def _record(
        self, event_type: str, now: datetime, *, previous: str | None, reason: str | None = None
    ) -> None:
        """Record the workflow event and, when the status changed, announce it after the
        commit."""
        record_event(self.workflow_events.model, self.pk, event_type, reason, now)
        self._announce(previous)

    def _announce(self, previous: str | None) -> None:
        """Announce a change of status after the commit (``workflow_status_changed``)."""
        if previous == self.status:
            return  # an event that changes no status (a fork's source): no signal
        # Every change of status is announced (paused, resumed... not only a finish), so the
        # signal belongs with the transition, not with runtime.finishing.instance_finished.
        sender = registry.lookup(self.definition_name, self.definition_version)
        if not workflow_status_changed.has_listeners(sender):
            return
        # Positional arguments: Django's fast path, as when it loads a row.
        values: Any = [getattr(self, field.attname) for field in self._meta.concrete_fields]
        snapshot = WorkflowInstance(*values)
        status = self.status
        transaction.on_commit(
            lambda: workflow_status_changed.send(
                sender=sender, instance=snapshot, status=status, previous_status=previous
            )
        )


def _tick_finished(now: datetime) -> dict[str, Any]:
    """The fields a finishing tick clears: no alarm, no lease, no wake request."""
    return {
        "alarm_at": None,
        "lease_token": None,
        "lease_expires_at": None,
        "wake_requested": False,
        "updated_at": now,
        "finished_at": now,
    }
