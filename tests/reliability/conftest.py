"""Helpers shared by the reliability suite: threads with their own connections, row counts
of the engine's tables, and the figures each test prints."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from django_workerflow import alarms
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
)

ENGINE_MODELS = (WorkflowInstance, Step, StepEvent, WorkflowEvent, InboundEvent)

ON_POSTGRES = connection.vendor == "postgresql"

requires_postgres = pytest.mark.skipif(
    not ON_POSTGRES,
    reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises every writer, so "
    "the threads would take turns instead of racing",
)


class ThreadTimeout(AssertionError):
    """A thread did not finish in time: a deadlock or a stuck operation."""


def in_threads(*targets: Callable[[], Any], timeout: float = 60.0) -> list[Any]:
    """Run each target in its own thread (own connection, no bells); return their results.

    An exception in a thread is re-raised here; a thread still alive after ``timeout``
    seconds fails the test with :class:`ThreadTimeout` instead of hanging it.
    """
    results: list[Any] = [None] * len(targets)
    errors: list[BaseException | None] = [None] * len(targets)

    def body(index: int, target: Callable[[], Any]) -> None:
        try:
            with alarms.suppressed():
                results[index] = target()
        except BaseException as exc:  # re-raised in the calling thread
            errors[index] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=body, args=(index, target), daemon=True)
        for index, target in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    stuck = [index for index, thread in enumerate(threads) if thread.is_alive()]
    if stuck:
        raise ThreadTimeout(f"threads {stuck} still running after {timeout} s: a deadlock?")
    for error in errors:
        if error is not None:
            raise error
    return results


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
