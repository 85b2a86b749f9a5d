"""``manage.py workerflow reseal``: seal every stored sensitive value again with the newest
key of the codec, the step of a key rotation between putting the new key first and
dropping the old one (docs/operations.md#sealed-at-rest).

Only the rows holding a sealed value are read (a text match on the marker), in batches by
primary key; each batch is written in its own short transaction. The values stay the same:
only their encoding changes, so running it while workers run is safe (a value written
meanwhile is sealed with the newest key already).
"""

from __future__ import annotations

from django.db import models, transaction

from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.models import InboundEvent, Step, StoredStepEvent, WorkflowInstance
from django_workerflow.values.sealing import MARKER, codec, reseal

#: The models and their columns that can hold sealed values.
SEALED_COLUMNS: tuple[tuple[type[models.Model], tuple[str, ...]], ...] = (
    (WorkflowInstance, ("input", "result")),
    (Step, ("result", "payload")),
    (StoredStepEvent, ("result", "payload")),
    (InboundEvent, ("payload",)),
)
BATCH = 500


def reseal_all(batch: int = BATCH) -> int:
    """Seal every sealed value again with the codec's newest key; the number of rows
    rewritten. Raises :class:`WorkflowStateError` without ``WORKERFLOW_PAYLOAD_CODEC``."""
    if codec() is None:
        raise WorkflowStateError(
            "Nothing to reseal with: WORKERFLOW_PAYLOAD_CODEC is not set. Set it (and its "
            "keys, newest first) before running reseal."
        )
    rewritten = 0
    for model, columns in SEALED_COLUMNS:
        for column in columns:
            rewritten += _reseal_column(model, column, batch)
    return rewritten


def _reseal_column(model: type[models.Model], column: str, batch: int) -> int:
    rows = model._default_manager.filter(**{f"{column}__contains": MARKER}).order_by("pk")
    rewritten, after = 0, 0
    while True:
        page = list(rows.filter(pk__gt=after).values_list("pk", column)[:batch])
        if not page:
            return rewritten
        with transaction.atomic():
            for pk, value in page:
                model._default_manager.filter(pk=pk).update(**{column: reseal(value)})
        rewritten += len(page)
        after = page[-1][0]
