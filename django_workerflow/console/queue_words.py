"""What a queued instance waits for: "queued: 5 of 5 slots in use", "queued behind
'customer-7': 1 of 1 slots in use" (a limit per concurrency key), "queued: rate limit 10 per
second, next at 14:03:07 UTC"."""

from __future__ import annotations

from datetime import datetime, timedelta

from django_workerflow.console.time_words import format_when
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.flow.admission import queue_state

PERIOD_WORDS = {
    timedelta(seconds=1): "second",
    timedelta(minutes=1): "minute",
    timedelta(hours=1): "hour",
    timedelta(days=1): "day",
}


def is_queued(instance: WorkflowInstance) -> bool:
    return instance.status == "pending" and instance.admitted_at is None


def queued_words(instance: WorkflowInstance, now: datetime) -> str:
    """Say why the queued ``instance`` is not admitted yet (a few queries)."""
    state = queue_state(instance.definition_name, instance.concurrency_key, now)
    if state is None:
        return "queued: its definition has no limit any more; waiting for admission"
    # The limit counts per concurrency key: name it, so the operator knows whose slots.
    queued = f"queued behind '{instance.concurrency_key}'" if instance.concurrency_key else "queued"
    if state.max_concurrency is not None and state.in_use >= state.max_concurrency:
        return f"{queued}: {state.in_use} of {state.max_concurrency} slots in use"
    if state.next_rate_slot is not None and state.rate_period is not None:
        period = period_words(state.rate_period)
        when = format_when(state.next_rate_slot, now, relative=False)
        return f"{queued}: rate limit {state.rate_count} per {period}, next at {when}"
    return f"{queued}: waiting for admission"


def period_words(period: timedelta) -> str:
    """ "second", "minute", or "90 seconds" for other periods."""
    if period in PERIOD_WORDS:
        return PERIOD_WORDS[period]
    seconds = period.total_seconds()
    return f"{seconds:g} seconds"
