"""Reruns an operator asks for: retry a failed instance, fork an instance onto another version.

Both lock the source instance row in one short transaction, like every verb of
:mod:`django_workerflow.runtime`, and ring the bell of the instance that is to run in the
same transaction.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from django_workerflow.definition import registry
from django_workerflow.exceptions import WorkflowInputError, WorkflowStateError
from django_workerflow.models import Step, StepState, StepType, WorkflowInstance, WorkflowStatus

# The verbs' shared helpers: resolve a key, lock the row, refresh the caller's object.
from django_workerflow.runtime.verbs import _lock, _pk, _refresh
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

__all__ = ["SETTLED_STATES", "fork", "retry"]

logger = logging.getLogger("django_workerflow.runtime")

#: The settled outcome of each kind of step: what a fork copies.
SETTLED_STATES = {
    StepType.RUN: StepState.SUCCEEDED,
    StepType.SLEEP: StepState.ELAPSED,
    StepType.WAIT: StepState.SATISFIED,
}
KEY_MAX_LENGTH = WorkflowInstance._meta.get_field("key").max_length or 255
# How many copied steps one INSERT carries.
_COPY_BATCH = 500


# Retry --------------------------------------------------------------------------------


def retry(instance: WorkflowInstance | str, reason: str | None = None) -> None:
    """Run a failed instance again, with the code now deployed.

    What reopens: the step whose failure failed the workflow and the steps nested in it
    that failed or timed out (the failure came up through them). A run step gets a fresh
    budget of its ``max_attempts``, its attempt numbers continuing; a timed-out wait waits
    again, its new deadline as far after now as the first was after it began waiting. A
    failure ``execute()`` raised outside any step just replays. Steps that succeeded never
    run again. WorkflowStateError unless the instance is failed.
    """
    reason = _checked_reason(reason, "retry")
    with transaction.atomic():
        locked = _lock(_pk(instance))
        if locked.status != WorkflowStatus.FAILED:
            raise WorkflowStateError(
                f"Cannot retry workflow '{locked.key}': only a failed instance can be "
                f"retried, and its status is '{locked.status}'."
            )
        now = clock_now()
        reopened = _reopen_failed_steps(locked, now)
        locked.set_retried(now, reason)
        bells.arm(locked.pk, now)
    _refresh(instance, locked)
    logger.info("workflow retried key=%s steps=%s", locked.key, ",".join(reopened) or "-")


def _reopen_failed_steps(instance: WorkflowInstance, now: datetime) -> list[str]:
    """Reopen the step that failed the instance and what failed inside it; their ids."""
    if not instance.error_step_id:
        return []
    steps = list(Step.objects.filter(instance_id=instance.pk).order_by("created_at", "id"))
    failing = next((step for step in steps if step.step_id == instance.error_step_id), None)
    if failing is None:
        return []
    inside = {failing.pk}
    reopened = []
    for step in steps:
        if step.pk != failing.pk and step.parent_id not in inside:
            continue
        inside.add(step.pk)
        if step.type == StepType.RUN and step.state == StepState.FAILED:
            step.reopen_run()
        elif step.type == StepType.WAIT and step.state == StepState.TIMED_OUT:
            step.reopen_wait(now)
        elif step.type == StepType.CHILD and step.state == StepState.FAILED:
            if step.child_instance_id is None:
                continue  # the start itself was refused: nothing to wait for
            step.reopen_child()
        else:
            continue
        reopened.append(step.step_id)
    return reopened


# Fork ---------------------------------------------------------------------------------


def fork(
    instance: WorkflowInstance | str,
    *,
    from_step: str | None = None,
    key: str | None = None,
    version: str | None = None,
    input: Any = ...,
    reason: str | None = None,
) -> WorkflowInstance:
    """A new instance of the same workflow that keeps the source's settled steps created
    before ``from_step`` (every settled step when None), and runs the rest anew.

    It is pinned to ``version`` (default: the registered default version), takes the
    source's input unless ``input`` is given, and the key ``f"{source key}~{n}"`` unless
    ``key`` is given. Copied steps keep their nesting: a step nested in a run step that runs
    anew runs anew with it. The source only gains a ``forked`` event naming the fork.
    """
    reason = _checked_reason(reason, "fork")
    if key is not None:
        jsonvalue.check_identifier(key, what="An instance key", max_length=KEY_MAX_LENGTH)
    with transaction.atomic():
        source = _lock(_pk(instance))
        definition = registry.get(source.definition_name, version)
        fork_input = source.input if input is ... else input
        fork_input = jsonvalue.loads(jsonvalue.dumps(fork_input, what="The workflow input"))
        steps = list(Step.objects.filter(instance_id=source.pk).order_by("created_at", "id"))
        copies = _steps_to_copy(source, steps, from_step)
        now = clock_now()
        try:
            with transaction.atomic():
                forked = WorkflowInstance.objects.create_fork(
                    source,
                    key=key if key is not None else _next_fork_key(source),
                    version=definition.version,
                    input=fork_input,
                    now=now,
                    reason=reason,
                )
        except IntegrityError:
            raise WorkflowInputError(
                f"An instance with the key {key!r} already exists. Fork under another key."
            ) from None
        _copy_steps(forked, copies)
        source.note_forked(forked, now, reason)
        bells.arm(forked.pk, now)
    logger.info(
        "workflow forked key=%s source=%s version=%s from_step=%s copied=%s",
        forked.key,
        source.key,
        forked.definition_version,
        from_step or "-",
        len(copies),
    )
    return forked


def _steps_to_copy(
    source: WorkflowInstance, steps: list[Step], from_step: str | None
) -> list[Step]:
    """The settled steps created before ``from_step`` whose enclosing steps are copied too
    (``from_step``'s own enclosing steps run anew, so that it does)."""
    end = len(steps)
    excluded: set[int] = set()
    if from_step is not None:
        by_id = {step.step_id: index for index, step in enumerate(steps)}
        if from_step not in by_id:
            raise WorkflowInputError(
                f"Instance '{source.key}' has no step {from_step!r} to fork from. Name one of "
                "its recorded steps, or fork without from_step to keep every settled step."
            )
        end = by_id[from_step]
        by_pk = {step.pk: step for step in steps}
        parent_pk = steps[end].parent_id
        while parent_pk is not None:
            excluded.add(parent_pk)
            parent_pk = by_pk[parent_pk].parent_id
    copied: set[int] = set()
    copies = []
    for step in steps[:end]:
        settled = SETTLED_STATES.get(StepType(step.type)) == step.state
        if settled and step.pk not in excluded and (step.parent_id in copied or not step.parent_id):
            copied.add(step.pk)
            copies.append(step)
    return copies


def _copy_steps(fork: WorkflowInstance, copies: list[Step]) -> None:
    """Insert the copies under ``fork`` in their order (the ids keep it when their times
    are equal), in batches that end before a step whose parent is not inserted yet."""
    new_pk: dict[int, int] = {}
    batch: list[Step] = []

    def flush() -> None:
        rows = [_copy_of(step, fork, new_pk) for step in batch]
        for step, row in zip(batch, Step.objects.bulk_create(rows), strict=True):
            new_pk[step.pk] = row.pk
        batch.clear()

    for step in copies:
        if len(batch) >= _COPY_BATCH or (step.parent_id and step.parent_id not in new_pk):
            flush()
        batch.append(step)
    flush()


def _copy_of(step: Step, fork: WorkflowInstance, new_pk: dict[int, int]) -> Step:
    return Step(
        instance=fork,
        step_id=step.step_id,
        type=step.type,
        state=step.state,
        parent_id=new_pk[step.parent_id] if step.parent_id is not None else None,
        attempt_count=step.attempt_count,
        max_attempts=step.max_attempts,
        result=step.result,
        error_name=step.error_name,
        error_message=step.error_message,
        wake_at=step.wake_at,
        event_name=step.event_name,
        timeout_at=step.timeout_at,
        payload=step.payload,
        resolved_at=step.resolved_at,
        created_at=step.created_at,
    )


def _next_fork_key(source: WorkflowInstance) -> str:
    """``f"{source key}~{n}"``: n counts the source's forks, skipping keys already taken."""
    n = source.forks.count() + 1
    while WorkflowInstance.objects.filter(key=f"{source.key}~{n}").exists():
        n += 1
    key = f"{source.key}~{n}"
    if len(key) > KEY_MAX_LENGTH:
        raise WorkflowInputError(
            f"The fork key {key!r} would be longer than {KEY_MAX_LENGTH} characters. Pass a "
            "shorter key."
        )
    return key


def _checked_reason(reason: str | None, verb: str) -> str | None:
    return storable.check_optional_text(reason, what=f"The {verb} reason") or None
