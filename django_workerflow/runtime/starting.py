"""Starting instances: the one start path of ``start()``, and the writes of new instances
for it and for ``start_many()``.

A definition without flow control starts in one statement (:func:`start_one`); one with
``max_concurrency`` or ``rate_limit`` is created queued and admitted under its gate
(:func:`start_queued`).

New instances, their 'created' workflow events and their bells are written by
:func:`django_workerflow.store.instance_inserts.insert`: one statement per batch on
PostgreSQL, one ``BEGIN IMMEDIATE`` transaction of three statements on SQLite. Rows are
inserted with ``ON CONFLICT DO NOTHING``, so a key that exists (or is created concurrently)
writes nothing and is read back by the caller: starts stay idempotent by key.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import IntegrityError, connection, transaction

from django_workerflow import registry, tracing
from django_workerflow.definition import options, sensitive
from django_workerflow.definition.workflow import WorkflowDefinition, resolve
from django_workerflow.exceptions import WorkflowInputError, WorkflowVersionConflictError
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime import debounce as debounce_module
from django_workerflow.runtime.flow import admission
from django_workerflow.signals import workflow_status_changed
from django_workerflow.store import instance_inserts
from django_workerflow.store.transactions import WriteTransaction
from django_workerflow.values import attributes as attribute_values
from django_workerflow.values import jsonvalue, transitions
from django_workerflow.values.attributes import Scalar
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import WakeCause
from django_workerflow.workers import bell_rows, bells

logger = logging.getLogger(__name__)

#: The most rows one statement inserts.
BATCH_ROWS = 1000


@dataclass(frozen=True, slots=True)
class NewInstance:
    """A validated instance to create: its key, the JSON text of its input and its
    attributes (None: none)."""

    key: str
    input_json: str
    attributes: dict[str, Scalar] | None = None


# The start path ------------------------------------------------------------------------


def _input_json(name: str, input: Any) -> str:
    """The input as stored: JSON text, its sensitive values sealed (values/sealing.py)."""
    return jsonvalue.dumps(sensitive.sealer(name).input(input), what="The workflow input")


def start(
    definition: str | type[WorkflowDefinition],
    *,
    key: str | None = None,
    input: Any = None,
    version: str | None = None,
    priority: int = 0,
    parent_pk: int | None = None,
    detached: bool = False,
    scheduled: bool = False,
    debounce: float | timedelta | None = None,
    max_debounce: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, object] | None = None,
) -> WorkflowInstance:
    """Create an instance of ``definition`` under ``key``, or return the existing one.

    Idempotent on ``key``: the first call pins the input and the definition version. A
    different ``version`` for a non-terminal instance raises WorkflowVersionConflictError;
    a key of another workflow, bad input, key or priority raise WorkflowInputError.
    ``parent_pk`` and ``detached`` are set by a parent's child step, ``scheduled`` by a
    schedule's occurrence (its first tick's wake lag counts from the occurrence). A workflow with
    ``max_concurrency`` or ``rate_limit`` is queued (``pending``) until admitted, in order
    of ``priority`` (lower first), then creation; in the same transaction when a slot is
    free.

    With ``debounce`` (or the definition's), a start replaces the input of an instance of
    ``key`` that has not started and puts its first tick off (:mod:`.debounce`).

    ``timeout`` (or the definition's) is the new instance's budget of running time
    (:func:`timeout_budget`); an existing instance keeps its own. So do ``attributes``
    (:mod:`django_workerflow.values.attributes`), checked before anything is written.
    """
    name, version, definition_class = resolve(definition, version, caller="start()")
    definition_class.check_input(input)
    budget = timeout_budget(definition_class, timeout)
    given = attribute_values.of_start(attributes, what=f"start() of '{name}'")
    if debounce is not None or max_debounce is not None or definition_class.debounce is not None:
        return _start_debounced(
            name,
            version,
            definition_class,
            key,
            input,
            priority,
            parent_pk,
            detached,
            debounce=debounce,
            max_debounce=max_debounce,
            timeout_seconds=budget,
            attributes=given,
        )
    key = str(uuid.uuid4()) if key is None else key
    jsonvalue.check_identifier(key, what="An instance key", max_length=255)
    entry = NewInstance(key, _input_json(name, input), given)
    admission.check_priority(priority)
    if not admission.takes_admission(definition_class, key, input):
        # Instance, event and bell in one statement.
        created = start_one(
            name,
            definition_class.version,
            entry,
            priority,
            parent_pk,
            detached,
            scheduled,
            timeout_seconds=budget,
        )
    elif WorkflowInstance.objects.filter(key=key).exists():
        created = None
    else:
        concurrency_key = admission.concurrency_key_for(
            definition_class, key, open_value(jsonvalue.loads(entry.input_json))
        )
        # takes_admission() said yes: the definition has limits, or the key is a shared gate.
        assert admission.limits_for(name, concurrency_key) is not None
        created = start_queued(
            name,
            definition_class.version,
            entry,
            concurrency_key,
            priority,
            parent_pk,
            detached,
            timeout_seconds=budget,
        )
    return created or check_existing_start(WorkflowInstance.objects.get(key=key), name, version)


def timeout_budget(
    definition_class: type[WorkflowDefinition], timeout: float | timedelta | None
) -> float | None:
    """The timeout budget, in seconds, of a new instance of ``definition_class``: the
    start's ``timeout``, else the definition's (None: no limit). Raises
    :class:`WorkflowInputError` for a ``timeout`` that is not a positive duration."""
    if timeout is None:
        chosen = definition_class.timeout  # checked when the class was declared
        return None if chosen is None else options.instance_timeout_seconds(chosen)
    problem = options.instance_timeout_problem(timeout)
    if problem is not None:
        raise WorkflowInputError(
            f"The timeout given to start() of '{definition_class.name}' {problem}, not "
            f"{timeout!r}. Pass seconds or a timedelta, e.g. timeout=300 or "
            "timeout=timedelta(hours=2), or None for the definition's timeout."
        )
    return options.instance_timeout_seconds(timeout)


def _start_debounced(
    name: str,
    version: str | None,
    definition_class: type[WorkflowDefinition],
    key: str | None,
    input: Any,
    priority: int,
    parent_pk: int | None,
    detached: bool,
    *,
    debounce: float | timedelta | None,
    max_debounce: float | timedelta | None,
    timeout_seconds: float | None,
    attributes: dict[str, Scalar] | None,
) -> WorkflowInstance:
    """``start()`` with a debounce: create the instance with its first tick put off, or
    replace the input of the one not started yet; otherwise the existing instance."""
    chosen = debounce_module.debounce_for(definition_class, debounce, max_debounce)
    assert chosen is not None  # the caller saw a debounce, and a bare max_debounce raised
    key = debounce_module.check_debounceable(definition_class, key)
    jsonvalue.check_identifier(key, what="An instance key", max_length=255)
    entry = NewInstance(key, _input_json(name, input), attributes)
    admission.check_priority(priority)
    if admission.takes_admission(definition_class, key, input):
        raise WorkflowInputError(
            f"'{name}' has a concurrency or rate limit, and a queued instance's first tick "
            "belongs to admission: start it without debounce."
        )
    # Twice: an instance found here and gone before its lock (a purge) is created again.
    for _attempt in range(2):
        now = clock_now()
        created = start_one(
            name,
            definition_class.version,
            entry,
            priority,
            parent_pk,
            detached,
            due=chosen.first_tick(now, now),
            timeout_seconds=timeout_seconds,
        )
        if created is not None:
            created.refresh_from_db(fields=["bell_at"])  # armed unless beyond the horizon
            logger.info(
                "workflow debounced key=%s definition=%s delay=%.3f",
                key,
                name,
                chosen.delay.total_seconds(),
            )
            return created
        found = debounce_module.replace_input(
            key, name, version, jsonvalue.loads(entry.input_json), chosen, now
        )
        if found is not None:
            return check_existing_start(found, name, version)
    return check_existing_start(WorkflowInstance.objects.get(key=key), name, version)


def check_existing_start(
    instance: WorkflowInstance, name: str, version: str | None
) -> WorkflowInstance:
    """The existing ``instance`` a start of ``name`` (at ``version``) under its key returns,
    or the error that start raises."""
    if instance.definition_name != name:
        raise WorkflowInputError(
            f"Instance key '{instance.key}' already belongs to a '{instance.definition_name}' "
            f"workflow, not '{name}'. Use another key."
        )
    if version is not None and version != instance.definition_version and not instance.is_terminal:
        raise WorkflowVersionConflictError(
            f"Workflow definition version is already pinned to '{instance.definition_version}' "
            f"and cannot be changed to '{version}'. Instance '{instance.key}' has status "
            f"'{instance.status}' and keeps its version until it finishes: start it without a "
            "version, or start the new version under another key."
        )
    return instance


def start_queued(
    name: str,
    version: str,
    entry: NewInstance,
    concurrency_key: str,
    priority: int = 0,
    parent_pk: int | None = None,
    detached: bool = False,
    *,
    timeout_seconds: float | None = None,
) -> WorkflowInstance | None:
    """The start of a definition with a concurrency or rate limit (or on a shared gate), its
    concurrency key already checked: create the instance queued and admit it if its gate
    has room, in one transaction. None when the key is taken (the caller reads it back)."""
    now = clock_now()
    try:
        with transaction.atomic():
            instance = WorkflowInstance.objects.create_pending(
                key=entry.key,
                definition_name=name,
                definition_version=version,
                input=jsonvalue.loads(entry.input_json),
                now=now,
                priority=priority,
                concurrency_key=concurrency_key,
                queued=True,
                parent_pk=parent_pk,
                detached=detached,
                trace_context=tracing.carrier(),
                timeout_seconds=timeout_seconds,
                attributes=entry.attributes,
            )
            if instance.pk in admission.admit_waiting(name, concurrency_key, now):
                instance.admitted_at = instance.alarm_at = now
    except IntegrityError:
        if WorkflowInstance.objects.filter(key=entry.key).exists():
            return None  # created concurrently under the same key
        raise
    logger.info("workflow created key=%s definition=%s version=%s", entry.key, name, version)
    return instance


# Writing new instances ------------------------------------------------------------------


def start_one(
    name: str,
    version: str,
    entry: NewInstance,
    priority: int,
    parent_pk: int | None,
    detached: bool,
    scheduled: bool = False,
    due: datetime | None = None,
    *,
    timeout_seconds: float | None = None,
) -> WorkflowInstance | None:
    """``start()`` of a definition without a concurrency limit: the new instance, or None
    when its key is taken. ``due``: its first tick, if not at once (a debounced start)."""
    created = insert_pending(
        name,
        version,
        [entry],
        clock_now(),
        priority=priority,
        parent_pk=parent_pk,
        detached=detached,
        scheduled=scheduled,
        due=due,
        timeout_seconds=timeout_seconds,
    )
    if not created:
        return None
    logger.info("workflow created key=%s definition=%s version=%s", entry.key, name, version)
    return created[0]


def _chosen(
    name: str,
    version: str,
    now: datetime,
    bell: bool,
    priority: int,
    parent_pk: int | None,
    detached: bool,
    scheduled: bool,
    due: datetime | None = None,
    timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """A new pending instance's values by attribute name, but for its key and input; every
    other column keeps its default. Admitted at once: starts of definitions with a
    concurrency limit take admission's path. The current span's trace context goes with
    them (NULL without one), so that their ticks continue the caller's trace. ``due``: the
    first tick, put off by a debounce (the wake lag counts from it: cause ``start``).
    ``timeout_seconds``: the budget of its timeout (left at the column's default, NULL,
    when there is none)."""
    if timeout_seconds is not None:
        return {
            **_chosen(name, version, now, bell, priority, parent_pk, detached, scheduled, due),
            "timeout_seconds": timeout_seconds,
        }
    if due is not None:
        return {
            **_chosen(name, version, now, False, priority, parent_pk, detached, scheduled),
            "alarm_at": due,
            "alarm_cause": WakeCause.START,
        }
    return {
        "key": "",
        "definition_name": name,
        "definition_version": version,
        "input": None,
        "status": transitions.CREATED,
        "alarm_at": now,
        # What the first tick's wake lag counts from: the occurrence (its input) or now.
        "alarm_cause": WakeCause.SCHEDULE if scheduled else "",
        "bell_at": now if bell else None,
        "created_at": now,
        "updated_at": now,
        # A child workflow's parent (set by a parent's child step, Execution.child).
        "parent_id": parent_pk,
        "detached": detached,
        "priority": priority,
        "admitted_at": now,
        "trace_context": tracing.carrier(),
    }


def _template(chosen: dict[str, Any]) -> WorkflowInstance:
    """A new instance of the ``chosen`` values (by attribute name), every other field at
    its default, built by position: Django's fast path, a fifth of keyword arguments' cost
    on a model of this many fields."""
    values: Any = []  # positional, as _copy's
    for attname, default, call in _defaults():
        if attname in chosen:
            values.append(chosen[attname])
        else:
            values.append(default() if call else default)
    return WorkflowInstance(*values)


@functools.cache
def _defaults() -> tuple[tuple[str, Any, bool], ...]:
    """Each concrete field's attribute name, its default and whether that is a callable to
    call for each instance (a constant default is read once per process)."""
    found = []
    for field in WorkflowInstance._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            found.append((field.attname, field.get_default, True))
        else:
            found.append((field.attname, field.get_default(), False))
    return tuple(found)


def _copy(instance: WorkflowInstance) -> WorkflowInstance:
    # Positional arguments: Django's fast path, as when it loads a row.
    values: Any = [getattr(instance, f.attname) for f in WorkflowInstance._meta.concrete_fields]
    return WorkflowInstance(*values)


def insert_pending(
    name: str,
    version: str,
    entries: Sequence[NewInstance],
    now: datetime,
    *,
    priority: int = 0,
    parent_pk: int | None = None,
    detached: bool = False,
    scheduled: bool = False,
    due: datetime | None = None,
    timeout_seconds: float | None = None,
) -> list[WorkflowInstance]:
    """Create pending instances (due at ``now``, or at ``due``) for ``entries`` whose key is
    free, with their 'created' events and bells; return the created ones (keys taken are
    left out). The bells of instances due later are armed as any alarm's are (the caller
    reads back ``bell_at``: a bell beyond the horizon is left to the sweeper).

    At most :data:`BATCH_ROWS` entries; the caller splits larger sets.
    """
    if len(entries) > BATCH_ROWS:
        raise ValueError(f"insert_pending writes at most {BATCH_ROWS} rows at a time.")
    direct_bells = due is None and bell_rows.direct_orm_bells()
    layout = instance_inserts.layout()
    chosen = _chosen(
        name,
        version,
        now,
        direct_bells,
        priority,
        parent_pk,
        detached,
        scheduled,
        due,
        timeout_seconds,
    )
    template = _template(chosen)
    values = instance_inserts.prepared(template, chosen, now)
    rows = []
    for entry in entries:
        row = list(values)
        row[layout.key_at] = entry.key
        # Already JSON text, validated by the caller: stored as is (a None input as NULL).
        row[layout.input_at] = None if entry.input_json == "null" else entry.input_json
        if entry.attributes:
            row[layout.attributes_at] = instance_inserts.prepared_attributes(entry.attributes)
        rows.append(row)
    with WriteTransaction() as cursor:
        created = instance_inserts.insert(
            cursor, rows, _bell_rows(now, direct_bells), now, priority
        )
        if not direct_bells:
            # Another broker, or django-q2 elsewhere: ring through alarms (same transaction).
            for created_pk in created.values():
                bells.arm(created_pk, now if due is None else due)
    armed = direct_bells or (not bells.is_suppressed() and apps.is_installed("django_q"))
    template.bell_at = now if armed else None
    result = []
    for entry in entries:
        pk = created.pop(entry.key, None)  # a key given twice is created once
        if pk is None:
            continue
        # One entry: the template becomes the instance, no second model instance to build.
        instance = template if len(entries) == 1 else _copy(template)
        instance.key = entry.key
        instance.input = None if entry.input_json == "null" else jsonvalue.loads(entry.input_json)
        instance.attributes = entry.attributes
        instance.pk = pk
        instance._state.adding = False
        instance._state.db = connection.alias
        result.append(instance)
    _announce(result)
    return result


def _bell_rows(now: datetime, direct: bool) -> instance_inserts.BellRows | None:
    """The bells a start writes itself, due ``now`` (None: it does not, see
    :func:`~django_workerflow.workers.bell_rows.direct_orm_bells`)."""
    if not direct:
        return None
    return instance_inserts.BellRows(
        queue_table=bell_rows.queue_table(),
        list_key=bell_rows.list_key(),
        due=bell_rows.due(now),
        payload=bell_rows.payload,
    )


def _announce(instances: list[WorkflowInstance]) -> None:
    """Send workflow_status_changed (None -> pending) for each, once committed."""

    if not instances:
        return
    first = instances[0]  # a batch is of one definition and version
    sender = registry.lookup(first.definition_name, first.definition_version)
    if not workflow_status_changed.has_listeners(sender):
        return

    def send(snapshots: list[WorkflowInstance]) -> None:
        for instance in snapshots:
            workflow_status_changed.send(
                sender=sender,
                instance=instance,
                status=transitions.CREATED,
                previous_status=None,
            )

    if not connection.in_atomic_block and connection.get_autocommit():
        send(instances)  # committed already: the caller's objects are what was stored
        return
    # Copies: the caller's objects may change before the commit (the signal reports this one).
    snapshots = [_copy(instance) for instance in instances]
    transaction.on_commit(lambda: send(snapshots))
