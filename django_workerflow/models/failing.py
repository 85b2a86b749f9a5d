"""Failing an instance, and the reruns that may follow: its retry and fork verbs and
transitions."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django_workerflow.values.states import WorkflowEventType, WorkflowStatus

if TYPE_CHECKING:
    from django_workerflow.models.instance import WorkflowInstance


class FailureTransitions:
    """Mixed into :class:`~django_workerflow.models.WorkflowInstance`: the verbs call
    :mod:`django_workerflow.reruns`, which calls the transitions under the row lock."""

    def retry(self, reason: str | None = None) -> None:
        """Run a failed instance again from the step that failed it (see reruns.retry)."""
        from django_workerflow.runtime import reruns

        reruns.retry(_instance(self), reason=reason)

    def fork(
        self,
        *,
        from_step: str | None = None,
        key: str | None = None,
        version: str | None = None,
        input: Any = ...,
        reason: str | None = None,
    ) -> WorkflowInstance:
        """A new instance that keeps this one's settled steps before ``from_step`` (see
        reruns.fork)."""
        from django_workerflow.runtime import reruns

        return reruns.fork(
            _instance(self),
            from_step=from_step,
            key=key,
            version=version,
            input=input,
            reason=reason,
        )

    # Transitions: the caller holds the row lock (select_for_update) -------------------

    def set_failed(
        self,
        error_name: str,
        error_message: str,
        now: datetime,
        *,
        traceback: str = "",
        step_id: str = "",
    ) -> None:
        """running -> failed with the error (its traceback, and the step whose failure it
        is, if any), releasing the tick's lease."""
        instance = _instance(self)
        instance.status = WorkflowStatus.FAILED
        instance.error_name = error_name
        instance.error_message = error_message
        instance.error_traceback = traceback
        instance.error_step_id = step_id
        instance._finish_tick(now)  # noqa: SLF001 - this mixin is part of WorkflowInstance
        instance._save_fields(  # noqa: SLF001 - this mixin is part of WorkflowInstance
            [
                "status",
                "error_name",
                "error_message",
                "error_traceback",
                "error_step_id",
                "alarm_at",
                "lease_token",
                "lease_expires_at",
                "wake_requested",
                "updated_at",
                "finished_at",
            ]
        )
        instance._record(WorkflowEventType.FAILED, now, previous=WorkflowStatus.RUNNING)  # noqa: SLF001 - this mixin is part of WorkflowInstance
        instance._finished(now, None)  # noqa: SLF001 - this mixin is part of WorkflowInstance

    def set_retried(self, now: datetime, reason: str | None) -> None:
        """failed -> running, due at once; the failure's fields are cleared (its attempts
        keep their tracebacks)."""
        instance = _instance(self)
        instance.status = WorkflowStatus.RUNNING
        instance.error_name = ""
        instance.error_message = ""
        instance.error_traceback = ""
        instance.error_step_id = ""
        instance.alarm_at = now
        instance.updated_at = now
        instance.finished_at = None
        instance._save_fields(  # noqa: SLF001 - this mixin is part of WorkflowInstance
            [
                "status",
                "error_name",
                "error_message",
                "error_traceback",
                "error_step_id",
                "alarm_at",
                "updated_at",
                "finished_at",
            ]
        )
        instance._record(  # noqa: SLF001 - this mixin is part of WorkflowInstance
            WorkflowEventType.RETRIED, now, previous=WorkflowStatus.FAILED, reason=reason
        )

    def note_forked(self, fork: WorkflowInstance, now: datetime, reason: str | None) -> None:
        """Record on the source that ``fork`` was forked from it; nothing else changes."""
        text = f"forked to '{fork.key}'" + (f": {reason}" if reason else "")
        instance = _instance(self)
        instance._record(WorkflowEventType.FORKED, now, previous=instance.status, reason=text)  # noqa: SLF001 - this mixin is part of WorkflowInstance


def _instance(mixin: FailureTransitions) -> WorkflowInstance:
    """The instance this mixin is part of (typed for mypy)."""
    return cast("WorkflowInstance", mixin)
