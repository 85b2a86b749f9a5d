"""Flow control read from the rows: the instances admitted and queued under a definition's
limits, and the body that holds a slot (the ``define_with`` fixture, in tests/conftest.py,
defines the throwaway definitions)."""

from __future__ import annotations

import itertools
from typing import Any

from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowInstance, WorkflowStatus

_counter = itertools.count()


def wait_for_go(self: WorkflowDefinition) -> Any:
    """Hold a slot until the event 'go' arrives (a wait keeps the slot), then finish."""
    return self.wait("hold", "go")


def admitted_keys(name: str) -> list[str]:
    """Keys of the instances of ``name`` holding a slot, in admission order."""
    return list(
        WorkflowInstance.objects.filter(
            definition_name=name,
            admitted_at__isnull=False,
            status__in=[WorkflowStatus.PENDING, WorkflowStatus.RUNNING, WorkflowStatus.PAUSED],
        )
        .order_by("admitted_at", "id")
        .values_list("key", flat=True)
    )


def queued_keys(name: str) -> list[str]:
    return list(
        WorkflowInstance.objects.filter(
            definition_name=name, status=WorkflowStatus.PENDING, admitted_at__isnull=True
        )
        .order_by("priority", "created_at", "id")
        .values_list("key", flat=True)
    )
