"""Reruns from the console: retry failed instances, fork one onto another version.

Both go through the public API (:func:`django_workerflow.retry`, :func:`django_workerflow.fork`)
and return a :class:`~django_workerflow.console.operations.Report`, so the admin and the
command say what happened the same way: "1 workflow retried; 2 skipped: not failed".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import django_workerflow as workerflow
from django_workerflow.console.operations import Report
from django_workerflow.exceptions import WorkerflowError, WorkflowStateError
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.reruns import children_taken_back


@dataclass(frozen=True, slots=True)
class ForkRequest:
    """What an operator asks of a fork: the step to run anew from (None: keep every settled
    step), the version (None: the registered default), the new key (None: "<key>~<n>")."""

    from_step: str | None = None
    version: str | None = None
    key: str | None = None
    reason: str | None = None


def retry(
    instances: Iterable[WorkflowInstance], reason: str | None, *, with_children: bool = False
) -> Report:
    """Retry each failed instance (``with_children``: with the failed children it waits
    for); the others are skipped as "not failed". The report names the children a retried
    instance waits for again that are still failed or cancelled: it fails again at once."""
    report = Report()
    because = f" Reason: {reason}" if reason else " No reason given."
    for instance in instances:
        if instance.status != WorkflowStatus.FAILED:
            _skip_not_failed(report, instance)
            continue
        blocking = workerflow.failed_children(instance)
        taken_back = children_taken_back(instance)
        try:
            workerflow.retry(instance, reason=reason, with_children=with_children)
        except WorkflowStateError:  # it changed since it was read
            instance.refresh_from_db(fields=["status"])
            _skip_not_failed(report, instance)
            continue
        retried = [c for c in blocking if with_children and c.status == WorkflowStatus.FAILED]
        still = [c for c in blocking if c not in retried]
        detail = f"Retried '{instance.key}'"
        if retried:
            detail += f" with its failed {_children(retried)} {_keys(retried)}"
        detail += "."
        if taken_back:
            detail += (
                f" Its {_children(taken_back)} {_keys(taken_back)}, cancelled when it failed, "
                f"{'goes' if len(taken_back) == 1 else 'go'} on."
            )
        if still:
            detail += f" {_blocked(instance, still)}"
        if still:
            report.add(instance, True, _STILL_BLOCKED, detail + because, warning=True)
        elif retried:
            report.add(instance, True, "retried with failed children", detail + because)
        else:
            report.add(instance, True, "retried", detail + because)
    return report


_STILL_BLOCKED = "retried, but a failed child remains"


def retry_blockers(
    instances: Iterable[WorkflowInstance],
) -> list[tuple[WorkflowInstance, list[WorkflowInstance]]]:
    """For the retry form: each failed instance that waits for failed (or cancelled)
    children, with them."""
    found = []
    for instance in instances:
        if instance.status != WorkflowStatus.FAILED:
            continue
        blocking = workerflow.failed_children(instance)
        if blocking:
            found.append((instance, blocking))
    return found


def blocker_note(instance: WorkflowInstance, blocking: list[WorkflowInstance]) -> str:
    """The form's line for one instance: "'order-7' waits again for 'order-7/ship' (failed)."""
    return f"'{instance.key}' waits again for {_described(blocking)}."


def _blocked(instance: WorkflowInstance, still: list[WorkflowInstance]) -> str:
    """What a retried instance meets again, and what to do about it."""
    text = (
        f"It waits again for {_described(still)}, so it fails again at once when it meets "
        f"{'it' if len(still) == 1 else 'them'}."
    )
    if any(child.status == WorkflowStatus.FAILED for child in still):
        text += f" Retry '{instance.key}' with its failed children, or retry them first."
    if any(child.status == WorkflowStatus.CANCELLED for child in still):
        text += " A cancelled child cannot be retried: fork the parent to start it anew."
    return text


def _described(children: list[WorkflowInstance]) -> str:
    """ "'order-7/ship' (failed)", "'a' (failed) and 'b' (cancelled)"."""
    parts = [f"'{child.key}' ({child.status})" for child in children]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _keys(children: list[WorkflowInstance]) -> str:
    parts = [f"'{child.key}'" for child in children]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def _children(children: list[WorkflowInstance]) -> str:
    return "child" if len(children) == 1 else "children"


def fork(
    instance: WorkflowInstance, request: ForkRequest
) -> tuple[Report, WorkflowInstance | None]:
    """Fork ``instance`` as ``request`` asks; the report says why when it cannot."""
    report = Report()
    try:
        forked = workerflow.fork(
            instance,
            from_step=request.from_step,
            key=request.key,
            version=request.version,
            reason=request.reason,
        )
    except WorkerflowError as exc:
        report.add(instance, False, "not forked", f"Could not fork '{instance.key}': {exc}")
        return report, None
    start = "keeping every settled step"
    if request.from_step:
        start = f"from step '{request.from_step}'"
    because = f" Reason: {request.reason}" if request.reason else ""
    detail = (
        f"Forked '{instance.key}' into '{forked.key}' ({forked.definition_name} "
        f"v{forked.definition_version}), {start}.{because}"
    )
    report.add(instance, True, "forked", detail)
    return report, forked


def _skip_not_failed(report: Report, instance: WorkflowInstance) -> None:
    detail = f"Skipped '{instance.key}': it is {instance.status}, not failed."
    report.add(instance, False, "not failed", detail)
