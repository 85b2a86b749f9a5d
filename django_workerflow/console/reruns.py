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


@dataclass(frozen=True, slots=True)
class ForkRequest:
    """What an operator asks of a fork: the step to run anew from (None: keep every settled
    step), the version (None: the registered default), the new key (None: "<key>~<n>")."""

    from_step: str | None = None
    version: str | None = None
    key: str | None = None
    reason: str | None = None


def retry(instances: Iterable[WorkflowInstance], reason: str | None) -> Report:
    """Retry each failed instance; the others are skipped as "not failed"."""
    report = Report()
    because = f" Reason: {reason}" if reason else " No reason given."
    for instance in instances:
        if instance.status != WorkflowStatus.FAILED:
            _skip_not_failed(report, instance)
            continue
        try:
            workerflow.retry(instance, reason=reason)
        except WorkflowStateError:  # it changed since it was read
            instance.refresh_from_db(fields=["status"])
            _skip_not_failed(report, instance)
        else:
            report.add(instance, True, "retried", f"Retried '{instance.key}'.{because}")
    return report


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
