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
from django.db.models import Q

from django_workerflow import registry
from django_workerflow.definition import sensitive
from django_workerflow.exceptions import WorkflowInputError, WorkflowStateError
from django_workerflow.models import (
    ACTIVE_STATUSES,
    Step,
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime.finishing import PARENT_CANCELLED, PARENT_FINISHED

# The verbs' shared helpers: resolve a key, lock the row, refresh the caller's object.
from django_workerflow.store import instance_rows, locks
from django_workerflow.values import jsonvalue, storable, transitions
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

__all__ = ["SETTLED_STATES", "children_taken_back", "failed_children", "fork", "retry"]

logger = logging.getLogger(__name__)

#: The settled outcome of each kind of step: what a fork copies. A patch marker is the
#: answer the source's replay gave ``patched()``; a child step also needs its child to be
#: completed, or detached and unfinished (:func:`_lost_children`).
SETTLED_STATES = {
    StepType.RUN: StepState.SUCCEEDED,
    StepType.SLEEP: StepState.ELAPSED,
    StepType.WAIT: StepState.SATISFIED,
    StepType.PATCH: StepState.SUCCEEDED,
    StepType.CHILD: StepState.SUCCEEDED,
}
KEY_MAX_LENGTH = WorkflowInstance._meta.get_field("key").max_length or 255
# How many copied steps one INSERT carries.
_COPY_BATCH = 500


# Retry --------------------------------------------------------------------------------


def retry(
    instance: WorkflowInstance | str, reason: str | None = None, *, with_children: bool = False
) -> None:
    """Run a failed instance again, with the code now deployed.

    What reopens: the steps whose failure failed the workflow (the failed branches of an
    ``all()`` with the first) and the steps nested in them that failed or timed out (the
    failure came up through them). A run step gets a fresh budget of its ``max_attempts``,
    its attempt numbers continuing; a timed-out wait waits again, its new deadline as far
    after now as the first was after it began waiting; a child step waits again for its
    child, and a refused child start is made again. A failure ``execute()`` raised outside
    any step just replays. Steps that succeeded never run again.

    The children that the instance's failure cancelled ("parent finished") go on from
    where they stopped, and their children likewise. ``with_children``: the failed
    instances its reopened child steps wait for (see :func:`failed_children`) are retried
    in the same transaction, theirs in turn; without it a retried parent meets their
    failure again and fails again at once.

    WorkflowStateError unless the instance is failed.
    """
    reason = storable.check_reason(reason, verb="retry")
    with transaction.atomic():
        locked = locks.lock_instance(instance_rows.pk_of(instance))
        if locked.status != WorkflowStatus.FAILED:
            raise WorkflowStateError(
                f"Cannot retry instance '{locked.key}': only a failed instance can be "
                f"retried, and its status is '{locked.status}'."
            )
        family = _Retry(clock_now(), with_children=with_children)
        reopened = family.retry(locked, reason)
    instance_rows.copy_onto(instance, locked)
    logger.info(
        "workflow retried key=%s steps=%s children=%s",
        locked.key,
        ",".join(reopened) or "-",
        ",".join(family.children) or "-",
    )


def failed_children(instance: WorkflowInstance | str) -> list[WorkflowInstance]:
    """The instances a retry of the failed ``instance`` would wait for again and find ended
    badly: failed (a retry ``with_children`` retries them), or cancelled other than by the
    instance's own failure; a failed one's own such instances follow it. Read only; empty
    unless the instance is failed."""
    if not isinstance(instance, WorkflowInstance):
        instance = WorkflowInstance.objects.get(pk=instance_rows.pk_of(instance))
    if instance.status != WorkflowStatus.FAILED:
        return []
    found: list[WorkflowInstance] = []
    seen = {instance.pk}

    def walk(parent: WorkflowInstance) -> None:
        steps = _steps_of(parent)
        awaited = [
            step.child_instance_id
            for step in _steps_to_reopen(parent, steps)
            if step.type == StepType.CHILD and step.child_instance_id is not None
        ]
        revived = {child.pk for child, _ in _cancelled_by_parent(parent, lock=False)}
        for child in WorkflowInstance.objects.filter(pk__in=awaited).order_by("pk"):
            if child.pk in seen or child.pk in revived:
                continue
            seen.add(child.pk)
            if child.status == WorkflowStatus.FAILED:
                found.append(child)
                walk(child)
            elif child.status == WorkflowStatus.CANCELLED:
                found.append(child)

    walk(instance)
    return found


def children_taken_back(instance: WorkflowInstance) -> list[WorkflowInstance]:
    """The children of the failed ``instance`` that its failure cancelled: a retry of it
    sets them going again (theirs too). Read only."""
    if instance.status != WorkflowStatus.FAILED:
        return []
    return [child for child, _ in _cancelled_by_parent(instance, lock=False)]


class _Retry:
    """One retry: the instance and, in the same transaction, the children it takes back
    (revived) or retries with it. Rows are locked parent first, then its children."""

    def __init__(self, now: datetime, *, with_children: bool) -> None:
        self.now = now
        self.with_children = with_children
        self.visited: set[int] = set()
        self.root_key = ""
        #: The keys of the other instances this retry set running again.
        self.children: list[str] = []

    def retry(self, instance: WorkflowInstance, reason: str | None) -> list[str]:
        """Retry the locked, failed ``instance``; the ids of the steps it reopened."""
        self.root_key = self.root_key or instance.key
        self.visited.add(instance.pk)
        steps = _steps_of(instance)
        reopening = _steps_to_reopen(instance, steps)
        revived = self._revive_children(instance)
        for step in reopening:
            _reopen(instance, step, self.now)
        reopened_pks = {step.pk for step in reopening}
        for step in steps:
            # A child step that met the cancellation of a child taken back waits again.
            if (
                step.pk not in reopened_pks
                and step.type == StepType.CHILD
                and step.state == StepState.FAILED
                and step.child_instance_id in revived
            ):
                step.reopen_child()
                reopening.append(step)
        if self.with_children:
            awaited = sorted(
                step.child_instance_id
                for step in reopening
                if step.type == StepType.CHILD and step.child_instance_id is not None
            )
            for child in locks.lock_instances(
                WorkflowInstance.objects.filter(pk__in=awaited, status=WorkflowStatus.FAILED)
            ):
                if child.pk in self.visited:
                    continue
                self.children.append(child.key)
                because = f": {reason}" if reason else ""
                self.retry(child, f"retried with '{self.root_key}'{because}")
        instance.set_retried(self.now, reason)
        bells.arm(instance.pk, self.now)
        return [step.step_id for step in reopening]

    def _revive_children(self, parent: WorkflowInstance) -> set[int]:
        """Take back the cancellation of the children that ``parent``'s finish cancelled,
        and of their children in turn; the pks of ``parent``'s children taken back."""
        revived = set()
        for child, status in _cancelled_by_parent(parent, lock=True):
            if child.pk in self.visited:
                continue
            self.visited.add(child.pk)
            self.children.append(child.key)
            child.set_revived(status, self.now, f"taken back by the retry of '{self.root_key}'")
            if status != WorkflowStatus.PAUSED:
                bells.arm(child.pk, self.now)
            self._revive_children(child)
            revived.add(child.pk)
        return revived


def _steps_of(instance: WorkflowInstance) -> list[Step]:
    return list(Step.objects.filter(instance_id=instance.pk).order_by("created_at", "id"))


def _steps_to_reopen(instance: WorkflowInstance, steps: list[Step]) -> list[Step]:
    """The steps whose failure failed the instance and the steps nested in them that failed
    or timed out (steps come parents first, in creation order)."""
    failing = {instance.error_step_id, *(instance.other_error_step_ids or ())} - {""}
    inside: set[int] = set()
    found = []
    for step in steps:
        if step.step_id not in failing and step.parent_id not in inside:
            continue
        inside.add(step.pk)
        if _reopens(step):
            found.append(step)
    return found


def _reopens(step: Step) -> bool:
    if step.type in (StepType.RUN, StepType.CHILD):
        return step.state == StepState.FAILED
    return step.type == StepType.WAIT and step.state == StepState.TIMED_OUT


def _reopen(instance: WorkflowInstance, step: Step, now: datetime) -> None:
    if step.type == StepType.RUN:
        if step.attempt_count >= storable.MAX_INTEGER:
            raise WorkflowStateError(
                f"Cannot retry instance '{instance.key}' (status '{instance.status}'): its run "
                f"step '{step.step_id}' made {step.attempt_count} attempts, the largest count "
                "the database stores; start a new instance to run it again."
            )
        step.reopen_run()
    elif step.type == StepType.WAIT:
        step.reopen_wait(now)
    elif step.child_instance_id is None:
        step.reopen_start()  # the start (or lookup) was refused: it is made again
    else:
        step.reopen_child()


def _cancelled_by_parent(
    parent: WorkflowInstance, *, lock: bool
) -> list[tuple[WorkflowInstance, str]]:
    """The children of ``parent`` that its finish (or, for a child that was itself taken
    back, its cancellation) cancelled, each with the status it goes back to."""
    children = WorkflowInstance.objects.filter(
        parent_id=parent.pk, detached=False, status=WorkflowStatus.CANCELLED
    ).order_by("pk")
    found = locks.lock_instances(children) if lock else list(children)
    if not found:
        return []
    history: dict[int, list[tuple[str, str | None]]] = {}
    for pk, event_type, reason in (
        WorkflowEvent.objects.filter(instance_id__in=[child.pk for child in found])
        .order_by("recorded_at", "id")
        .values_list("instance_id", "type", "reason")
    ):
        history.setdefault(pk, []).append((event_type, reason))
    taken_back = []
    for child in found:
        events = history.get(child.pk, [])
        cancels = [
            reason or ""
            for event_type, reason in events
            if event_type == WorkflowEventType.CANCELLED
        ]
        if cancels and _is_cascade(cancels[-1]):
            taken_back.append((child, _status_before_cancel(events)))
    return taken_back


def _is_cascade(reason: str) -> bool:
    return reason == PARENT_FINISHED or reason.startswith(PARENT_CANCELLED)


#: The status each workflow event leaves an instance in (a cancel and a retry: see below).
_STATUS_AFTER = {
    WorkflowEventType.STARTED: WorkflowStatus.RUNNING,
    WorkflowEventType.PAUSED: WorkflowStatus.PAUSED,
    WorkflowEventType.RESUMED: WorkflowStatus.RUNNING,
    WorkflowEventType.COMPLETED: WorkflowStatus.COMPLETED,
    WorkflowEventType.FAILED: WorkflowStatus.FAILED,
}


def _status_before_cancel(events: list[tuple[str, str | None]]) -> str:
    """What a cancelled instance was before its last cancellation: its events replayed in
    order, from the status it was created with. A retry after a cancel is a take-back,
    which returns to the status that cancel ended; any other retry is of a failure."""
    status = before_cancel = transitions.CREATED
    for event_type, _ in events:
        if event_type == WorkflowEventType.CANCELLED:
            before_cancel, status = status, WorkflowStatus.CANCELLED
        elif event_type == WorkflowEventType.RETRIED:
            cancelled = status == WorkflowStatus.CANCELLED
            status = before_cancel if cancelled else WorkflowStatus.RUNNING
        else:
            status = _STATUS_AFTER.get(WorkflowEventType(event_type), status)
    return before_cancel


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
    reason = storable.check_reason(reason, verb="fork")
    if key is not None:
        jsonvalue.check_identifier(key, what="An instance key", max_length=KEY_MAX_LENGTH)
    with transaction.atomic():
        source = locks.lock_instance(instance_rows.pk_of(instance))
        definition = registry.get(source.definition_name, version)
        # The source's input as stored (sealed values stay sealed), or a new one sealed.
        fork_input = (
            source.input if input is ... else sensitive.sealer(source.definition_name).input(input)
        )
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
    lost_children = _lost_children(steps[:end])
    for step in steps[:end]:
        settled = SETTLED_STATES.get(StepType(step.type)) == step.state
        if step.type == StepType.CHILD and step.child_instance_id in lost_children:
            settled = False
        if settled and step.pk not in excluded and (step.parent_id in copied or not step.parent_id):
            copied.add(step.pk)
            copies.append(step)
    return copies


def _lost_children(steps: list[Step]) -> set[int]:
    """The children of succeeded child steps that the fork starts anew.

    A succeeded child step either returned the result of a child that completed, or (a
    ``start_child``) the key of a child it did not wait for. The fork keeps the step, and
    so never starts that child again, while the child completed, or is a detached child
    still unfinished (it outlives its parent: the fork waits for the same instance). A
    child that failed or was cancelled (the source's failure cancels its unfinished
    children), or a non-detached one still unfinished (it ends with the source), is
    started anew.
    """
    pks = [
        step.child_instance_id
        for step in steps
        if step.type == StepType.CHILD
        and step.state == StepState.SUCCEEDED
        and step.child_instance_id is not None
    ]
    if not pks:
        return set()
    kept = WorkflowInstance.objects.filter(pk__in=pks).filter(
        Q(status=WorkflowStatus.COMPLETED)
        | Q(detached=True, status__in=[*ACTIVE_STATUSES, WorkflowStatus.PAUSED])
    )
    return set(pks) - set(kept.values_list("pk", flat=True))


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
        child_instance_id=step.child_instance_id,
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
