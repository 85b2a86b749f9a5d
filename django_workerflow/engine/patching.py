"""``patched()``: change a definition's code in place without breaking recorded histories.

The answer is decided once per instance and recorded as a marker step, so every later
replay gives the same answer. How the first decision tells "this history already went past
this point" from "this is the first time the instance gets here": when ``patched()`` is
reached without a recorded marker, the replay looks for recorded steps it has not reached
yet in this pass. There are some only if the instance already ran beyond this point under
the old code: the answer is False, and the old branch replays its recorded steps. There are
none when the replay stands at the end of the history, where new code runs for the first
time: the answer is True. An absent marker therefore never fails a replay.

One limit follows: inside ``all()``/``all_settled()`` branches, steps of a later branch
recorded before this branch reached ``patched()`` count as "past this point". Decide patches
before a fan-out, or in a step of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_workerflow.store.records import unreached_steps
from django_workerflow.values import jsonvalue
from django_workerflow.values.states import StepType

if TYPE_CHECKING:
    from django_workerflow.engine.execution import Execution

#: Marker steps' ids: ``patch:<change_id>``, apart from the ids users give their steps.
MARKER_PREFIX = "patch:"


def marker_step_id(change_id: str) -> str:
    """The step id of the marker recording ``change_id``'s answer."""
    jsonvalue.check_identifier(change_id, what="A patch change id", max_length=190)
    return f"{MARKER_PREFIX}{change_id}"


def patched(execution: Execution, change_id: str) -> bool:
    """The recorded answer of ``change_id`` for this instance, decided on first reach."""
    step_id = marker_step_id(change_id)
    store = execution.store
    record = store.get(step_id)
    if record is not None and step_id in execution.seen_step_ids:
        # Asked again in the same pass: the same answer, not a duplicate step.
        return bool(record.result)
    execution._reach(step_id)  # noqa: SLF001 - patched() is part of Execution's replay pass
    if record is not None:
        execution._check_kind(record, StepType.PATCH)  # noqa: SLF001 - patched() is part of Execution's replay pass
        return bool(record.result)
    applied = not _history_went_past(execution)
    record = execution._write(  # noqa: SLF001 - patched() is part of Execution's replay pass
        store.record_patch_marker,
        step_id,
        applied=applied,
        parent_step_id=execution._parent(),  # noqa: SLF001 - patched() is part of Execution's replay pass
    )
    return bool(record.result)


def _history_went_past(execution: Execution) -> bool:
    """True if a recorded step that this pass should reach is not reached yet."""
    return bool(unreached_steps(execution.store.steps, execution.seen_step_ids))
