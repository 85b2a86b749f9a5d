"""Helpers shared by the reliability suite: threads with their own connections, row counts
of the engine's tables, and the figures each test prints."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_workerflow.models import InboundEvent, Step, StepEvent, WorkflowEvent, WorkflowInstance
from tests.support.threads import ThreadTimeout, in_threads  # noqa: F401 - the suite imports them here

ENGINE_MODELS = (WorkflowInstance, Step, StepEvent, WorkflowEvent, InboundEvent)

ON_POSTGRES = connection.vendor == "postgresql"

requires_postgres = pytest.mark.skipif(
    not ON_POSTGRES,
    reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises every writer, so "
    "the threads would take turns instead of racing",
)


def table_counts() -> dict[str, int]:
    """Row counts of the five engine tables, by model name."""
    return {model.__name__: model.objects.count() for model in ENGINE_MODELS}


def print_figures(title: str, **figures: Any) -> None:
    """Print a test's figures on one line (run pytest with ``-s`` to see them)."""
    values = ", ".join(f"{name.replace('_', ' ')}={value}" for name, value in figures.items())
    print(f"\n[reliability] {title}: {values}")


@pytest.fixture
def quiet_engine_logs() -> Iterator[None]:
    """Log only warnings from the engine: thousands of INFO lines slow a storm down."""
    logger = logging.getLogger("django_workerflow")
    previous = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(previous)
