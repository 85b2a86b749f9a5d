"""What an instance does as part of a composition: wait for its result, and the one hook
point its finishing transitions call (a mixin of :class:`~.instance.WorkflowInstance`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from django_workerflow.models.instance import WorkflowInstance


class ComposedInstance:
    """``wait_result``, ``await_result`` and ``_finished`` of an instance."""

    def wait_result(self, timeout: float | timedelta | None = None) -> Any:
        """Block until the instance finishes; see :func:`django_workerflow.wait_result`."""
        from django_workerflow.runtime.composition import (
            results,
        )  # results reads models: import at call time

        return results.wait_result(_instance(self), timeout)

    async def await_result(self, timeout: float | timedelta | None = None) -> Any:
        """Await the instance's end without holding a thread for the whole wait."""
        from django_workerflow.runtime.composition import results

        return await results.await_result(_instance(self), timeout)

    def _finished(self, now: datetime, reason: str | None) -> None:
        """The one hook point of the transitions that finish an instance (completed,
        failed, cancelled), inside their transaction: see :mod:`django_workerflow.finishing`."""
        from django_workerflow.runtime.finishing import (
            instance_finished,
        )  # finishing reads models: import late

        instance_finished(_instance(self), now, reason)


def _instance(mixin: ComposedInstance) -> WorkflowInstance:
    """The instance this mixin is part of (typed for mypy)."""
    return cast("WorkflowInstance", mixin)
