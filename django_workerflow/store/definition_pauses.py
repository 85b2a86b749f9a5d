"""The definition pause rows: the switch per paused definition and the audit of each change.

The tick's claim reads the switch with the instance row
(:func:`~.instance_rows.read_for_claim`) and every step start reads it in its fence, both
through :data:`~django_workerflow.store.sql.DEFINITION_PAUSED`; only
:mod:`django_workerflow.runtime.definition_pauses` writes it. A pause locks the one row it
adds and no instance row; a resume locks the row it removes first, then moves the timeout
deadlines of the definition's instances in the same transaction (see :mod:`.locks`, rule 5).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from django_workerflow.models import DefinitionPause, DefinitionPauseRecord
from django_workerflow.store import locks
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


def remove(definition_name: str, reason: str, actor: str, now: datetime) -> datetime | None:
    """Resume ``definition_name`` and record it; returns when it was paused, or None
    (nothing written) if it was not. Call inside a transaction."""
    # The lock: of two concurrent resumes, the second finds no row (and deletes nothing).
    pause = locks.lock_pause(definition_name)
    if pause is None:
        return None
    pause.delete()
    _record(definition_name, DefinitionPauseAction.RESUMED, actor, reason, now)
    return pause.paused_at


def _record(
    definition_name: str, action: DefinitionPauseAction, actor: str, reason: str, now: datetime
) -> None:
    DefinitionPauseRecord.objects.create(
        definition_name=definition_name, action=action, actor=actor, reason=reason, at=now
    )
