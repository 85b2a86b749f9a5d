"""Run test code in threads, each with its own database connection and no worker bells."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

from django_workerflow.workers import bells


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
            with bells.suppressed():
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
