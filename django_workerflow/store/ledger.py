"""What a replay pass needs of the store of its instance's steps.

:class:`~django_workerflow.engine.execution.Execution` reads and writes steps only through
this protocol. :class:`~.steps.StepStore` implements it for the tick (every write fenced by
the lease); the check replay's store (:mod:`django_workerflow.deploy.replay`) implements
it explicitly in memory, where every write ends the replay instead of happening.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition
    from django_workerflow.store.records import StepRecord
    from django_workerflow.store.steps import PendingSuccess
    from django_workerflow.values.backoff import Backoff
    from django_workerflow.values.outcome import Outcome


class StepLedger(Protocol):
    """The recorded steps of one instance, and the writes a pass makes to them."""

    pending_success: PendingSuccess | None

    @property
    def steps(self) -> dict[str, StepRecord]: ...

    def get(self, step_id: str) -> StepRecord | None: ...

    def require(self, step_id: str) -> StepRecord: ...

    def has_running_or_waiting_child_steps(self, step_id: str) -> bool:
        """True if a direct child of ``step_id`` is pending, running or waiting."""
        ...

    def interrupted_attempts(self, step_id: str, interrupted_name: str) -> int:
        """How many of ``step_id``'s latest failed attempts in a row were interrupted."""
        ...

    def sleep_step(
        self, step_id: str, *, wake_at: datetime, parent_step_id: str | None
    ) -> StepRecord:
        """The recorded sleep step, created (waiting until ``wake_at``) on first reach."""
        ...

    def wait_step(
        self,
        step_id: str,
        *,
        event_name: str,
        timeout_at: datetime | None,
        parent_step_id: str | None,
    ) -> StepRecord:
        """The recorded wait step, created on first reach; a waiting one is re-read."""
        ...

    def mark_sleep_elapsed(self, step_id: str) -> StepRecord: ...

    def mark_wait_timed_out(self, step_id: str) -> StepRecord: ...

    def start_child_step(
        self,
        step_id: str,
        *,
        parent_step_id: str | None,
        workflow: str | type[WorkflowDefinition],
        key: str,
        input: Any,
        version: str | None,
        detached: bool,
        waits: bool,
    ) -> StepRecord:
        """Start the child (idempotently, as ``start()``) and record the step linked to it."""
        ...

    def wait_instance_step(
        self, step_id: str, *, parent_step_id: str | None, key: str
    ) -> StepRecord:
        """Record a step waiting for the instance ``key`` (any instance) to finish."""
        ...

    def awaited_outcome(self, record: StepRecord) -> Outcome | None:
        """How the instance a waiting child step awaits stands now (None: it is gone)."""
        ...

    def resolve_child_step(self, step_id: str, outcome: Outcome | None) -> StepRecord:
        """waiting -> succeeded with the awaited instance's result, or -> failed."""
        ...

    def defer_success(self, step_id: str, attempt: int, result_json: str) -> StepRecord:
        """running -> succeeded in memory; written by the next write or :meth:`flush`."""
        ...

    def flush(self) -> None:
        """Write the success held in memory, if any, on its own."""
        ...

    def create_started_run_step(
        self, step_id: str, *, parent_step_id: str | None, max_attempts: int
    ) -> StepRecord:
        """Create a run step with its first attempt already started, in one transaction,"""
        ...

    def mark_attempt_started(self, step_id: str, attempt: int) -> StepRecord:
        """pending -> running for attempt number ``attempt`` (the next one)."""
        ...

    def mark_attempt_succeeded(self, step_id: str, attempt: int, result_json: str) -> StepRecord:
        """running -> succeeded, storing the JSON text of the result."""
        ...

    def mark_attempt_failed(
        self,
        step_id: str,
        attempt: int,
        *,
        error_name: str,
        error_message: str,
        non_retryable: bool = False,
        backoff: Backoff | None = None,
        traceback: str = "",
    ) -> StepRecord:
        """running -> pending (retry later) or -> failed (non-retryable or out of attempts);"""
        ...

    def record_patch_marker(
        self, step_id: str, *, applied: bool, parent_step_id: str | None
    ) -> StepRecord:
        """Record the answer of a ``patched()`` call as a succeeded marker step."""
        ...

    def report_progress(self, current: object, total: object, message: object) -> None:
        """Hold a ``set_progress()`` value for the pass's next write, or raise
        WorkflowInputError for one that cannot be stored. Progress is not a step: no
        replay compares it with what was recorded."""
        ...

    def report_attributes(self, changes: dict[str, object]) -> None:
        """Hold a ``set_attributes()`` call's changes for the pass's next write, or raise
        WorkflowInputError for any that cannot be stored. Attributes are not steps either."""
        ...
