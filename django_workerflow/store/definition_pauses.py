"""The definition pause rows: the switch per paused definition and the audit of each change.

The tick's claim reads the switch with the instance row
(:func:`~.instance_rows.read_for_claim`) and every step start reads it in its fence, both
through :data:`~django_workerflow.store.sql.DEFINITION_PAUSED`; only
:mod:`django_workerflow.runtime.definition_pauses` writes it. A change locks the one pause
row it adds or removes and no instance row (see :mod:`.locks`).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from django_workerflow.models import DefinitionPause, DefinitionPauseRecord
from django_workerflow.values.states import DefinitionPauseAction


def is_paused(definition_name: str) -> bool:
    """Whether ``definition_name`` is paused now."""
    return DefinitionPause.objects.filter(definition_name=definition_name).exists()


def current(definition_name: str) -> DefinitionPause | None:
    """The pause of ``definition_name`` (None: it is not paused)."""
    return DefinitionPause.objects.filter(definition_name=definition_name).first()


def all_paused() -> list[DefinitionPause]:
    """Every paused definition, by name."""
    return list(DefinitionPause.objects.order_by("definition_name"))


def recent_records(limit: int = 20) -> list[DefinitionPauseRecord]:
    """The latest pauses and resumes, newest first."""
    return list(DefinitionPauseRecord.objects.order_by("-at", "-id")[:limit])


def add(definition_name: str, reason: str, actor: str, now: datetime) -> bool:
    """Pause ``definition_name`` and record it; False (nothing written) if it already was.
    Call inside a transaction."""
    try:
        with transaction.atomic():
            DefinitionPause.objects.create(
                definition_name=definition_name, reason=reason, paused_by=actor, paused_at=now
            )
    except IntegrityError:  # paused already, maybe by a concurrent call: its pause stands
        return False
    _record(definition_name, DefinitionPauseAction.PAUSED, actor, reason, now)
    return True


def remove(definition_name: str, reason: str, actor: str, now: datetime) -> bool:
    """Resume ``definition_name`` and record it; False (nothing written) if it was not
    paused. Call inside a transaction."""
    # The delete locks the row: of two concurrent resumes, the second deletes nothing.
    deleted, _ = DefinitionPause.objects.filter(definition_name=definition_name).delete()
    if not deleted:
        return False
    _record(definition_name, DefinitionPauseAction.RESUMED, actor, reason, now)
    return True


def _record(
    definition_name: str, action: DefinitionPauseAction, actor: str, reason: str, now: datetime
) -> None:
    DefinitionPauseRecord.objects.create(
        definition_name=definition_name, action=action, actor=actor, reason=reason, at=now
    )
