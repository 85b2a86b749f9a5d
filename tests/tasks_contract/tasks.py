"""The task functions the contract tests enqueue: one per behaviour the contract names."""

from __future__ import annotations

from typing import Any

from .framework import TaskContext, task


@task()
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def meaning_of_life() -> int:
    return 42


@task()
def fails_with_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def fails_with_an_exception_in_its_argument() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def returns_a_function() -> Any:
    """A value that is neither JSON nor picklable."""
    return lambda: True


@task(takes_context=True)
def own_id(context: TaskContext) -> str:
    return context.task_result.id


@task(takes_context=True)
def context_of(context: TaskContext) -> dict[str, Any]:
    return {
        "is_context": isinstance(context, TaskContext),
        "attempt": context.attempt,
        "status": context.task_result.status,
    }
