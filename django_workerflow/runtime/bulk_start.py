"""``start_many()``: start many instances of one definition, in batches.

Every item is validated before anything is written (a bad one refuses the whole call, and
the error names its position), its concurrency key too under a limit, and so are the
existing instances whose keys are given again; then the new instances, their events and
their bells are written in batches of at most
:data:`~django_workerflow.runtime.starting.BATCH_ROWS` rows per statement.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django_workerflow.definition import sensitive
from django_workerflow.definition.workflow import WorkflowDefinition, resolve
from django_workerflow.exceptions import WorkerflowError, WorkflowInputError
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime import starting
from django_workerflow.runtime.flow import admission
from django_workerflow.values import attributes as attribute_values
from django_workerflow.values import jsonvalue
from django_workerflow.values.attributes import Scalar
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.sealing import open_value

logger = logging.getLogger(__name__)


def start_many(
    definition: str | type[WorkflowDefinition],
    items: Iterable[tuple[str | None, Any]],
    *,
    version: str | None = None,
    timeout: float | timedelta | None = None,
    attributes: Mapping[str, object] | None = None,
) -> list[WorkflowInstance]:
    """Start one instance of ``definition`` per ``(key, input)`` pair, in the items' order.

    Idempotent by key like ``start()``: a key that exists returns the existing instance (a
    key given twice, the same one). A ``None`` key gets a random one. ``timeout`` (or the
    definition's) is each new instance's budget, as ``start()``'s; ``attributes`` are each
    new instance's (checked before anything is written).
    """
    name, version, definition_class = resolve(definition, version, caller="start_many()")
    budget = starting.timeout_budget(definition_class, timeout)
    given = attribute_values.of_start(attributes, what=f"start_many() of '{name}'")
    if definition_class.debounce is not None:
        raise WorkflowInputError(
            f"'{name}' is debounced, and start_many() does not debounce: start its instances "
            "one by one with start(), which replaces the input of a burst's instance."
        )
    entries = [
        _entry(position, item, definition_class, given) for position, item in enumerate(items)
    ]
    existing = _existing(entries, name, version)
    if admission.limits_for_name(name) is not None:
        # Every concurrency key is checked before the first write; then each start is
        # admitted in its own transaction (admission.py).
        concurrency_keys: dict[str, str] = {}
        for position, entry in enumerate(entries):
            # A key given twice is started once, from its first item.
            if entry.key not in existing and entry.key not in concurrency_keys:
                concurrency_keys[entry.key] = _concurrency_key(position, definition_class, entry)
        for entry in entries:
            if entry.key not in existing:
                existing[entry.key] = starting.start_queued(
                    name,
                    definition_class.version,
                    entry,
                    concurrency_keys[entry.key],
                    timeout_seconds=budget,
                ) or starting.check_existing_start(
                    WorkflowInstance.objects.get(key=entry.key), name, version
                )
        return [existing[entry.key] for entry in entries]
    now = clock_now()
    for batch in batched([e for e in entries if e.key not in existing], starting.BATCH_ROWS):
        for instance in starting.insert_pending(
            name, definition_class.version, batch, now, timeout_seconds=budget
        ):
            existing[instance.key] = instance
    missing = {e.key for e in entries} - existing.keys()
    if missing:  # created concurrently by another start: read back like start() does
        existing.update(_existing([e for e in entries if e.key in missing], name, version))
    logger.info("workflows started definition=%s count=%s", name, len(entries))
    return [existing[entry.key] for entry in entries]


def batched(values: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """``values`` in slices of at most ``size`` (itertools.batched is Python 3.12+)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _entry(
    position: int,
    item: Any,
    definition: type[WorkflowDefinition],
    attributes: dict[str, Scalar] | None = None,
) -> starting.NewInstance:
    """Validate one ``(key, input)`` item of ``definition``; errors name its position (from 0)."""
    try:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise WorkflowInputError(f"expected a (key, input) pair, not {item!r:.80}")
        key, value = item
        key = str(uuid.uuid4()) if key is None else key
        jsonvalue.check_identifier(key, what="its instance key", max_length=255)
        definition.check_input(value)
        sealed = sensitive.sealer(definition.name).input(value)
        return starting.NewInstance(key, jsonvalue.dumps(sealed, what="its input"), attributes)
    except WorkflowInputError as exc:
        raise WorkflowInputError(
            f"Item {position} of start_many() is refused, nothing was started: {exc}"
        ) from exc


def _concurrency_key(
    position: int, definition_class: type[WorkflowDefinition], entry: starting.NewInstance
) -> str:
    """The item's concurrency key; an error names its position (from 0)."""
    try:
        return admission.concurrency_key_for(
            definition_class, entry.key, open_value(jsonvalue.loads(entry.input_json))
        )
    except WorkflowInputError as exc:
        raise WorkflowInputError(
            f"Item {position} of start_many() is refused, nothing was started: {exc}"
        ) from exc


def _existing(
    entries: list[starting.NewInstance], name: str, version: str | None
) -> dict[str, WorkflowInstance]:
    """The instances that already hold some of the keys, checked as ``start()`` checks them."""
    found: dict[str, WorkflowInstance] = {}
    keys = list(dict.fromkeys(entry.key for entry in entries))
    for batch in batched(keys, starting.BATCH_ROWS):
        for instance in WorkflowInstance.objects.filter(key__in=batch):
            found[instance.key] = instance
    for position, entry in enumerate(entries):
        if entry.key in found:
            try:
                starting.check_existing_start(found[entry.key], name, version)
            except WorkerflowError as exc:
                raise type(exc)(f"Item {position} of start_many(): {exc}") from exc
    return found
