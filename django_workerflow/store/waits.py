"""Sleep and wait steps: created waiting, resolved when due, satisfied by events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_workerflow.store import sql
from django_workerflow.store.lease import Lease
from django_workerflow.store.records import RecordedSteps, StepRecord, read_step
from django_workerflow.store.transactions import (
    adapt,
    execute,
    explain_refusal,
    fenced,
    insert_event,
    satisfy_wait,
)
from django_workerflow.values import jsonvalue
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.states import StepEventType, StepState, StepType


class WaitingStepStore(RecordedSteps):
    """Reads the steps of one instance and writes its sleep and wait steps, for the tick
    holding ``lease_token`` (fenced as :mod:`django_workerflow.lease` states)."""

    def __init__(self, instance_pk: int, *, lease_token: str) -> None:
        super().__init__(instance_pk)
        self.lease = Lease(instance_pk, lease_token)

    def sleep_step(
        self, step_id: str, *, wake_at: datetime, parent_step_id: str | None
    ) -> StepRecord:
        """The recorded sleep step, created (waiting until ``wake_at``) on first reach."""
        record = self.get(step_id)
        if record is not None:
            return record
        return self._create_waiting(
            step_id, StepType.SLEEP, parent_step_id, StepEventType.SLEEP_WAITING, wake_at=wake_at
        )

    def wait_step(
        self,
        step_id: str,
        *,
        event_name: str,
        timeout_at: datetime | None,
        parent_step_id: str | None,
    ) -> StepRecord:
        """The recorded wait step, created on first reach; a waiting one is re-read.

        A wait step claims the oldest queued event of its name that arrived before its
        deadline. An existing step keeps its recorded timeout: the arguments only apply at
        creation.
        """
        record = self.get(step_id)
        if record is None:
            return self._create_waiting(
                step_id,
                StepType.WAIT,
                parent_step_id,
                StepEventType.WAIT_WAITING,
                event_name=event_name,
                timeout_at=timeout_at,
            )
        if record.state == StepState.WAITING and record.type == StepType.WAIT:
            return self._refresh_wait(record)
        return record

    def mark_sleep_elapsed(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.ELAPSED, StepEventType.SLEEP_ELAPSED)

    def mark_wait_timed_out(self, step_id: str) -> StepRecord:
        return self._resolve_waiting(step_id, StepState.TIMED_OUT, StepEventType.WAIT_TIMED_OUT)

    def _create_waiting(
        self,
        step_id: str,
        type: str,
        parent_step_id: str | None,
        event_type: str,
        *,
        wake_at: datetime | None = None,
        event_name: str = "",
        timeout_at: datetime | None = None,
    ) -> StepRecord:
        parent_pk = self.require(parent_step_id).pk if parent_step_id else None
        now = clock_now()
        with fenced(self.lease, now, require_running=True) as cursor:
            values = sql.params(
                instance=self.instance_pk,
                step_id=step_id,
                type=type,
                parent=parent_pk,
                wake_at=adapt(wake_at),
                event_name=event_name,
                timeout_at=adapt(timeout_at),
            )
            execute(cursor, "insert_step", values, now)
            pk = cursor.fetchone()[0]
            record = StepRecord.new(
                pk,
                step_id,
                type,
                StepState.WAITING,
                now,
                parent_pk=parent_pk,
                parent_step_id=parent_step_id,
                wake_at=wake_at,
                event_name=event_name,
                timeout_at=timeout_at,
            )
            if type == StepType.SLEEP:
                insert_event(cursor, self.instance_pk, pk, now, event_type, wake_at=wake_at)
            else:
                insert_event(
                    cursor,
                    self.instance_pk,
                    pk,
                    now,
                    event_type,
                    event_name=event_name,
                    timeout_at=timeout_at,
                )
                self._claim_queued_event(cursor, record, now)
        self._remember(record)
        return record

    def _refresh_wait(self, record: StepRecord) -> StepRecord:
        """Re-read a waiting wait step (an event may have satisfied it meanwhile) and let it
        claim a queued event if none did."""
        now = clock_now()
        with fenced(self.lease, now, require_running=False) as cursor:
            execute(cursor, "step_state", {"step": record.pk}, now)
            if cursor.fetchone()[0] != StepState.WAITING:
                updated = read_step(record.pk, record.parent_step_id)
                self._remember(updated)
                return updated
            self._claim_queued_event(cursor, record, now)
        return record

    def _resolve_waiting(self, step_id: str, state: str, event_type: str) -> StepRecord:
        record = self.require(step_id)
        now = clock_now()
        with fenced(self.lease, now, require_running=False) as cursor:
            execute(cursor, "resolve_waiting", sql.params(step=record.pk, state=state), now)
            if cursor.rowcount != 1:
                raise explain_refusal(self.instance_pk, step_id, StepState.WAITING, None, now)
            insert_event(cursor, self.instance_pk, record.pk, now, event_type)
        record.state = state
        record.resolved_at = now
        return record

    def _claim_queued_event(self, cursor: Any, record: StepRecord, now: datetime) -> bool:
        """Give the wait step the oldest unclaimed event of its name sent before its deadline
        (strictly: an event sent at the deadline finds the wait timed out)."""
        values = {
            "instance": self.instance_pk,
            "event_name": record.event_name,
            "deadline": adapt(record.timeout_at),
        }
        execute(cursor, "oldest_queued_event", values, now)
        row = cursor.fetchone()
        if row is None:
            return False
        event_pk, payload_json = row
        satisfy_wait(cursor, self.instance_pk, record.pk, event_pk, payload_json, now)
        record.state = StepState.SATISFIED
        record.payload = jsonvalue.loads(payload_json)
        record.resolved_at = now
        return True
