"""Shared fixtures: throwaway definitions registered for one test only."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_workerflow import WorkflowDefinition, registry

_counter = itertools.count()


@pytest.fixture
def define() -> Iterator[Callable[..., type[WorkflowDefinition]]]:
    """Return ``define(execute, name=None, version="2026-03-19")``: a registered definition
    whose ``execute`` is the given function, unregistered when the test ends."""
    created: list[type[WorkflowDefinition]] = []

    def make(
        execute: Callable[[Any], Any], *, name: str | None = None, version: str = "2026-03-19"
    ) -> type[WorkflowDefinition]:
        attrs = {
            "name": name or f"test-workflow-{next(_counter)}",
            "version": version,
            "execute": execute,
            "__module__": __name__,
        }
        definition = type("TestWorkflow", (WorkflowDefinition,), attrs)
        created.append(definition)
        return definition

    yield make
    for definition in created:
        registry.unregister(definition)
