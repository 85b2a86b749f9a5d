"""Throwaway definitions with schedules and flow-control settings, for one test only."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_workerflow import WorkflowDefinition, registry
from django_workerflow.models import WorkflowInstance, WorkflowStatus

_counter = itertools.count()


def wait_for_go(self: WorkflowDefinition) -> Any:
    """Hold a slot until the event 'go' arrives (a wait keeps the slot), then finish."""
    return self.wait("hold", "go")


@pytest.fixture
def define_with() -> Iterator[Callable[..., type[WorkflowDefinition]]]:
    """``define_with(execute=wait_for_go, name=None, **settings)``: a registered definition
    with class attributes ``settings`` (max_concurrency, rate_limit, schedule, ...),
    unregistered when the test ends."""
    created: list[type[WorkflowDefinition]] = []

    def make(
        execute: Callable[[Any], Any] = wait_for_go, *, name: str | None = None, **settings: Any
    ) -> type[WorkflowDefinition]:
        attrs = {
            "name": name or f"flow-workflow-{next(_counter)}",
            "version": "1",
            "execute": execute,
            "__module__": __name__,
            **settings,
        }
        definition = type("FlowWorkflow", (WorkflowDefinition,), attrs)
        created.append(definition)
        return definition

    yield make
    for definition in created:
        registry.unregister(definition)


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
