"""Check the live instances against the code now registered, before a deploy moves traffic.

Instances are read in batches (by primary key, one query for the instances and one for all
their steps per batch), so memory holds one batch whatever the table's size. Each batch is
replayed inside a read-only transaction that is rolled back, and each instance inside its own
rolled-back savepoint when its replay runs a statement at all; :mod:`.replay` itself never
writes and never calls a callback.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django_workerflow import registry
from django_workerflow.deploy.replay import ReplayReport, replay_records, unregistered_problem
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.store.readonly import read_only_transaction, savepoint_if_used
from django_workerflow.store.records import STEP_FIELDS, StepRecord, name_parents

#: Instances read (and replayed) per batch.
BATCH_SIZE = 200
#: The statuses check-replay looks at: those whose next tick replays the history.
CHECKED_STATUSES = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.PAUSED)
#: The instance fields a check reads.
CHECKED_FIELDS = (
    "pk",
    "key",
    "definition_name",
    "definition_version",
    "input",
    "status",
    "error_name",
    "error_message",
)


@dataclass(frozen=True, slots=True)
class CheckFilter:
    """Which instances to check."""

    name: str | None = None
    version: str | None = None
    key: str | None = None
    limit: int | None = None
    include_failed: bool = False


def check_instances(
    selection: CheckFilter, *, batch_size: int = BATCH_SIZE
) -> Iterator[tuple[WorkflowInstance, ReplayReport]]:
    """Replay every selected instance; yield each with its report, batch by batch."""
    statuses = list(CHECKED_STATUSES)
    if selection.include_failed:
        statuses.append(WorkflowStatus.FAILED)
    instances = WorkflowInstance.objects.filter(status__in=statuses)
    if selection.name:
        instances = instances.filter(definition_name=selection.name)
    if selection.version:
        instances = instances.filter(definition_version=selection.version)
    if selection.key:
        instances = instances.filter(key=selection.key)
    instances = instances.only(*CHECKED_FIELDS).order_by("pk")
    remaining = selection.limit
    last_pk = 0
    while remaining is None or remaining > 0:
        size = batch_size if remaining is None else min(batch_size, remaining)
        batch = list(instances.filter(pk__gt=last_pk)[:size])
        if not batch:
            return
        last_pk = batch[-1].pk
        if remaining is not None:
            remaining -= len(batch)
        yield from check_batch(batch)


def check_batch(
    batch: list[WorkflowInstance],
) -> Iterator[tuple[WorkflowInstance, ReplayReport]]:
    """Replay one batch of instances (read with :data:`CHECKED_FIELDS`): their steps in one
    query, all inside one read-only transaction that is rolled back."""
    with read_only_transaction():
        steps = _steps_of([instance.pk for instance in batch])
        for instance in batch:
            yield instance, check_instance(instance, steps.get(instance.pk, []))


def check_instance(instance: WorkflowInstance, records: list[StepRecord]) -> ReplayReport:
    """Replay one instance's recorded steps against its registered definition."""
    name, version = instance.definition_name, instance.definition_version
    definition_class = registry.lookup(name, version)
    if definition_class is None:
        return ReplayReport(
            key=instance.key,
            name=name,
            version=version,
            outcome=None,
            problems=(unregistered_problem(instance.key, name, version, registry.versions(name)),),
        )
    recorded_error = (
        (instance.error_name, instance.error_message)
        if instance.status == WorkflowStatus.FAILED
        else None
    )
    with savepoint_if_used():
        return replay_records(
            definition_class,
            key=instance.key,
            input=instance.input,
            records=records,
            recorded_error=recorded_error,
        )


def _steps_of(instance_pks: list[int]) -> dict[int, list[StepRecord]]:
    """The recorded steps of several instances in one query, oldest first, with parents."""
    by_instance: dict[int, list[StepRecord]] = {}
    rows = (
        Step.objects.filter(instance_id__in=instance_pks)
        .order_by("instance_id", "created_at", "id")
        .values_list("instance_id", *STEP_FIELDS)
    )
    for instance_pk, *fields in rows:
        by_instance.setdefault(instance_pk, []).append(StepRecord(*fields))
    for records in by_instance.values():
        name_parents(records)
    return by_instance
